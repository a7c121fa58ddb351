//! Retention: whole oldest segments go when they are older than `retention.ms`, when
//! the log without them still holds `retention.bytes`, or when they lie wholly below
//! the log start offset (moved by DeleteRecords). Kafka's three rules, in Kafka's
//! order, which all delete a prefix of the segments, so one walk applies them.
//!
//! [`plan`] is pure: segment summaries, offsets, a policy and the time in, a count of
//! segments out; the model test drives it with its own clock. [`enforce`] is its shell:
//! it re-plans under the log's io lock right before removing (appends and rolls may
//! have happened since), drops the segments from the log, then releases their files
//! after the lock is gone, on glommio's blocking thread (see
//! [`crate::segment::release_file`]), so deleting a large file never stalls the
//! shard's reactor. Callers run it in a low-share task queue.

use std::cell::RefCell;
use std::rc::Rc;

use crate::error::StorageError;
use crate::log::{self, PartitionLog};
use crate::segment;

/// The retention settings of one log (Kafka's topic configs of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// `cleanup.policy` contains `delete`; without it only the log start offset rule
    /// applies.
    pub delete: bool,
    /// Negative: keep forever.
    pub retention_ms: i64,
    /// Negative: no size limit.
    pub retention_bytes: i64,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy { delete: true, retention_ms: 7 * 24 * 3600 * 1000, retention_bytes: -1 }
    }
}

/// What [`plan`] needs to know of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    pub base_offset: i64,
    pub size: u64,
    /// Largest record timestamp in the segment (-1 if it has none).
    pub max_timestamp: i64,
}

/// How many of the oldest segments to delete, and whether the active segment is among
/// them (it must be rolled first, so the log keeps an active segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionPlan {
    pub delete_count: usize,
    pub roll_active: bool,
}

/// Applies the retention rules to `segments` (oldest first, the last is active). Only
/// segments wholly below the high watermark can go, and never an empty active one.
pub fn plan(
    segments: &[SegmentSummary],
    log_start_offset: i64,
    high_watermark: i64,
    log_end_offset: i64,
    now_ms: i64,
    policy: &RetentionPolicy,
) -> RetentionPlan {
    let total: u64 = segments.iter().map(|s| s.size).sum();
    let mut remaining = total;
    let mut count = 0;
    for (i, seg) in segments.iter().enumerate() {
        let next_base = segments.get(i + 1).map(|s| s.base_offset);
        let upper = next_base.unwrap_or(log_end_offset);
        let last_and_empty = next_base.is_none() && seg.size == 0;
        if upper > high_watermark || last_and_empty {
            break;
        }
        let by_time = policy.delete
            && policy.retention_ms >= 0
            && seg.max_timestamp >= 0
            && now_ms.saturating_sub(seg.max_timestamp) > policy.retention_ms;
        let by_size = policy.delete
            && policy.retention_bytes >= 0
            && remaining.saturating_sub(seg.size) >= policy.retention_bytes as u64;
        let by_start = next_base.map(|b| b <= log_start_offset).unwrap_or(false);
        if !(by_time || by_size || by_start) {
            break;
        }
        remaining -= seg.size;
        count += 1;
    }
    RetentionPlan { delete_count: count, roll_active: count > 0 && count == segments.len() }
}

/// What [`plan`] needs to know of `log`'s segments, oldest first.
pub fn segment_summaries(log: &PartitionLog) -> Vec<SegmentSummary> {
    log.segments
        .iter()
        .map(|s| SegmentSummary { base_offset: s.base_offset, size: s.size, max_timestamp: s.max_timestamp })
        .collect()
}

/// What retention deletes of `log`'s segments wholly below `bound`.
fn plan_for(log: &PartitionLog, bound: i64, now_ms: i64, policy: &RetentionPolicy) -> RetentionPlan {
    plan(&segment_summaries(log), log.log_start_offset, bound, log.next_offset, now_ms, policy)
}

/// What one retention pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    pub log_start_offset: i64,
}

