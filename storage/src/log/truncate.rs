//! `truncate(offset)`: removes the batch holding `offset` and everything after it, as
//! a Raft follower must when its log diverges from the leader's.
//!
//! The log is flushed first (under the io lock), so the files hold exactly the logical
//! log and truncation is a file operation: later segments are released, the segment
//! holding the cut is truncated at that batch's position and fsynced, and its
//! in-memory state is rebuilt by scanning what remains of it. The log end offset
//! becomes `offset`, or the base offset of the batch holding it when `offset` falls
//! inside a batch (Raft entries are whole batches, so Raft always cuts on a
//! boundary); the high watermark comes down with it; the cache, epoch cache and
//! producer tail forget what was cut.

use std::cell::RefCell;
use std::rc::Rc;

use keel_protocol::batch::{BatchHeader, BATCH_HEADER_LEN};

use crate::error::StorageError;
use crate::fsync::sync_or_die;
use crate::journal::Record;
use crate::log::{self, PartitionLog};
use crate::segment::{self, Segment};

/// Removes every batch whose last offset is at or after `offset`. Truncating at or past
/// the log end does nothing; truncating at or below the log start empties the log and
/// restarts it at `offset`, as Kafka's `truncateFullyAndStartAt`.
pub async fn truncate(log: &Rc<RefCell<PartitionLog>>, offset: i64) -> Result<(), StorageError> {
    if offset >= log.borrow().next_offset {
        return Ok(());
    }
    // The segment holding the cut and every later one change (or go).
    let cut_base = {
        let l = log.borrow();
        let holding = l.segments.iter().rev().find(|s| s.base_offset <= offset).map(|s| s.base_offset);
        if offset <= l.log_start_offset {
            i64::MIN
        } else {
            holding.unwrap_or(i64::MIN)
        }
    };
    let _change = crate::log::snapshot::begin_file_change(log, |b| b >= cut_base).await?;
    let lock = log.borrow().io_lock();
    let permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    if offset >= log.borrow().next_offset {
        return Ok(());
    }
    log::flush_locked(log).await?;
    let start = log.borrow().log_start_offset;
    if offset <= start {
        restart_at(log, offset).await?;
        drop(permit);
        return persist(log).await;
    }
    // Segments wholly at or after the cut go; `keep` segments remain.
    let keep = log.borrow().segments.partition_point(|s| s.base_offset < offset).max(1);
    let (cut, straddling_base) = cut_position(log, keep - 1, offset).await?;
    let end = straddling_base.unwrap_or(offset);
    if end <= start {
        // The cut batch holds the log start offset: nothing visible would remain.
        restart_at(log, offset).await?;
        drop(permit);
        return persist(log).await;
    }
    journal_cut(log, end).await?;
    let released = log.borrow_mut().segments.split_off(keep);
    for seg in released {
        segment::release_file(seg.file, Some(&seg.path)).await;
    }
    let (path, base) = {
        let l = log.borrow();
        let seg = &l.segments[keep - 1];
        (seg.path.clone(), seg.base_offset)
    };
    // Rebuild the segment holding the cut from its remaining bytes.
    let mut rebuilt = Segment::open(path.clone(), base).await?;
    rebuilt.file.truncate(cut).await.map_err(|e| StorageError::io("truncate segment", &path, e))?;
    sync_or_die(&rebuilt.file, &path).await;
    let interval = log.borrow().config.index_interval_bytes;
    let outcome = rebuilt.scan(interval, |_, _| {}).await?;
    assert!(
        outcome.stopped.is_none(),
        "a flushed segment rescans cleanly after truncation: {:?} cut {cut} end {end} path {}",
        outcome.stopped,
        path.display()
    );
    assert!(rebuilt.next_offset <= end, "truncation left a batch past the new end");
    // When compaction emptied the end of the kept segment, no batch records where the
    // log ends: a new active segment named after the end does, so that a restart does
    // not hand out those offsets again.
    let dir = log.borrow().dir.clone();
    let fresh = if rebuilt.next_offset < end { Some(Segment::create(&dir, end).await?) } else { None };
    {
        let mut l = log.borrow_mut();
        let old = std::mem::replace(&mut l.segments[keep - 1], rebuilt);
        drop(old);
        l.segments.extend(fresh);
        l.next_offset = end;
        l.note_truncated(end);
        l.truncate_cache(end);
        l.epochs.retain(|(_, first)| *first < end);
        l.producers.truncate(end);
        l.cleaned_upto = l.cleaned_upto.min(end);
        // The caller (the Raft layer) does not append while it truncates.
        assert!(l.pending.is_empty() && l.queued.is_empty(), "append during truncate");
    }
    PartitionLog::reload_tail(log).await?;
    crate::disk::sync_dir(&dir).await?;
    drop(permit);
    persist(log).await
}

