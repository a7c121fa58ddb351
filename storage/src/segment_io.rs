//! Segment file I/O in whole pages with O_DIRECT: the aligned writes a log's flush
//! path queues ([`PendingWrite`], written by [`write_aligned`] with the zeros or
//! allocation it prepares ahead of the data), and, for background work, a chunked
//! batch reader and an aligned streaming writer, both with bounded memory whatever
//! the segment's size.
//!
//! Compaction reads a segment twice (building the key map, then filtering) and writes
//! its replacement; neither may hold a whole segment (up to `segment.bytes`, 1 GiB by
//! default) in memory, and every write must be an O_DIRECT write of whole pages.

use std::path::PathBuf;
use std::rc::Rc;

use crate::disk::File;
use bytes::Bytes;
use keel_protocol::batch::{self, BatchHeader};

use crate::error::StorageError;
use crate::fsync::sync_or_die;
use crate::segment::{self, Segment};
use crate::PAGE;

/// Bytes read or written per DMA operation.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Reads the validated batches of one segment file in order.
pub struct SegmentReader {
    file: Rc<File>,
    path: PathBuf,
    size: u64,
    position: u64,
    buffer: Bytes,
}

impl SegmentReader {
    pub fn new(seg: &Segment) -> SegmentReader {
        SegmentReader {
            file: seg.file.clone(),
            path: seg.path.clone(),
            size: seg.written_size,
            position: 0,
            buffer: Bytes::new(),
        }
    }

    /// The next batch, CRC-checked; `None` at the end of the segment.
    pub async fn next(&mut self) -> Result<Option<(BatchHeader, Bytes)>, StorageError> {
        loop {
            let need = match batch::peek_batch_len(&self.buffer) {
                Some(Ok(need)) => need,
                Some(Err(e)) => return Err(self.corrupt(e.to_string())),
                None => batch::BATCH_LOG_OVERHEAD,
            };
            if self.buffer.len() >= need && need > batch::BATCH_LOG_OVERHEAD {
                let bytes = self.buffer.split_to(need);
                let header = batch::validate(&bytes).map_err(|e| self.corrupt(e.to_string()))?;
                self.position += need as u64;
                return Ok(Some((header, bytes)));
            }
            let read_from = self.position + self.buffer.len() as u64;
            if read_from >= self.size {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                return Err(self.corrupt(format!("{} trailing bytes", self.buffer.len())));
            }
            let want = CHUNK_BYTES.max(need - self.buffer.len()).min((self.size - read_from) as usize);
            let chunk = segment::read_file(&self.file, &self.path, read_from, want).await?;
            if chunk.len() < want {
                return Err(self.corrupt("segment shorter than its recorded size".into()));
            }
            let mut joined = Vec::with_capacity(self.buffer.len() + chunk.len());
            joined.extend_from_slice(&self.buffer);
            joined.extend_from_slice(&chunk);
            self.buffer = Bytes::from(joined);
        }
    }

    fn corrupt(&self, reason: String) -> StorageError {
        tracing::error!(path = %self.path.display(), position = self.position, %reason, "corrupt batch in background read");
        StorageError::Corrupt { path: self.path.clone(), position: self.position, reason }
    }
}

/// Writes a new segment file front to back with whole-page O_DIRECT writes, keeping
/// at most one chunk in memory, and builds its in-memory [`Segment`] as it goes.
pub struct SegmentWriter {
    segment: Segment,
    buffer: Vec<u8>,
    written: u64,
    index_interval_bytes: u64,
}

impl SegmentWriter {
    /// Creates (truncating) `path` for a segment based at `base_offset`.
    pub async fn create(
        path: PathBuf,
        base_offset: i64,
        index_interval_bytes: u64,
    ) -> Result<SegmentWriter, StorageError> {
        let segment = Segment::create_at(path, base_offset).await?;
        Ok(SegmentWriter { segment, buffer: Vec::new(), written: 0, index_interval_bytes })
    }

    pub fn size(&self) -> u64 {
        self.segment.size
    }

    pub async fn push(&mut self, header: &BatchHeader, bytes: &[u8]) -> Result<(), StorageError> {
        self.segment.track_append(header, self.index_interval_bytes);
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK_BYTES {
            let full = self.buffer.len() / PAGE as usize * PAGE as usize;
            self.write(full).await?;
        }
        Ok(())
    }

    async fn write(&mut self, len: usize) -> Result<(), StorageError> {
        let padded = len.div_ceil(PAGE as usize) * PAGE as usize;
        let file = &self.segment.file;
        let mut buf = file.alloc_dma_buffer(padded);
        let slice = buf.as_bytes_mut();
        slice[..len].copy_from_slice(&self.buffer[..len]);
        slice[len..].fill(0);
        let path = &self.segment.path;
        let n = file.write_at(buf, self.written).await.map_err(|e| StorageError::io("write segment", path, e))?;
        if n < padded {
            return Err(StorageError::io(
                "short write",
                path,
                std::io::Error::from_raw_os_error(crate::error::libc_enospc()),
            ));
        }
        self.buffer.drain(..len);
        self.written += len as u64;
        Ok(())
    }

