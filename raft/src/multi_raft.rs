//! `MultiRaft`: every Raft group of one shard, driven by events and answering with actions.
//!
//! Why one object per shard rather than a task per group: a shard holds thousands of
//! partitions, and a timer, a task and an fsync per group would cost a wakeup and a disk
//! flush per partition. Here one tick call ticks every group, a ready set remembers which
//! groups have work so `collect` visits only those, and one `Actions` covers them all so the
//! shell writes once and sends once per destination.
//!
//! The drive protocol follows raft-rs 0.7's asynchronous Ready loop (`RawNode::ready`
//! docs, "async ready" in the raft-rs README):
//! 1. `ready()` once per group with work; its `messages` leave at once (only a leader has
//!    any: appends may go out before the leader's own write, Raft thesis §10.2.1);
//! 2. its entries and HardState are put in `GroupStorage` so raft-rs can read them, then
//!    `advance_append_async(ready)` — "it's still required that the updates can be read by
//!    raft from the `Storage` trait before calling `advance_append_async`";
//! 3. after the shell's fdatasync, `on_persist_ready(number)` ("calling this function
//!    implicitly means all readies with numbers smaller than this one have been
//!    persisted"); only then does the leader count itself toward a commit (raft-rs
//!    `Raft::on_persist_entries` moves its own match index), and only then do the
//!    Ready's `persisted_messages` (a follower's acks and votes) leave.
//!
//! Election timeouts: raft-rs draws them from a thread-local RNG, which would make a
//! simulation unrepeatable. Whenever a group's election clock is at zero after a call
//! (every reset leaves it there), the core redraws the timeout from its own seeded RNG in
//! raft-rs's range `[election_ticks, 2 * election_ticks)`. Extra draws (a follower hearing
//! its leader also zeroes the clock) keep the same distribution. The setter,
//! `Raft::set_randomized_election_timeout`, is public but doc-hidden in raft-rs 0.7; the
//! workspace pins 0.7, and `one_seed_gives_one_election_schedule` fails if it changes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::marker::PhantomData;
use std::rc::Rc;

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType};
use raft::{RawNode, StateRole};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::actions::{Actions, Apply, LeadershipChange, PersistRequest, ReadConfirmed};
use crate::error::{FetchError, GroupError, ProposeError, StepError};
use crate::in_sync::{InSync, InSyncTracker, Observed};
use crate::log_store::{offset_count, GroupStorage, SnapshotInstall};
use crate::offset_translator::batch_offset_count;
use crate::quiesce::{self, Liveness, PING_GROUP};
use crate::{GroupId, NodeId};

/// Timing and limits shared by every group of a shard.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's Raft peer id in every group (a broker node id; 0 is invalid).
    pub node: NodeId,
    /// Ticks before a follower campaigns: drawn in `[election_ticks, 2 * election_ticks)`.
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// The shell's tick period; documentation for the shell, the core counts ticks only.
    pub tick_ms: u64,
    /// Largest append message to one follower, in bytes.
    pub message_bytes_max: u64,
    /// Append messages in flight to one follower.
    pub inflight_messages_max: usize,
    /// Uncommitted bytes a leader accepts before dropping proposals.
    pub uncommitted_bytes_max: u64,
    /// Bytes of applied entries a group keeps in memory for appends to slow voters;
    /// older ones are read back from the partition log (`GroupStorage` module doc).
    pub log_memory_bytes_max: u64,
    /// Seed of the election-timeout RNG (from the OS in production, the seed in tests).
    pub seed: u64,
    /// Ticks a voter may go without catching up before it leaves the in-sync voters
    /// (Kafka's `replica.lag.time.max.ms`; see [`crate::in_sync`]).
    pub replica_lag_ticks: u64,
}

impl Config {
    /// Defaults: tick 50 ms, heartbeat every 2 ticks (100 ms), election timeout 10–19 ticks
    /// (0.5–1 s), 1 MiB messages and 256 in flight as TiKV, 64 MiB uncommitted, 1 MiB of
    /// applied entries kept in memory per group, a replica lag of 600 ticks (30 s, Kafka's).
    pub fn new(node: NodeId, seed: u64) -> Self {
        Self {
            node,
            election_ticks: 10,
            heartbeat_ticks: 2,
            tick_ms: 50,
            message_bytes_max: 1 << 20,
            inflight_messages_max: 256,
            uncommitted_bytes_max: 64 << 20,
            log_memory_bytes_max: 1 << 20,
            seed,
            replica_lag_ticks: 600,
        }
    }

