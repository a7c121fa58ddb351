//! The Raft shell of one shard: it owns the shard's [`MultiRaft`], its tick, its
//! transport, and the disk writes the core asks for.
//!
//! **The partition log is the Raft log.** A data entry is a Kafka batch, written byte
//! for byte into the partition's log at the offset the core's offset translator gives
//! it, with the entry's term as its `partitionLeaderEpoch`. Raft's own entries (the
//! empty entry a new leader appends, configuration changes) take no Kafka offset: they
//! are kept, with the group's HardState, in one state-store record per group, each
//! noting the Kafka offset it precedes, so the Raft log is the merge of the two. Both
//! reach disk in the shard's journal pass: one fdatasync covers every group's entries
//! and HardState, and only then is the core told they are durable
//! ([`MultiRaft::persisted`]) — a leader counts itself toward a commit only after its
//! own write is durable.
//!
//! **One driver per shard.** A loop takes the core's [`Actions`] and carries them out in
//! order: send messages (a leader's appends go out before its own write), write every
//! group's entries and HardState, wait for the one pass that makes them durable, report
//! them, then apply commits (the high watermark becomes the commit index's offset) and
//! leadership changes. Proposals, peer messages and ticks only step the core and wake
//! the driver, so nothing else writes a replicated log: its single writer is the driver,
//! by construction.
//!
//! **Restart.** A group is rebuilt from its log and its record: every batch becomes an
//! entry again (term = its leader epoch), Raft's own entries are put back at their
//! indexes, and the high watermark comes down to the recorded commit index (recovery
//! leaves it at the log end, and an uncommitted tail must not be served). The log is read
//! from what every voter had at the last record write, and applied entries past the
//! group's memory budget are released as the read goes, so a restart after a long
//! outage does not hold the outage's batches in memory.
//!
//! **Reading released entries back.** A leader's append to a slow voter that needs
//! entries no longer in memory arrives as a [`keel_raft::FetchRequest`]: a task reads
//! those batches from the partition log (a few at once per shard, one message's worth
//! each, so a catching-up voter does not starve produce), rebuilds the entries the same
//! way as a restart does, and hands them back ([`MultiRaft::fetched`]).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_protocol::batch::{self, BatchHeader};
use keel_raft::{
    Actions, ConfChangeV2, ConfState, Entry, EntryType, Envelope, GroupId, GroupStorage, MultiRaft, NodeId,
    PersistRequest, ProposeError, SnapshotInstall, StateRole,
};
use keel_storage::disk;
use keel_storage::flush::FlushQueue;
use keel_storage::kv::ShardKv;
use keel_storage::log::{self, PartitionLog};
use keel_storage::{Signal, StorageError};

use super::raft_log::{is_data, record_key, GroupRecord, OwnEntry};
use super::read_index::ReadRounds;
use super::transport::{Network, Transport, TransportConfig};
use crate::errors;

mod persist;
mod restore;
mod retry;

/// The cluster metadata group (KRaft's `__cluster_metadata`), on shard 0 of every node.
pub const METADATA_GROUP: GroupId = GroupId { topic: 0, partition: 0 };

/// Called for every batch a replica writes (idempotent-producer state follows the log
/// on every replica, so a new leader has it).
/// Returns state-store changes (full key, value or removal) the batch calls for: they
/// are written durably with the pass's Raft records, before its entries are
/// acknowledged, so what the partition derived from a batch is never behind its log.
pub type OnAppend = Box<dyn Fn(&BatchHeader, &[u8]) -> Vec<StateChange>>;
pub type StateChange = (String, Option<Bytes>);
/// Called with the data batches of committed entries, in order, once each.
pub type OnCommit = Box<dyn Fn(Vec<Bytes>)>;
/// Called with the offset a replica's log was cut back to (a deposed leader's
/// uncommitted tail replaced by the new leader's entries).
pub type OnTruncate = Box<dyn Fn(i64)>;

/// Called with a committed log start offset (DeleteRecords), and at a restart with the
/// highest one committed.
pub type OnLogStart = Box<dyn Fn(i64)>;

/// What a group's owner wants to hear of its log.
#[derive(Default)]
pub struct ReplicaHooks {
    pub on_append: Option<OnAppend>,
    pub on_commit: Option<OnCommit>,
    pub on_truncate: Option<OnTruncate>,
    pub on_log_start: Option<OnLogStart>,
}

