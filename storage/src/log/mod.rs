//! A partition's log: its segments, its batch cache, its pending writes and the
//! offsets that matter: log start, high watermark (what consumers may read), flushed
//! (locally durable), written (in the segment files), synced (fsynced in the segment
//! files) and log end.
//!
//! Appends are synchronous: the patched batch goes to the tail cache and to the pending
//! buffer of the active segment. A log has one of two durability paths:
//!
//! - **Journaled** (every partition of a broker shard): the shard's flush loop writes
//!   the batches to the shard's journal ([`crate::journal`]) with one fdatasync for all
//!   logs, which moves `flushed`; the segment files are written afterwards in whole
//!   pages without an fsync, and fsynced only by a checkpoint (`flush_locked`), which
//!   moves `synced`.
//! - **Direct** (logs opened without a journal: tools and storage tests): `flush` writes
//!   pending bytes with O_DIRECT from 4 KiB-aligned buffers, rewriting the partial tail
//!   page kept in memory, fdatasyncs each file before writing the next, and then moves
//!   `flushed`, `written` and `synced` together. The active segment is zero-filled ahead
//!   of its end, so its fdatasync carries no file-system metadata, only the data.
//!
//! The high watermark follows `flushed` on a single node; a replicated log moves it
//! itself ([`PartitionLog::set_high_watermark`]). Readers never see past it.
//!
//! Everything that changes files under the log (flush, truncation, retention removing
//! segments, compaction swapping one) holds the log's `io_lock`, so a flush never
//! writes into a segment another task is replacing. Readers take no lock: they hold
//! the `Rc<File>` of the segment they read, which stays valid (and unlinked files
//! readable) until they drop it.
//!
//! The log's own operations are its sub-modules: reads (`read`), the write path
//! (`write`: rolls, flushes, checkpoint writes), truncation (`truncate`) and the
//! checkpoint snapshots ([`snapshot`]) that every change of its files must invalidate
//! first. Opening (recovery), retention, compaction and the shard's flush loop are
//! built on the log in modules above it ([`crate::recovery`], [`crate::retention`],
//! [`crate::compaction`], [`crate::flush`]).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::BytesMut;
use glommio::sync::Semaphore;
use keel_protocol::batch::{self, BatchHeader};

use crate::cache::{BatchCache, CachedLog};
use crate::checkpoint::{PartitionState, STATE_KEY};
use crate::error::StorageError;
use crate::producer_tail::ProducerTail;
use crate::segment::Segment;
use crate::segment_io::{Ahead, PendingWrite};
use crate::signal::Signal;
use crate::PAGE;

mod read;
pub mod snapshot;
mod truncate;
mod write;

pub use read::{offset_for_timestamp, offset_of_max_timestamp, read, read_kept, verify, ReadResult};
pub use truncate::{reset, truncate};
pub use write::{flush, release_files, roll, roll_if_needed, roll_if_needed_at, Synced};
pub(crate) use write::{flush_locked, note_synced, write_for_sync, write_whole_pages, Written};

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub segment_bytes_max: u64,
    /// Roll when the incoming batch is this much newer than the active segment's first
    /// batch (Kafka's `segment.ms`); `i64::MAX` never rolls by time.
    pub segment_ms_max: i64,
    pub index_interval_bytes: u64,
    /// Tail batches kept in memory once durable, per partition.
    pub cache_bytes_max: usize,
    /// Smallest DMA read issued for a catch-up fetch.
    pub read_ahead_bytes: usize,
    /// Most zeroed bytes kept written ahead of the active segment's end (a new segment
    /// starts with less and grows towards it); never past `segment_bytes_max`; 0
    /// disables preallocation.
    pub preallocate_step_bytes: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 1 << 30,
            segment_ms_max: i64::MAX,
            index_interval_bytes: 4096,
            cache_bytes_max: 4 << 20,
            read_ahead_bytes: 256 << 10,
            preallocate_step_bytes: 1 << 20,
        }
    }
}

