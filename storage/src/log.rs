//! A partition's log: its segments, its batch cache, its pending writes and the three
//! offsets that matter (log start, durable = high watermark, log end).
//!
//! Appends are synchronous: the patched batch goes to the tail cache and to the pending
//! buffer of the active segment. `flush` (called only by the shard's flush loop, so
//! never concurrently for one log) writes pending bytes with O_DIRECT from 4 KiB-aligned
//! buffers, rewriting the partial tail page kept in memory, fdatasyncs, and then moves
//! the durable offset. Readers never see past the durable offset.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use glommio::io::DmaFile;
use keel_protocol::batch::{self, BatchHeader};

use crate::error::StorageError;
use crate::segment::{self, Segment};
use crate::signal::Signal;
use crate::PAGE;

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub segment_bytes_max: u64,
    pub index_interval_bytes: u64,
    /// Tail batches kept in memory once durable, per partition.
    pub cache_bytes_max: usize,
    /// Smallest DMA read issued for a catch-up fetch.
    pub read_ahead_bytes: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 1 << 30,
            index_interval_bytes: 4096,
            cache_bytes_max: 4 << 20,
            read_ahead_bytes: 256 << 10,
        }
    }
}

/// One aligned write waiting for the flush loop.
struct PendingWrite {
    file: Rc<DmaFile>,
    path: PathBuf,
    /// Aligned file position of `data[0]`.
    position: u64,
    data: Vec<u8>,
    /// Set for a segment that was rolled away from: its final logical size.
    seal_size: Option<u64>,
}

pub struct ReadResult {
    pub batches: Vec<Bytes>,
    pub bytes: usize,
}

pub struct PartitionLog {
    dir: PathBuf,
    pub config: LogConfig,
    segments: Vec<Segment>,
    pub log_start_offset: i64,
    next_offset: i64,
    durable_offset: i64,
    cache: VecDeque<(BatchHeader, Bytes)>,
    cache_bytes: usize,
    /// Bytes of the active segment not yet handed to a write.
    pending: Vec<u8>,
    /// The partial last page of the active segment, rewritten by the next write.
    tail: Vec<u8>,
    tail_position: u64,
    queued: Vec<PendingWrite>,
    /// (leader epoch, first offset) for every epoch change, as Kafka's checkpoint.
    epochs: Vec<(i32, i64)>,
    /// Largest batch max-timestamp and the base offset of its batch.
    max_timestamp: (i64, i64),
    rolling: bool,
    /// Last flush error, reported to acks=-1 waiters until a flush succeeds.
    pub flush_error: Option<String>,
    /// Notified whenever the durable offset (high watermark) moves or a flush fails.
    pub changed: Rc<Signal>,
}