/// The context of Raft's own entry that moves a partition's log start offset
/// (DeleteRecords): this prefix, then the offset (8 bytes, big-endian).
const LOG_START: &[u8] = b"keel-log-start:";

/// The log start offset an own entry's context sets, if it is one.
fn log_start_of(context: &[u8]) -> Option<i64> {
    let offset = context.strip_prefix(LOG_START)?;
    Some(i64::from_be_bytes(offset.try_into().ok()?))
}

/// Called with the groups whose leader (or leader epoch) changed.
pub type OnLeadership = Box<dyn Fn(Vec<(GroupId, Option<NodeId>, i32)>)>;
/// Called with a group whose log failed a CRC check while the shell read it, and why.
pub type OnDamaged = Box<dyn Fn(GroupId, String)>;

/// One group's log on this node, and what the shell knows of its leadership.
pub struct Replica {
    pub group: GroupId,
    pub log: Rc<RefCell<PartitionLog>>,
    /// Raft index of the last entry written to the log or the record.
    written_index: Cell<u64>,
    pub(super) record: RefCell<GroupRecord>,
    /// Leader and term as the last Ready told.
    leader: Cell<Option<NodeId>>,
    term: Cell<u64>,
    /// What every voter has durably, as this group's leader last said (followers
    /// drop entries up to it from memory); on the leader, what it computed.
    everyone_has: Cell<u64>,
    /// The snapshot point (index) in the record last written.
    recorded_base: Cell<u64>,
    on_append: Option<OnAppend>,
    on_commit: Option<OnCommit>,
    on_truncate: Option<OnTruncate>,
    on_log_start: Option<OnLogStart>,
    /// The group's writes wait in `deferred`, in order, and are carried out by
    /// `drain_deferred`: a leader's snapshot is being installed (until its batches are
    /// copied), or entries could not be written and are tried again.
    deferring: Cell<bool>,
    deferred: RefCell<Vec<PersistRequest>>,
    /// The record changed in memory only (a configuration change applied).
    record_due: Cell<bool>,
    /// Leadership confirmations for reads, on the leader (`read_index`).
    pub(super) reads: RefCell<ReadRounds>,
}

impl Replica {
    pub fn leader(&self) -> Option<NodeId> {
        self.leader.get()
    }
    /// The leader epoch clients see: the Raft term.
    pub fn epoch(&self) -> i32 {
        i32::try_from(self.term.get()).unwrap_or(i32::MAX)
    }
}

/// Timing and memory of every group of a node.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    pub tick: Duration,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    /// Applied entries a group keeps in memory, in bytes (`GroupStorage` module doc).
    pub log_memory_bytes: u64,
    /// How long a voter may go without catching up before it leaves the in-sync
    /// voters (Kafka's `replica.lag.time.max.ms`).
    pub replica_lag: Duration,
}

/// Entries a group's snapshot point moves before its record is written for it alone.
const BASE_WRITE_EVERY: u64 = 256;
/// Reads of released entries one shard runs at once.
const READS_BACK_MAX: u64 = 2;

pub struct Replication {
    pub node: NodeId,
    shard: u16,
    pub(super) multi: RefCell<MultiRaft>,
    transport: Rc<Transport>,
    pub(super) wake: Rc<Signal>,
    /// The shortest election timeout: how long a read waits for a leadership
    /// confirmation before asking again (`read_index`).
    pub(super) election_timeout: Duration,
    replicas: RefCell<BTreeMap<GroupId, Rc<Replica>>>,
    kv: Rc<ShardKv>,
    flush: Rc<FlushQueue>,
    /// Told of leadership changes (the shard shares them with the others).
    on_leadership: RefCell<Option<OnLeadership>>,
    /// Told of a replica found damaged (the shard takes it out and has it rebuilt).
    pub(super) on_damaged: RefCell<Option<OnDamaged>>,
    /// Peer messages refused by the core (unknown group, stale), for `/metrics`.
    pub refused_messages: Cell<u64>,
    /// Released entries read back for appends, for `/metrics`.
    pub entries_read_back: Cell<u64>,
    /// Read-backs that failed without a damaged batch (the log no longer or not yet
    /// holding the entries), for `/metrics`: each leaves a voter waiting.
    pub read_back_failures: Cell<u64>,
    /// Set by a stop: no more messages are taken and nothing more is written.
    stopped: Cell<bool>,
    log_memory_bytes: u64,
    pub(super) reads_back: Rc<glommio::sync::Semaphore>,
    /// The Kafka listener of a node, for copying a snapshot's batches from a leader.
    kafka_addrs: RefCell<Option<KafkaAddrs>>,
    /// Snapshot copies one shard runs at once.
    installs: Rc<glommio::sync::Semaphore>,
    /// Passes a full disk left unacknowledged, retried until durable (`retry.rs`).
    unpersisted: retry::Unpersisted,
}