pub struct PartitionLog {
    pub(crate) dir: PathBuf,
    pub config: LogConfig,
    pub(crate) segments: Vec<Segment>,
    pub log_start_offset: i64,
    pub(crate) next_offset: i64,
    /// Flushed: offsets below this are locally durable (in the journal or fsynced).
    pub(crate) durable_offset: i64,
    /// Offsets below this are what consumers may read and what acks=all waits for.
    pub(crate) high_watermark: i64,
    /// The high watermark follows `durable_offset` (a single node); when false, the
    /// replication layer moves it.
    pub(crate) hw_follows_flush: bool,
    /// A replicated log: offsets below this are durable on every replica, as its Raft
    /// group last recorded (`i64::MAX` on a single node).
    replicas_have: i64,
    /// Offsets below this are written to the segment files (readable with DMA reads).
    pub(crate) written_offset: i64,
    /// Offsets below this are fsynced in the segment files.
    pub(crate) synced_offset: i64,
    /// A journaled log: the base of the segment its last durable journal checkpoint's
    /// mark names. After a crash recovery cuts that segment back to the mark and drops
    /// later ones before replaying the journal, so only segments wholly below it may
    /// be rewritten by compaction: a segment rewritten above it would be cut at a
    /// position of its old layout, or rebuilt from the journal's copies of the records
    /// compaction removed.
    pub(crate) checkpointed_base: i64,
    /// (segment base, end position in it, next offset) of batches not yet written.
    pub(crate) unwritten: std::collections::VecDeque<(i64, u64, i64)>,
    /// How this log reaches the shard's journal, when it has one.
    pub(crate) journal: Option<crate::journal::LogJournal>,
    pub(crate) cache: BatchCache,
    /// Bytes of the active segment not yet handed to a write.
    pub(crate) pending: Vec<u8>,
    /// The partial last page of the active segment, rewritten by the next write.
    pub(crate) tail: Vec<u8>,
    pub(crate) tail_position: u64,
    pub(crate) queued: Vec<PendingWrite>,
    /// In its flush queue's list for the next pass (so marking it dirty is O(1)).
    pub(crate) queued_for_pass: std::cell::Cell<bool>,
    /// `unflushed_bytes` as its flush queue last counted it into the shard's total.
    pub(crate) unflushed_accounted: std::cell::Cell<usize>,
    /// (leader epoch, first offset) for every epoch change, as Kafka's checkpoint.
    pub(crate) epochs: Vec<(i32, i64)>,
    pub(crate) producers: ProducerTail,
    /// Offsets below this were compacted with a complete key map.
    pub(crate) cleaned_upto: i64,
    pub(crate) rolling: bool,
    pub(crate) io_lock: Rc<Semaphore>,
    /// Last flush error, reported to acks=-1 waiters until a flush succeeds.
    pub flush_error: Option<String>,
    /// Why the open found records lost that were durable before (the files end before
    /// the clean-shutdown checkpoint or the journal checkpoint said): damage, not a
    /// torn write. A replica so found is rebuilt from its leader.
    pub damaged_at_open: Option<String>,
    /// Notified whenever the durable offset (high watermark) moves or a flush fails.
    pub changed: Rc<Signal>,
    /// Where the log start offset, cleaner position and clean-shutdown checkpoint go.
    pub(crate) state_keys: Option<crate::state::StateKeys>,
    /// Segment data read ahead for a consumer reading from disk in order.
    pub(crate) read_ahead: Option<read::ReadAhead>,
    pub(crate) read_ahead_running: bool,
    /// Counts truncations, so a read-ahead that started before one is dropped.
    pub(crate) truncations: u64,
    /// This log's checkpoint snapshot in the state store.
    pub(crate) snapshot: snapshot::SnapshotTracking,
}