    fn raft_config(&self, applied: u64) -> raft::Config {
        raft::Config {
            id: self.node,
            election_tick: self.election_ticks,
            heartbeat_tick: self.heartbeat_ticks,
            applied,
            max_size_per_msg: self.message_bytes_max,
            max_inflight_msgs: self.inflight_messages_max,
            max_uncommitted_size: self.uncommitted_bytes_max,
            // A partitioned node that comes back must not depose a healthy leader
            // (pre-vote, thesis §9.6), and a leader cut from its quorum steps down.
            pre_vote: true,
            check_quorum: true,
            ..raft::Config::default()
        }
    }
}

/// A proposal accepted into the leader's log (not yet committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposed {
    pub index: u64,
    pub term: u64,
    /// Kafka offset of the batch's first record.
    pub base_offset: u64,
}

/// Messages a Ready may send only once it is durable.
#[derive(Debug)]
struct Waiting {
    ready: u64,
    /// False when the Ready had nothing to write: it is durable once those before it are.
    writes: bool,
    messages: Vec<Message>,
}

struct Group {
    node: RawNode<GroupStorage>,
    /// Readies handed to the shell and not yet reported durable, oldest first.
    waiting: VecDeque<Waiting>,
    /// While this node leads: which voters keep up with it.
    in_sync: InSyncTracker,
    /// Not ticked: nothing in flight, and its leader said so (`quiesce` module doc).
    quiet: bool,
}

impl Group {
    /// Ticks the group again. Every voter had the whole log and was alive when it
    /// went quiet, and none went silent since (that wakes it first), so the in-sync
    /// clock starts again from now rather than from before the quiet time.
    fn wake(&mut self, now: u64) {
        if self.quiet {
            self.quiet = false;
            self.in_sync.resume(now);
        }
    }
}

/// All Raft groups of one shard. `!Send`: it lives and dies on its shard.
pub struct MultiRaft {
    config: Config,
    /// Ordered maps and sets throughout: iteration order feeds the shared RNG and the
    /// order of actions, and must not vary between runs of one seed.
    groups: BTreeMap<GroupId, Group>,
    /// Groups that may have a Ready; `collect` visits only these.
    ready: BTreeSet<GroupId>,
    /// Messages released by `persisted`, sent with the next `collect`.
    released: Vec<(GroupId, Message)>,
    rng: StdRng,
    logger: slog::Logger,
    /// Ticks since start (the clock of `InSyncTracker` and `Liveness`).
    ticks: u64,
    liveness: Liveness,
    _not_send: PhantomData<Rc<()>>,
}

impl MultiRaft {
    pub fn new(config: Config) -> Self {
        assert_ne!(config.node, 0, "Raft peer id 0 is invalid");
        let rng = StdRng::seed_from_u64(config.seed);
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        Self {
            config,
            groups: BTreeMap::new(),
            ready: BTreeSet::new(),
            released: Vec::new(),
            rng,
            logger,
            ticks: 0,
            liveness: Liveness::default(),
            _not_send: PhantomData,
        }
    }

    pub fn node(&self) -> NodeId {
        self.config.node
    }

    /// Starts `group` over `storage` (new or restored from disk); `applied` is the last
    /// index the shell has applied, so committed entries after it are handed out again.
    pub fn create_group(&mut self, group: GroupId, mut storage: GroupStorage, applied: u64) -> Result<(), GroupError> {
        if self.groups.contains_key(&group) {
            return Err(GroupError::Exists { group });
        }
        storage.set_applied(applied);
        let config = self.config.raft_config(applied);
        let node = RawNode::new(&config, storage, &self.logger).map_err(|source| GroupError::Raft { group, source })?;
        for (&id, _) in node.raft.prs().iter().filter(|(id, _)| **id != self.config.node) {
            self.liveness.track(id, self.ticks);
        }
        let mut state = Group { node, waiting: VecDeque::new(), in_sync: InSyncTracker::default(), quiet: false };
        redraw_election_timeout(&mut state.node, &mut self.rng, self.config.election_ticks);
        self.groups.insert(group, state);
        self.ready.insert(group);
        Ok(())
    }

    /// Drops `group` and everything it was waiting for.
    pub fn remove_group(&mut self, group: GroupId) -> Result<(), GroupError> {
        self.groups.remove(&group).ok_or(GroupError::Unknown { group })?;
        self.ready.remove(&group);
        self.released.retain(|(g, _)| *g != group);
        Ok(())
    }