    /// Writes what remains, cuts the file to its logical size and fsyncs it.
    pub async fn finish(mut self) -> Result<Segment, StorageError> {
        if !self.buffer.is_empty() {
            self.write(self.buffer.len()).await?;
        }
        let (file, path) = (&self.segment.file, &self.segment.path);
        file.truncate(self.segment.size).await.map_err(|e| StorageError::io("truncate segment", path, e))?;
        sync_or_die(file, path).await;
        self.segment.written_size = self.segment.size;
        Ok(self.segment)
    }

    /// Abandons the file (removing it).
    pub async fn abandon(self) {
        let path = self.segment.path.clone();
        segment::release_file(self.segment.file, Some(&path)).await;
    }
}

/// Writes zeros over `[from, to)` of `file` (already-allocated, written blocks make a
/// later overwrite's fdatasync carry no file-system metadata); false on a failure (a
/// full disk), which only means later writes land in unwritten blocks.
pub(crate) async fn write_zeros(file: &File, from: u64, to: u64) -> bool {
    let mut at = from;
    while at < to {
        let len = (to - at).min(CHUNK_BYTES as u64);
        let mut buf = file.alloc_dma_buffer(len as usize);
        buf.as_bytes_mut().fill(0);
        match file.write_at(buf, at).await {
            Ok(n) if n as u64 == len => at += len,
            _ => return false,
        }
    }
    true
}

/// One aligned write waiting for the flush loop.
pub(crate) struct PendingWrite {
    pub(crate) file: Rc<File>,
    pub(crate) path: PathBuf,
    /// Aligned file position of `data[0]`.
    pub(crate) position: u64,
    pub(crate) data: Vec<u8>,
    /// Set for a segment that was rolled away from: its final logical size.
    pub(crate) seal_size: Option<u64>,
    /// What to prepare past the data alongside the write.
    pub(crate) ahead: Option<Ahead>,
}

/// What a write to the active segment prepares past its data, so that the writes
/// after it change little or no file-system metadata.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ahead {
    /// Zeros written over `from..to`: writes there are then pure overwrites, and the
    /// fdatasync after them carries no metadata (a log without a journal).
    Zeros(u64, u64),
    /// Blocks allocated up to `to`, the file's size unchanged (a journaled log, whose
    /// files are fsynced only at checkpoints). Without it each page written past the
    /// end allocates a block: with thousands of partitions, each directory in its own
    /// block group, the file system then journals a bitmap block per file per commit
    /// (0.6 bytes of metadata per payload byte were measured at 4,000 partitions).
    Allocate(u64),
}

/// Writes `w`, preparing what it says past its data alongside.
pub(crate) async fn write_aligned(w: &PendingWrite) -> Result<(), StorageError> {
    assert_eq!(w.position % PAGE, 0, "O_DIRECT writes start on a page boundary");
    // A failure to prepare ahead (a full disk) is not an error: the data write needs
    // only its own pages and reports ENOSPC itself.
    match w.ahead {
        Some(Ahead::Zeros(from, to)) => {
            let zeros = async {
                if write_zeros(&w.file, from, to).await {
                    crate::stats::update(|s| s.segment_bytes_written += to - from);
                } else {
                    tracing::debug!(path = %w.path.display(), "zero-filling ahead failed; writing without it");
                }
            };
            futures_lite::future::zip(write_data(w), zeros).await.0
        }
        Some(Ahead::Allocate(to)) => {
            // Before the data, which then lands in allocated blocks.
            if let Err(e) = w.file.allocate(to).await {
                tracing::debug!(path = %w.path.display(), error = %e, "allocating ahead failed; writing without it");
            }
            write_data(w).await
        }
        None => write_data(w).await,
    }
}

/// Writes `w.data` at its aligned position, zero-padded to whole pages, then cuts the
/// file to `w.seal_size` if set.
pub(crate) async fn write_data(w: &PendingWrite) -> Result<(), StorageError> {
    let len = (w.data.len() as u64).div_ceil(PAGE) * PAGE;
    if len > 0 {
        let mut buf = w.file.alloc_dma_buffer(len as usize);
        let slice = buf.as_bytes_mut();
        slice[..w.data.len()].copy_from_slice(&w.data);
        slice[w.data.len()..].fill(0);
        let written =
            w.file.write_at(buf, w.position).await.map_err(|e| StorageError::io("write segment", &w.path, e))?;
        if (written as u64) < len {
            return Err(StorageError::io(
                "short write",
                &w.path,
                std::io::Error::from_raw_os_error(crate::error::libc_enospc()),
            ));
        }
        crate::stats::update(|s| s.segment_bytes_written += len);
    }
    if let Some(size) = w.seal_size {
        w.file.truncate(size).await.map_err(|e| StorageError::io("seal segment", &w.path, e))?;
    }
    Ok(())
}
