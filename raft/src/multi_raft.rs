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
//! its leader also zeroes the clock) keep the same distribution.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::marker::PhantomData;
use std::rc::Rc;

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{Entry, Message, MessageType};
use raft::{RawNode, StateRole};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::actions::{Actions, Apply, LeadershipChange, PersistRequest};
use crate::error::{GroupError, ProposeError, StepError};
use crate::log_store::{offset_count, GroupStorage};
use crate::offset_translator::batch_offset_count;
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
    /// Seed of the election-timeout RNG (from the OS in production, the seed in tests).
    pub seed: u64,
}

impl Config {
    /// Defaults: tick 50 ms, heartbeat every 2 ticks (100 ms), election timeout 10–19 ticks
    /// (0.5–1 s), 1 MiB messages and 256 in flight as TiKV, 64 MiB uncommitted.
    pub fn new(node: NodeId, seed: u64) -> Self {
        Self {
            node,
            election_ticks: 10,
            heartbeat_ticks: 2,
            tick_ms: 50,
            message_bytes_max: 1 << 20,
            inflight_messages_max: 256,
            uncommitted_bytes_max: 64 << 20,
            seed,
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
}

/// All Raft groups of one shard. `!Send`: it lives and dies on its shard.
pub struct MultiRaft {
    config: Config,
    groups: BTreeMap<GroupId, Group>,
    /// Groups that may have a Ready; `collect` visits only these.
    ready: BTreeSet<GroupId>,
    /// Messages released by `persisted`, sent with the next `collect`.
    released: Vec<(GroupId, Message)>,
    rng: StdRng,
    logger: slog::Logger,
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
            _not_send: PhantomData,
        }
    }

    pub fn node(&self) -> NodeId {
        self.config.node
    }

    /// Starts `group` over `storage` (new or restored from disk); `applied` is the last
    /// index the shell has applied, so committed entries after it are handed out again.
    pub fn create_group(&mut self, group: GroupId, storage: GroupStorage, applied: u64) -> Result<(), GroupError> {
        if self.groups.contains_key(&group) {
            return Err(GroupError::Exists { group });
        }
        let config = self.config.raft_config(applied);
        let node = RawNode::new(&config, storage, &self.logger).map_err(|source| GroupError::Raft { group, source })?;
        let mut state = Group { node, waiting: VecDeque::new() };
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

    /// One tick of the shard's timer, for every group.
    pub fn tick(&mut self) {
        let election_ticks = self.config.election_ticks;
        for (id, group) in &mut self.groups {
            group.node.tick();
            redraw_election_timeout(&mut group.node, &mut self.rng, election_ticks);
            if group.node.has_ready() {
                self.ready.insert(*id);
            }
        }
    }

    /// Decodes a message received from a peer (raft-rs's protobuf encoding).
    pub fn decode_message(bytes: &[u8]) -> Result<Message, StepError> {
        Ok(Message::parse_from_bytes(bytes)?)
    }

    /// A message of `group` from a peer.
    pub fn step(&mut self, group: GroupId, message: Message) -> Result<(), StepError> {
        if message.to != self.config.node {
            return Err(StepError::WrongDestination { to: message.to, node: self.config.node });
        }
        let kind = message.get_msg_type();
        // Followers never forward proposals, and snapshots are not built yet (no log
        // compaction, so a follower is always caught up from the log).
        if matches!(kind, MessageType::MsgPropose | MessageType::MsgSnapshot) {
            return Err(StepError::Refused { group, kind });
        }
        let state = self.groups.get_mut(&group).ok_or(StepError::UnknownGroup { group })?;
        let stepped = state.node.step(message);
        redraw_election_timeout(&mut state.node, &mut self.rng, self.config.election_ticks);
        self.ready.insert(group);
        stepped.map_err(|source| StepError::Raft { group, source })
    }

    /// Starts an election in `group` now (tests, or leadership placement later).
    pub fn campaign(&mut self, group: GroupId) -> Result<(), GroupError> {
        let state = self.groups.get_mut(&group).ok_or(GroupError::Unknown { group })?;
        let campaigned = state.node.campaign();
        redraw_election_timeout(&mut state.node, &mut self.rng, self.config.election_ticks);
        self.ready.insert(group);
        campaigned.map_err(|source| GroupError::Raft { group, source })
    }

    /// Appends one Kafka v2 batch to `group`'s log if this node leads it.
    ///
    /// The shell patches the batch's `baseOffset` with [`Self::next_offset`] and its
    /// `partitionLeaderEpoch` with the term from [`Self::leader_term`] before calling, in the
    /// same synchronous step; the returned `Proposed` repeats both.
    pub fn propose(&mut self, group: GroupId, batch: Bytes) -> Result<Proposed, ProposeError> {
        let node_id = self.config.node;
        let state = self.groups.get_mut(&group).ok_or(ProposeError::UnknownGroup { group })?;
        let raft = &state.node.raft;
        if raft.state != StateRole::Leader {
            let leader = (raft.leader_id != raft::INVALID_ID).then_some(raft.leader_id);
            return Err(ProposeError::NotLeader { group, term: raft.term, leader });
        }
        if let Some(transferee) = raft.lead_transferee {
            return Err(ProposeError::TransferringLeadership { group, transferee });
        }
        batch_offset_count(&batch).map_err(|source| ProposeError::InvalidBatch { group, source })?;
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

    /// The work of every group that has some: see [`Actions`] for how to carry it out.
    pub fn collect(&mut self) -> Actions {
        let mut actions = Actions::default();
        for (group, message) in self.released.drain(..) {
            actions.send(group, message);
        }
        let candidates = std::mem::take(&mut self.ready);
        for id in candidates {
            let Some(state) = self.groups.get_mut(&id) else { continue };
            if state.node.has_ready() {
                collect_group(id, state, &mut actions);
            }
        }
        actions
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
        self.ready.insert(group);
        Ok(())
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
fn collect_group(group: GroupId, state: &mut Group, actions: &mut Actions) {
    let node = &mut state.node;
    let mut ready = node.ready();
    if let Some(soft) = ready.ss() {
        let leader = (soft.leader_id != raft::INVALID_ID).then_some(soft.leader_id);
        let term = node.raft.term;
        actions.leadership.push(LeadershipChange { group, term, leader, role: soft.raft_state });
    }
    for message in ready.take_messages() {
        actions.send(group, message);
    }
    // `step` refuses MsgSnapshot and `GroupStorage::snapshot` never yields one.
    assert!(ready.snapshot().is_empty(), "snapshots are not supported yet");
    let entries = ready.take_entries();
    let hard_state = ready.hs().cloned();
    let store = node.mut_store();
    store.append(&entries);
    if let Some(hard_state) = &hard_state {
        store.set_hard_state(hard_state.clone());
    }
    let committed = ready.take_committed_entries();
    if !committed.is_empty() {
        actions.apply.push(Apply { group, entries: committed });
    }
    let number = ready.number();
    let must_sync = ready.must_sync();
    let messages = ready.take_persisted_messages();
    node.advance_append_async(ready);
    let writes = !entries.is_empty() || hard_state.is_some();
    if writes {
        actions.persist.push(PersistRequest { group, ready: number, entries, hard_state, must_sync });
    }
    if !writes && state.waiting.is_empty() {
        // Nothing to make durable and nothing before it: durable already.
        node.on_persist_ready(number);
        for message in messages {
            actions.send(group, message);
        }
        return;
    }
    state.waiting.push_back(Waiting { ready: number, writes, messages });
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