impl PartitionLog {
    pub(crate) fn empty(dir: &Path, config: LogConfig) -> PartitionLog {
        PartitionLog {
            dir: dir.to_path_buf(),
            config,
            segments: Vec::new(),
            log_start_offset: 0,
            next_offset: 0,
            durable_offset: 0,
            high_watermark: 0,
            hw_follows_flush: true,
            replicas_have: i64::MAX,
            written_offset: 0,
            synced_offset: 0,
            checkpointed_base: 0,
            unwritten: Default::default(),
            journal: None,
            cache: BatchCache::default(),
            pending: Vec::new(),
            tail: Vec::new(),
            tail_position: 0,
            queued: Vec::new(),
            queued_for_pass: std::cell::Cell::new(false),
            unflushed_accounted: std::cell::Cell::new(0),
            epochs: Vec::new(),
            producers: ProducerTail::default(),
            cleaned_upto: 0,
            rolling: false,
            io_lock: Rc::new(Semaphore::new(1)),
            flush_error: None,
            damaged_at_open: None,
            changed: Signal::new(),
            state_keys: None,
            read_ahead: None,
            read_ahead_running: false,
            truncations: 0,
            snapshot: Default::default(),
        }
    }

    /// Reads the partial last page of the active segment back into memory.
    pub(crate) async fn load_tail(&mut self) -> Result<(), StorageError> {
        let active = self.active();
        let position = active.size / PAGE * PAGE;
        let len = (active.size - position) as usize;
        let tail = active.read(position, len).await?.to_vec();
        assert_eq!(tail.len(), len, "tail page shorter than the segment says");
        self.tail_position = position;
        self.tail = tail;
        Ok(())
    }

