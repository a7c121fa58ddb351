//! One segment file: `<base_offset>.log` holding RecordBatch v2 batches back to back,
//! plus its sparse in-memory index (rebuilt by the recovery scan at open, or restored
//! from the clean-shutdown checkpoint or a journal checkpoint's snapshot).
//!
//! The index has one entry per `index_interval_bytes` of data and records, for the
//! batch at that entry, its base offset, its file position and the largest batch
//! timestamp up to and including it, so one binary search serves both offset and
//! timestamp lookups. Kafka keeps two files (`.index`, `.timeindex`) per segment; one
//! in-memory vector is smaller, needs no fsync on the write path, and is persisted
//! only at a clean shutdown and, for journaled logs, in checkpoint snapshots (a sealed
//! segment's once, the active segment's at each checkpoint that finds it changed).

use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::disk::File;
use bytes::Bytes;
use keel_protocol::batch::{self, BatchHeader};

use crate::error::StorageError;

/// Bytes read per DMA read during the recovery scan.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: i64,
    pub position: u64,
    pub max_timestamp_so_far: i64,
}

pub struct Segment {
    pub base_offset: i64,
    pub path: PathBuf,
    pub file: Rc<File>,
    /// Logical size: every appended byte, flushed or not.
    pub size: u64,
    /// Bytes known to be written and fsynced; reads never go past them.
    pub written_size: u64,
    /// Offset after the last batch in this segment.
    pub next_offset: i64,
    pub max_timestamp: i64,
    /// Base offset of the batch holding `max_timestamp`.
    pub max_timestamp_offset: i64,
    /// Max timestamp of the first batch: what `segment.ms` measures from, as in Kafka.
    pub rolling_timestamp: i64,
    /// The file is written (with zeros past the data) up to here, as far as this
    /// process knows; appends below it overwrite allocated blocks.
    pub preallocated: u64,
    pub index: Vec<IndexEntry>,
    bytes_since_index: u64,
}

pub fn segment_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

/// Base offset encoded in a segment file name, or `None` for other files.
pub fn parse_segment_name(name: &str) -> Option<i64> {
    name.strip_suffix(".log")?.parse().ok()
}

/// Outcome of scanning a segment at open.
pub struct ScanOutcome {
    /// Where the valid data ends; bytes past it are torn, zeroed or corrupt.
    pub valid_len: u64,
    /// Why the scan stopped before the end of the file, if it did.
    pub stopped: Option<String>,
    /// Everything past `valid_len` is zeros: the end of the data, or a write that
    /// never reached the disk, not damaged bytes.
    pub zero_tail: bool,
}

impl Segment {
    pub async fn create(dir: &Path, base_offset: i64) -> Result<Segment, StorageError> {
        let path = segment_path(dir, base_offset);
        Segment::create_at(path, base_offset).await
    }

    /// Creates (truncating) a segment file at `path`, which may be a temporary name.
    pub async fn create_at(path: PathBuf, base_offset: i64) -> Result<Segment, StorageError> {
        let file = File::create(&path).await.map_err(|e| StorageError::io("create segment", &path, e))?;
        Ok(Segment::new(base_offset, path, Rc::new(file)))
    }

    pub async fn open(path: PathBuf, base_offset: i64) -> Result<Segment, StorageError> {
        let file = File::open(&path).await.map_err(|e| StorageError::io("open segment", &path, e))?;
        Ok(Segment::new(base_offset, path, Rc::new(file)))
    }

    pub fn new(base_offset: i64, path: PathBuf, file: Rc<File>) -> Segment {
        Segment {
            base_offset,
            path,
            file,
            size: 0,
            written_size: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            max_timestamp_offset: -1,
            rolling_timestamp: -1,
            preallocated: 0,
            index: Vec::new(),
            bytes_since_index: u64::MAX,
        }
    }

