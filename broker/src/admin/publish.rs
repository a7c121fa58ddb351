//! Turns what the shards reported at a scrape ([`ShardStats`]) into metrics of the
//! global recorder, which the exporter then renders: the gauges and counters the
//! shards keep in plain cells, the percentiles of their distributions, and
//! consumer-group lag (computed here, at scrape time, from every shard's high
//! watermarks and every coordinator's committed offsets).

use std::collections::{BTreeMap, HashMap};

use metrics::Label;

use super::stats::ShardStats;
use crate::telemetry::distribution::{Percentiles, QUANTILES};
use crate::telemetry::names;

/// Groups given a lag series (the ones with the largest lag); bounds the labels.
pub const GROUPS_WITH_SERIES_MAX: usize = 1000;

/// A metric: name, Prometheus type, help text, and how to read it from a shard.
type Series = (&'static str, &'static str, &'static str, fn(&ShardStats) -> u64);

/// Every plain per-shard series, published from the shards' cells at each scrape.
fn series() -> &'static [Series] {
    &[
        ("keel_partitions", "gauge", "Partitions owned by the shard", |s| s.partitions as u64),
        ("keel_raft_groups", "gauge", "Raft groups (replicated partitions and the metadata group) on the shard", |s| {
            s.raft.groups
        }),
        ("keel_raft_groups_led", "gauge", "Raft groups this shard leads", |s| s.raft.groups_led),
        (
            "keel_raft_quiet_groups",
            "gauge",
            "Raft groups with nothing in flight, not ticked and not heartbeating",
            |s| s.raft.quiet_groups,
        ),
        ("keel_raft_log_memory_bytes", "gauge", "Bytes of Raft log entries the shard holds in memory", |s| {
            s.raft.log_memory_bytes
        }),
        (
            "keel_raft_entries_read_back_total",
            "counter",
            "Released Raft entries read back from the partition log for appends to slow replicas",
            |s| s.raft.entries_read_back,
        ),
        (
            "keel_raft_read_back_failures_total",
            "counter",
            "Read-backs of released Raft entries that failed (the log no longer or not yet holds them)",
            |s| s.raft.read_back_failures,
        ),
        (
            "keel_raft_refused_messages_total",
            "counter",
            "Peer Raft messages the core refused (unknown group, stale)",
            |s| s.raft.refused_messages,
        ),
        ("keel_raft_frames_sent_total", "counter", "Node-to-node frames sent", |s| s.raft.transport.frames_sent),
        (
            "keel_raft_heartbeat_frames_sent_total",
            "counter",
            "Node-to-node frames that carried heartbeats (one per peer per tick, whatever the group count)",
            |s| s.raft.transport.heartbeat_frames_sent,
        ),
        ("keel_raft_bytes_sent_total", "counter", "Node-to-node bytes sent", |s| s.raft.transport.bytes_sent),
        ("keel_raft_bytes_received_total", "counter", "Node-to-node bytes received", |s| {
            s.raft.transport.bytes_received
        }),
        (
            "keel_raft_dropped_messages_total",
            "counter",
            "Raft messages not sent (peer unreachable or over its queue bound; Raft resends)",
            |s| s.raft.transport.dropped_messages,
        ),
        ("keel_raft_bad_frames_total", "counter", "Node-to-node frames refused (CRC, size, format)", |s| {
            s.raft.transport.bad_frames
        }),
        ("keel_rpc_peers_refused_total", "counter", "Node-to-node peers refused (TLS handshake, certificate not naming the node)", |s| {
            s.raft.transport.peers_refused
        }),
        (
            "keel_read_ahead_hits_total",
            "counter",
            "Catch-up reads served from data read ahead of a consumer reading in order",
            |s| s.storage.read_ahead_hits,
        ),
        (
            "keel_batch_cache_bytes",
            "gauge",
            "Batches cached in memory for tail reads, all partitions of the shard",
            |s| s.cache_bytes,
        ),
        ("keel_connections", "gauge", "Open Kafka connections on the shard", |s| s.connections as u64),
        (
            "keel_authentication_failures_total",
            "counter",
            "Failed SASL logins and TLS handshakes on the shard's connections",
            |s| s.authentication_failures,
        ),
        ("keel_tls_handshake_failures_total", "counter", "TLS handshakes that failed or timed out", |s| {
            s.tls_handshake_failures
        }),
        (
            "keel_sasl_reauthentications_total",
            "counter",
            "KIP-368 re-authentications that succeeded on the shard's connections",
            |s| s.reauthentications,
        ),
        (
            "keel_sasl_expired_sessions_closed_total",
            "counter",
            "Connections closed because their SASL session expired without re-authentication",
            |s| s.expired_sessions_closed,
        ),
        (
            "keel_authorization_denials_total",
            "counter",
            "Requests or parts of requests the authorizer refused on the shard (filtered lists not counted)",
            |s| s.authorization_denials,
        ),
        (
            "keel_quota_throttles_total",
            "counter",
            "Answers throttled for a client quota (byte rates, controller mutations) kept on the shard",
            |s| s.quota_throttles,
        ),
        (
            "keel_connections_delayed_total",
            "counter",
            "New connections that waited for the broker's connection creation rate (counted on the shard keeping it)",
            |s| s.connections_delayed,
        ),
        (
            "keel_connections_refused_total",
            "counter",
            "New connections closed unserved for their IP address's connection creation rate (counted on the shard keeping it)",
            |s| s.connections_refused,
        ),
        (
            "keel_quota_throttle_ms_total",
            "counter",
            "Milliseconds of throttle given to clients over their quotas on the shard",
            |s| s.quota_throttle_ms,
        ),
        ("keel_flush_passes_total", "counter", "Group-commit passes of the shard's flush loop", |s| s.flush_passes),
        (
            "keel_log_flushes_total",
            "counter",
            "fdatasyncs issued by flush passes (one per pass with the journal)",
            |s| s.log_flushes,
        ),
        (
            "keel_journal_bytes_written_total",
            "counter",
            "Bytes written to the shard journal (page rewrites included)",
            |s| s.journal_bytes_written,
        ),
        (
            "keel_reactor_lag_max_microseconds",
            "gauge",
            "Longest a 5 ms timer fired late on the shard since start, for any reason",
            |s| s.reactor_lag_max_us,
        ),
        (
            "keel_reactor_stall_max_microseconds",
            "gauge",
            "Longest a 5 ms timer fired late for the shard's own reasons (lateness less run-queue wait)",
            |s| s.reactor_stall_max_us,
        ),
        (
            "keel_reactor_stalls_over_10ms_total",
            "counter",
            "Times a 5 ms timer fired more than 10 ms late for the shard's own reasons",
            |s| s.reactor_stalls_over_10ms,
        ),
        (
            "keel_reactor_preemptions_over_10ms_total",
            "counter",
            "Times a 5 ms timer fired more than 10 ms late only because the thread waited for a CPU",
            |s| s.reactor_preemptions_over_10ms,
        ),
        (
            "keel_journal_checkpoints_total",
            "counter",
            "Journal checkpoints: segment files fsynced, older journal files retired",
            |s| s.journal_checkpoints,
        ),
        (
            "keel_journal_files_created_total",
            "counter",
            "Journal files created (zero-filled) rather than recycled; flat once the journal is warm",
            |s| s.journal_files_created,
        ),
        ("keel_log_bytes", "gauge", "Bytes in the shard's partition logs", |s| s.log_bytes),
        ("keel_retention_segments_deleted_total", "counter", "Segments deleted by retention", |s| {
            s.storage.retention_segments_deleted
        }),
        ("keel_retention_bytes_deleted_total", "counter", "Bytes deleted by retention", |s| {
            s.storage.retention_bytes_deleted
        }),
        ("keel_compaction_passes_total", "counter", "Compaction passes that rewrote a segment", |s| {
            s.storage.compaction_passes
        }),
        ("keel_compaction_records_removed_total", "counter", "Records removed by compaction", |s| {
            s.storage.compaction_records_removed
        }),
        ("keel_compaction_bytes_reclaimed_total", "counter", "Bytes reclaimed by compaction", |s| {
            s.storage.compaction_bytes_reclaimed
        }),
        ("keel_corrupt_batches_read_total", "counter", "Batches that failed their CRC when read (never served)", |s| {
            s.storage.corrupt_batches_read
        }),
        ("keel_recovery_truncations_total", "counter", "Segments cut at a torn tail during recovery", |s| {
            s.storage.recovery_truncations
        }),
        ("keel_damaged_segments_total", "counter", "Segments with damage inside the log found at open", |s| {
            s.storage.damaged_segments_found
        }),
        ("keel_log_opens_clean_total", "counter", "Logs opened from a clean-shutdown checkpoint", |s| {
            s.storage.opens_clean
        }),
        ("keel_log_opens_scanned_total", "counter", "Logs opened by a recovery scan", |s| s.storage.opens_scanned),
        ("keel_log_opens_snapshot_total", "counter", "Logs opened after a crash from a checkpoint snapshot", |s| {
            s.storage.opens_snapshot
        }),
        (
            "keel_checkpoint_snapshot_bytes_total",
            "counter",
            "Bytes of checkpoint snapshots written to the state store",
            |s| s.storage.snapshot_bytes_written,
        ),
        ("keel_checkpoint_file_syncs_total", "counter", "Segment-file fdatasyncs by checkpoints", |s| {
            s.storage.checkpoint_file_syncs
        }),
        (
            "keel_checkpoint_file_system_syncs_total",
            "counter",
            "syncfs calls by checkpoints, each taking a data directory's files at once",
            |s| s.storage.checkpoint_file_system_syncs,
        ),
        (
            "keel_checkpoint_tails_left_total",
            "counter",
            "Logs a checkpoint fsynced in whole pages only, leaving their last batches to the journal",
            |s| s.storage.checkpoint_tails_left,
        ),
        ("keel_disk_bytes_written_total", "counter", "Bytes the storage wrote: journal, segments, state store", |s| {
            s.storage.disk_bytes_written
        }),
        ("keel_segment_bytes_written_total", "counter", "Bytes written to segment files (state store included)", |s| {
            s.storage.segment_bytes_written
        }),
        (
            "keel_checkpoint_segment_bytes_written_total",
            "counter",
            "Of keel_segment_bytes_written_total, the bytes full flushes wrote: checkpoints, shutdown (tails short of a page)",
            |s| s.storage.checkpoint_segment_bytes_written,
        ),
        ("keel_request_bytes_in_flight", "gauge", "Request bytes read and not yet answered, all connections", |s| {
            s.limits.request_bytes_in_flight
        }),
        ("keel_request_bytes_in_flight_max", "gauge", "request_bytes_in_flight_max_per_shard", |s| {
            s.limits.request_bytes_in_flight_max
        }),
        ("keel_unflushed_bytes", "gauge", "Bytes appended and not yet written to segment files, all partitions", |s| {
            s.limits.unflushed_bytes
        }),
        ("keel_unflushed_bytes_max", "gauge", "unflushed_bytes_max_per_shard", |s| s.limits.unflushed_bytes_max),
        ("keel_producer_states", "gauge", "Idempotent producer states, all partitions", |s| s.limits.producer_states),
        ("keel_producer_states_max", "gauge", "producer_states_per_shard_max", |s| s.limits.producer_states_max),
        (
            "keel_producer_states_largest_partition",
            "gauge",
            "Idempotent producer states of the fullest partition",
            |s| s.limits.producer_states_largest_partition,
        ),
        ("keel_producer_states_per_partition_max", "gauge", "producer_states_per_partition_max", |s| {
            s.limits.producer_states_per_partition_max
        }),
        ("keel_producers_evicted_total", "counter", "Producer states evicted by the partition or shard cap", |s| {
            s.limits.producers_evicted
        }),
        ("keel_producers_expired_total", "counter", "Producer states removed after producer_id_expiration_ms", |s| {
            s.limits.producers_expired
        }),
        ("keel_mesh_calls_in_flight", "gauge", "Calls this shard waits on, all other shards", |s| {
            s.limits.mesh.calls_in_flight as u64
        }),
        ("keel_mesh_calls_in_flight_max_per_peer", "gauge", "mesh_calls_in_flight_max_per_peer", |s| {
            s.limits.mesh.calls_in_flight_max_per_peer as u64
        }),
        ("keel_mesh_calls_running", "gauge", "Calls from other shards running on this shard", |s| {
            s.limits.mesh.calls_running as u64
        }),
        (
            "keel_mesh_calls_cancelled_total",
            "counter",
            "Calls cancelled on their target after the caller stopped waiting",
            |s| s.limits.mesh.calls_cancelled,
        ),
        ("keel_partition_leaders", "gauge", "Partitions of the shard this node leads", |s| s.leaders as u64),
        (
            "keel_under_replicated_partitions",
            "gauge",
            "Partitions the shard leads with fewer in-sync replicas than replicas",
            |s| s.under_replicated as u64,
        ),
        ("keel_batch_cache_bytes_max", "gauge", "The batch-cache budget of the shard (an eighth of its memory)", |s| {
            s.cache_bytes_max
        }),
        ("keel_batch_cache_hits_total", "counter", "Reads answered from the batch cache", |s| s.storage.cache_hits),
        ("keel_batch_cache_misses_total", "counter", "Reads that went to the segment files", |s| {
            s.storage.cache_misses
        }),
        ("keel_mesh_calls_sent_total", "counter", "Cross-shard calls this shard sent (mesh messages)", |s| {
            s.limits.mesh.calls_sent
        }),
    ]
}

