//! How a log's appended bytes reach its segment files: segment rolls, the direct
//! flush of a log without a journal ([`flush`]), the whole-page writes that follow a
//! journal pass ([`write_whole_pages`]) and a checkpoint's writes and fsyncs
//! ([`write_for_sync`], [`note_synced`]), which may leave the end of the active
//! segment to the journal ([`LeftTail`]). Flushes and writes hold the log's io lock;
//! a roll is serialized by the log's `rolling` flag instead.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use super::PartitionLog;
use crate::disk::File;
use crate::error::StorageError;
use crate::fsync::{sync_or_die, sync_or_fail};
use crate::journal::tail::LeftTail;
use crate::segment::Segment;
use crate::segment_io::{write_aligned, PendingWrite};
use crate::PAGE;

/// Rolls to a new segment when the next `incoming` bytes would overflow the active one.
pub async fn roll_if_needed(log: &Rc<RefCell<PartitionLog>>, incoming: usize) -> Result<(), StorageError> {
    roll_if_needed_at(log, incoming, -1).await
}

/// Rolls when the next `incoming` bytes would overflow the active segment, or when
/// `incoming_timestamp` is more than `segment_ms_max` past its first batch.
pub async fn roll_if_needed_at(
    log: &Rc<RefCell<PartitionLog>>,
    incoming: usize,
    incoming_timestamp: i64,
) -> Result<(), StorageError> {
    roll_while(log, |l| l.needs_roll(incoming, incoming_timestamp)).await
}

/// Seals the active segment (if it holds anything) and starts a new one.
pub async fn roll(log: &Rc<RefCell<PartitionLog>>) -> Result<(), StorageError> {
    let mut first = true;
    roll_while(log, move |l| std::mem::replace(&mut first, false) && l.active().size > 0).await
}

async fn roll_while(
    log: &Rc<RefCell<PartitionLog>>,
    mut should_roll: impl FnMut(&PartitionLog) -> bool,
) -> Result<(), StorageError> {
    loop {
        let another_roll = {
            let l = log.borrow();
            l.rolling.then(|| l.changed.wait())
        };
        if let Some(done) = another_roll {
            done.await;
            continue;
        }
        let (dir, base) = {
            let l = log.borrow();
            if !should_roll(&l) {
                return Ok(());
            }
            (l.dir.clone(), l.next_offset)
        };
        log.borrow_mut().rolling = true;
        // The new file's directory entry is made durable before anything lands in it.
        let created = match Segment::create(&dir, base).await {
            Ok(seg) => crate::disk::sync_dir(&dir).await.map(|()| seg),
            Err(e) => Err(e),
        };
        let mut l = log.borrow_mut();
        l.rolling = false;
        l.changed.notify();
        let seg = created?;
        // Appenders check `roll_if_needed` and append without awaiting in between, and
        // wait while `rolling` is set, so nothing was appended during the create.
        assert_eq!(l.next_offset, base, "an append raced a segment roll");
        seal_active(&mut l);
        l.segments.push(seg);
    }
}

/// Frees the files of a log whose partition is being deleted, each as retention
/// frees a segment ([`crate::segment::release_file`]): truncated and unlinked on glommio's
/// blocking thread. Without it the last close of an unlinked file, on the shard's
/// thread, frees its extents there (ext4 with `discard` waits for the device: 77 ms
/// stalls per 200 MB file were measured). The log keeps its (now empty) files until
/// it is dropped; nothing may be appended to it.
pub async fn release_files(log: &Rc<RefCell<PartitionLog>>) {
    let lock = log.borrow().io_lock();
    let _permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    let files: Vec<(Rc<File>, PathBuf)> =
        log.borrow().segments.iter().map(|s| (s.file.clone(), s.path.clone())).collect();
    for (file, path) in files {
        crate::segment::release_file(file, Some(&path)).await;
    }
}

/// Queues the final write of the active segment before a new one takes its place.
fn seal_active(l: &mut PartitionLog) {
    let mut data = std::mem::take(&mut l.tail);
    data.append(&mut l.pending);
    let old = l.active();
    let write = PendingWrite {
        file: old.file.clone(),
        path: old.path.clone(),
        position: l.tail_position,
        data,
        seal_size: Some(old.size),
        ahead: None,
    };
    l.queued.push(write);
    l.tail_position = 0;
}