    pub fn group_ids(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.keys().copied()
    }

    /// One tick of the shard's timer: every group that is not quiet ticks, a leader
    /// with nothing in flight goes quiet, peers not heard from for an election timeout
    /// wake the groups they are voters of, and every heartbeat interval each peer node
    /// gets a liveness ping (`quiesce` module doc).
    pub fn tick(&mut self) {
        let election_ticks = self.config.election_ticks;
        self.ticks += 1;
        for node in self.liveness.expire(self.ticks, election_ticks as u64) {
            self.peer_down(node);
        }
        if self.ticks.is_multiple_of(self.config.heartbeat_ticks as u64) {
            let me = self.config.node;
            self.released.extend(self.liveness.peers().map(|peer| (PING_GROUP, quiesce::ping(me, peer))));
        }
        for (id, group) in &mut self.groups {
            if group.quiet {
                continue;
            }
            // Before raft-rs's tick: a check-quorum pass clears `recent_active`.
            observe_in_sync(group, self.ticks);
            group.node.tick();
            redraw_election_timeout(&mut group.node, &mut self.rng, election_ticks);
            if group.node.has_ready() {
                self.ready.insert(*id);
            } else if group.waiting.is_empty() && quiesce::can_quiesce(&group.node, |n| self.liveness.alive(n)) {
                group.quiet = true;
                self.released.extend(quiesce::quiesce_messages(&group.node).into_iter().map(|m| (*id, m)));
            }
        }
    }

    /// Whether peer `node` is taken for alive (heard from within an election timeout,
    /// its connection not seen closed since); true for a node no group here has.
    pub fn peer_alive(&self, node: NodeId) -> bool {
        self.liveness.alive(node)
    }

    /// Peer `node`'s connection closed: taken for down now, as if it had been silent
    /// for an election timeout (`quiesce` module doc).
    pub fn peer_lost(&mut self, node: NodeId) {
        if self.liveness.lost(node) {
            self.peer_down(node);
        }
    }

    /// Peer `node` went silent: wakes every quiet group it is a voter of. Followers it
    /// led forget it and campaign soon, one after the other: in an order of the live
    /// voters that turns with the group, half an election timeout apart, so they do
    /// not split the vote and the new leaderships spread over the nodes. Leaders stop
    /// counting it active.
    fn peer_down(&mut self, node: NodeId) {
        let spacing = (self.config.election_ticks / 2).max(1);
        for (id, group) in &mut self.groups {
            let voters: Vec<NodeId> = group.node.raft.prs().conf().voters().ids().iter().collect();
            if !voters.contains(&node) {
                continue;
            }
            group.wake(self.ticks);
            let raft = &mut group.node.raft;
            if raft.state == StateRole::Leader {
                if let Some(progress) = raft.mut_prs().get_mut(node) {
                    progress.recent_active = false;
                }
            } else if raft.leader_id == node {
                let mut live: Vec<NodeId> = voters.into_iter().filter(|v| self.liveness.alive(*v)).collect();
                live.sort_unstable();
                let rank = live.iter().position(|v| *v == raft.id).unwrap_or(0);
                let turn = (rank + (id.topic as usize ^ id.partition as usize)) % live.len().max(1);
                let due = raft.randomized_election_timeout().saturating_sub(1 + turn * spacing);
                raft.leader_id = raft::INVALID_ID;
                raft.election_elapsed = raft.election_elapsed.max(due);
            }
            self.ready.insert(*id);
        }
    }

    /// Groups that are quiet (not ticked), for `/metrics`.
    pub fn quiet_groups(&self) -> usize {
        self.groups.values().filter(|group| group.quiet).count()
    }

    /// Decodes a message received from a peer (raft-rs's protobuf encoding).
    pub fn decode_message(bytes: &[u8]) -> Result<Message, StepError> {
        Ok(Message::parse_from_bytes(bytes)?)
    }

