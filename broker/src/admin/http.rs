//! A small HTTP/1.1 server on `--admin-addr`: `GET /v1/health`, `GET /v1/status`
//! (JSON) and `GET /metrics` (Prometheus text), gathered from every shard over the
//! mesh, and `POST /v1/partitions/{topic}/{partition}/leader[?to=N]`, which moves a
//! partition's leadership to replica N (the preferred replica without `to`). One
//! request per connection; the admin API is not on the data path.

use std::rc::Rc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpListener;

use crate::replication::balance::{self, MoveError, Moved, Wanted};
use crate::shard::Shard;

/// Largest request head the admin API reads.
const REQUEST_HEAD_BYTES_MAX: usize = 8192;
/// How long a leadership move waits for the new leader before answering 504.
const LEADER_MOVE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone, Default)]
pub struct ShardStats {
    pub shard: usize,
    pub partitions: usize,
    pub connections: usize,
    pub authentication_failures: u64,
    pub tls_handshake_failures: u64,
    pub flush_passes: u64,
    pub log_flushes: u64,
    pub journal_bytes_written: u64,
    pub journal_checkpoints: u64,
    pub reactor_lag_max_us: u64,
    pub reactor_stall_max_us: u64,
    pub reactor_stalls_over_10ms: u64,
    pub reactor_preemptions_over_10ms: u64,
    pub log_bytes: u64,
    pub cache_bytes: u64,
    pub pass_times: keel_storage::flush::PassTimes,
    pub storage: keel_storage::stats::StorageStats,
    pub member_changes: crate::coordinator::membership::MembershipCounts,
    pub limits: LimitStats,
    pub raft: RaftStats,
}