    /// Records a batch appended at the current end of the segment.
    pub fn track_append(&mut self, header: &BatchHeader, index_interval_bytes: u64) {
        assert!(header.base_offset >= self.next_offset, "offsets must not go backwards");
        if self.size == 0 {
            self.rolling_timestamp = header.max_timestamp;
        }
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.max_timestamp_offset = header.base_offset;
        }
        if self.bytes_since_index >= index_interval_bytes {
            self.index.push(IndexEntry {
                offset: header.base_offset,
                position: self.size,
                max_timestamp_so_far: self.max_timestamp,
            });
            self.bytes_since_index = 0;
        }
        let len = header.total_len() as u64;
        self.size += len;
        self.bytes_since_index += len;
        self.next_offset = header.last_offset() + 1;
    }

    /// File position from which a scan finds the batch holding `offset`.
    pub fn position_for_offset(&self, offset: i64) -> u64 {
        self.index_entry_for(offset).map_or(0, |e| e.position)
    }

    /// The last index entry at or below `offset`: a batch starting at its position
    /// with its offset. None: scan from the segment's start.
    pub fn index_entry_for(&self, offset: i64) -> Option<&IndexEntry> {
        self.index[..self.index.partition_point(|e| e.offset <= offset)].last()
    }

    /// File position from which a scan finds the first batch with a timestamp at or
    /// after `timestamp`.
    pub fn position_for_timestamp(&self, timestamp: i64) -> u64 {
        let k = self.index.partition_point(|e| e.max_timestamp_so_far < timestamp);
        match k {
            0 => 0,
            k => self.index[k - 1].position,
        }
    }

    /// Reads `len` bytes at `position` (clamped to the logical size).
    pub async fn read(&self, position: u64, len: usize) -> Result<Bytes, StorageError> {
        let len = len.min(self.size.saturating_sub(position) as usize);
        read_file(&self.file, &self.path, position, len).await
    }

    /// Scans the file from `from` (a batch boundary whose earlier batches were already
    /// tracked), validating every batch's CRC, and calls `on_batch` for each valid one.
    /// Stops at the first torn, zero or corrupt batch, yielding to other tasks between
    /// chunks.
    pub async fn scan(
        &mut self,
        index_interval_bytes: u64,
        mut on_batch: impl FnMut(&BatchHeader, &Bytes),
    ) -> Result<ScanOutcome, StorageError> {
        let file_len = self.file.file_size().await.map_err(|e| StorageError::io("stat segment", &self.path, e))?;
        let mut pos: u64 = self.size;
        let mut carry = Vec::new();
        let mut carry_start = self.size;
        loop {
            let mut stop: Option<String> = None;
            let mut cursor = 0usize;
            while cursor < carry.len() {
                let rest = &carry[cursor..];
                let len = match batch::peek_batch_len(rest) {
                    None => break,
                    Some(Err(e)) => {
                        stop = Some(e.to_string());
                        break;
                    }
                    Some(Ok(len)) => len,
                };
                if len > rest.len() {
                    if carry_start + cursor as u64 + len as u64 > file_len {
                        stop = Some(format!("torn batch of {len} bytes"));
                    }
                    break;
                }
                let bytes = Bytes::copy_from_slice(&rest[..len]);
                match batch::validate(&bytes) {
                    Ok(h) if h.base_offset >= self.next_offset => {
                        self.track_append(&h, index_interval_bytes);
                        on_batch(&h, &bytes);
                        cursor += len;
                    }
                    Ok(h) => {
                        stop = Some(format!("offset {} goes backwards", h.base_offset));
                        break;
                    }
                    Err(e) => {
                        stop = Some(e.to_string());
                        break;
                    }
                }
            }
            carry.drain(..cursor);
            carry_start += cursor as u64;
            if stop.is_some() || pos >= file_len {
                if stop.is_none() && !carry.is_empty() {
                    stop = Some(format!("{} trailing bytes", carry.len()));
                }
                // Zeros from here to the end of the file are the zero fill written
                // ahead of the data (or the padding of a last page written whole).
                let zero_tail = carry.iter().all(|b| *b == 0) && self.zeros_from(pos, file_len).await?;
                if zero_tail && file_len - carry_start < crate::PAGE {
                    stop = None;
                }
                self.written_size = self.size;
                return Ok(ScanOutcome { valid_len: carry_start, stopped: stop, zero_tail });
            }
            let want = SCAN_CHUNK_BYTES.min((file_len - pos) as usize);
            let chunk =
                self.file.read_at(pos, want).await.map_err(|e| StorageError::io("scan segment", &self.path, e))?;
            if chunk.is_empty() {
                pos = file_len;
            } else {
                pos += chunk.len() as u64;
                carry.extend_from_slice(&chunk);
            }
            glommio::yield_if_needed().await;
        }
    }

    /// Whether `[from, to)` of the file holds only zeros.
    async fn zeros_from(&self, mut from: u64, to: u64) -> Result<bool, StorageError> {
        while from < to {
            let want = SCAN_CHUNK_BYTES.min((to - from) as usize);
            let chunk =
                self.file.read_at(from, want).await.map_err(|e| StorageError::io("scan segment", &self.path, e))?;
            if chunk.is_empty() {
                return Ok(true);
            }
            if chunk.iter().any(|b| *b != 0) {
                return Ok(false);
            }
            from += chunk.len() as u64;
            glommio::yield_if_needed().await;
        }
        Ok(true)
    }

    /// Drops index entries at or after `size` (after a truncation inside the segment).
    pub fn truncate_index(&mut self, size: u64) {
        let keep = self.index.partition_point(|e| e.position < size);
        self.index.truncate(keep);
    }

    /// Restores a segment's in-memory state from a clean-shutdown checkpoint.
    pub fn restore(&mut self, state: &SegmentState) {
        self.size = state.size;
        self.written_size = state.size;
        self.next_offset = state.next_offset;
        self.max_timestamp = state.max_timestamp;
        self.max_timestamp_offset = state.max_timestamp_offset;
        self.rolling_timestamp = state.rolling_timestamp;
        self.index = state.index.clone();
        self.bytes_since_index = state.bytes_since_index;
    }

    /// The in-memory state a clean-shutdown checkpoint keeps for this segment.
    pub fn state(&self) -> SegmentState {
        self.state_with_index_from(0)
    }

    /// `state` with only the index entries from `first` on.
    pub fn state_with_index_from(&self, first: usize) -> SegmentState {
        SegmentState {
            base_offset: self.base_offset,
            size: self.size,
            next_offset: self.next_offset,
            max_timestamp: self.max_timestamp,
            max_timestamp_offset: self.max_timestamp_offset,
            rolling_timestamp: self.rolling_timestamp,
            bytes_since_index: self.bytes_since_index,
            index: self.index[first.min(self.index.len())..].to_vec(),
        }
    }
}

