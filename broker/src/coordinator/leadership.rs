//! In a cluster: the groups of a replicated `__consumer_offsets` partition live on its
//! Raft leader, and follow that leadership as Kafka's `GroupMetadataManager` follows
//! its partitions' (`onElection`, `onResignation`).
//!
//! Every `LEADERSHIP_CHECK` each shard compares the offsets partitions it leads with
//! the ones whose groups it holds. A partition it has come to lead (or leads again in
//! a later term, after another leader may have written to it) is loaded: once the
//! records of earlier terms are committed, the log is read up to the high watermark,
//! and only then does `routing::check_coordinator` let requests through (until then
//! they get COORDINATOR_LOAD_IN_PROGRESS). A partition it no longer leads is unloaded:
//! its groups and offsets leave memory, and parked JoinGroup and SyncGroup requests are
//! answered NOT_COORDINATOR, so their members find the new coordinator and rejoin.
//!
//! **Why polling.** The Raft shell's leadership changes already feed Metadata on every
//! node; checking `leads` here, on the shard that owns the partition, keeps the group
//! coordinator out of the Raft driver's path and costs one map lookup per offsets
//! partition every 50 ms. A change is acted on within that, far below the election
//! timeout clients wait out anyway.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::shell;
use crate::cluster::routing;
use crate::config::OFFSETS_TOPIC;
use crate::errors;
use crate::groups::classic::{JoinResult, SyncResult};
use crate::shard::partition::Partition;
use crate::shard::Shard;
use crate::util::wait_below_high_watermark;

/// How often each shard compares the offsets partitions it leads with those it holds.
const LEADERSHIP_CHECK: Duration = Duration::from_millis(50);
/// Longest wait for a new leader's log to be committed before loading; the next check
/// tries again.
const ELECTION_COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Starts following leadership on this shard (nothing on a single node).
pub fn spawn(shard: &Rc<Shard>) {
    if shard.replication.is_none() {
        return;
    }
    let shard = Rc::downgrade(shard);
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(LEADERSHIP_CHECK).await;
            let Some(shard) = shard.upgrade() else { return };
            follow(&shard).await;
        }
    })
    .detach();
}

/// True while this shard leads an offsets partition whose groups it has not loaded
/// in the current term (ListGroups answers COORDINATOR_LOAD_IN_PROGRESS then).
pub fn loading(shard: &Shard) -> bool {
    let c = shard.coordinator.borrow();
    shell::offsets_partitions(shard, true)
        .iter()
        .any(|p| p.not_leader(shard).is_none() && c.led.get(&p.index) != Some(&p.leader_epoch()))
}

async fn follow(shard: &Rc<Shard>) {
    let partitions = shell::offsets_partitions(shard, true);
    let gone: Vec<i32> = {
        let c = shard.coordinator.borrow();
        c.led.keys().filter(|i| !partitions.iter().any(|p| p.index == **i)).copied().collect()
    };
    for index in gone {
        unload(shard, index);
    }
    for p in partitions {
        let leads = p.not_leader(shard).is_none();
        let epoch = p.leader_epoch();
        let held = shard.coordinator.borrow().led.get(&p.index).copied();
        if held.is_some() && (!leads || held != Some(epoch)) {
            unload(shard, p.index);
        }
        if leads && held != Some(epoch) {
            load(shard, &p, epoch).await;
        }
    }
}

/// Reads the groups of partition `p`, which this node leads in `epoch`.
async fn load(shard: &Rc<Shard>, p: &Partition, epoch: i32) {
    let started = Instant::now();
    let still_leads = || p.not_leader(shard).is_none() && p.leader_epoch() == epoch;
    // A new leader's log holds every committed record and perhaps some of earlier
    // terms not yet known committed; they commit with the entry it appends on
    // election. Groups are read only from committed records.
    let end = p.log.borrow().log_end_offset();
    if end > 0 {
        let deposed = || (!still_leads()).then_some(errors::NOT_LEADER_OR_FOLLOWER);
        if let Err(code) = wait_below_high_watermark(&p.log, end - 1, ELECTION_COMMIT_WAIT, deposed).await {
            tracing::debug!(partition = p.index, epoch, code, "offsets partition not loaded yet");
            return;
        }
    }
    let read = shell::read_partition(shard, p).await;
    if !still_leads() {
        return;
    }
    let mut c = shard.coordinator.borrow_mut();
    tracing::info!(
        partition = p.index,
        epoch,
        groups = read.groups.len(),
        ms = started.elapsed().as_millis() as u64,
        "loaded the groups of {OFFSETS_TOPIC}-{} as its leader",
        p.index
    );
    c.absorb(read);
    c.led.insert(p.index, epoch);
}

/// Drops the groups of partition `index` from memory: this node no longer leads it.
fn unload(shard: &Shard, index: i32) {
    let belongs = |group: &str| routing::partition_of(shard, group).is_none_or(|p| p == index);
    let mut c = shard.coordinator.borrow_mut();
    c.led.remove(&index);
    let groups: Vec<String> = c.groups.keys().chain(c.offsets.group_ids()).filter(|g| belongs(g)).cloned().collect();
    for g in &groups {
        c.groups.remove(g);
        c.offsets.remove_group(g);
    }
    for pending in c.txn_offsets.values_mut() {
        pending.retain(|(g, _, _)| !belongs(g));
    }
    c.txn_offsets.retain(|_, pending| !pending.is_empty());
    // Members waiting on a rebalance look for the new coordinator and join there.
    c.joins.retain(|(group, member), tx| {
        let stays = !belongs(group);
        if !stays {
            let _ = tx.try_send(JoinResult::error(errors::NOT_COORDINATOR, member));
        }
        stays
    });
    c.syncs.retain(|(group, _), tx| {
        let stays = !belongs(group);
        if !stays {
            let _ = tx.try_send(SyncResult::error(errors::NOT_COORDINATOR));
        }
        stays
    });
    tracing::info!(partition = index, groups = groups.len(), "unloaded the groups of {OFFSETS_TOPIC}-{index}");
}
