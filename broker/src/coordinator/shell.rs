//! The I/O shell around the group state machines, on each coordinator shard: appending
//! records to `__consumer_offsets` and waiting until they are durable, carrying out the
//! machines' actions (answering parked JoinGroup and SyncGroup requests), the timer
//! that feeds them the time, offset retention, and the replay of the log at start-up.

use std::rc::Rc;
use std::time::Duration;

use glommio::channels::local_channel::{self, LocalReceiver};
use keel_protocol::batch::{Producer, CONTROL_COMMIT};

use crate::cluster::routing;
use crate::config::OFFSETS_TOPIC;
use crate::errors;
use crate::groups::classic::{Action, ClassicGroup, JoinResult, SyncResult};
use crate::groups::consumer::ConsumerGroup;
use crate::groups::limits;
use crate::groups::membership;
use crate::groups::offsets::Committed;
use crate::groups::records::{self, Record, RecordKey};
use crate::groups::Coordinator;
use crate::groups::Group;
use crate::shard::partition::{now_ms, Partition};
use crate::shard::Shard;

/// How often the timer fires deadlines (sessions, rebalance timeouts, delays).
const TICK: Duration = Duration::from_millis(50);
/// How often expired offsets are looked for (Kafka's offsets.retention.check.interval.ms).
const RETENTION_CHECK_INTERVAL_MS: i64 = 600_000;

/// A record to append: key, and value or `None` for a tombstone.
pub use routing::KeyValue;

impl Coordinator {
    /// Parks a JoinGroup response until an action completes it. A member that joins
    /// again while parked (its client gave up on the first request) replaces it.
    pub fn park_join(&mut self, group: &str, member: &str) -> LocalReceiver<JoinResult> {
        let (tx, rx) = local_channel::new_bounded(1);
        if let Some(old) = self.joins.insert((group.to_string(), member.to_string()), tx) {
            let _ = old.try_send(JoinResult::error(errors::REBALANCE_IN_PROGRESS, member));
        }
        rx
    }

    pub fn park_sync(&mut self, group: &str, member: &str) -> LocalReceiver<SyncResult> {
        let (tx, rx) = local_channel::new_bounded(1);
        if let Some(old) = self.syncs.insert((group.to_string(), member.to_string()), tx) {
            let _ = old.try_send(SyncResult::error(errors::REBALANCE_IN_PROGRESS));
        }
        rx
    }
}

/// Appends records to a `__consumer_offsets` partition and waits until they are
/// durable; returns the offset of the first.
pub async fn append(shard: &Rc<Shard>, partition: i32, records: &[KeyValue]) -> Result<i64, i16> {
    routing::append_internal(shard, OFFSETS_TOPIC, partition, Producer::NONE, records).await
}

/// Carries out a classic group's actions: answers parked requests, starts writes.
pub fn dispatch(shard: &Rc<Shard>, group: &str, partition: i32, actions: Vec<Action>) {
    for action in actions {
        match action {
            Action::CompleteJoin { member_id, result } => {
                let tx = shard.coordinator.borrow_mut().joins.remove(&(group.to_string(), member_id));
                if let Some(tx) = tx {
                    let _ = tx.try_send(result);
                }
            }
            Action::CompleteSync { member_id, result } => {
                let tx = shard.coordinator.borrow_mut().syncs.remove(&(group.to_string(), member_id));
                if let Some(tx) = tx {
                    let _ = tx.try_send(result);
                }
            }
            Action::Persist { assignment_of } => {
                glommio::spawn_local(persist_classic(shard.clone(), group.to_string(), partition, assignment_of))
                    .detach();
            }
            Action::Membership(change) => {
                membership::record(&mut shard.coordinator.borrow_mut().member_changes, "classic", group, &change);
            }
        }
    }
}

/// Writes the group's current metadata record; with `assignment_of`, tells the group
/// whether its assignment for that generation is durable.
async fn persist_classic(shard: Rc<Shard>, group: String, partition: i32, assignment_of: Option<i32>) {
    let value = match shard.coordinator.borrow().groups.get(&group) {
        Some(Group::Classic(g)) => records::encode_group(&g.to_record()),
        _ => return,
    };
    let key = records::encode_key(&RecordKey::Group { group: group.clone() });
    let written = append(&shard, partition, &[(key, Some(value))]).await;
    let Some(generation) = assignment_of else {
        return;
    };
    let mut out = Vec::new();
    if let Some(Group::Classic(g)) = shard.coordinator.borrow_mut().groups.get_mut(&group) {
        g.assignment_persisted(generation, written.err().unwrap_or(errors::NONE), now_ms(), &mut out);
    }
    dispatch(&shard, &group, partition, out);
}