    /// A message of `group` from a peer.
    pub fn step(&mut self, group: GroupId, mut message: Message) -> Result<(), StepError> {
        if message.to != self.config.node {
            return Err(StepError::WrongDestination { to: message.to, node: self.config.node });
        }
        self.liveness.heard(message.from, self.ticks);
        if group == PING_GROUP {
            return Ok(());
        }
        let kind = message.get_msg_type();
        // Followers never forward proposals; a snapshot must carry Keel's data.
        let foreign_snapshot = kind == MessageType::MsgSnapshot
            && (SnapshotInstall::decode(message.get_snapshot()).is_none()
                || !conf_state_is_valid(message.get_snapshot().get_metadata().get_conf_state()));
        if kind == MessageType::MsgPropose || foreign_snapshot {
            return Err(StepError::Refused { group, kind });
        }
        let state = self.groups.get_mut(&group).ok_or(StepError::UnknownGroup { group })?;
        if kind == MessageType::MsgAppendResponse && message.reject && message.term == state.node.raft.term {
            let matched = state.node.raft.prs().get(message.from).map(|p| p.matched);
            if let Some(matched) = matched.filter(|&m| m > 0) {
                // A follower holds durably every entry up to what it matched in this
                // term, so a rejection at or below it is a stale (delayed or duplicated)
                // answer. raft-rs 0.7 would still move a probing follower's next index
                // down to it (etcd clamps at match + 1): below what every voter has,
                // which is no longer in the log raft-rs reads.
                if message.index <= matched {
                    return Err(StepError::Stale { group, kind });
                }
                message.reject_hint = message.reject_hint.max(matched);
            }
        }
        let (from, term, quiesce, keeps_quiet) =
            (message.from, message.term, quiesce::is_quiesce(&message), quiesce::keeps_quiet(&message));
        let stepped = state.node.step(message);
        let raft = &state.node.raft;
        if quiesce && raft.state == StateRole::Follower && raft.leader_id == from && raft.term == term {
            state.quiet = true;
        } else if !keeps_quiet {
            state.wake(self.ticks);
        }
        redraw_election_timeout(&mut state.node, &mut self.rng, self.config.election_ticks);
        self.ready.insert(group);
        stepped.map_err(|source| StepError::Raft { group, source })
    }

    /// Starts an election in `group` now (tests, or leadership placement later).
    pub fn campaign(&mut self, group: GroupId) -> Result<(), GroupError> {
        let state = self.groups.get_mut(&group).ok_or(GroupError::Unknown { group })?;
        state.wake(self.ticks);
        let campaigned = state.node.campaign();
        redraw_election_timeout(&mut state.node, &mut self.rng, self.config.election_ticks);
        self.ready.insert(group);
        campaigned.map_err(|source| GroupError::Raft { group, source })
    }

    /// Asks `group`'s leadership to move to voter `to` (a controlled shutdown, or
    /// balancing): raft-rs brings `to` up to date, then tells it to campaign at once.
    /// Proposals are refused meanwhile. Does nothing unless this node leads `group`.
    pub fn transfer_leadership(&mut self, group: GroupId, to: NodeId) -> Result<(), GroupError> {
        let state = self.groups.get_mut(&group).ok_or(GroupError::Unknown { group })?;
        if state.node.raft.state == StateRole::Leader && to != self.config.node {
            state.wake(self.ticks);
            state.node.transfer_leader(to);
            self.ready.insert(group);
        }
        Ok(())
    }