impl PartitionLog {
    /// Opens (recovering) or creates the log in `dir`. `on_batch` sees every valid batch,
    /// so callers can rebuild state such as producer sequences.
    pub async fn open(
        dir: &Path,
        config: LogConfig,
        mut on_batch: impl FnMut(&BatchHeader),
    ) -> Result<PartitionLog, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| StorageError::io("create log dir", dir, e))?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| StorageError::io("list log dir", dir, e))? {
            let entry = entry.map_err(|e| StorageError::io("list log dir", dir, e))?;
            if let Some(base) = entry.file_name().to_str().and_then(segment::parse_segment_name) {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        let mut log = PartitionLog::empty(dir, config);
        let mut damaged = false;
        for base in bases {
            let path = segment::segment_path(dir, base);
            if damaged {
                tracing::error!(path = %path.display(), "removing segment after a damaged one");
                std::fs::remove_file(&path).map_err(|e| StorageError::io("remove segment", &path, e))?;
                continue;
            }
            let mut seg = Segment::open(path.clone(), base.max(log.next_offset)).await?;
            let (epochs, max_ts) = (&mut log.epochs, &mut log.max_timestamp);
            let outcome = seg
                .scan(log.config.index_interval_bytes, |h, _| {
                    note_epoch(epochs, h);
                    if h.max_timestamp > max_ts.0 {
                        *max_ts = (h.max_timestamp, h.base_offset);
                    }
                    on_batch(h);
                })
                .await?;
            if let Some(reason) = outcome.stopped {
                tracing::warn!(path = %path.display(), valid_len = outcome.valid_len, %reason,
                    "log recovery truncates at the last valid batch");
                damaged = true;
            }
            let file_len = seg.file.file_size().await.map_err(|e| StorageError::io("stat", &path, e.into()))?;
            if file_len != outcome.valid_len {
                seg.file.truncate(outcome.valid_len).await.map_err(|e| StorageError::io("truncate", &path, e.into()))?;
                sync_or_die(&seg.file, &path).await;
            }
            log.next_offset = seg.next_offset;
            log.segments.push(seg);
        }
        if log.segments.is_empty() {
            log.segments.push(Segment::create(dir, 0).await?);
        } else {
            log.log_start_offset = log.segments[0].base_offset;
        }
        log.durable_offset = log.next_offset;
        log.load_tail().await?;
        Ok(log)
    }

    fn empty(dir: &Path, config: LogConfig) -> PartitionLog {
        PartitionLog {
            dir: dir.to_path_buf(),
            config,
            segments: Vec::new(),
            log_start_offset: 0,
            next_offset: 0,
            durable_offset: 0,
            cache: VecDeque::new(),
            cache_bytes: 0,
            pending: Vec::new(),
            tail: Vec::new(),
            tail_position: 0,
            queued: Vec::new(),
            epochs: Vec::new(),
            max_timestamp: (-1, -1),
            rolling: false,
            flush_error: None,
            changed: Signal::new(),
        }
    }

    /// Reads the partial last page of the active segment back into memory.
    async fn load_tail(&mut self) -> Result<(), StorageError> {
        let active = self.segments.last().expect("a log always has an active segment");
        self.tail_position = active.size / PAGE * PAGE;
        let len = (active.size - self.tail_position) as usize;
        self.tail = active.read(self.tail_position, len).await?.to_vec();
        assert_eq!(self.tail.len(), len, "tail page shorter than the segment says");
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn log_end_offset(&self) -> i64 {
        self.next_offset
    }
    /// Offsets below this are fsynced; on a single node this is the high watermark.
    pub fn high_watermark(&self) -> i64 {
        self.durable_offset
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }
    pub fn is_dirty(&self) -> bool {
        !self.pending.is_empty() || !self.queued.is_empty()
    }
    pub fn epochs(&self) -> &[(i32, i64)] {
        &self.epochs
    }
    fn active(&self) -> &Segment {
        self.segments.last().expect("a log always has an active segment")
    }

    /// Appends one validated batch: assigns its offsets, patches it and queues it.
    /// Returns the patched batch's header. Call `roll_if_needed` first.
    pub fn append(
        &mut self,
        batch: &[u8],
        leader_epoch: i32,
        log_append_time: Option<i64>,
    ) -> BatchHeader {
        let mut copy = BytesMut::from(batch);
        batch::patch(&mut copy, self.next_offset, leader_epoch, log_append_time);
        let bytes = copy.freeze();
        let header = BatchHeader::parse(&bytes).expect("a validated batch has a header");
        let interval = self.config.index_interval_bytes;
        self.segments.last_mut().expect("active segment").track_append(&header, interval);
        note_epoch(&mut self.epochs, &header);
        if header.max_timestamp > self.max_timestamp.0 {
            self.max_timestamp = (header.max_timestamp, header.base_offset);
        }
        self.next_offset = header.last_offset() + 1;
        self.pending.extend_from_slice(&bytes);
        self.cache_bytes += bytes.len();
        self.cache.push_back((header, bytes));
        header
    }

    /// Takes everything waiting to be written, leaving the tail page in memory.
    fn take_writes(&mut self) -> (Vec<PendingWrite>, i64) {
        let mut writes = std::mem::take(&mut self.queued);
        if !self.pending.is_empty() {
            let mut data = std::mem::take(&mut self.tail);
            data.append(&mut self.pending);
            let full = data.len() as u64 / PAGE * PAGE;
            self.tail = data[full as usize..].to_vec();
            let active = self.active();
            writes.push(PendingWrite {
                file: active.file.clone(),
                path: active.path.clone(),
                position: self.tail_position,
                data,
                seal_size: None,
            });
            self.tail_position += full;
        }
        (writes, self.next_offset)
    }

    fn needs_roll(&self, incoming: usize) -> bool {
        let active = self.active();
        active.size > 0 && active.size + incoming as u64 > self.config.segment_bytes_max
    }

    fn evict_cache(&mut self) {
        while self.cache_bytes > self.config.cache_bytes_max {
            match self.cache.front() {
                Some((h, b)) if h.last_offset() < self.durable_offset => {
                    self.cache_bytes -= b.len();
                    self.cache.pop_front();
                }
                _ => break,
            }
        }
    }

    fn read_cached(&self, offset: i64, max_bytes: usize, upto: i64) -> Option<ReadResult> {
        let (first, _) = self.cache.front()?;
        if first.base_offset > offset {
            return None;
        }
        let mut out = ReadResult { batches: Vec::new(), bytes: 0 };
        let start = self.cache.partition_point(|(h, _)| h.last_offset() < offset);
        for (h, b) in self.cache.range(start..) {
            if h.base_offset >= upto || (out.bytes > 0 && out.bytes + b.len() > max_bytes) {
                break;
            }
            out.bytes += b.len();
            out.batches.push(b.clone());
        }
        Some(out)
    }

    fn check_range(&self, offset: i64) -> Result<(), StorageError> {
        if offset < self.log_start_offset || offset > self.next_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                start: self.log_start_offset,
                end: self.next_offset,
            });
        }
        Ok(())
    }

    /// The segment holding `offset` and where to start scanning for it.
    fn locate(&self, offset: i64) -> Option<(usize, u64)> {
        let i = self.segments.partition_point(|s| s.base_offset <= offset);
        if i == 0 {
            return None;
        }
        Some((i - 1, self.segments[i - 1].position_for_offset(offset)))
    }
}

