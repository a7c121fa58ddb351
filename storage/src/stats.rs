//! Storage counters of the current shard, for the broker's `/metrics`.
//!
//! A shard is one thread and owns its logs, so the counters are thread-local cells:
//! no atomics, no sharing, and each shard reports its own.

use std::cell::Cell;

/// A snapshot of one shard's storage counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Segments deleted by retention (time, size or log start offset).
    pub retention_segments_deleted: u64,
    pub retention_bytes_deleted: u64,
    /// Compaction passes that rewrote at least one segment, and what they removed.
    pub compaction_passes: u64,
    pub compaction_records_removed: u64,
    pub compaction_bytes_reclaimed: u64,
    /// Batches that failed their CRC (or framing) when read; never served.
    pub corrupt_batches_read: u64,
    /// Segments cut short at open because their tail was torn.
    pub recovery_truncations: u64,
    /// Segments found at open with a damaged batch inside the log (kept, not served).
    pub damaged_segments_found: u64,
    /// Logs opened from a clean-shutdown checkpoint / by scanning.
    pub opens_clean: u64,
    pub opens_scanned: u64,
    /// Logs opened after a crash from their last checkpoint's snapshot.
    pub opens_snapshot: u64,
    /// Checkpoint snapshots written to the state store, and their bytes (keys and
    /// values: the active segments' states, sealed segments' states, producer tails).
    pub snapshots_written: u64,
    pub snapshot_bytes_written: u64,
    /// Every byte the shard's storage wrote (journal, segment files, state store,
    /// zeros written ahead).
    pub disk_bytes_written: u64,
    /// Bytes written to segment files (whole pages, the state store's included), and
    /// of those, the ones a checkpoint wrote (tails not yet a whole page).
    pub segment_bytes_written: u64,
    pub checkpoint_segment_bytes_written: u64,
    /// Checkpoints' fsyncs of segment files: one file each, or one file system each
    /// (`syncfs`, taking every file a checkpoint wrote in a data directory at once).
    pub checkpoint_file_syncs: u64,
    pub checkpoint_file_system_syncs: u64,
    /// Logs a checkpoint fsynced in whole pages only, leaving the rest to the journal;
    /// and at open, such tails written back from the journal, or (the journal not
    /// holding one whole) recovered by replaying from the tail.
    pub checkpoint_tails_left: u64,
    pub tails_written_back: u64,
    pub tails_replayed: u64,
    /// Journal files recovery read at open, and their bytes.
    pub journal_files_read: u64,
    pub journal_bytes_read: u64,
    /// Disk reads served from data read ahead for a consumer reading in order.
    pub read_ahead_hits: u64,
    /// Reads answered from the batch cache, and reads that had to go to the segment
    /// files (the batch cache's hit rate is hits / (hits + misses)).
    pub cache_hits: u64,
    pub cache_misses: u64,
}

thread_local! {
    static STATS: Cell<StorageStats> = Cell::new(StorageStats::default());
}

/// This shard's counters.
pub fn snapshot() -> StorageStats {
    STATS.with(Cell::get)
}

pub(crate) fn update(f: impl FnOnce(&mut StorageStats)) {
    STATS.with(|s| {
        let mut v = s.get();
        f(&mut v);
        s.set(v);
    });
}