    /// Appends one Kafka v2 batch to `group`'s log if this node leads it.
    ///
    /// The shell patches the batch's `baseOffset` with [`Self::next_offset`] and its
    /// `partitionLeaderEpoch` with the term from [`Self::leader_term`] before calling, in the
    /// same synchronous step; the returned `Proposed` repeats both.
    pub fn propose(&mut self, group: GroupId, batch: Bytes) -> Result<Proposed, ProposeError> {
        let node_id = self.config.node;
        let state = self.groups.get_mut(&group).ok_or(ProposeError::UnknownGroup { group })?;
        may_propose(&state.node, group)?;
        batch_offset_count(&batch).map_err(|source| ProposeError::InvalidBatch { group, source })?;
        state.wake(self.ticks);
        let raft = &state.node.raft;
        let index = raft.raft_log.last_index() + 1;
        let term = raft.term;
        let base_offset = next_offset(&state.node);
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgPropose);
        message.from = node_id;
        message.set_entries(vec![Entry { data: batch, ..Default::default() }].into());
        let stepped = state.node.step(message);
        self.ready.insert(group);
        match stepped {
            Ok(()) => {}
            Err(raft::Error::ProposalDropped) => return Err(ProposeError::Dropped { group }),
            Err(source) => return Err(ProposeError::Raft { group, source }),
        }
        assert_eq!(state.node.raft.raft_log.last_index(), index, "proposal took one index");
        Ok(Proposed { index, term, base_offset })
    }

    /// Appends an entry of Raft's own holding `context` if this node leads `group`: it
    /// takes no Kafka offset, and the shell acts on it once committed (a new log start
    /// offset, for DeleteRecords). Returns its index and term.
    pub fn propose_own(&mut self, group: GroupId, context: Bytes) -> Result<(u64, u64), ProposeError> {
        let state = self.groups.get_mut(&group).ok_or(ProposeError::UnknownGroup { group })?;
        may_propose(&state.node, group)?;
        state.wake(self.ticks);
        let (index, term) = (state.node.raft.raft_log.last_index() + 1, state.node.raft.term);
        let stepped = state.node.propose(context.to_vec(), Vec::new());
        self.ready.insert(group);
        match stepped {
            Ok(()) => Ok((index, term)),
            Err(raft::Error::ProposalDropped) => Err(ProposeError::Dropped { group }),
            Err(source) => Err(ProposeError::Raft { group, source }),
        }
    }

    /// Proposes a change of `group`'s members if this node leads it and no other
    /// change is still being applied (raft-rs takes one at a time).
    pub fn propose_conf_change(&mut self, group: GroupId, change: ConfChangeV2) -> Result<u64, ProposeError> {
        let state = self.groups.get_mut(&group).ok_or(ProposeError::UnknownGroup { group })?;
        may_propose(&state.node, group)?;
        if state.node.raft.has_pending_conf() {
            return Err(ProposeError::Dropped { group });
        }
        state.wake(self.ticks);
        let index = state.node.raft.raft_log.last_index() + 1;
        let stepped = state.node.propose_conf_change(Vec::new(), change);
        self.ready.insert(group);
        match stepped {
            Ok(()) => Ok(index),
            Err(raft::Error::ProposalDropped) => Err(ProposeError::Dropped { group }),
            Err(source) => Err(ProposeError::Raft { group, source }),
        }
    }

    /// `group`'s members as this node last applied them, and whether a change is
    /// still on its way (proposed or committed but not applied).
    pub fn conf(&self, group: GroupId) -> Option<(ConfState, bool)> {
        let state = self.groups.get(&group)?;
        Some((state.node.store().conf_state().clone(), state.node.raft.has_pending_conf()))
    }

    /// The work of every group that has some: see [`Actions`] for how to carry it out.
    pub fn collect(&mut self) -> Actions {
        let mut actions = Actions::default();
        for (group, message) in self.released.drain(..) {
            actions.send(group, message);
        }
        let candidates = std::mem::take(&mut self.ready);
        for id in candidates {
            let Some(state) = self.groups.get_mut(&id) else { continue };
            if state.node.has_ready() && collect_group(id, state, &mut actions) {
                let me = self.config.node;
                for (&peer, _) in state.node.raft.prs().iter().filter(|(peer, _)| **peer != me) {
                    self.liveness.track(peer, self.ticks);
                }
            }
            actions.fetch.extend(state.node.store().take_fetch_requests(id));
        }
        actions
    }

    /// Asks `group`'s voters to confirm that this node still leads it (Raft's ReadIndex,
    /// §6.4 of Ongaro's thesis), for a read that must not be served by a deposed leader
    /// that has not heard of its successor (one paused, or cut off, and back). The
    /// heartbeats carrying `round` go out with the next `collect`; once a majority
    /// answers them in this term, a later `collect` carries a [`ReadConfirmed`]. A
    /// leader deposed meanwhile never confirms, nor does one that has not yet committed
    /// an entry of its term (raft-rs drops that request): the caller bounds its wait
    /// and asks again.
    pub fn read_index(&mut self, group: GroupId, round: u64) -> Result<(), ProposeError> {
        let state = self.groups.get_mut(&group).ok_or(ProposeError::UnknownGroup { group })?;
        may_propose(&state.node, group)?;
        state.wake(self.ticks);
        state.node.read_index(round.to_be_bytes().to_vec());
        self.ready.insert(group);
        Ok(())
    }

    /// The shell read back the released entries of `group` from `low` that a
    /// [`FetchRequest`](crate::FetchRequest) asked for (`entries` empty: the read
    /// failed, and raft-rs asks again with a later append). The appends waiting for them
    /// go out with the next `collect`.
    pub fn fetched(&mut self, group: GroupId, low: u64, entries: Vec<Entry>) -> Result<(), FetchError> {
        let state = self.groups.get_mut(&group).ok_or(FetchError::Unknown { group })?;
        let contexts =
            state.node.mut_store().fetched(low, entries).map_err(|reason| FetchError::Mismatch { group, reason })?;
        for context in contexts {
            state.node.on_entries_fetched(context);
        }
        self.ready.insert(group);
        Ok(())
    }

    /// The shell made Ready `ready` of `group` (and every earlier one) durable.
    pub fn persisted(&mut self, group: GroupId, ready: u64) -> Result<(), GroupError> {
        let state = self.groups.get_mut(&group).ok_or(GroupError::Unknown { group })?;
        let mut durable = None;
        while let Some(front) = state.waiting.front() {
            let covered = front.ready <= ready || (!front.writes && durable.is_some());
            if !covered {
                break;
            }
            let Some(waiting) = state.waiting.pop_front() else { break };
            durable = Some(waiting.ready);
            self.released.extend(waiting.messages.into_iter().map(|message| (group, message)));
        }
        if let Some(number) = durable {
            state.node.on_persist_ready(number);
            self.ready.insert(group);
        }
        Ok(())
    }

    /// The shell applied `group`'s committed entries up to `index`.
    pub fn applied(&mut self, group: GroupId, index: u64) -> Result<(), GroupError> {
        let state = self.groups.get_mut(&group).ok_or(GroupError::Unknown { group })?;
        assert!(index <= state.node.raft.raft_log.committed, "applied past the commit index");
        state.node.advance_apply_to(index);
        state.node.mut_store().set_applied(index);
        self.ready.insert(group);
        Ok(())
    }

    /// Moves `group`'s snapshot point to the entries no voter will ask for again:
    /// applied and persisted here, and durable on every voter. A leader knows the last
    /// (its progress tracking); a follower is told it (`everyone_has`, what its leader
    /// computed). Every voter has those entries on disk and never truncates committed
    /// ones, so whichever becomes leader never needs to send them. Then releases applied
    /// entries from memory beyond the group's budget. Returns the index every voter
    /// has, which a leader passes on to its followers.
    pub fn compact(&mut self, group: GroupId, everyone_has: u64) -> Result<u64, GroupError> {
        let budget = self.config.log_memory_bytes_max;
        let state = self.groups.get_mut(&group).ok_or(GroupError::Unknown { group })?;
        let raft = &state.node.raft;
        let applied = raft.raft_log.applied.min(raft.raft_log.persisted).min(state.node.store().hard_state().commit);
        let upto = if raft.state == StateRole::Leader {
            applied.min(raft.prs().iter().map(|(_, p)| p.matched).min().unwrap_or(0))
        } else {
            applied.min(everyone_has)
        };
        let store = state.node.mut_store();
        store.compact(upto);
        store.release_over_budget(applied, budget);
        Ok(upto)
    }

    /// Bytes of entries every group of the shard holds in memory.
    pub fn memory_bytes(&self) -> u64 {
        self.groups.values().map(|state| state.node.store().memory_bytes()).sum()
    }

    /// On `group`'s leader: the voter to hand leadership to, one that answered
    /// recently (not a stopped node), the most up to date first.
    pub fn transfer_target(&self, group: GroupId) -> Option<NodeId> {
        let state = self.groups.get(&group)?;
        let raft = &state.node.raft;
        if raft.state != StateRole::Leader {
            return None;
        }
        let voters = raft.prs().conf().voters();
        raft.prs()
            .iter()
            .filter(|(id, p)| **id != self.config.node && p.recent_active && voters.contains(**id))
            .max_by_key(|(id, p)| (p.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)
    }

    /// On `group`'s leader: each voter's highest index known to be in its log
    /// (raft-rs's `matched`), this node's last index for itself.
    pub fn progress(&self, group: GroupId) -> Option<Vec<(NodeId, u64)>> {
        let state = self.groups.get(&group)?;
        let raft = &state.node.raft;
        if raft.state != StateRole::Leader {
            return None;
        }
        let mut voters: Vec<(NodeId, u64)> = raft.prs().iter().map(|(id, p)| (*id, p.matched)).collect();
        voters.sort_unstable();
        Some(voters)
    }

    /// On `group`'s leader: its in-sync and offline voters (see [`crate::in_sync`]).
    pub fn in_sync(&self, group: GroupId) -> Option<InSync> {
        let state = self.groups.get(&group)?;
        let raft = &state.node.raft;
        if raft.state != StateRole::Leader {
            return None;
        }
        let voters = raft.prs().conf().voters().ids();
        if state.quiet {
            let mut voters: Vec<NodeId> = voters.iter().collect();
            voters.sort_unstable();
            return Some(InSync { voters, offline: Vec::new() });
        }
        let silent_ticks = 2 * self.config.election_ticks as u64;
        let lag_ticks = self.config.replica_lag_ticks;
        Some(state.in_sync.in_sync(self.ticks, raft.term, raft.id, voters.iter(), lag_ticks, silent_ticks))
    }

    /// The group's stable log and offset translation.
    pub fn storage(&self, group: GroupId) -> Option<&GroupStorage> {
        self.groups.get(&group).map(|state| state.node.store())
    }

    /// This node's role and term in `group`, and the leader it knows.
    pub fn role(&self, group: GroupId) -> Option<(StateRole, u64, Option<NodeId>)> {
        self.groups.get(&group).map(|state| {
            let raft = &state.node.raft;
            let leader = (raft.leader_id != raft::INVALID_ID).then_some(raft.leader_id);
            (raft.state, raft.term, leader)
        })
    }

    /// The term to stamp into a batch as its leader epoch, if this node leads `group`.
    pub fn leader_term(&self, group: GroupId) -> Option<u64> {
        match self.role(group) {
            Some((StateRole::Leader, term, _)) => Some(term),
            _ => None,
        }
    }

    /// Kafka offset the next proposed batch of `group` will start at.
    pub fn next_offset(&self, group: GroupId) -> Option<u64> {
        self.groups.get(&group).map(|state| next_offset(&state.node))
    }

    /// Commit index of `group` as this node knows it.
    pub fn commit_index(&self, group: GroupId) -> Option<u64> {
        self.groups.get(&group).map(|state| state.node.raft.raft_log.committed)
    }
}