    /// `load_tail` for a log already shared: no borrow is held across the read.
    pub(crate) async fn reload_tail(log: &Rc<RefCell<PartitionLog>>) -> Result<(), StorageError> {
        let (file, path, position, len) = {
            let l = log.borrow();
            let active = l.active();
            let position = active.size / PAGE * PAGE;
            (active.file.clone(), active.path.clone(), position, (active.size - position) as usize)
        };
        let tail = crate::segment::read_file(&file, &path, position, len).await?.to_vec();
        assert_eq!(tail.len(), len, "tail page shorter than the segment says");
        let mut l = log.borrow_mut();
        l.tail_position = position;
        l.tail = tail;
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn log_end_offset(&self) -> i64 {
        self.next_offset
    }
    /// What consumers may read and what acks=all waits for.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    /// Hands the high watermark to the replication layer: from now on it moves only
    /// by [`PartitionLog::set_high_watermark`].
    pub fn set_replicated(&mut self) {
        self.hw_follows_flush = false;
        self.replicas_have = self.replicas_have.min(0);
    }
    /// A replicated log: everything below `offset` is durable on every replica and its
    /// Raft group will never read it again (the group's recorded snapshot point).
    pub fn set_replicas_have(&mut self, offset: i64) {
        self.replicas_have = offset;
    }
    /// Offsets below this may be removed by retention or rewritten by compaction: the
    /// high watermark, and on a replicated log no further than what every replica has
    /// (its Raft group reads the log back from there after a restart, and sends what
    /// follows to replicas that are behind).
    pub fn cleanable_end(&self) -> i64 {
        self.high_watermark.min(self.replicas_have)
    }
    /// Everything below this is durable on this node (journaled or fsynced).
    pub fn durable_offset(&self) -> i64 {
        self.durable_offset
    }
    /// Sets the high watermark after a restart, down as well as up: recovery leaves it
    /// at the log end, and a replicated log's tail may not be committed.
    pub fn restart_high_watermark(&mut self, offset: i64) {
        self.high_watermark = offset.clamp(self.log_start_offset.min(self.next_offset), self.next_offset);
        self.changed.notify();
    }
    /// Moves the high watermark (never backwards, never past the log end).
    pub fn set_high_watermark(&mut self, offset: i64) {
        assert!(offset <= self.next_offset, "high watermark {offset} past the log end {}", self.next_offset);
        if offset > self.high_watermark {
            self.high_watermark = offset;
            self.changed.notify();
        }
    }
    /// Moves `flushed` to `offset` after a successful flush or journal pass.
    pub(crate) fn mark_flushed(&mut self, offset: i64) {
        assert!(offset >= self.durable_offset, "flushed offset must not go backwards");
        self.durable_offset = offset;
        if self.hw_follows_flush {
            self.high_watermark = self.high_watermark.max(offset);
        }
        self.flush_error = None;
        self.changed.notify();
    }
    /// Sets every offset to the log end: what recovery leaves behind.
    pub(crate) fn mark_all_durable(&mut self, saved_high_watermark: Option<i64>) {
        let end = self.next_offset;
        self.durable_offset = end;
        self.written_offset = end;
        self.synced_offset = end;
        self.unwritten.clear();
        self.high_watermark = match saved_high_watermark {
            Some(hw) if !self.hw_follows_flush => hw.min(end),
            _ => end,
        };
    }
    /// Segments wholly below this may be deleted or rewritten: consumers may have read
    /// them and their files are fsynced (a journal replay never has to rebuild them).
    pub(crate) fn settled_offset(&self) -> i64 {
        self.cleanable_end().min(self.synced_offset)
    }
    /// Segments wholly below this may be rewritten by compaction: settled, and on a
    /// journaled log below its last checkpoint's mark (see `checkpointed_base`).
    pub(crate) fn rewritable_offset(&self) -> i64 {
        let settled = self.settled_offset();
        if self.journal.is_some() {
            settled.min(self.checkpointed_base)
        } else {
            settled
        }
    }
    /// Records that the active segment (or an earlier one) is written up to `position`.
    pub(crate) fn note_written(&mut self, segment_base: i64, position: u64) {
        while let Some(&(base, end, next)) = self.unwritten.front() {
            if base > segment_base || (base == segment_base && end > position) {
                break;
            }
            self.unwritten.pop_front();
            self.written_offset = self.written_offset.max(next);
        }
        if let Some(j) = self.journal.as_mut() {
            while j.records.get(1).is_some_and(|(first, _)| *first <= self.written_offset) {
                j.records.pop_front();
            }
        }
        for seg in self.segments.iter_mut() {
            if seg.base_offset < segment_base {
                seg.written_size = seg.size;
            } else if seg.base_offset == segment_base {
                seg.written_size = seg.written_size.max(position.min(seg.size));
            }
        }
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }
    /// Bytes of batches held in memory for tail reads.
    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
    /// Base offsets of the segments, oldest first (the last one is active).
    pub fn segment_bases(&self) -> Vec<i64> {
        self.segments.iter().map(|s| s.base_offset).collect()
    }
    pub fn cleaned_upto(&self) -> i64 {
        self.cleaned_upto
    }
    /// Bytes appended but not yet handed to a completed write.
    pub fn unflushed_bytes(&self) -> usize {
        self.pending.len() + self.queued.iter().map(|w| w.data.len()).sum::<usize>()
    }
    pub fn is_dirty(&self) -> bool {
        !self.pending.is_empty() || !self.queued.is_empty()
    }
    pub fn epochs(&self) -> &[(i32, i64)] {
        &self.epochs
    }
    pub(crate) fn active(&self) -> &Segment {
        self.segments.last().expect("a log always has an active segment")
    }
    pub fn io_lock(&self) -> Rc<Semaphore> {
        self.io_lock.clone()
    }

    /// Moves the log end to `offset` if it is short of it, leaving a gap: a copy of a
    /// compacted log whose last batches below a snapshot's offset were cleaned away.
    /// Nothing is written; a restart does it again from the group's record.
    pub fn skip_to(&mut self, offset: i64) {
        if offset > self.next_offset {
            self.next_offset = offset;
        }
    }

    /// Appends a batch copied from another replica's log as it is, offsets and leader
    /// epoch included: a compacted log has gaps between batches, which the copy keeps.
    /// The batch must start at or after the log end. Call `roll_if_needed` first.
    pub fn append_copied(&mut self, batch: &[u8]) -> Result<BatchHeader, StorageError> {
        let header = BatchHeader::parse(batch).map_err(|e| StorageError::Corrupt {
            path: self.dir.clone(),
            position: 0,
            reason: format!("a copied batch: {e}"),
        })?;
        if header.base_offset < self.next_offset {
            return Err(StorageError::Corrupt {
                path: self.dir.clone(),
                position: 0,
                reason: format!("a copied batch at {} below the log end {}", header.base_offset, self.next_offset),
            });
        }
        self.next_offset = header.base_offset;
        let epoch = header.partition_leader_epoch;
        Ok(self.append(batch, epoch, None))
    }

    /// Appends one validated batch: assigns its offsets, patches it and queues it.
    /// Returns the patched batch's header. Call `roll_if_needed` first.
    pub fn append(&mut self, batch: &[u8], leader_epoch: i32, log_append_time: Option<i64>) -> BatchHeader {
        assert!(!self.rolling, "append while a roll is creating the next segment");
        let mut copy = BytesMut::from(batch);
        batch::patch(&mut copy, self.next_offset, leader_epoch, log_append_time);
        let bytes = copy.freeze();
        let header = BatchHeader::parse(&bytes).expect("a validated batch has a header");
        let interval = self.config.index_interval_bytes;
        self.segments.last_mut().expect("active segment").track_append(&header, interval);
        note_epoch(&mut self.epochs, &header);
        self.producers.note(&header);
        self.next_offset = header.last_offset() + 1;
        let active = self.active();
        self.unwritten.push_back((active.base_offset, active.size, self.next_offset));
        self.pending.extend_from_slice(&bytes);
        self.cache.push_back(header, bytes);
        header
    }

    /// Takes everything waiting to be written (with `whole_pages_only`, all but the
    /// partial last page), leaving the tail page in memory. Returns the writes and
    /// what they cover: the next offset, and the active segment's base and the
    /// position written up to.
    fn take_writes(&mut self, whole_pages_only: bool) -> (Vec<PendingWrite>, i64, (i64, u64)) {
        let mut writes = std::mem::take(&mut self.queued);
        let step = self.config.preallocate_step_bytes;
        let segment_max = self.config.segment_bytes_max;
        // A journaled log may hold a tail page that is not on disk yet.
        let unwritten = !self.pending.is_empty() || self.active().written_size < self.active().size;
        let mut data = std::mem::take(&mut self.tail);
        if data.is_empty() {
            data = std::mem::take(&mut self.pending);
        } else {
            data.append(&mut self.pending);
        }
        let full = data.len() as u64 / PAGE * PAGE;
        if whole_pages_only && full == 0 {
            // Less than a page: nothing to write, and no copy of the tail.
            self.tail = data;
            let active = self.active();
            return (writes, self.next_offset, (active.base_offset, self.tail_position));
        }
        self.tail = data[full as usize..].to_vec();
        let position = self.tail_position;
        if whole_pages_only {
            data.truncate(full as usize);
        }
        if !data.is_empty() && unwritten {
            let end = position + (data.len() as u64).div_ceil(PAGE) * PAGE;
            let journaled = self.journal.is_some();
            let active = self.segments.last_mut().expect("active segment");
            let ahead = if step > 0 {
                (data.len() < ZERO_FILL_WRITES_BELOW)
                    .then(|| zero_fill_range(active, end, step, segment_max))
                    .flatten()
                    .map(|(from, to)| Ahead::Zeros(from, to))
            } else if journaled {
                zero_fill_range(active, end, ALLOCATE_AHEAD_BYTES, segment_max).map(|(_, to)| Ahead::Allocate(to))
            } else {
                None
            };
            writes.push(PendingWrite {
                file: active.file.clone(),
                path: active.path.clone(),
                position,
                data,
                seal_size: None,
                ahead,
            });
        }
        self.tail_position += full;
        let active = self.active();
        let written_upto = if whole_pages_only { self.tail_position } else { active.size };
        (writes, self.next_offset, (active.base_offset, written_upto))
    }

    fn needs_roll(&self, incoming: usize, incoming_timestamp: i64) -> bool {
        let active = self.active();
        if active.size == 0 {
            return false;
        }
        let by_size = active.size + incoming as u64 > self.config.segment_bytes_max;
        let by_time = active.rolling_timestamp >= 0
            && incoming_timestamp >= 0
            && incoming_timestamp.saturating_sub(active.rolling_timestamp) > self.config.segment_ms_max;
        by_size || by_time
    }

    pub(crate) fn evict_cache(&mut self) {
        let bound = self.evictable_below();
        self.cache.evict_to(self.config.cache_bytes_max, bound);
    }

    /// Brings every offset down to `end` after a truncation, and tells the journal.
    pub(crate) fn note_truncated(&mut self, end: i64) {
        self.durable_offset = self.durable_offset.min(end);
        self.high_watermark = self.high_watermark.min(end);
        self.written_offset = self.written_offset.min(end);
        self.synced_offset = self.synced_offset.min(end);
        // Recovery moves the mark down to a truncation journaled after it.
        let cut_segment = self.segments.iter().rev().find(|s| s.base_offset <= end).map_or(end, |s| s.base_offset);
        self.checkpointed_base = self.checkpointed_base.min(cut_segment);
        self.unwritten.retain(|&(_, _, next)| next <= end);
        if let Some(j) = self.journal.as_mut() {
            j.journaled_offset = j.journaled_offset.min(end);
            j.pending_truncate = Some(j.pending_truncate.map_or(end, |t| t.min(end)));
        }
    }

    /// Drops cached batches at or after `offset` (the log was truncated there), and
    /// any data read ahead (it may hold batches the truncation removed).
    pub(crate) fn truncate_cache(&mut self, offset: i64) {
        self.read_ahead = None;
        self.truncations += 1;
        if let Some(j) = self.journal.as_mut() {
            // A checkpoint's tail must not reach back over a truncation.
            j.records.clear();
        }
        while let Some((h, _)) = self.cache.back() {
            if h.last_offset() < offset {
                break;
            }
            self.cache.pop_back();
        }
    }

    /// Drops cached batches that start below `offset` (their segment was rewritten).
    pub(crate) fn drop_cached_below(&mut self, offset: i64) {
        while let Some((h, _)) = self.cache.front() {
            if h.base_offset >= offset {
                break;
            }
            self.cache.pop_front();
        }
    }

    /// The file name of the active segment, if the log has one.
    pub fn active_segment_file_name(&self) -> Option<String> {
        self.segments.last().and_then(|s| s.path.file_name()).map(|n| n.to_string_lossy().into_owned())
    }

    /// Makes this log, just opened on a copy of `old`'s files in another directory,
    /// take `old`'s place behind the same `Rc`: it shares `old`'s io lock (tasks
    /// queued on it stay serialised with everything done on this log), its change
    /// signal (waiters registered on it are woken by this log) and its shard's cache
    /// budget. For moving a partition between data directories; `old` must have been
    /// closed ([`crate::recovery::close`]) with nothing appended since.
    pub fn take_place_of(&mut self, old: &PartitionLog) {
        assert_eq!(self.next_offset, old.next_offset, "a moved log holds exactly what its source held");
        self.io_lock = old.io_lock.clone();
        self.changed = old.changed.clone();
        self.cache.shard = old.cache.shard.clone();
    }

    /// `offset` is readable from `start`: at or after it, and not past the log end.
    pub(crate) fn check_range_from(&self, start: i64, offset: i64) -> Result<(), StorageError> {
        if offset < start || offset > self.next_offset {
            return Err(StorageError::OffsetOutOfRange { offset, start, end: self.next_offset });
        }
        Ok(())
    }

    /// The first offset still in the segment files: the log start offset, or below it
    /// when DeleteRecords moved it and the segments below are not deleted yet (a
    /// replicated log keeps them until every replica has them).
    pub fn first_kept_offset(&self) -> i64 {
        self.segments.first().map_or(self.log_start_offset, |s| s.base_offset.min(self.log_start_offset))
    }

    /// Moves the log start offset forward (never back) and trims the epoch cache to it.
    pub(crate) fn advance_start(&mut self, offset: i64) -> bool {
        if offset <= self.log_start_offset {
            return false;
        }
        self.log_start_offset = offset;
        trim_epochs_from_start(&mut self.epochs, offset);
        true
    }
}

/// Writes the log start offset and cleaner position to the shard's state store.
pub async fn persist_state(log: &Rc<RefCell<PartitionLog>>) -> Result<(), StorageError> {
    let (keys, state) = {
        let l = log.borrow();
        (l.state_keys.clone(), PartitionState { log_start_offset: l.log_start_offset, cleaned_upto: l.cleaned_upto })
    };
    let Some(k) = keys else { return Ok(()) };
    k.kv.put(&k.key(STATE_KEY), state.encode().into()).await
}

impl CachedLog for PartitionLog {
    fn batch_cache(&self) -> &BatchCache {
        &self.cache
    }
    fn batch_cache_mut(&mut self) -> &mut BatchCache {
        &mut self.cache
    }
    /// Readable from the segment files and already journaled.
    fn evictable_below(&self) -> i64 {
        self.high_watermark.min(self.written_offset).min(self.durable_offset)
    }
}

pub(crate) fn note_epoch(epochs: &mut Vec<(i32, i64)>, h: &BatchHeader) {
    if epochs.last().map(|(e, _)| h.partition_leader_epoch > *e).unwrap_or(true) {
        epochs.push((h.partition_leader_epoch, h.base_offset));
    }
}

/// As Kafka's `truncateFromStart`: epochs that start below `start` go, except the
/// latest of them, which now starts at `start`.
pub(crate) fn trim_epochs_from_start(epochs: &mut Vec<(i32, i64)>, start: i64) {
    let below = epochs.partition_point(|(_, first)| *first < start);
    if below == 0 {
        return;
    }
    let latest = epochs[below - 1].0;
    epochs.drain(..below);
    if epochs.first().map(|(_, first)| *first > start).unwrap_or(true) {
        epochs.insert(0, (latest, start));
    }
}

/// How far ahead of its data a journaled log's active segment has blocks allocated, at
/// most (the headroom grows with the segment, as the zero fill's does).
const ALLOCATE_AHEAD_BYTES: u64 = 1 << 20;

/// Passes writing this much or more of one log skip the zero fill: their fdatasync's
/// metadata cost is spread over enough data that writing every byte twice (once as
/// zeros) would cost more bandwidth than it saves latency.
const ZERO_FILL_WRITES_BELOW: usize = 1 << 20;

/// The zeros to write past `end` (the aligned end of this write) so that the active
/// segment keeps between half and all of its headroom written ahead. The headroom
/// grows with the segment (at least 256 KiB, at most `step`), so a thousand quiet
/// partitions do not each zero megabytes.
fn zero_fill_range(active: &mut Segment, end: u64, step: u64, segment_max: u64) -> Option<(u64, u64)> {
    const GRAIN: u64 = 64 << 10;
    let headroom = end.clamp(256 << 10, step.max(256 << 10));
    if step == 0 || active.preallocated >= end + headroom / 2 {
        return None;
    }
    let from = active.preallocated.max(end);
    let to = (end + headroom).div_ceil(GRAIN).saturating_mul(GRAIN).min(segment_max.max(end));
    active.preallocated = to;
    (to > from).then_some((from, to))
}