/// Writes the log's start and cleaner position to the state store once the io lock is
/// released: the store's write waits for a journal pass, a pass at the journal's file
/// limit waits for a checkpoint, and a checkpoint takes every log's io lock.
async fn persist(log: &Rc<RefCell<PartitionLog>>) -> Result<(), StorageError> {
    crate::log::persist_state(log).await?;
    log.borrow().changed.notify();
    Ok(())
}

/// File position of the first batch whose last offset is at or after `offset` in the
/// segment at `index`, and that batch's base offset when it starts before `offset`
/// (the position is the segment's size when there is no such batch).
async fn cut_position(
    log: &Rc<RefCell<PartitionLog>>,
    index: usize,
    offset: i64,
) -> Result<(u64, Option<i64>), StorageError> {
    let (file, path, mut position, size) = {
        let l = log.borrow();
        let seg = &l.segments[index];
        (seg.file.clone(), seg.path.clone(), seg.position_for_offset(offset), seg.size)
    };
    while position < size {
        let head = segment::read_file(&file, &path, position, BATCH_HEADER_LEN).await?;
        let h = BatchHeader::parse(&head).map_err(|e| StorageError::Corrupt {
            path: path.clone(),
            position,
            reason: e.to_string(),
        })?;
        if h.last_offset() >= offset {
            return Ok((position, (h.base_offset < offset).then_some(h.base_offset)));
        }
        position += h.total_len() as u64;
    }
    Ok((size, None))
}

/// Empties the log and starts it again at `offset`, which may be past its end (a
/// replica about to copy a leader's log from that leader's start).
pub async fn reset(log: &Rc<RefCell<PartitionLog>>, offset: i64) -> Result<(), StorageError> {
    let _change = crate::log::snapshot::begin_file_change(log, |_| true).await?;
    let lock = log.borrow().io_lock();
    let permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    log::flush_locked(log).await?;
    restart_at(log, offset).await?;
    drop(permit);
    persist(log).await
}

/// Makes the cut at `end` durable in the shard journal before any file is cut. Were a
/// file cut below the last checkpoint's mark and the power lost before the journal
/// said so, recovery would replay the cut batches past the mark onto the shortened
/// file, leaving a hole below them. Batches at or past `end` leave the cache first, so
/// no pass writes them after the record. (The pass after the truncation records it
/// again, before what is appended next; replaying it twice changes nothing.)
async fn journal_cut(log: &Rc<RefCell<PartitionLog>>, end: i64) -> Result<(), StorageError> {
    let (journal, key) = {
        let mut l = log.borrow_mut();
        l.truncate_cache(end);
        let Some(j) = l.journal.as_mut() else { return Ok(()) };
        j.journaled_offset = j.journaled_offset.min(end);
        (j.journal.clone(), j.key.clone())
    };
    journal.write(&[Record::Truncate { key, offset: end }]).await.map(drop)
}

/// Empties the log and starts it again at `offset`.
async fn restart_at(log: &Rc<RefCell<PartitionLog>>, offset: i64) -> Result<(), StorageError> {
    journal_cut(log, offset).await?;
    let dir = log.borrow().dir.clone();
    let fresh = Segment::create(&dir, offset).await;
    let old = {
        let mut l = log.borrow_mut();
        let old = std::mem::take(&mut l.segments);
        // A fresh segment at `offset` replaces them (unless it has the same name as
        // an old one, which was just truncated by the create).
        l.segments.push(match fresh {
            Ok(seg) => seg,
            Err(e) => {
                l.segments = old;
                return Err(e);
            }
        });
        l.next_offset = offset;
        l.note_truncated(offset);
        l.mark_all_durable(None);
        if let Some(j) = l.journal.as_mut() {
            j.journaled_offset = offset;
            j.pending_truncate = Some(offset);
        }
        l.log_start_offset = offset;
        l.cleaned_upto = offset;
        l.cache.clear();
        l.read_ahead = None;
        l.truncations += 1;
        l.pending.clear();
        l.queued.clear();
        l.tail.clear();
        l.tail_position = 0;
        l.epochs.clear();
        l.producers = Default::default();
        l.damaged_at_open = None;
        old
    };
    for seg in old {
        let path = (seg.base_offset != offset).then_some(seg.path);
        segment::release_file(seg.file, path.as_deref()).await;
    }
    crate::disk::sync_dir(&dir).await
}