/// Takes one Ready of `group` apart into `actions` and advances raft-rs past it.
/// Returns true when the group's configuration changed.
fn collect_group(group: GroupId, state: &mut Group, actions: &mut Actions) -> bool {
    let node = &mut state.node;
    let mut ready = node.ready();
    if let Some(soft) = ready.ss() {
        let leader = (soft.leader_id != raft::INVALID_ID).then_some(soft.leader_id);
        let term = node.raft.term;
        actions.leadership.push(LeadershipChange { group, term, leader, role: soft.raft_state });
    }
    for read in ready.take_read_states() {
        if let Ok(round) = <[u8; 8]>::try_from(&read.request_ctx[..]) {
            actions.reads.push(ReadConfirmed { group, round: u64::from_be_bytes(round), commit: read.index });
        }
    }
    let mut snapshots_sent = Vec::new();
    for message in ready.take_messages() {
        if message.get_msg_type() == MessageType::MsgSnapshot {
            snapshots_sent.push(message.to);
        }
        actions.send(group, message);
    }
    // `step` lets in only snapshots whose data decodes.
    let snapshot = (!ready.snapshot().is_empty()).then(|| SnapshotInstall::decode(ready.snapshot())).flatten();
    let entries = ready.take_entries();
    let hard_state = ready.hs().cloned();
    let store = node.mut_store();
    if let Some(install) = &snapshot {
        store.apply_snapshot(install);
    }
    store.append(&entries);
    if let Some(hard_state) = &hard_state {
        store.set_hard_state(hard_state.clone());
    }
    let committed = ready.take_committed_entries();
    let conf_changed = apply_conf_changes(node, &committed);
    if !committed.is_empty() {
        actions.apply.push(Apply { group, entries: committed });
    }
    let number = ready.number();
    let must_sync = ready.must_sync();
    let messages = ready.take_persisted_messages();
    node.advance_append_async(ready);
    // The snapshot left with this Ready's messages; the receiver copies the batches
    // below it and acknowledges, and until then raft-rs probes it as any follower.
    for to in snapshots_sent {
        node.report_snapshot(to, raft::SnapshotStatus::Finish);
    }
    let writes = !entries.is_empty() || hard_state.is_some() || snapshot.is_some();
    if writes {
        actions.persist.push(PersistRequest { group, ready: number, entries, hard_state, must_sync, snapshot });
    }
    if !writes && state.waiting.is_empty() {
        // Nothing to make durable and nothing before it: durable already.
        node.on_persist_ready(number);
        for message in messages {
            actions.send(group, message);
        }
        return conf_changed;
    }
    state.waiting.push_back(Waiting { ready: number, writes, messages });
    conf_changed
}