/// Replication on one shard (all zero on a single node).
#[derive(Debug, Clone, Default)]
pub struct RaftStats {
    pub groups: u64,
    pub groups_led: u64,
    pub refused_messages: u64,
    pub log_memory_bytes: u64,
    pub entries_read_back: u64,
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

pub fn spawn(shard: &Rc<Shard>) -> Result<(), String> {
    let addr = shard.config.admin_addr.clone();
    let listener = TcpListener::bind(&addr).map_err(|e| format!("admin API cannot listen on {addr}: {e}"))?;
    let shard = shard.clone();
    glommio::spawn_local(async move {
        loop {
            let Ok(mut stream) = listener.accept().await else { continue };
            let shard = shard.clone();
            glommio::spawn_local(async move {
                let mut buf = vec![0u8; REQUEST_HEAD_BYTES_MAX];
                let mut len = 0;
                while len < buf.len() {
                    match stream.read(&mut buf[len..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => len += n,
                    }
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let head = String::from_utf8_lossy(&buf[..len]);
                let mut words = head.split_whitespace();
                let method = words.next().unwrap_or("GET").to_string();
                let path = words.next().unwrap_or("/").to_string();
                let (status, content_type, body) = route(&shard, &method, &path).await;
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.close().await;
            })
            .detach();
        }
    })
    .detach();
    tracing::info!(%addr, "admin API listening");
    Ok(())
}

async fn route(shard: &Rc<Shard>, method: &str, path: &str) -> (&'static str, &'static str, String) {
    if let Some(rest) = path.strip_prefix("/v1/partitions/") {
        return partition_route(shard, method, rest).await;
    }
    match path {
        "/v1/health" => ("200 OK", "text/plain", "ok\n".into()),
        "/v1/status" => {
            let stats = gather(shard).await;
            let meta = shard.meta();
            let shards: Vec<String> = stats
                .iter()
                .map(|s| {
                    format!(r#"{{"shard":{},"partitions":{},"connections":{}}}"#, s.shard, s.partitions, s.connections)
                })
                .collect();
            let body = format!(
                r#"{{"node_id":{},"cluster_id":"{}","topics":{},"shards":[{}]}}"#,
                shard.config.node_id,
                meta.cluster_id,
                meta.topics.len(),
                shards.join(",")
            );
            ("200 OK", "application/json", body + "\n")
        }
        "/v1/cluster" => {
            // The cluster as this node sees it: registered brokers, the controller
            // (-1 while there is none), and the replicated partitions it knows leaders of.
            let meta = shard.meta();
            let leaders = shard.leaders.borrow();
            let led = leaders.values().filter(|k| k.leader >= 0).count();
            let body = format!(
                r#"{{"node_id":{},"cluster_id":"{}","brokers":{},"controller":{},"groups_with_leader":{},"groups_known":{}}}"#,
                shard.config.node_id,
                meta.cluster_id,
                meta.brokers.len().max(usize::from(shard.replication.is_none())),
                crate::replication::cluster::controller_id(shard),
                led,
                leaders.len()
            );
            ("200 OK", "application/json", body + "\n")
        }
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", render_metrics(&gather(shard).await)),
        _ => ("404 Not Found", "text/plain", "not found\n".into()),
    }
}

/// `{topic}/{partition}/leader[?to=N]` under `/v1/partitions/`.
async fn partition_route(shard: &Rc<Shard>, method: &str, rest: &str) -> (&'static str, &'static str, String) {
    let json = "application/json";
    let error = |status, message: String| (status, json, serde_json::json!({ "error": message }).to_string() + "\n");
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let parts: Vec<&str> = path.rsplitn(3, '/').collect();
    let [action, partition, topic] = parts.as_slice() else {
        return ("404 Not Found", "text/plain", "not found\n".into());
    };
    if *action != "leader" {
        return ("404 Not Found", "text/plain", "not found\n".into());
    }
    if method != "POST" {
        return error("405 Method Not Allowed", "POST moves the partition's leadership".into());
    }
    let Ok(partition) = partition.parse::<i32>() else {
        return error("400 Bad Request", format!("{partition:?} is not a partition number"));
    };
    let to = query.split('&').find_map(|kv| kv.strip_prefix("to="));
    let to = match to.map(|n| n.parse::<i32>()) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return error("400 Bad Request", "`to` is not a node id".into()),
    };
    let wanted = Wanted { topic: topic.to_string(), partition, to };
    let moved = balance::move_leaders(shard, vec![wanted], LEADER_MOVE_WAIT).await;
    let leader = |moved: bool| {
        let leaders = shard.meta().topics.get(*topic).and_then(|t| {
            let view = crate::replication::cluster::partition_view(shard, t, partition)?;
            Some(view.leader)
        });
        let body = serde_json::json!({
            "topic": topic,
            "partition": partition,
            "leader": leaders.unwrap_or(shard.config.node_id),
            "moved": moved,
        });
        ("200 OK", json, body.to_string() + "\n")
    };
    match moved.into_iter().next().expect("one answer per move") {
        Ok(Moved::Done) => leader(true),
        Ok(Moved::AlreadyLeads) => leader(false),
        Err(e @ MoveError::Unknown) => error("404 Not Found", e.to_string()),
        Err(e @ MoveError::NotAReplica { .. }) => error("400 Bad Request", e.to_string()),
        Err(e @ (MoveError::NotReplicated | MoveError::NoLeader | MoveError::NotInSync { .. })) => {
            error("409 Conflict", e.to_string())
        }
        Err(e @ MoveError::TimedOut { .. }) => error("504 Gateway Timeout", e.to_string()),
    }
}

async fn gather(shard: &Rc<Shard>) -> Vec<ShardStats> {
    let admin_shard = shard.id;
    shard
        .submit_to_all(move |s| async move {
            let parts = s.partitions.borrow();
            ShardStats {
                shard: s.id,
                partitions: parts.len(),
                connections: s.connections.get(),
                authentication_failures: s.security.stats.authentication_failures.get(),
                tls_handshake_failures: s.security.stats.tls_handshake_failures.get(),
                flush_passes: s.flush.passes.get(),
                log_flushes: s.flush.syncs.get(),
                journal_bytes_written: s.flush.journal().map_or(0, |j| j.bytes_written.get()),
                journal_checkpoints: s.flush.journal().map_or(0, |j| j.checkpoints.get()),
                reactor_lag_max_us: s.reactor_lag_max_us.get(),
                reactor_stall_max_us: s.reactor_stall_max_us.get(),
                reactor_stalls_over_10ms: s.reactor_stalls_over_10ms.get(),
                reactor_preemptions_over_10ms: s.reactor_preemptions_over_10ms.get(),
                log_bytes: parts.values().map(|p| p.log.borrow().size_bytes()).sum(),
                cache_bytes: s.cache.used() as u64,
                pass_times: s.flush.pass_times.borrow().clone(),
                storage: keel_storage::stats::snapshot(),
                member_changes: s.coordinator.borrow().member_changes.clone(),
                limits: LimitStats::of(&s, s.id != admin_shard),
                raft: RaftStats::of(&s),
            }
        })
        .await
}

/// A metric: name, Prometheus type, help text, and how to read it from a shard.
type Series = (&'static str, &'static str, &'static str, fn(&ShardStats) -> u64);

fn render_metrics(stats: &[ShardStats]) -> String {
    let mut out = String::new();
    let series: &[Series] = &[
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
    ];
    for &(name, kind, help, get) in series {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for s in stats {
            out.push_str(&format!("{name}{{shard=\"{}\"}} {}\n", s.shard, get(s)));
        }
    }
    render_pass_times(&mut out, stats);
    render_member_changes(&mut out, stats);
    out
}

fn render_member_changes(out: &mut String, stats: &[ShardStats]) {
    let name = "keel_group_member_changes_total";
    out.push_str(&format!(
        "# HELP {name} Group members added, left, removed and fenced, by protocol and reason\n# TYPE {name} counter\n"
    ));
    for s in stats {
        for (protocol, reason, count) in s.member_changes.iter() {
            out.push_str(&format!(
                "{name}{{shard=\"{}\",protocol=\"{protocol}\",change=\"{}\",reason=\"{}\"}} {count}\n",
                s.shard,
                reason.change().name(),
                reason.name()
            ));
        }
    }
}

fn render_pass_times(out: &mut String, stats: &[ShardStats]) {
    let name = "keel_flush_pass_seconds";
    out.push_str(&format!(
        "# HELP {name} Duration of the shard's flush passes (write and fdatasync of every dirty log)\n# TYPE {name} histogram\n"
    ));
    for s in stats {
        let t = &s.pass_times;
        let mut cumulative = 0;
        for (bound, count) in keel_storage::flush::PASS_TIME_BOUNDS.iter().zip(t.counts) {
            cumulative += count;
            out.push_str(&format!("{name}_bucket{{shard=\"{}\",le=\"{bound}\"}} {cumulative}\n", s.shard));
        }
        let total: u64 = t.counts.iter().sum();
        out.push_str(&format!("{name}_bucket{{shard=\"{}\",le=\"+Inf\"}} {total}\n", s.shard));
        out.push_str(&format!("{name}_sum{{shard=\"{}\"}} {}\n", s.shard, t.sum_seconds));
        out.push_str(&format!("{name}_count{{shard=\"{}\"}} {total}\n", s.shard));
    }
}