fn note_epoch(epochs: &mut Vec<(i32, i64)>, h: &BatchHeader) {
    if epochs.last().map(|(e, _)| h.partition_leader_epoch > *e).unwrap_or(true) {
        epochs.push((h.partition_leader_epoch, h.base_offset));
    }
}

/// An fdatasync failure leaves the page cache and the disk in an unknown state; the
/// only safe answer is to stop and let recovery re-read what is really on disk.
async fn sync_or_die(file: &DmaFile, path: &Path) {
    if let Err(e) = file.fdatasync().await {
        eprintln!("keel: fatal: fdatasync {} failed: {e}; stopping to recover from disk", path.display());
        std::process::exit(70);
    }
}

/// Rolls to a new segment when the next `incoming` bytes would overflow the active one.
pub async fn roll_if_needed(log: &Rc<RefCell<PartitionLog>>, incoming: usize) -> Result<(), StorageError> {
    loop {
        let (dir, base) = {
            let l = log.borrow();
            if !l.needs_roll(incoming) {
                return Ok(());
            }
            if l.rolling {
                let wait = l.changed.wait();
                drop(l);
                wait.await;
                continue;
            }
            (l.dir.clone(), l.next_offset)
        };
        log.borrow_mut().rolling = true;
        let created = Segment::create(&dir, base).await;
        let mut l = log.borrow_mut();
        l.rolling = false;
        l.changed.notify();
        let seg = created?;
        let tail = std::mem::take(&mut l.tail);
        let mut data = tail;
        data.append(&mut l.pending);
        let old = l.active();
        let write = PendingWrite {
            file: old.file.clone(),
            path: old.path.clone(),
            position: l.tail_position,
            data,
            seal_size: Some(old.size),
        };
        l.queued.push(write);
        l.tail_position = 0;
        l.segments.push(seg);
    }
}

