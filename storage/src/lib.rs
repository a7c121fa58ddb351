//! Keel's storage engine: one segmented log per partition, written with O_DIRECT
//! through each shard's io_uring (glommio DMA files). Every file, directory and timer
//! goes through [`disk`], where a deterministic simulation puts a simulated disk and
//! clock instead.
//!
//! Everything here runs on the shard that owns the partition; nothing is `Send` and
//! nothing is shared between shards. Appends are synchronous and land in memory (the
//! batch cache and the pending write buffer); the shard's flush loop ([`flush`]) makes
//! them durable with one write and one `fdatasync` of the shard's [`journal`] per pass,
//! however many logs the pass carries (group commit), then advances each log's flushed
//! offset, which the high watermark follows on a single node. The segment files are
//! written afterwards in whole pages and fsynced by journal checkpoints. Background work — [`retention`], [`compaction`] — runs in the
//! caller's low-share task queue, yields, and moves file deletion and truncation to
//! glommio's blocking thread. The storage layer knows RecordBatch v2 framing, never
//! Kafka requests or Raft.
//!
//! The modules form layers, each naming only those below it (checked by
//! `compat/tools/modgraph.py storage/src --check`):
//!
//! 1. errors and plain types: [`error`], [`stats`], [`signal`], [`join`], `sync_log`
//!    (the fsync record of fault tests), [`batch_filter`], [`producer_tail`], [`state`]
//!    (what a log needs of the state store, as a trait);
//! 2. files: [`disk`], [`fsync`], [`segment`], [`segment_io`], and [`checkpoint`]
//!    (the encoding of segment states and the clean-shutdown checkpoint);
//! 3. the shard-wide parts a log uses: [`cache`] (the cache budget, reaching logs
//!    through a trait it defines) and [`journal`];
//! 4. [`log`], with its own operations as sub-modules (reads, writes and rolls,
//!    truncation, checkpoint snapshots);
//! 5. what is built on logs: [`recovery`] (opening), [`retention`], [`compaction`],
//!    [`flush`] (the shard's flush loop) and, on top, [`kv`] (the state store, itself
//!    a log written by the flush loop).

pub mod batch_filter;
pub mod cache;
pub mod checkpoint;
pub mod compaction;
pub mod disk;
pub mod error;
pub mod flush;
pub mod fsync;
pub mod join;
pub mod journal;
pub mod kv;
pub mod log;
pub mod producer_tail;
pub mod recovery;
pub mod retention;
pub mod segment;
pub mod segment_io;
pub mod signal;
pub mod state;
pub mod stats;
mod sync_log;

pub use compaction::{CompactionOutcome, CompactionPolicy};
pub use error::StorageError;
pub use log::{LogConfig, PartitionLog, ReadResult};
pub use recovery::OpenKind;
pub use retention::{RetentionOutcome, RetentionPolicy};
pub use signal::Signal;

/// Alignment of every O_DIRECT write and of the tail page kept in memory.
pub const PAGE: u64 = 4096;

/// Opens an existing non-empty file on the data device with a DMA read before any log
/// file is created, so glommio's one-time io_poll probe reads real data instead of
/// hitting EOF on a new file (which would make it mark the device pollable and fail
/// every later DMA read with EOPNOTSUPP).
pub async fn prime_dma_probe(data_dir: &std::path::Path) -> Result<(), StorageError> {
    let path = data_dir.join(".io-probe");
    let meta = std::fs::metadata(&path).ok();
    if meta.map(|m| m.len() < PAGE).unwrap_or(true) {
        std::fs::write(&path, vec![0u8; PAGE as usize]).map_err(|e| StorageError::io("write io probe", &path, e))?;
    }
    let file =
        glommio::io::DmaFile::open(&path).await.map_err(|e| StorageError::io("open io probe", &path, e.into()))?;
    file.read_at_aligned(0, PAGE as usize).await.map_err(|e| StorageError::io("read io probe", &path, e.into()))?;
    let _ = file.close().await;
    Ok(())
}