/// Applies the configuration changes among `committed` that the group's
/// configuration does not reflect yet (a restart or a snapshot may hand out again
/// changes it already has). Returns true if one was applied.
fn apply_conf_changes(node: &mut RawNode<GroupStorage>, committed: &[Entry]) -> bool {
    let mut changed = false;
    for entry in committed {
        let v2 = match entry.get_entry_type() {
            EntryType::EntryConfChangeV2 => ConfChangeV2::parse_from_bytes(&entry.data).ok(),
            // Keel proposes only V2 changes, and raft-rs makes none of its own.
            EntryType::EntryConfChange => None,
            EntryType::EntryNormal => continue,
        };
        if entry.index <= node.store().conf_index() {
            continue;
        }
        // A change raft-rs itself refuses (a leave with no joint configuration)
        // leaves the configuration as it is, on every member alike.
        let conf_state = v2.and_then(|cc| node.apply_conf_change(&cc).ok());
        let conf_state = conf_state.unwrap_or_else(|| node.store().conf_state().clone());
        node.mut_store().set_conf_state(conf_state, entry.index);
        changed = true;
    }
    changed
}

/// Whether a configuration from the network is one raft-rs can restore: raft-rs
/// panics on some well-formed but impossible ones (`confchange::restore`).
fn conf_state_is_valid(conf: &ConfState) -> bool {
    let distinct = |ids: &[NodeId]| ids.iter().collect::<BTreeSet<_>>().len() == ids.len() && !ids.contains(&0);
    let disjoint = |a: &[NodeId], b: &[NodeId]| a.iter().all(|id| !b.contains(id));
    let (voters, learners, outgoing, next) =
        (&conf.voters[..], &conf.learners[..], &conf.voters_outgoing[..], &conf.learners_next[..]);
    [voters, learners, outgoing, next].into_iter().all(distinct)
        && !voters.is_empty()
        && disjoint(learners, voters)
        && disjoint(learners, outgoing)
        && disjoint(next, voters)
        && next.iter().all(|id| outgoing.contains(id))
        && (conf.auto_leave <= !outgoing.is_empty())
}