/// Writes and fsyncs everything appended so far, then advances the durable offset.
/// Only the shard's flush loop calls this, so it never runs twice at once for one log.
pub async fn flush(log: &Rc<RefCell<PartitionLog>>) -> Result<(), StorageError> {
    let (writes, target) = log.borrow_mut().take_writes();
    let mut synced: Vec<Rc<DmaFile>> = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        if let Err(e) = write_aligned(w).await {
            let mut l = log.borrow_mut();
            let rest: Vec<PendingWrite> = writes.into_iter().skip(i).collect();
            let mut queued = rest;
            queued.append(&mut l.queued);
            l.queued = queued;
            l.flush_error = Some(e.to_string());
            l.changed.notify();
            return Err(e);
        }
        if !synced.iter().any(|f| Rc::ptr_eq(f, &w.file)) {
            synced.push(w.file.clone());
        }
    }
    for (file, w) in synced.iter().zip(writes.iter()) {
        sync_or_die(file, &w.path).await;
    }
    let mut l = log.borrow_mut();
    assert!(target >= l.durable_offset, "durable offset must not go backwards");
    l.durable_offset = target;
    l.flush_error = None;
    l.evict_cache();
    l.changed.notify();
    Ok(())
}

async fn write_aligned(w: &PendingWrite) -> Result<(), StorageError> {
    assert_eq!(w.position % PAGE, 0, "O_DIRECT writes start on a page boundary");
    let len = (w.data.len() as u64).div_ceil(PAGE) * PAGE;
    if len > 0 {
        let mut buf = w.file.alloc_dma_buffer(len as usize);
        let slice = buf.as_bytes_mut();
        slice[..w.data.len()].copy_from_slice(&w.data);
        slice[w.data.len()..].fill(0);
        let written = w
            .file
            .write_at(buf, w.position)
            .await
            .map_err(|e| StorageError::io("write segment", &w.path, e.into()))?;
        if (written as u64) < len {
            return Err(StorageError::io("short write", &w.path, std::io::Error::from_raw_os_error(28)));
        }
    }
    if let Some(size) = w.seal_size {
        w.file.truncate(size).await.map_err(|e| StorageError::io("seal segment", &w.path, e.into()))?;
    }
    Ok(())
}

/// Reads batches from `offset` (the batch holding it first) up to `max_bytes` (at
/// least one batch), never past `upto` or the high watermark. Every batch read from
/// disk has its CRC checked before it is returned.
pub async fn read(
    log: &Rc<RefCell<PartitionLog>>,
    offset: i64,
    max_bytes: usize,
    upto: i64,
) -> Result<ReadResult, StorageError> {
    let mut out = ReadResult { batches: Vec::new(), bytes: 0 };
    let (upto, mut seg_index, mut position, mut want) = {
        let l = log.borrow();
        l.check_range(offset)?;
        let upto = upto.min(l.durable_offset);
        if offset >= upto {
            return Ok(out);
        }
        if let Some(hit) = l.read_cached(offset, max_bytes, upto) {
            return Ok(hit);
        }
        let Some((seg_index, position)) = l.locate(offset) else { return Ok(out) };
        (upto, seg_index, position, l.config.read_ahead_bytes.max(max_bytes))
    };
    loop {
        let (file, path, size) = {
            let l = log.borrow();
            let Some(seg) = l.segments.get(seg_index) else { return Ok(out) };
            (seg.file.clone(), seg.path.clone(), seg.size)
        };
        if position >= size {
            seg_index += 1;
            position = 0;
            continue;
        }
        let len = want.min((size - position) as usize);
        let data = segment::read_file(&file, &path, position, len).await?;
        let mut cursor = 0;
        while cursor < data.len() {
            let rest = &data[cursor..];
            let need = match batch::peek_batch_len(rest) {
                Some(Ok(need)) => need,
                Some(Err(e)) => return Err(corrupt(&path, position + cursor as u64, e.to_string())),
                None => batch::BATCH_HEADER_LEN,
            };
            if need > rest.len() {
                if cursor == 0 {
                    // The next batch is larger than the read: read it whole.
                    want = want.max(need);
                }
                break;
            }
            let header = BatchHeader::parse(rest).map_err(|e| corrupt(&path, position, e.to_string()))?;
            if header.base_offset >= upto {
                return Ok(out);
            }
            if header.last_offset() >= offset {
                if !out.batches.is_empty() && out.bytes + need > max_bytes {
                    return Ok(out);
                }
                let bytes = data.slice(cursor..cursor + need);
                batch::validate(&bytes).map_err(|e| corrupt(&path, position + cursor as u64, e.to_string()))?;
                out.bytes += need;
                out.batches.push(bytes);
            }
            cursor += need;
        }
        if out.bytes >= max_bytes {
            return Ok(out);
        }
        position += cursor as u64;
    }
}