/// Writes a consumer group's epoch record (not awaited by any request).
pub fn persist_consumer_epoch(shard: &Rc<Shard>, group: &str, partition: i32, epoch: i32) {
    let key = records::encode_key(&RecordKey::ConsumerGroup { group: group.to_string() });
    let value = records::encode_consumer_group(epoch);
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let _ = append(&shard, partition, &[(key, Some(value))]).await;
    })
    .detach();
}

/// Start-up on each shard: replay its unreplicated `__consumer_offsets` partitions
/// (a single node's), then start the timer. Group requests are answered
/// COORDINATOR_LOAD_IN_PROGRESS until then. In a cluster the partitions are
/// replicated and their groups are loaded when this node becomes leader
/// ([`crate::coordinator::leadership`]).
pub async fn start(shard: &Rc<Shard>) {
    let owned = offsets_partitions(shard, false);
    for p in &owned {
        let read = read_partition(shard, p).await;
        shard.coordinator.borrow_mut().absorb(read);
    }
    {
        let mut c = shard.coordinator.borrow_mut();
        c.loaded = true;
        tracing::info!(shard = shard.id, partitions = owned.len(), groups = c.groups.len(), "group coordinator loaded");
    }
    spawn_timer(shard);
    super::leadership::spawn(shard);
}

/// This shard's `__consumer_offsets` partitions, replicated or not, by index.
pub(super) fn offsets_partitions(shard: &Shard, replicated: bool) -> Vec<Rc<Partition>> {
    let mut owned: Vec<Rc<Partition>> = shard
        .partitions
        .borrow()
        .iter()
        .filter(|((topic, _), p)| topic == OFFSETS_TOPIC && p.replica.is_some() == replicated)
        .map(|(_, p)| p.clone())
        .collect();
    owned.sort_by_key(|p| p.index);
    owned
}

impl Coordinator {
    /// Takes in the groups and offsets read from one `__consumer_offsets` partition.
    pub(super) fn absorb(&mut self, read: Coordinator) {
        self.groups.extend(read.groups);
        self.offsets.absorb(read.offsets);
        for (producer_id, pending) in read.txn_offsets {
            self.txn_offsets.entry(producer_id).or_default().extend(pending);
        }
    }
}

/// The groups and offsets of one `__consumer_offsets` partition, as its log holds them
/// up to the high watermark.
pub(super) async fn read_partition(shard: &Rc<Shard>, p: &Partition) -> Coordinator {
    let mut read = Coordinator::default();
    if let Err(e) = replay(shard, p, &mut read).await {
        // The log recovery already cut damaged tails; what remains unreadable is
        // skipped rather than keeping the groups down.
        tracing::error!(partition = p.index, error = %e, "replaying __consumer_offsets stopped early");
    }
    let now = now_ms();
    let lim = limits(&shard.config);
    let orphans: Vec<String> = read.offsets.group_ids().filter(|g| !read.groups.contains_key(*g)).cloned().collect();
    for g in orphans {
        // Offsets without group metadata: a group that only committed (Kafka's
        // "simple" group), kept as an empty classic group.
        read.groups.insert(g.clone(), Group::Classic(ClassicGroup::new(&g, lim, now)));
    }
    read
}

async fn replay(shard: &Rc<Shard>, p: &Partition, c: &mut Coordinator) -> Result<(), String> {
    let lim = limits(&shard.config);
    routing::for_each_record(p, |r| {
        let now = now_ms();
        match (&r.key, r.control, r.transactional) {
            // A marker ends a producer's transactional offset commits (TxnOffsetCommit).
            (Some(key), true, _) => {
                let commit = key.len() >= 4 && i16::from_be_bytes([key[2], key[3]]) == CONTROL_COMMIT;
                c.complete_txn_offsets(r.producer_id, commit);
            }
            (Some(key), false, true) => c.pend_txn_offsets(r.producer_id, key, r.value.as_deref(), r.offset),
            (Some(key), false, false) => apply_record(c, key, r.value.as_deref(), r.offset, lim, now),
            (None, _, _) => {}
        }
    })
    .await
}

/// Applies one replayed record to the coordinator state.
fn apply_record(
    c: &mut Coordinator,
    key: &[u8],
    value: Option<&[u8]>,
    offset: i64,
    lim: crate::groups::classic::Limits,
    now: i64,
) {
    match records::decode(key, value) {
        Some(Record::Offset { group, topic, partition, value }) => {
            let committed = value.map(|v| Committed {
                offset: v.offset,
                leader_epoch: v.leader_epoch,
                metadata: v.metadata,
                commit_timestamp_ms: v.commit_timestamp_ms,
                record_offset: offset,
            });
            c.offsets.apply(&group, (topic, partition), committed, offset);
        }
        Some(Record::Group { group, value: Some(v) }) => {
            c.groups.insert(group.clone(), Group::Classic(ClassicGroup::from_record(&group, &v, lim, now)));
        }
        Some(Record::Group { group, value: None }) | Some(Record::ConsumerGroup { group, epoch: None }) => {
            c.groups.remove(&group);
        }
        Some(Record::ConsumerGroup { group, epoch: Some(epoch) }) => {
            c.groups.insert(group.clone(), Group::Consumer(ConsumerGroup::with_epoch(&group, epoch, now)));
        }
        None => {}
    }
}