/// Deletes the segments retention allows, rolling the active segment first when it
/// must go too.
pub async fn enforce(
    log: &Rc<RefCell<PartitionLog>>,
    now_ms: i64,
    policy: &RetentionPolicy,
) -> Result<RetentionOutcome, StorageError> {
    let hw = log.borrow().cleanable_end();
    let first = plan_for(&log.borrow(), hw, now_ms, policy);
    if first.delete_count == 0 {
        return Ok(RetentionOutcome { log_start_offset: log.borrow().log_start_offset, ..Default::default() });
    }
    if first.roll_active {
        log::roll(log).await?;
    }
    // Only segments whose files are fsynced go (a journal replay never rebuilds
    // them): fsync the log's files first when the plan reaches past that.
    let settled = log.borrow().settled_offset();
    if first.roll_active || plan_for(&log.borrow(), settled, now_ms, policy).delete_count < first.delete_count {
        log::flush(log).await?;
    }
    // Removed segments are found missing by the next snapshot capture.
    let _change = crate::log::snapshot::begin_file_change(log, |_| false).await?;
    let lock = log.borrow().io_lock();
    let permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    let (released, outcome) = {
        let mut l = log.borrow_mut();
        let plan = plan_for(&l, l.settled_offset(), now_ms, policy);
        let count = plan.delete_count.min(l.segments.len() - 1);
        let released: Vec<segment::Segment> = l.segments.drain(..count).collect();
        l.queued.retain(|w| !released.iter().any(|s| Rc::ptr_eq(&s.file, &w.file)));
        let start = l.segments[0].base_offset;
        l.advance_start(start);
        let outcome = RetentionOutcome {
            segments_deleted: released.len(),
            bytes_deleted: released.iter().map(|s| s.size).sum(),
            log_start_offset: l.log_start_offset,
        };
        (released, outcome)
    };
    drop(permit);
    if outcome.segments_deleted > 0 {
        crate::stats::update(|s| {
            s.retention_segments_deleted += outcome.segments_deleted as u64;
            s.retention_bytes_deleted += outcome.bytes_deleted;
        });
        log.borrow().changed.notify();
        let dir = log.borrow().dir.clone();
        for seg in released {
            tracing::info!(path = %seg.path.display(), bytes = seg.size, "retention deletes segment");
            segment::release_file(seg.file, Some(&seg.path)).await;
            glommio::yield_if_needed().await;
        }
        crate::disk::sync_dir(&dir).await?;
        log::persist_state(log).await?;
    }
    Ok(outcome)
}

/// DeleteRecords: moves the log start offset to `offset` (-1: the high watermark) and
/// persists it before returning; segments wholly below it go at the next retention
/// pass. Returns the new log start offset (Kafka's low watermark).
pub async fn delete_records(log: &Rc<RefCell<PartitionLog>>, offset: i64) -> Result<i64, StorageError> {
    let moved = {
        let mut l = log.borrow_mut();
        let target = if offset == -1 { l.high_watermark } else { offset };
        if target < 0 || target > l.high_watermark {
            return Err(StorageError::OffsetOutOfRange { offset, start: l.log_start_offset, end: l.high_watermark });
        }
        l.advance_start(target)
    };
    if moved {
        log::persist_state(log).await?;
        log.borrow().changed.notify();
    }
    Ok(log.borrow().log_start_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(spec: &[(i64, u64, i64)]) -> Vec<SegmentSummary> {
        spec.iter()
            .map(|&(base_offset, size, max_timestamp)| SegmentSummary { base_offset, size, max_timestamp })
            .collect()
    }

    const KEEP: RetentionPolicy = RetentionPolicy { delete: true, retention_ms: -1, retention_bytes: -1 };

    #[test]
    fn time_rule_deletes_an_expired_prefix_below_the_high_watermark() {
        let s = segs(&[(0, 100, 1000), (10, 100, 5000), (20, 100, 1500), (30, 50, 9000)]);
        let p = RetentionPolicy { retention_ms: 2000, ..KEEP };
        // Segment 1 is fresh, so segment 2 stays even though it is expired.
        assert_eq!(plan(&s, 0, 40, 40, 6000, &p), RetentionPlan { delete_count: 1, roll_active: false });
        // Nothing past the high watermark goes.
        assert_eq!(plan(&s, 0, 5, 40, 6000, &p).delete_count, 0);
        // Everything expired: the active segment goes too, after a roll.
        assert_eq!(plan(&s, 0, 40, 40, 100_000, &p), RetentionPlan { delete_count: 4, roll_active: true });
        // ...but not when cleanup.policy lacks delete.
        assert_eq!(plan(&s, 0, 40, 40, 100_000, &RetentionPolicy { delete: false, ..p }).delete_count, 0);
    }

    #[test]
    fn size_rule_keeps_at_least_retention_bytes() {
        let s = segs(&[(0, 100, -1), (10, 100, -1), (20, 100, -1), (30, 50, -1)]);
        let p = RetentionPolicy { retention_bytes: 160, ..KEEP };
        assert_eq!(plan(&s, 0, 40, 40, 0, &p).delete_count, 1);
        let p = RetentionPolicy { retention_bytes: 150, ..KEEP };
        assert_eq!(plan(&s, 0, 40, 40, 0, &p).delete_count, 2);
        let p = RetentionPolicy { retention_bytes: 0, ..KEEP };
        assert_eq!(plan(&s, 0, 40, 40, 0, &p), RetentionPlan { delete_count: 4, roll_active: true });
        let empty_active = segs(&[(0, 100, -1), (10, 0, -1)]);
        assert_eq!(plan(&empty_active, 0, 10, 10, 0, &p), RetentionPlan { delete_count: 1, roll_active: false });
    }

    #[test]
    fn start_offset_rule_deletes_segments_wholly_below_it() {
        let s = segs(&[(0, 100, -1), (10, 100, -1), (20, 100, -1)]);
        assert_eq!(plan(&s, 15, 30, 30, 0, &KEEP).delete_count, 1);
        assert_eq!(plan(&s, 20, 30, 30, 0, &KEEP).delete_count, 2);
        // The active segment never goes by this rule alone.
        assert_eq!(plan(&s, 30, 30, 30, 0, &KEEP).delete_count, 2);
        assert_eq!(plan(&s, 20, 30, 30, 0, &RetentionPolicy { delete: false, ..KEEP }).delete_count, 2);
    }
}