fn corrupt(path: &Path, position: u64, reason: String) -> StorageError {
    tracing::error!(path = %path.display(), position, %reason, "corrupt batch not served");
    StorageError::Corrupt { path: path.to_path_buf(), position, reason }
}

/// First record at or after `timestamp`: its (offset, timestamp), below the high
/// watermark. Uses the segments' timestamp index, then decodes one batch.
pub async fn offset_for_timestamp(
    log: &Rc<RefCell<PartitionLog>>,
    timestamp: i64,
) -> Result<Option<(i64, i64)>, StorageError> {
    let (mut offset, hw) = {
        let l = log.borrow();
        let Some(seg) = l.segments.iter().find(|s| s.max_timestamp >= timestamp) else { return Ok(None) };
        let i = seg.index.partition_point(|e| e.max_timestamp_so_far < timestamp);
        let start = if i == 0 { seg.base_offset } else { seg.index[i - 1].offset };
        (start.max(l.log_start_offset), l.durable_offset)
    };
    while offset < hw {
        let r = read(log, offset, 1 << 20, hw).await?;
        if r.batches.is_empty() {
            break;
        }
        for b in &r.batches {
            let h = BatchHeader::parse(b).map_err(|e| StorageError::Corrupt {
                path: log.borrow().dir.clone(),
                position: 0,
                reason: e.to_string(),
            })?;
            if h.max_timestamp >= timestamp && !h.is_control() {
                let records = batch::record_timestamps(b).map_err(|e| StorageError::Corrupt {
                    path: log.borrow().dir.clone(),
                    position: 0,
                    reason: e.to_string(),
                })?;
                if let Some(found) = records.into_iter().find(|(o, t)| *t >= timestamp && *o >= offset) {
                    return Ok(Some(found));
                }
            }
            offset = offset.max(h.last_offset() + 1);
        }
    }
    Ok(None)
}

/// The record with the largest timestamp: its (offset, timestamp).
pub async fn offset_of_max_timestamp(log: &Rc<RefCell<PartitionLog>>) -> Result<Option<(i64, i64)>, StorageError> {
    let (max_ts, base, start) = {
        let l = log.borrow();
        (l.max_timestamp.0, l.max_timestamp.1, l.log_start_offset)
    };
    if max_ts < 0 || base < start {
        return Ok(None);
    }
    let r = read(log, base, 1, i64::MAX).await?;
    let Some(b) = r.batches.first() else { return Ok(None) };
    let records = batch::record_timestamps(b)
        .map_err(|e| StorageError::Corrupt { path: log.borrow().dir.clone(), position: 0, reason: e.to_string() })?;
    Ok(records.into_iter().find(|(_, t)| *t == max_ts))
}
