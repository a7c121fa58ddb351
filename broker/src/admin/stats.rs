//! What every shard reports at a scrape, gathered over the mesh by the shard that
//! answers the admin API (shard 0): gauges and counters the shards keep in plain cells
//! (no cost on the data path) and the percentiles of their distributions.

use std::rc::Rc;

use super::requests::GatherStats;
use crate::shard::Shard;

#[derive(Debug, Clone, Default)]
pub struct ShardStats {
    pub shard: usize,
    pub partitions: usize,
    pub connections: usize,
    pub authentication_failures: u64,
    pub tls_handshake_failures: u64,
    pub reauthentications: u64,
    pub expired_sessions_closed: u64,
    pub authorization_denials: u64,
    pub quota_throttles: u64,
    pub quota_throttle_ms: u64,
    pub connections_delayed: u64,
    pub connections_refused: u64,
    pub flush_passes: u64,
    pub log_flushes: u64,
    pub journal_bytes_written: u64,
    pub journal_checkpoints: u64,
    pub journal_files_created: u64,
    pub reactor_lag_max_us: u64,
    pub reactor_stall_max_us: u64,
    pub reactor_stalls_over_10ms: u64,
    pub reactor_preemptions_over_10ms: u64,
    pub log_bytes: u64,
    pub cache_bytes: u64,
    pub pass_times: keel_storage::flush::PassTimes,
    pub storage: keel_storage::stats::StorageStats,
    pub member_changes: crate::groups::membership::MembershipCounts,
    pub limits: LimitStats,
    pub raft: RaftStats,
    /// Partitions of the shard this node leads (all of them on a single node).
    pub leaders: usize,
    /// Partitions the shard leads with fewer in-sync replicas than replicas.
    pub under_replicated: usize,
    pub cache_bytes_max: u64,
    pub distributions: crate::telemetry::recorder::Distributions,
    /// High watermark of every partition the shard leads.
    pub high_watermarks: Vec<(String, i32, i64)>,
    /// Committed offsets of the groups the shard coordinates: (group, topic,
    /// partition, offset).
    pub committed: Vec<(String, String, i32, i64)>,
}

/// Replication on one shard (all zero on a single node).
#[derive(Debug, Clone, Default)]
pub struct RaftStats {
    pub groups: u64,
    pub groups_led: u64,
    pub refused_messages: u64,
    pub log_memory_bytes: u64,
    pub entries_read_back: u64,
    pub read_back_failures: u64,
    pub quiet_groups: u64,
    pub transport: crate::replication::transport::TransportStats,
}

impl RaftStats {
    fn of(shard: &Shard) -> RaftStats {
        let Some(r) = &shard.replication else { return RaftStats::default() };
        let views = r.views();
        RaftStats {
            groups: views.len() as u64,
            groups_led: views.iter().filter(|(_, leader, ..)| *leader == Some(r.node)).count() as u64,
            refused_messages: r.refused_messages.get(),
            log_memory_bytes: r.log_memory_bytes(),
            entries_read_back: r.entries_read_back.get(),
            read_back_failures: r.read_back_failures.get(),
            quiet_groups: r.quiet_groups(),
            transport: r.transport().stats(),
        }
    }
}

/// Use and cap of each bound on what clients can grow, for one shard.
#[derive(Debug, Clone, Default)]
pub struct LimitStats {
    pub request_bytes_in_flight: u64,
    pub request_bytes_in_flight_max: u64,
    pub unflushed_bytes: u64,
    pub unflushed_bytes_max: u64,
    pub producer_states: u64,
    pub producer_states_max: u64,
    pub producer_states_largest_partition: u64,
    pub producer_states_per_partition_max: u64,
    pub producers_evicted: u64,
    pub producers_expired: u64,
    pub mesh: crate::shard::mesh::MeshStats,
}