fn spawn_timer(shard: &Rc<Shard>) {
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let mut retention_checked = now_ms();
        // 0: check once at start-up too, for topics deleted while the broker was down.
        let mut metadata_seen = 0;
        loop {
            glommio::timer::sleep(TICK).await;
            let now = now_ms();
            tick_groups(&shard, now);
            let version = shard.meta().version;
            if version != metadata_seen {
                metadata_seen = version;
                drop_deleted_topics(&shard).await;
            }
            if now - retention_checked >= RETENTION_CHECK_INTERVAL_MS {
                retention_checked = now;
                expire_offsets(&shard, now).await;
            }
        }
    })
    .detach();
}

fn tick_groups(shard: &Rc<Shard>, now: i64) {
    let mut classic_actions = Vec::new();
    let mut epochs = Vec::new();
    {
        let mut c = shard.coordinator.borrow_mut();
        if c.groups.is_empty() {
            return;
        }
        let c = &mut *c;
        for (id, group) in c.groups.iter_mut() {
            match group {
                Group::Classic(g) => {
                    let mut out = Vec::new();
                    g.tick(now, &mut out);
                    if !out.is_empty() {
                        classic_actions.push((id.clone(), out));
                    }
                }
                Group::Consumer(g) => {
                    if g.tick(now) {
                        epochs.push((id.clone(), g.epoch()));
                    }
                    for change in g.take_changes() {
                        membership::record(&mut c.member_changes, "consumer", id, &change);
                    }
                }
            }
        }
    }
    for (id, out) in classic_actions {
        if let Some(partition) = routing::partition_of(shard, &id) {
            dispatch(shard, &id, partition, out);
        }
    }
    for (id, epoch) in epochs {
        if let Some(partition) = routing::partition_of(shard, &id) {
            persist_consumer_epoch(shard, &id, partition, epoch);
        }
    }
}

/// Offsets of deleted topics (and removed partitions) are deleted, as Kafka does when
/// a topic goes away.
async fn drop_deleted_topics(shard: &Rc<Shard>) {
    let meta = shard.meta();
    let work: Vec<(String, Vec<(String, i32)>)> = {
        let c = shard.coordinator.borrow();
        c.groups
            .keys()
            .filter_map(|g| {
                let gone: Vec<(String, i32)> = c
                    .offsets
                    .group(g)
                    .filter(|((t, p), _)| meta.owner(t, *p).is_none())
                    .map(|(tp, _)| tp.clone())
                    .collect();
                (!gone.is_empty()).then(|| (g.clone(), gone))
            })
            .collect()
    };
    for (group, gone) in work {
        let Some(partition) = routing::partition_of(shard, &group) else {
            continue;
        };
        if let Err(code) = super::admin_ops::delete_offsets_and_group(shard, partition, &group, gone, false).await {
            tracing::warn!(%group, code, "deleting offsets of deleted topics failed");
        }
    }
}

/// Deletes offsets past retention (tombstones first, memory after), then empty groups
/// left without offsets.
async fn expire_offsets(shard: &Rc<Shard>, now: i64) {
    let retention = shard.config.offsets_retention_ms;
    let mut work = Vec::new();
    {
        let c = shard.coordinator.borrow();
        for (id, group) in &c.groups {
            let empty_since = match group {
                Group::Classic(g) if g.member_count() > 0 => continue,
                Group::Consumer(g) if g.member_count() > 0 => continue,
                Group::Classic(g) if g.protocol_type().is_none() => None,
                Group::Classic(g) => Some(g.state_since_ms()),
                Group::Consumer(g) => Some(g.state_since_ms()),
            };
            let expired = c.offsets.expired(id, now, retention, empty_since);
            let drop_group = expired.len() == c.offsets.group(id).count();
            if !expired.is_empty() || (drop_group && !matches!(empty_since, Some(s) if s + retention > now)) {
                work.push((id.clone(), expired, drop_group));
            }
        }
    }
    for (group, expired, drop_group) in work {
        let Some(partition) = routing::partition_of(shard, &group) else {
            continue;
        };
        if let Err(code) =
            super::admin_ops::delete_offsets_and_group(shard, partition, &group, expired, drop_group).await
        {
            tracing::warn!(%group, code, "expiring offsets failed; will retry");
        }
    }
}