/// Samples a group's progress for its in-sync voters at tick `now`.
fn observe_in_sync(group: &mut Group, now: u64) {
    let raft = &group.node.raft;
    let term = (raft.state == StateRole::Leader).then_some(raft.term);
    let progress =
        raft.prs().iter().map(|(id, p)| Observed { node: *id, matched: p.matched, recent_active: p.recent_active });
    group.in_sync.observe(now, term, raft.raft_log.committed, progress);
}

/// A proposal to `group` is taken only by its leader, and not while it hands over.
fn may_propose(node: &RawNode<GroupStorage>, group: GroupId) -> Result<(), ProposeError> {
    let raft = &node.raft;
    if raft.state != StateRole::Leader {
        let leader = (raft.leader_id != raft::INVALID_ID).then_some(raft.leader_id);
        return Err(ProposeError::NotLeader { group, term: raft.term, leader });
    }
    if let Some(transferee) = raft.lead_transferee {
        return Err(ProposeError::TransferringLeadership { group, transferee });
    }
    Ok(())
}

/// Kafka offset after the last entry of the raft log, stable and unstable.
fn next_offset(node: &RawNode<GroupStorage>) -> u64 {
    let translator = node.store().translator();
    let unstable = node.raft.raft_log.unstable_entries();
    let Some(first) = unstable.first() else { return translator.next_offset() };
    let before = translator.end_offset_of(first.index - 1);
    let before = before.unwrap_or_else(|| panic!("unstable entry {} follows the log", first.index));
    before + unstable.iter().map(|entry| u64::from(offset_count(entry))).sum::<u64>()
}

/// Replaces raft-rs's thread-RNG election timeout with one from the shard's seeded RNG
/// whenever the election clock has just been reset (see the module doc).
fn redraw_election_timeout(node: &mut RawNode<GroupStorage>, rng: &mut StdRng, ticks: usize) {
    let raft = &mut node.raft;
    if raft.state != StateRole::Leader && raft.election_elapsed == 0 {
        raft.set_randomized_election_timeout(rng.gen_range(ticks..2 * ticks));
    }
}

#[cfg(test)]
mod tests;