/// Registers the help text of every series published here.
pub fn describe() {
    for &(name, kind, help, _) in series() {
        match kind {
            "counter" => metrics::describe_counter!(name, help),
            _ => metrics::describe_gauge!(name, help),
        }
    }
    metrics::describe_counter!(
        "keel_group_member_changes_total",
        "Group members added, left, removed and fenced, by protocol and reason"
    );
}

pub fn publish(stats: &[ShardStats]) {
    for &(name, kind, _, get) in series() {
        for s in stats {
            let shard = s.shard.to_string();
            match kind {
                "counter" => metrics::counter!(name, "shard" => shard).absolute(get(s)),
                _ => metrics::gauge!(name, "shard" => shard).set(get(s) as f64),
            }
        }
    }
    for s in stats {
        let shard = s.shard.to_string();
        for (protocol, reason, count) in s.member_changes.iter() {
            metrics::counter!("keel_group_member_changes_total",
                "shard" => shard.clone(), "protocol" => protocol.to_string(),
                "change" => reason.change().name(), "reason" => reason.name())
            .absolute(count);
        }
        let d = &s.distributions;
        for (api, p) in &d.request_latency_us {
            let labels = vec![Label::new("shard", shard.clone()), Label::new("api", api.clone())];
            percentiles(names::REQUEST_LATENCY, labels, p, 1e-6);
        }
        let labels = || vec![Label::new("shard", shard.clone())];
        percentiles(names::PRODUCE_BATCH_BYTES, labels(), &d.produce_batch_bytes, 1.0);
        percentiles(names::FSYNC_SECONDS, labels(), &d.fsync_us, 1e-6);
        percentiles(names::FLUSH_PASS_LOGS, labels(), &d.flush_pass_logs, 1.0);
        percentiles(names::FLUSH_PASS_BYTES, labels(), &d.flush_pass_bytes, 1.0);
    }
    let mut lags: Vec<(&String, &GroupLag)> = Vec::new();
    let all = group_lags(stats);
    lags.extend(all.iter());
    lags.sort_by_key(|(_, g)| std::cmp::Reverse(g.total()));
    for (group, lag) in lags.into_iter().take(GROUPS_WITH_SERIES_MAX) {
        metrics::gauge!(names::CONSUMER_GROUP_LAG, "shard" => lag.shard.to_string(), "group" => group.clone())
            .set(lag.total() as f64);
    }
}