/// What a flush left fsynced in the segment files: everything below `next_offset`,
/// the active segment being `segment_base` with `segment_size` bytes.
#[derive(Debug, Clone, Copy)]
pub struct Synced {
    pub next_offset: i64,
    pub segment_base: i64,
    pub segment_size: u64,
}

/// Writes and fsyncs everything appended so far to the segment files. For a log
/// without a journal this is what makes appends durable (it moves `flushed` and the
/// high watermark); for a journaled log it is the checkpoint of its segment files (it
/// moves `synced` only: the journal already made the appends durable). Serialized
/// with every other file change of the log by its io lock.
pub async fn flush(log: &Rc<RefCell<PartitionLog>>) -> Result<Synced, StorageError> {
    let lock = log.borrow().io_lock();
    let _permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    flush_locked(log).await
}

/// `flush` for a caller already holding the io lock.
pub(crate) async fn flush_locked(log: &Rc<RefCell<PartitionLog>>) -> Result<Synced, StorageError> {
    Ok(flush_locked_capturing(log, |_, _| ()).await?.0)
}

/// `flush_locked` that also hands `capture` the log at the instant the flush takes its
/// writes, the instant the returned [`Synced`] describes (a checkpoint's snapshot).
async fn flush_locked_capturing<T>(
    log: &Rc<RefCell<PartitionLog>>,
    capture: impl FnOnce(&PartitionLog, Synced) -> T,
) -> Result<(Synced, T), StorageError> {
    let written = write_for_sync(log, None, capture).await?;
    let syncs = written.files.iter().map(|(file, path)| sync_or_fail(file, path)).collect();
    for synced in crate::join::join_all(syncs).await {
        synced?;
    }
    note_synced(log, &written);
    Ok((written.synced, written.captured))
}

/// A log's writes, written by [`write_for_sync`] and waiting for their files' fsync.
pub(crate) struct Written<T> {
    /// The files to fsync, each once.
    pub files: Vec<(Rc<File>, PathBuf)>,
    /// What those files hold once fsynced, with `left`.
    pub synced: Synced,
    /// The end of the segment not written, left to the journal.
    pub left: Option<LeftTail>,
    pub captured: T,
}

/// The first half of `flush_locked_capturing`: writes everything appended so far to
/// the segment files and returns the files left to fsync (for a journaled log, every
/// file written since its last checkpoint). The caller holds the io lock until it
/// has fsynced them and called [`note_synced`], so that a checkpoint can fsync many
/// logs' files at once.
///
/// With `leave_tail_from` (a checkpoint of a journaled log), only whole pages are
/// written when the batches after them are in journal files from that sequence
/// number on, or not journaled yet: a checkpoint then costs no partial last page per
/// log (0.30 bytes per payload byte of 2.7 at 4,000 partitions).
pub(crate) async fn write_for_sync<T>(
    log: &Rc<RefCell<PartitionLog>>,
    leave_tail_from: Option<u64>,
    capture: impl FnOnce(&PartitionLog, Synced) -> T,
) -> Result<Written<T>, StorageError> {
    let journaled = log.borrow().journal.is_some();
    let (writes, synced, left, captured) = {
        let mut l = log.borrow_mut();
        let left = leave_tail_from.and_then(|keep_from| tail_to_leave(&l, keep_from));
        let (writes, target, active) = l.take_writes(left.is_some());
        let size = l.active().size;
        let synced = Synced { next_offset: target, segment_base: active.0, segment_size: size };
        let left = left.flatten();
        (writes, synced, left, capture(&l, synced))
    };
    if journaled {
        let bytes = writes.iter().map(|w| (w.data.len() as u64).div_ceil(PAGE) * PAGE).sum::<u64>();
        crate::stats::update(|s| s.checkpoint_segment_bytes_written += bytes);
    }
    // Without a journal every file was fsynced as it was written, and none is left.
    let mut files = write_all(log, writes, !journaled).await?;
    if let Some(j) = log.borrow_mut().journal.as_mut() {
        j.keep_unsynced(files);
        files = std::mem::take(&mut j.unsynced);
    }
    Ok(Written { files, synced, left, captured })
}