impl LimitStats {
    /// `asked_over_mesh`: these stats are gathered by a call from the admin API's
    /// shard, which is not counted among the calls running.
    fn of(s: &Shard, asked_over_mesh: bool) -> LimitStats {
        let mut mesh = s.mesh.stats();
        mesh.calls_running -= usize::from(asked_over_mesh);
        let limits = s.producers.limits();
        let largest = s.partitions.borrow().values().map(|p| p.producer_count()).max().unwrap_or(0);
        LimitStats {
            request_bytes_in_flight: s.request_budget.in_use() as u64,
            request_bytes_in_flight_max: s.request_budget.bytes_max() as u64,
            unflushed_bytes: s.flush.unflushed_bytes() as u64,
            unflushed_bytes_max: s.unflushed_bytes_max as u64,
            producer_states: s.producers.in_use() as u64,
            producer_states_max: limits.per_shard_max as u64,
            producer_states_largest_partition: largest as u64,
            producer_states_per_partition_max: limits.per_partition_max as u64,
            producers_evicted: s.producers.evicted_total(),
            producers_expired: s.producers.expired_total(),
            mesh,
        }
    }
}

pub async fn gather(shard: &Rc<Shard>) -> Vec<ShardStats> {
    shard.call_all(GatherStats { admin_shard: shard.id }).await.into_iter().map(|s| *s).collect()
}

/// The statistics of shard `s`, for the admin API on shard `admin_shard`.
pub(super) fn of_shard(s: &Shard, admin_shard: usize) -> ShardStats {
    let (leaders, under_replicated) = led_partitions(s);
    let parts = s.partitions.borrow();
    ShardStats {
        shard: s.id,
        partitions: parts.len(),
        connections: s.connections.get(),
        authentication_failures: s.security.stats.authentication_failures.get(),
        tls_handshake_failures: s.security.stats.tls_handshake_failures.get(),
        reauthentications: s.security.stats.reauthentications.get(),
        expired_sessions_closed: s.security.stats.expired_sessions_closed.get(),
        authorization_denials: s.security.authorizer.denials.get(),
        quota_throttles: s.security.quotas.throttled.get(),
        quota_throttle_ms: s.security.quotas.throttle_ms_total.get(),
        connections_delayed: s.security.quotas.connections_delayed.get(),
        connections_refused: s.security.quotas.connections_refused.get(),
        flush_passes: s.flush.passes.get(),
        log_flushes: s.flush.syncs.get(),
        journal_bytes_written: s.flush.journal().map_or(0, |j| j.bytes_written.get()),
        journal_checkpoints: s.flush.journal().map_or(0, |j| j.checkpoints.get()),
        journal_files_created: s.flush.journal().map_or(0, |j| j.files_created.get()),
        reactor_lag_max_us: s.reactor_lag_max_us.get(),
        reactor_stall_max_us: s.reactor_stall_max_us.get(),
        reactor_stalls_over_10ms: s.reactor_stalls_over_10ms.get(),
        reactor_preemptions_over_10ms: s.reactor_preemptions_over_10ms.get(),
        log_bytes: parts.values().map(|p| p.log.borrow().size_bytes()).sum(),
        cache_bytes: s.cache.used() as u64,
        pass_times: s.flush.pass_times.borrow().clone(),
        storage: keel_storage::stats::snapshot(),
        member_changes: s.coordinator.borrow().member_changes.clone(),
        limits: LimitStats::of(s, s.id != admin_shard),
        raft: RaftStats::of(s),
        leaders: leaders.len(),
        under_replicated,
        cache_bytes_max: s.cache.limit() as u64,
        distributions: s.metrics.distributions(),
        high_watermarks: leaders,
        committed: committed_offsets(s),
    }
}

/// The partitions of a shard this node leads, with their high watermarks, and how many
/// of them lack in-sync replicas.
fn led_partitions(s: &Shard) -> (Vec<(String, i32, i64)>, usize) {
    let meta = s.meta();
    let mut led = Vec::new();
    let mut under_replicated = 0;
    for ((topic, index), p) in s.partitions.borrow().iter() {
        if p.not_leader(s).is_some() {
            continue;
        }
        led.push((topic.clone(), *index, p.log.borrow().high_watermark()));
        let view = meta.topics.get(topic).and_then(|t| crate::cluster::nodes::partition_view(s, t, *index));
        if view.is_some_and(|v| v.in_sync.len() < v.replicas.len()) {
            under_replicated += 1;
        }
    }
    (led, under_replicated)
}

fn committed_offsets(s: &Shard) -> Vec<(String, String, i32, i64)> {
    let coordinator = s.coordinator.borrow();
    let offsets = &coordinator.offsets;
    let mut out = Vec::new();
    for group in offsets.group_ids() {
        for ((topic, partition), c) in offsets.group(group) {
            out.push((group.clone(), topic.clone(), *partition, c.offset));
        }
    }
    out
}