/// Names the Kafka listener (`host:port`) of a node, if it registered one.
pub type KafkaAddrs = Box<dyn Fn(NodeId) -> Option<String>>;

impl Replication {
    /// Starts the shell of shard `shard`: binds its node-to-node listener (mutual TLS
    /// with `tls`) and runs its driver and tick.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        node: NodeId,
        shard: u16,
        rpc_addr: SocketAddr,
        peers: &BTreeMap<NodeId, SocketAddr>,
        settings: RaftSettings,
        kv: Rc<ShardKv>,
        flush: Rc<FlushQueue>,
        tls: Option<Rc<super::rpc_tls::RpcTls>>,
    ) -> Result<Rc<Replication>, String> {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64);
        let seed = seed.unwrap_or(0) ^ node.rotate_left(17) ^ u64::from(shard);
        let others = peers.iter().filter(|(id, _)| **id != node).map(|(id, a)| (*id, *a)).collect();
        let me = Replication::new(node, shard, seed, settings, kv, flush, |inbound| {
            Transport::new(node, shard, others, TransportConfig { tls, ..TransportConfig::default() }, inbound)
        });
        me.transport
            .listen(rpc_addr)
            .await
            .map_err(|e| format!("shard {shard} cannot listen for peers on {rpc_addr} (+{shard}): {e}"))?;
        Ok(me)
    }

    /// Starts the shell of shard 0 of `node` on a simulated network (no sockets), its
    /// Raft randomness from `seed`: for the cluster simulation.
    pub fn start_simulated(
        node: NodeId,
        peers: &[NodeId],
        network: Rc<dyn Network>,
        seed: u64,
        settings: RaftSettings,
        kv: Rc<ShardKv>,
        flush: Rc<FlushQueue>,
    ) -> Rc<Replication> {
        Replication::new(node, 0, seed, settings, kv, flush, |inbound| {
            Transport::simulated(node, 0, peers, network, inbound)
        })
    }

    /// Builds the shell over the transport `transport` makes, and runs its driver and
    /// tick.
    fn new(
        node: NodeId,
        shard: u16,
        seed: u64,
        settings: RaftSettings,
        kv: Rc<ShardKv>,
        flush: Rc<FlushQueue>,
        transport: impl FnOnce(Rc<dyn Fn(NodeId, Vec<Envelope>)>) -> Rc<Transport>,
    ) -> Rc<Replication> {
        let mut config = keel_raft::Config::new(node, seed);
        config.election_ticks = settings.election_ticks.max(2);
        config.heartbeat_ticks = settings.heartbeat_ticks.clamp(1, config.election_ticks - 1);
        config.tick_ms = settings.tick.as_millis() as u64;
        config.log_memory_bytes_max = settings.log_memory_bytes;
        config.replica_lag_ticks = (settings.replica_lag.as_millis() / settings.tick.as_millis().max(1)) as u64;
        let election_timeout = settings.tick * config.election_ticks as u32;
        let me = Rc::new_cyclic(|me: &Weak<Replication>| {
            let inbound_to = me.clone();
            let inbound: Rc<dyn Fn(NodeId, Vec<Envelope>)> = Rc::new(move |from, envelopes| {
                if let Some(r) = inbound_to.upgrade() {
                    r.receive(from, envelopes);
                }
            });
            Replication {
                node,
                shard,
                multi: RefCell::new(MultiRaft::new(config)),
                election_timeout,
                transport: transport(inbound),
                wake: Signal::new(),
                replicas: RefCell::new(BTreeMap::new()),
                kv,
                flush,
                on_leadership: RefCell::new(None),
                on_damaged: RefCell::new(None),
                refused_messages: Cell::new(0),
                entries_read_back: Cell::new(0),
                read_back_failures: Cell::new(0),
                stopped: Cell::new(false),
                log_memory_bytes: settings.log_memory_bytes,
                reads_back: Rc::new(glommio::sync::Semaphore::new(READS_BACK_MAX)),
                kafka_addrs: RefCell::new(None),
                installs: Rc::new(glommio::sync::Semaphore::new(1)),
                unpersisted: retry::Unpersisted::default(),
            }
        });
        let closed_to = Rc::downgrade(&me);
        me.transport.on_closed(Rc::new(move |node| {
            if let Some(r) = closed_to.upgrade() {
                r.peer_closed(node);
            }
        }));
        glommio::spawn_local(me.clone().drive()).detach();
        glommio::spawn_local(tick(Rc::downgrade(&me), settings.tick)).detach();
        me
    }

    pub fn set_kafka_addrs(&self, f: KafkaAddrs) {
        *self.kafka_addrs.borrow_mut() = Some(f);
    }

    pub fn on_leadership(&self, f: OnLeadership) {
        *self.on_leadership.borrow_mut() = Some(f);
    }

    pub fn on_damaged(&self, f: OnDamaged) {
        *self.on_damaged.borrow_mut() = Some(f);
    }

    pub fn replica(&self, group: GroupId) -> Option<Rc<Replica>> {
        self.replicas.borrow().get(&group).cloned()
    }

    pub fn transport(&self) -> &Rc<Transport> {
        &self.transport
    }

    /// Stops `group` here, keeping its record: the node neither votes nor leads in it
    /// until it starts again. False if it was not running.
    pub fn stop_group(&self, group: GroupId) -> bool {
        if self.replicas.borrow_mut().remove(&group).is_none() {
            return false;
        }
        let _ = self.multi.borrow_mut().remove_group(group);
        true
    }

    /// Stops serving `group` here (its topic was deleted, or the replica moved away);
    /// its record goes too, also when the group was stopped already (damaged).
    pub async fn remove_group(&self, group: GroupId) {
        self.stop_group(group);
        if let Err(e) = self.kv.delete(&record_key(group)).await {
            tracing::warn!(%group, error = %e, "cannot remove a deleted group's record");
        }
    }

    /// Whether the state store holds `group`'s record (a removed group's must stay gone).
    pub fn has_record(&self, group: GroupId) -> bool {
        self.kv.get(&record_key(group)).is_some()
    }

    /// Appends one validated batch to `group`'s Raft log if this node leads it: stamps
    /// its offset and the term as its leader epoch, then proposes it. Returns the
    /// stamped header and the term it must commit in. Not `async`: callers check
    /// idempotent-producer state and propose with no await between.
    pub fn propose(
        &self,
        group: GroupId,
        batch: &[u8],
        log_append_time: Option<i64>,
    ) -> Result<(BatchHeader, u64), (i16, String)> {
        let mut multi = self.multi.borrow_mut();
        let Some(term) = multi.leader_term(group) else {
            return Err(not_leader(multi.role(group).and_then(|(_, _, l)| l)));
        };
        let offset = multi.next_offset(group).expect("the group exists") as i64;
        let mut copy = BytesMut::from(batch);
        batch::patch(&mut copy, offset, i32::try_from(term).unwrap_or(i32::MAX), log_append_time);
        let bytes = copy.freeze();
        let header = BatchHeader::parse(&bytes).map_err(|e| (errors::CORRUPT_MESSAGE, e.to_string()))?;
        let p = multi.propose(group, bytes).map_err(refusal)?;
        debug_assert_eq!(p.base_offset as i64, offset);
        drop(multi);
        self.wake.notify();
        Ok((header, term))
    }

    /// Waits until the batch ending at `last_offset`, proposed in `term`, is committed
    /// (below the high watermark). If this node stops leading in that term first, the
    /// outcome is unknown and the client is told to retry on the new leader.
    pub async fn wait_committed(
        &self,
        group: GroupId,
        term: u64,
        last_offset: i64,
        timeout: Duration,
    ) -> Result<(), i16> {
        let Some(r) = self.replica(group) else { return Err(errors::NOT_LEADER_OR_FOLLOWER) };
        let deposed =
            || (self.multi.borrow().leader_term(group) != Some(term)).then_some(errors::NOT_LEADER_OR_FOLLOWER);
        crate::util::wait_below_high_watermark(&r.log, last_offset, timeout, deposed).await
    }

    /// Whether this shard takes peer `node` for alive (`MultiRaft::peer_alive`).
    pub fn peer_alive(&self, node: NodeId) -> bool {
        self.multi.borrow().peer_alive(node)
    }

    /// Every group's leader and epoch as this shard knows them, and for the groups it
    /// leads what every voter has (0 for the others).
    pub fn views(&self) -> Vec<(GroupId, Option<NodeId>, i32, u64)> {
        let multi = self.multi.borrow();
        self.replicas
            .borrow()
            .values()
            .map(|r| {
                let everyone_has = if multi.leader_term(r.group).is_some() { r.everyone_has.get() } else { 0 };
                (r.group, r.leader(), r.epoch(), everyone_has)
            })
            .collect()
    }

    /// On `group`'s leader: its term, and each voter's log end (the Kafka offset after
    /// the last entry raft-rs knows it has).
    pub fn quorum(&self, group: GroupId) -> Option<(i32, Vec<(NodeId, i64)>)> {
        let multi = self.multi.borrow();
        let term = i32::try_from(multi.leader_term(group)?).unwrap_or(i32::MAX);
        let translator = multi.storage(group)?.translator();
        let ends = multi.progress(group)?;
        let ends = ends.into_iter().map(|(id, index)| (id, translator.end_offset_of(index).map_or(-1, |o| o as i64)));
        Some((term, ends.collect()))
    }

    /// Groups not ticked: nothing in flight (`keel_raft` quiescence).
    pub fn quiet_groups(&self) -> u64 {
        self.multi.borrow().quiet_groups() as u64
    }

    /// Bytes of log entries the shard's groups hold in memory.
    pub fn log_memory_bytes(&self) -> u64 {
        self.multi.borrow().memory_bytes()
    }

    /// On `group`'s leader: the voters in sync with it (Kafka's ISR) and the offline
    /// ones, as `keel_raft::in_sync` defines them.
    pub fn in_sync(&self, group: GroupId) -> Option<keel_raft::InSync> {
        self.multi.borrow().in_sync(group)
    }

    /// This node's role in `group`: leading (with its term) or not.
    pub fn leads(&self, group: GroupId) -> bool {
        self.multi.borrow().leader_term(group).is_some()
    }

    /// On `group`'s leader: its commit index and each voter's highest index known to
    /// be in its log (for leadership moves, `cluster::balance`).
    pub fn progress(&self, group: GroupId) -> Option<(u64, Vec<(NodeId, u64)>)> {
        let multi = self.multi.borrow();
        let voters = multi.progress(group)?;
        Some((multi.commit_index(group)?, voters))
    }

    /// Asks `group`'s leadership to move to voter `to` (raft-rs catches `to` up, then
    /// has it campaign); nothing happens unless this node leads `group`.
    pub fn transfer_leadership(&self, group: GroupId, to: NodeId) {
        let _ = self.multi.borrow_mut().transfer_leadership(group, to);
        self.wake.notify();
    }

    /// Controlled shutdown, first step: moves every leadership this shard holds to
    /// another voter of its group, and waits (at most `wait`) until it holds none, so
    /// clients move on before the node goes and no acknowledged write waits on it.
    pub async fn hand_over(&self, wait: Duration) {
        let deadline = disk::now() + wait;
        loop {
            let led: Vec<GroupId> = {
                let multi = self.multi.borrow();
                multi.group_ids().filter(|g| multi.leader_term(*g).is_some()).collect()
            };
            if led.is_empty() || disk::now() >= deadline {
                if !led.is_empty() {
                    tracing::warn!(groups = led.len(), "stopping while still leading some groups");
                }
                return;
            }
            let mut handed = false;
            {
                let mut multi = self.multi.borrow_mut();
                for group in led {
                    if let Some(to) = multi.transfer_target(group) {
                        let _ = multi.transfer_leadership(group, to);
                        handed = true;
                    }
                }
            }
            if !handed {
                // No other voter answers (the last node of a cluster going down).
                return;
            }
            self.wake.notify();
            disk::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Controlled shutdown, last step: takes no more messages and writes nothing more,
    /// so the logs can be closed.
    pub fn stop(&self) {
        self.stopped.set(true);
        self.wake.notify();
    }

    /// Messages from a peer.
    fn receive(&self, from: NodeId, envelopes: Vec<Envelope>) {
        if self.stopped.get() {
            return;
        }
        {
            let mut multi = self.multi.borrow_mut();
            for e in envelopes {
                if let Err(err) = multi.step(e.group, e.message) {
                    self.refused_messages.set(self.refused_messages.get() + 1);
                    tracing::trace!(from, group = %e.group, error = %err, "peer message refused");
                }
            }
        }
        self.wake.notify();
    }

    /// A connection that carried `node`'s Raft messages ended: the groups it led here
    /// campaign now rather than an election timeout later (`keel_raft::quiesce`).
    fn peer_closed(&self, node: NodeId) {
        if self.stopped.get() {
            return;
        }
        tracing::debug!(shard = self.shard, node, "a peer's Raft connection closed: taken for down");
        self.multi.borrow_mut().peer_lost(node);
        self.wake.notify();
    }

    async fn drive(self: Rc<Self>) {
        while !self.stopped.get() {
            let woken = self.wake.wait();
            let actions = self.multi.borrow_mut().collect();
            if actions.is_empty() && !self.unpersisted.due.replace(false) {
                woken.await;
                continue;
            }
            self.send(&actions);
            self.leadership(&actions);
            self.confirm_reads(&actions.reads);
            for request in &actions.fetch {
                glommio::spawn_local(self.clone().read_back(*request)).detach();
            }
            let durable = self.persist(&actions.persist).await;
            {
                let mut multi = self.multi.borrow_mut();
                for (group, ready) in durable {
                    let _ = multi.persisted(group, ready);
                }
            }
            self.schedule_retry();
            self.apply(&actions);
        }
    }

    fn send(&self, actions: &Actions) {
        for (to, messages) in &actions.messages {
            self.transport.send(*to, self.shard, messages.clone());
        }
        for (to, heartbeats) in &actions.heartbeats {
            self.transport.send_heartbeats(*to, self.shard, heartbeats.clone());
        }
    }

    fn leadership(&self, actions: &Actions) {
        let mut changes = Vec::new();
        for c in &actions.leadership {
            let Some(r) = self.replica(c.group) else { continue };
            let leader = match c.role {
                StateRole::Leader => Some(self.node),
                _ => c.leader,
            };
            r.leader.set(leader);
            r.term.set(c.term);
            r.log.borrow().changed.notify();
            tracing::debug!(group = %c.group, ?leader, term = c.term, "leadership changed");
            changes.push((c.group, leader, r.epoch()));
        }
        if !changes.is_empty() {
            if let Some(f) = self.on_leadership.borrow().as_ref() {
                f(changes);
            }
        }
    }

    fn apply(&self, actions: &Actions) {
        for a in &actions.apply {
            let Some(r) = self.replica(a.group) else { continue };
            let Some(last) = a.entries.last().map(|e| e.index) else { continue };
            let end = {
                let multi = self.multi.borrow();
                multi.storage(a.group).and_then(|s| s.translator().end_offset_of(last))
            };
            if let Some(end) = end {
                let mut l = r.log.borrow_mut();
                let end = (end as i64).min(l.log_end_offset());
                l.set_high_watermark(end);
            }
            if let Some(f) = &r.on_commit {
                f(a.entries.iter().filter(|e| is_data(e)).map(|e| e.data.clone()).collect());
            }
            if a.entries.iter().any(|e| e.get_entry_type() == EntryType::EntryConfChangeV2) {
                let multi = self.multi.borrow();
                if let Some(storage) = multi.storage(a.group) {
                    r.record.borrow_mut().set_conf(storage.conf_state(), storage.conf_index());
                    r.record_due.set(true);
                }
            }
            for offset in a.entries.iter().filter(|e| !is_data(e)).filter_map(|e| log_start_of(&e.context)) {
                let mut record = r.record.borrow_mut();
                record.log_start = record.log_start.max(offset);
                if let Some(f) = &r.on_log_start {
                    f(offset);
                }
            }
            let mut multi = self.multi.borrow_mut();
            let _ = multi.applied(a.group, last);
            // The metadata group keeps its (small) log in memory: every node installs
            // its committed records again at start.
            if r.on_commit.is_none() {
                self.compact(&mut multi, &r);
            }
        }
    }

    /// Drops what every voter has from memory, and notes the new base in the group's
    /// record (written with its next HardState).
    fn compact(&self, multi: &mut MultiRaft, r: &Replica) {
        let Ok(upto) = multi.compact(r.group, r.everyone_has.get()) else { return };
        if multi.leader_term(r.group).is_some() {
            r.everyone_has.set(upto);
        }
        let Some(base) = multi.storage(r.group).map(|s| s.base()) else { return };
        let mut record = r.record.borrow_mut();
        if base.index > record.base.0 {
            record.base = (base.index, base.term, base.offset);
            record.own.retain(|e| e.index > base.index);
        }
    }

    /// Commits a new log start offset for `group` through its Raft log if this node
    /// leads it (DeleteRecords): every replica moves its log start there as the entry
    /// commits, and deletes the segments below once every replica has them
    /// (`PartitionLog::cleanable_end`).
    pub fn propose_log_start(&self, group: GroupId, offset: i64) -> Result<(), (i16, String)> {
        let context = [LOG_START, &offset.to_be_bytes()].concat();
        let proposed = self.multi.borrow_mut().propose_own(group, Bytes::from(context));
        self.wake.notify();
        proposed.map(|_| ()).map_err(refusal)
    }

    /// `group`'s members as this node applied them, and whether a change is on its way.
    pub fn conf(&self, group: GroupId) -> Option<(ConfState, bool)> {
        self.multi.borrow().conf(group)
    }

    /// Proposes a change of `group`'s members if this node leads it.
    pub fn propose_conf_change(&self, group: GroupId, change: ConfChangeV2) -> Result<(), (i16, String)> {
        let proposed = self.multi.borrow_mut().propose_conf_change(group, change);
        self.wake.notify();
        proposed.map(|_| ()).map_err(refusal)
    }

    /// Followers of `group` may drop entries up to `index`: its leader says every
    /// voter has them.
    pub fn everyone_has(&self, group: GroupId, index: u64) {
        if let Some(r) = self.replica(group) {
            r.everyone_has.set(r.everyone_has.get().max(index));
        }
    }
}

fn not_leader(leader: Option<NodeId>) -> (i16, String) {
    (errors::NOT_LEADER_OR_FOLLOWER, format!("this node does not lead the partition (leader {leader:?})"))
}

/// What a client is told when the core refuses a proposal.
pub(super) fn refusal(e: ProposeError) -> (i16, String) {
    match e {
        ProposeError::NotLeader { leader, .. } => not_leader(leader),
        ProposeError::TransferringLeadership { .. } => not_leader(None),
        ProposeError::Dropped { .. } => {
            (errors::NOT_ENOUGH_REPLICAS, "the replicas are too far behind to take more".into())
        }
        e => (errors::UNKNOWN_SERVER_ERROR, e.to_string()),
    }
}

fn hard_state_term(storage: &GroupStorage) -> u64 {
    storage.hard_state().term
}

/// A group's record as the state-store change that writes it.
fn record_change(group: GroupId, record: &GroupRecord) -> StateChange {
    let value = serde_json::to_vec(record).expect("a group record serializes");
    (record_key(group), Some(value.into()))
}

/// Waits until everything appended to `log` is durable (the journal pass ran).
async fn wait_durable(log: &Rc<RefCell<PartitionLog>>) -> Result<(), String> {
    loop {
        let wait = {
            let l = log.borrow();
            if l.durable_offset() >= l.log_end_offset() {
                return Ok(());
            }
            if let Some(e) = &l.flush_error {
                return Err(e.clone());
            }
            l.changed.wait()
        };
        wait.await;
    }
}

async fn tick(replication: Weak<Replication>, period: Duration) {
    loop {
        disk::sleep(period).await;
        let Some(r) = replication.upgrade() else { return };
        if r.stopped.get() {
            return;
        }
        r.multi.borrow_mut().tick();
        r.wake.notify();
    }
}