/// The second half: the files [`write_for_sync`] returned are fsynced, so `synced`
/// (and for a log without a journal `flushed`) moves to what they hold.
pub(crate) fn note_synced<T>(log: &Rc<RefCell<PartitionLog>>, written: &Written<T>) {
    let synced = written.synced;
    let mut l = log.borrow_mut();
    l.note_written(synced.segment_base, written.left.map_or(synced.segment_size, |t| t.size));
    l.synced_offset = l.synced_offset.max(synced.next_offset);
    if l.journal.is_none() {
        l.mark_flushed(synced.next_offset);
    }
    l.evict_cache();
    l.changed.notify();
}

/// Writes a journaled log's whole pages to its segment files, without an fsync: the
/// journal holds the data durably, and the next checkpoint fsyncs these files.
pub(crate) async fn write_whole_pages(log: &Rc<RefCell<PartitionLog>>) -> Result<(), StorageError> {
    let lock = log.borrow().io_lock();
    let _permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    let (writes, _, (active_base, written_upto)) = log.borrow_mut().take_writes(true);
    if writes.is_empty() {
        return Ok(());
    }
    let files = write_all(log, writes, false).await?;
    let mut l = log.borrow_mut();
    if let Some(j) = l.journal.as_mut() {
        j.keep_unsynced(files);
    }
    l.note_written(active_base, written_upto);
    l.evict_cache();
    Ok(())
}

/// Writes `writes` in order. With `sync_between`, each file is fsynced before the
/// next one is written (writes come in segment order): valid data in a segment then
/// proves every earlier one complete on disk, which the recovery of a log without a
/// journal relies on to tell a torn write from damage; the last file is fsynced too.
/// Without it, returns the files written, unsynced. A failed write and those after
/// it go back to the queue, to be retried by the next flush.
async fn write_all(
    log: &Rc<RefCell<PartitionLog>>,
    writes: Vec<PendingWrite>,
    sync_between: bool,
) -> Result<Vec<(Rc<File>, PathBuf)>, StorageError> {
    let mut files: Vec<(Rc<File>, PathBuf)> = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        if sync_between {
            if let Some((file, path)) = files.pop_if(|(f, _)| !Rc::ptr_eq(f, &w.file)) {
                sync_or_die(&file, &path).await;
            }
        }
        if let Err(e) = write_aligned(w).await {
            if sync_between {
                if let Some((file, path)) = files.pop() {
                    sync_or_die(&file, &path).await;
                }
            }
            let mut l = log.borrow_mut();
            let mut queued: Vec<PendingWrite> = writes.into_iter().skip(i).collect();
            queued.append(&mut l.queued);
            l.queued = queued;
            if let Some(j) = l.journal.as_mut() {
                j.unsynced.append(&mut files);
            } else {
                l.flush_error = Some(e.to_string());
            }
            l.changed.notify();
            return Err(e);
        }
        if !files.last().is_some_and(|(f, _)| Rc::ptr_eq(f, &w.file)) {
            files.push((w.file.clone(), w.path.clone()));
        }
    }
    if sync_between {
        if let Some((file, path)) = files.pop() {
            sync_or_die(&file, &path).await;
        }
    }
    Ok(files)
}

/// Whether a checkpoint may write only this journaled log's whole pages: `None`
/// when it must write everything, `Some(None)` when the whole pages are
/// everything, else the tail it leaves (see [`write_for_sync`]).
fn tail_to_leave(l: &PartitionLog, keep_from: u64) -> Option<Option<LeftTail>> {
    let j = l.journal.as_ref()?;
    // A pass under way has batches in the journal that `records` does not list yet.
    if j.in_pass {
        return None;
    }
    let active = l.active();
    let whole_end = l.tail_position + (l.tail.len() + l.pending.len()) as u64 / PAGE * PAGE;
    // Batches of earlier segments are in the writes the checkpoint takes (a seal).
    let Some(&(base, end, next)) =
        l.unwritten.iter().find(|(base, end, _)| *base >= active.base_offset && *end > whole_end)
    else {
        return Some(None);
    };
    let i = l.cache.partition_point(|(h, _)| h.last_offset() < next - 1);
    let (header, batch) = l.cache.get(i).filter(|(h, _)| base == active.base_offset && h.last_offset() == next - 1)?;
    let offset = header.base_offset;
    let position = if offset >= j.journaled_offset {
        None
    } else {
        let (_, position) = j.records.iter().rev().find(|(first, _)| *first <= offset)?;
        if position.seq < keep_from {
            return None;
        }
        Some(*position)
    };
    Some(Some(LeftTail { position, size: end - batch.len() as u64, offset }))
}