/// What a segment's open needs instead of a scan, as a clean shutdown records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentState {
    pub base_offset: i64,
    pub size: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub max_timestamp_offset: i64,
    pub rolling_timestamp: i64,
    pub bytes_since_index: u64,
    pub index: Vec<IndexEntry>,
}

/// Reads `len` bytes at `position` of a segment file. May return fewer bytes when the
/// file is shorter (a segment truncated or released while a reader held it).
pub async fn read_file(file: &File, path: &Path, position: u64, len: usize) -> Result<Bytes, StorageError> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let data = file.read_at(position, len).await.map_err(|e| StorageError::io("read segment", path, e))?;
    Ok(Bytes::copy_from_slice(&data))
}

/// Releases a segment file no longer in the log without stalling the reactor: the
/// truncation that frees its extents and the unlink run on glommio's blocking thread;
/// the close that remains is cheap. Readers still holding the file see short reads.
pub async fn release_file(file: Rc<File>, path: Option<&Path>) {
    if let Err(e) = file.truncate(0).await {
        tracing::warn!(path = ?path, error = %e, "truncating a released segment failed");
    }
    if let Some(path) = path {
        if let Err(e) = crate::disk::remove(path, "remove released segment").await {
            tracing::warn!(path = %path.display(), error = %e, "removing a released segment failed");
        }
    }
    let _ = file.close_rc().await;
}
