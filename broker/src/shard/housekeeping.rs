//! The shard's housekeeping task: retention and compaction of every partition the
//! shard owns, in a task queue of its own with few shares.
//!
//! Produce and fetch run in the default queue (1000 shares); housekeeping has
//! `HOUSEKEEPING_SHARES`, and glommio's scheduler gives it CPU in that proportion only
//! when both want it, so deleting segments or rewriting them for compaction does not
//! raise produce latency: the storage side yields between batches and sends the slow
//! file operations (truncating and unlinking large files) to glommio's blocking thread.
//! Redpanda's per-shard "housekeeping" loop plays the same role; Kafka uses separate
//! log-cleaner and retention threads, which a thread-per-core design cannot.
//!
//! Every `HOUSEKEEPING_INTERVAL_MS` each partition is visited: retention by size and
//! by log start offset (DeleteRecords), and compaction when its `cleanup.policy` has
//! `compact`. The checks are in-memory and cheap; a partition with nothing to do costs
//! microseconds. Retention by time runs less often: every tenth of the topic's
//! `retention.ms`, at most every five minutes (Kafka's
//! `log.retention.check.interval.ms`). Records are deleted by their timestamps, so a
//! client writing old timestamps sees them go at the first time check, as with Kafka;
//! the first check comes one interval after the partition is first visited.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use glommio::{Latency, Shares};
use keel_storage::{compaction, retention, CompactionPolicy, RetentionPolicy};

use super::partition::{now_ms, Partition};
use super::Shard;
use crate::metadata::configs::TopicSettings;

/// How often every partition is checked (Kafka's `log.retention.check.interval.ms` is
/// five minutes; the checks here are in-memory, so they can run far more often).
pub const HOUSEKEEPING_INTERVAL_MS: u64 = 1000;
/// Shares of the housekeeping queue; the default queue, where requests run, has 1000.
pub const HOUSEKEEPING_SHARES: usize = 20;
/// Longest wait between two time-based retention checks of a partition.
pub const RETENTION_TIME_CHECK_INTERVAL_MS_MAX: i64 = 300_000;
/// Memory for one compaction pass's key map (one pass at a time per shard).
pub const COMPACTION_KEY_MAP_BYTES_MAX: usize = 16 << 20;

/// Starts the shard's housekeeping task in its low-share queue.
pub fn spawn(shard: &Rc<Shard>) {
    let queue = glommio::executor().create_task_queue(
        Shares::Static(HOUSEKEEPING_SHARES),
        Latency::NotImportant,
        "housekeeping",
    );
    match glommio::spawn_local_into(run(shard.clone()), queue) {
        Ok(task) => {
            task.detach();
        }
        Err(e) => tracing::error!(shard = shard.id, error = %e, "housekeeping task did not start"),
    }
}

/// When time-based retention is next due, per partition (by its `Rc` address, so a
/// re-created partition starts afresh).
type TimeChecks = HashMap<*const Partition, i64>;

async fn run(shard: Rc<Shard>) {
    let mut time_checks = TimeChecks::new();
    loop {
        glommio::timer::sleep(Duration::from_millis(HOUSEKEEPING_INTERVAL_MS)).await;
        let partitions: Vec<Rc<Partition>> = shard.partitions.borrow().values().cloned().collect();
        time_checks.retain(|ptr, _| partitions.iter().any(|p| Rc::as_ptr(p) == *ptr));
        for p in partitions {
            let now = now_ms();
            let interval = time_check_interval_ms(p.settings().retention_ms);
            let due = time_checks.entry(Rc::as_ptr(&p)).or_insert(now + interval);
            let check_time = now >= *due;
            if check_time {
                *due = now + interval;
            }
            visit(&shard, &p, check_time).await;
            glommio::yield_if_needed().await;
        }
    }
}

/// How often records of a topic with this `retention.ms` are checked for expiry.
pub fn time_check_interval_ms(retention_ms: i64) -> i64 {
    (retention_ms / 10).clamp(HOUSEKEEPING_INTERVAL_MS as i64, RETENTION_TIME_CHECK_INTERVAL_MS_MAX)
}

/// True while `p` is still the partition this shard serves under its name (a deleted
/// or re-created topic's old partition must not be touched: its files are gone).
fn still_owned(shard: &Shard, p: &Rc<Partition>) -> bool {
    shard.partition(&p.topic, p.index).map(|current| Rc::ptr_eq(&current, p)).unwrap_or(false)
}

async fn visit(shard: &Shard, p: &Rc<Partition>, check_time: bool) {
    // A replicated log is its Raft log: retention and compaction stop at what every
    // replica has (`PartitionLog::cleanable_end`), which its group never reads again.
    if !still_owned(shard, p) || p.unavailable(shard).is_some() {
        return;
    }
    p.advance_log_start().await;
    let settings = p.settings();
    let mut policy = retention_policy(&settings);
    if !check_time {
        policy.retention_ms = -1;
    }
    match retention::enforce(&p.log, now_ms(), &policy).await {
        Ok(outcome) if outcome.segments_deleted > 0 => tracing::info!(
            topic = %p.topic, partition = p.index, segments = outcome.segments_deleted,
            bytes = outcome.bytes_deleted, log_start_offset = outcome.log_start_offset, "retention"
        ),
        Ok(_) => {}
        Err(e) => {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
        }
    }
    // Aborted transactions wholly below the (new) log start need no index entry.
    p.prune_aborted().await;
    if !settings.cleanup_compact || !still_owned(shard, p) {
        return;
    }
    // Compaction stops at the LSO and lets no aborted record supersede a committed one.
    let aborted = p.aborted_between(0, i64::MAX).into_iter().map(|a| (a.producer_id, a.first_offset, a.last_offset));
    let txns = compaction::Transactions::new(p.last_stable_offset(), aborted);
    match compaction::compact(&p.log, now_ms(), &compaction_policy(&settings), false, txns).await {
        Ok(Some(outcome)) if outcome.segments_rewritten > 0 => tracing::info!(
            topic = %p.topic, partition = p.index, segments = outcome.segments_rewritten,
            records_removed = outcome.records_removed, bytes_before = outcome.bytes_before,
            bytes_after = outcome.bytes_after, "compaction"
        ),
        Ok(_) => {}
        Err(e) => {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "compaction failed")
        }
    }
}

pub fn retention_policy(s: &TopicSettings) -> RetentionPolicy {
    RetentionPolicy { delete: s.cleanup_delete, retention_ms: s.retention_ms, retention_bytes: s.retention_bytes }
}

pub fn compaction_policy(s: &TopicSettings) -> CompactionPolicy {
    CompactionPolicy {
        min_compaction_lag_ms: s.min_compaction_lag_ms.max(0),
        delete_retention_ms: s.delete_retention_ms.max(0),
        min_cleanable_dirty_ratio: s.min_cleanable_dirty_ratio,
        key_map_bytes_max: COMPACTION_KEY_MAP_BYTES_MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_checks_scale_with_retention() {
        assert_eq!(time_check_interval_ms(604_800_000), RETENTION_TIME_CHECK_INTERVAL_MS_MAX);
        assert_eq!(time_check_interval_ms(60_000), 6_000);
        assert_eq!(time_check_interval_ms(100), HOUSEKEEPING_INTERVAL_MS as i64);
        assert_eq!(time_check_interval_ms(-1), HOUSEKEEPING_INTERVAL_MS as i64);
    }
}