/// A distribution as a summary: one gauge per quantile, `_count` and `_sum`. Values
/// are multiplied by `scale` (µs to seconds).
fn percentiles(name: &'static str, labels: Vec<Label>, p: &Percentiles, scale: f64) {
    for (value, (_, q)) in p.values.iter().zip(QUANTILES) {
        let mut with_q = labels.clone();
        with_q.push(Label::new("quantile", q));
        metrics::gauge!(name, with_q).set(*value as f64 * scale);
    }
    metrics::counter!(format!("{name}_count"), labels.clone()).absolute(p.count);
    metrics::gauge!(format!("{name}_sum"), labels).set(p.sum as f64 * scale);
}

/// One group's committed offsets against its partitions' high watermarks.
#[derive(Debug, Clone, Default)]
pub struct GroupLag {
    /// The shard coordinating the group.
    pub shard: usize,
    /// (topic, partition, committed offset, high watermark or -1 if unknown, lag).
    pub partitions: Vec<(String, i32, i64, i64, i64)>,
}

impl GroupLag {
    pub fn total(&self) -> i64 {
        self.partitions.iter().map(|p| p.4).sum()
    }
}

/// Lag of every group with committed offsets: high watermark less committed offset
/// per partition (0 when the offset is at or past it, or the watermark is unknown).
pub fn group_lags(stats: &[ShardStats]) -> BTreeMap<String, GroupLag> {
    let watermarks: HashMap<(&str, i32), i64> =
        stats.iter().flat_map(|s| s.high_watermarks.iter().map(|(t, p, hw)| ((t.as_str(), *p), *hw))).collect();
    let mut out: BTreeMap<String, GroupLag> = BTreeMap::new();
    for s in stats {
        for (group, topic, partition, offset) in &s.committed {
            let hw = watermarks.get(&(topic.as_str(), *partition)).copied().unwrap_or(-1);
            let lag = if hw < 0 { 0 } else { (hw - offset).max(0) };
            let g = out.entry(group.clone()).or_insert_with(|| GroupLag { shard: s.shard, ..GroupLag::default() });
            g.partitions.push((topic.clone(), *partition, *offset, hw, lag));
        }
    }
    out
}

/// Metrics `/public_metrics` shows: a small set whose names and labels stay stable.
pub const PUBLIC: &[&str] = &[
    "keel_requests_total",
    "keel_request_latency_seconds",
    "keel_topic_bytes_in_total",
    "keel_topic_bytes_out_total",
    "keel_partitions",
    "keel_partition_leaders",
    "keel_under_replicated_partitions",
    "keel_consumer_group_lag",
    "keel_connections",
];

/// The lines of a full `/metrics` text that belong to [`PUBLIC`] metrics.
pub fn public_subset(full: &str) -> String {
    let name_of = |line: &str| -> String {
        let rest = line.strip_prefix("# HELP ").or_else(|| line.strip_prefix("# TYPE ")).unwrap_or(line);
        rest.split(['{', ' ']).next().unwrap_or_default().to_string()
    };
    let mut out = String::new();
    for line in full.lines() {
        let name = name_of(line);
        let base = name.strip_suffix("_count").or_else(|| name.strip_suffix("_sum")).unwrap_or(&name);
        if PUBLIC.contains(&name.as_str()) || PUBLIC.contains(&base) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
