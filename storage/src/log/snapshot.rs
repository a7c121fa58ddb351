//! Checkpoint snapshots: what lets a journaled log open after a crash without reading
//! its data.
//!
//! A journal checkpoint fsyncs every log's segment files and notes a [`Mark`] per log
//! (the journal position and where the segment files then end). Right at the instant
//! the checkpoint's flush takes a log's writes (the instant its mark describes), the
//! log's state is captured: each segment's size, offsets, timestamps and sparse index,
//! the epoch cache and the producers' recent batch headers. Once the `Checkpoint`
//! record is durable, the captures are written to the shard's state store
//! ([`crate::kv`]) under the partition's prefix:
//!
//! - `snapshot`: the mark's coordinates (active segment base, its size, next offset),
//!   the epoch cache, the producer tail, every sealed segment's (base, size) and the
//!   active segment's state;
//! - `sealed/<base>`: one sealed segment's state, written once, at the first
//!   checkpoint after it was sealed (a sealed segment never changes unless retention,
//!   compaction or truncation changes it, see below);
//! - `index/<base>/<n>`: a segment's sparse index in chunks of 64 entries; a segment's
//!   state above holds only the entries past its last full chunk. A full chunk never
//!   changes (until one of those three marks it stale), so it is written once.
//!
//! A checkpoint therefore writes, per log that changed since its last snapshot, its
//! `snapshot` entry (about 200 bytes, 61 per remembered producer batch, and at most 63
//! index entries of 24 bytes), the chunks its segments filled since (24 bytes per 4 KiB
//! of new data) and the state of each segment sealed since: bounded whatever the size
//! of the active segment (writing its whole index would cost up to 6 MiB per log and
//! checkpoint with 1 GiB segments). A log that did not change writes nothing. At 1,000
//! partitions each taking 64 KiB per checkpoint: 0.6–0.9 MiB per checkpoint.
//!
//! **At open after a crash** ([`crate::recovery`]), the log first cuts its files back
//! to its mark, then trusts the snapshot only if its coordinates equal the mark's and
//! the files are exactly the segments it lists, each of the size it says (a stat per
//! file, no data read); every sealed segment's `sealed/<base>` entry must be there with
//! that size, and every segment's index chunks must be there. It then restores that state and replays the journal records after the
//! mark as before. Anything else (no snapshot, another mark, a file of another size)
//! logs a warning and falls back to the full scan. Damage inside a segment that a
//! restore does not read is found when it is read: every batch read is CRC-checked and
//! a failing one is answered with an error, never served (as after a scan that found
//! it).
//!
//! **Why a snapshot can be trusted.** A snapshot describes the files as a checkpoint
//! fsynced them. Appends only add bytes after a mark (cut away at open, then replayed
//! from the journal), so they never make a snapshot wrong, only older: its coordinates
//! then differ from the next mark's and it is not used. Three things change files
//! below a mark: retention (removes sealed segments), compaction (rewrites one) and
//! truncation (cuts a segment, removes later ones; DeleteRecords only moves the log
//! start offset, kept in the `state` key, and its segments go by retention). Each calls
//! [`begin_file_change`] before it touches a file, which, under the store's snapshot
//! lock, bumps the log's generation, marks the change in progress, marks the sealed
//! entries and index chunks it will change stale, and deletes the `snapshot` key
//! durably. The ordering
//! argument:
//!
//! 1. The deletion is durable before any file changes, so a crash during or after the
//!    change finds no snapshot (a scan), until a later checkpoint writes a new one.
//! 2. A capture is skipped while a change is in progress, so a capture describes the
//!    files either before a change began or after it ended.
//! 3. A capture taken before a change began is written only if the log's generation
//!    is unchanged, checked under the snapshot lock in the same synchronous step that
//!    appends the write to the store; the change takes the same lock to bump the
//!    generation and append its deletion. So either the stale snapshot is appended
//!    before the deletion (which then removes it), or it is never written.
//! 4. A sealed entry or index chunk is written only in the same store batch (atomic)
//!    as a `snapshot` that lists its segment, and only after the change that made it
//!    stale ended (a stale segment's chunks are all rewritten); a `snapshot` lists a
//!    sealed segment with the size its entry was written with.
//! 5. Snapshots are written after their `Checkpoint` record is durable. A crash in
//!    between leaves the previous snapshot under a newer mark: its coordinates differ
//!    if the log changed (a scan), and describe the same files if it did not.
//!
//! The journal format is unchanged: a snapshot is tied to its checkpoint by the mark's
//! coordinates, which only appends (moving them forward) and the changes above
//! (which delete the snapshot first) can alter.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::{BufMut, Bytes};
use keel_protocol::batch::BatchHeader;

use crate::checkpoint::{
    get_epochs_and_producers, get_i64, get_segment_state, get_u32, put_epochs_and_producers, put_segment_state,
};
use crate::error::StorageError;
use crate::journal::Mark;
use crate::log::PartitionLog;
use crate::segment::{self, IndexEntry, Segment, SegmentState};
use crate::state::{StateKeys, StateStore};

/// Key (under the partition's prefix) of the log's state as of its last checkpoint.
pub const SNAPSHOT_KEY: &str = "snapshot";
/// Key prefix (under the partition's prefix) of sealed segments' states.
pub const SEALED_PREFIX: &str = "sealed/";
/// Key prefix (under the partition's prefix) of segments' index chunks:
/// `index/<base>/<chunk>`.
pub const INDEX_PREFIX: &str = "index/";
/// Index entries per chunk: 1.5 KiB, one chunk per 256 KiB or more of segment. A
/// checkpoint rewrites at most one partial chunk's worth of entries per log (in the
/// `snapshot` entry), whatever the size of the active segment.
const CHUNK_ENTRIES: usize = 64;
/// Bytes of snapshots written to the store in one batch (one journal pass); a log's
/// entries always go in one batch, so it may be larger.
const WRITE_BATCH_BYTES: usize = 4 << 20;
/// Format of the `snapshot` value.
const VERSION: u8 = 1;

type Log = Rc<RefCell<PartitionLog>>;

/// Where a mark says the segment files end: what ties a snapshot to a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Coords {
    pub segment_base: i64,
    pub segment_size: u64,
    pub next_offset: i64,
}

impl Coords {
    fn of(mark: &Mark) -> Coords {
        Coords { segment_base: mark.segment_base, segment_size: mark.segment_size, next_offset: mark.next_offset }
    }
}

/// A log's bookkeeping of its snapshot in the store.
#[derive(Debug, Default)]
pub(crate) struct SnapshotTracking {
    /// Bumped when a file change begins: captures taken before are not written.
    generation: u64,
    /// File changes in progress: no capture is taken while one runs.
    changing: u32,
    /// The coordinates of the snapshot in the store, when it is current.
    saved: Option<Coords>,
    /// Sealed segments with an entry in the store: base → size (`u64::MAX`: stale).
    sealed: BTreeMap<i64, u64>,
    /// Segments with full index chunks in the store: base → how many (0: rewrite all).
    chunks: BTreeMap<i64, usize>,
}

/// A log's state at the instant a checkpoint's flush took its writes.
pub(crate) struct Captured {
    keys: StateKeys,
    generation: u64,
    coords: Coords,
    /// Entries to put, named under the log's prefix: the `snapshot` value, new sealed
    /// entries and new full index chunks.
    puts: Vec<(String, Vec<u8>)>,
    /// Sealed entries of segments no longer sealed in the log.
    sealed_gone: Vec<i64>,
    /// Segments no longer in the log whose index chunks go.
    chunks_gone: Vec<i64>,
    /// Every sealed segment, as the snapshot lists them.
    sealed_all: Vec<(i64, u64)>,
    /// Every segment's full index chunks once written.
    chunks_all: Vec<(i64, usize)>,
}

/// What the `snapshot` key holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    coords: Coords,
    epochs: Vec<(i32, i64)>,
    /// Replayed to `on_batch` after a restore, as a scan would report them.
    pub(crate) producers: Vec<BatchHeader>,
    /// Sealed segments as (base offset, size). While the snapshot is in the store no
    /// file change has begun since it was captured, so these files are still so.
    pub(crate) sealed: Vec<(i64, u64)>,
    /// The active segment's state, its index holding only the entries past its full
    /// chunks, and how many index entries it has in all.
    active: SegmentState,
    active_entries: usize,
}

impl Snapshot {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + self.active.index.len() * 24 + self.producers.len() * 61);
        b.put_u8(VERSION);
        b.put_i64(self.coords.segment_base);
        b.put_u64(self.coords.segment_size);
        b.put_i64(self.coords.next_offset);
        put_epochs_and_producers(&mut b, &self.epochs, &self.producers);
        b.put_u32(self.sealed.len() as u32);
        for (base, size) in &self.sealed {
            b.put_i64(*base);
            b.put_u64(*size);
        }
        put_segment_state(&mut b, &self.active);
        b.put_u32(self.active_entries as u32);
        b
    }

    /// `None` if the body is short, of another version or inconsistent.
    pub(crate) fn decode(mut b: &[u8]) -> Option<Snapshot> {
        let (&version, rest) = b.split_first()?;
        if version != VERSION {
            return None;
        }
        b = rest;
        let segment_base = get_i64(&mut b)?;
        let segment_size = u64::try_from(get_i64(&mut b)?).ok()?;
        let coords = Coords { segment_base, segment_size, next_offset: get_i64(&mut b)? };
        let (epochs, producers) = get_epochs_and_producers(&mut b)?;
        let mut sealed = Vec::new();
        for _ in 0..get_u32(&mut b)? {
            sealed.push((get_i64(&mut b)?, u64::try_from(get_i64(&mut b)?).ok()?));
        }
        let active = get_segment_state(&mut b)?;
        let active_entries = get_u32(&mut b)? as usize;
        b.is_empty().then_some(Snapshot { coords, epochs, producers, sealed, active, active_entries })
    }
}

fn sealed_key(base: i64) -> String {
    format!("{SEALED_PREFIX}{base:020}")
}

fn chunks_prefix(base: i64) -> String {
    format!("{INDEX_PREFIX}{base:020}/")
}

fn chunk_key(base: i64, chunk: usize) -> String {
    format!("{}{chunk:08}", chunks_prefix(base))
}

/// A segment's state without the index entries of its full chunks (stored apart),
/// then how many entries its index has in all.
fn encode_segment(seg: &Segment) -> Vec<u8> {
    let full = seg.index.len() / CHUNK_ENTRIES * CHUNK_ENTRIES;
    let state = seg.state_with_index_from(full);
    let mut b = Vec::with_capacity(64 + state.index.len() * 24);
    put_segment_state(&mut b, &state);
    b.put_u32(seg.index.len() as u32);
    b
}

fn encode_chunk(entries: &[IndexEntry]) -> Vec<u8> {
    let mut b = Vec::with_capacity(entries.len() * 24);
    for e in entries {
        b.put_i64(e.offset);
        b.put_u64(e.position);
        b.put_i64(e.max_timestamp_so_far);
    }
    b
}

fn decode_chunk(mut b: &[u8], into: &mut Vec<IndexEntry>) -> Option<()> {
    if b.len() != CHUNK_ENTRIES * 24 {
        return None;
    }
    while !b.is_empty() {
        let (offset, position, ts) = (get_i64(&mut b)?, get_i64(&mut b)? as u64, get_i64(&mut b)?);
        into.push(IndexEntry { offset, position, max_timestamp_so_far: ts });
    }
    Some(())
}

impl PartitionLog {
    /// Captures the log's state for a checkpoint snapshot, at the instant `coords`
    /// describe (the checkpoint's flush just took every write). `None` when the log has
    /// no state keys, has not changed since its last snapshot, or is changing files.
    pub(crate) fn capture_snapshot(&self, coords: Coords) -> Option<Captured> {
        let keys = self.state_keys.clone()?;
        let t = &self.snapshot;
        if self.journal.is_none() || t.changing > 0 || t.saved == Some(coords) {
            return None;
        }
        let active = self.active();
        assert_eq!(
            (active.base_offset, active.size, self.next_offset),
            (coords.segment_base, coords.segment_size, coords.next_offset),
            "a snapshot is captured at its mark"
        );
        let sealed = &self.segments[..self.segments.len() - 1];
        let mut puts = Vec::new();
        let mut chunks_all = Vec::with_capacity(self.segments.len());
        for seg in &self.segments {
            let full = seg.index.len() / CHUNK_ENTRIES;
            let saved = t.chunks.get(&seg.base_offset).copied().unwrap_or(0).min(full);
            for n in saved..full {
                let entries = &seg.index[n * CHUNK_ENTRIES..(n + 1) * CHUNK_ENTRIES];
                puts.push((chunk_key(seg.base_offset, n), encode_chunk(entries)));
            }
            chunks_all.push((seg.base_offset, full));
        }
        for seg in sealed.iter().filter(|s| t.sealed.get(&s.base_offset) != Some(&s.size)) {
            puts.push((sealed_key(seg.base_offset), encode_segment(seg)));
        }
        let full = active.index.len() / CHUNK_ENTRIES * CHUNK_ENTRIES;
        let snapshot = Snapshot {
            coords,
            epochs: self.epochs.clone(),
            producers: self.producers.headers(),
            sealed: sealed.iter().map(|s| (s.base_offset, s.size)).collect(),
            active: active.state_with_index_from(full),
            active_entries: active.index.len(),
        };
        puts.push((SNAPSHOT_KEY.to_string(), snapshot.encode()));
        let in_log = |b: &i64| self.segments.iter().any(|s| s.base_offset == *b);
        Some(Captured {
            keys,
            generation: t.generation,
            coords,
            puts,
            sealed_gone: t.sealed.keys().copied().filter(|b| !sealed.iter().any(|s| s.base_offset == *b)).collect(),
            chunks_gone: t.chunks.keys().copied().filter(|b| !in_log(b)).collect(),
            sealed_all: snapshot.sealed,
            chunks_all,
        })
    }
}

/// Writes checkpoint captures to the state store, a few logs per store batch, each
/// log's entries in one batch. Call once their `Checkpoint` record is durable.
pub(crate) async fn write(captures: Vec<(Log, Captured)>) -> Result<(), StorageError> {
    let mut captures = captures.into_iter().peekable();
    while let Some(first) = captures.next() {
        let kv = first.1.keys.kv.clone();
        let mut group = vec![first];
        let mut bytes = group[0].1.bytes();
        while let Some(next) = captures.next_if(|(_, c)| bytes < WRITE_BATCH_BYTES && Rc::ptr_eq(&c.keys.kv, &kv)) {
            bytes += next.1.bytes();
            group.push(next);
        }
        write_group(&kv, group).await?;
        glommio::yield_if_needed().await;
    }
    Ok(())
}

impl Captured {
    fn bytes(&self) -> usize {
        self.puts.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

async fn write_group(kv: &Rc<dyn StateStore>, group: Vec<(Log, Captured)>) -> Result<(), StorageError> {
    let lock = kv.snapshot_lock();
    let _permit = lock.acquire_permit(1).await.expect("the snapshot lock is never closed");
    // From here to the store's append nothing awaits but the store's own roll, and a
    // file change needs this lock to begin: the generations checked are current.
    let group: Vec<_> = group.into_iter().filter(|(l, c)| l.borrow().snapshot.generation == c.generation).collect();
    let mut changes: Vec<(String, Option<Bytes>)> = Vec::new();
    for (_, c) in &group {
        for base in &c.sealed_gone {
            let key = c.keys.key(&sealed_key(*base));
            if kv.get(&key).is_some() {
                changes.push((key, None));
            }
        }
        for base in &c.chunks_gone {
            changes.extend(kv.keys_with_prefix(&c.keys.key(&chunks_prefix(*base))).into_iter().map(|k| (k, None)));
        }
        // Last: the `snapshot` entry that lists the others.
        changes.extend(c.puts.iter().map(|(name, v)| (c.keys.key(name), Some(Bytes::from(v.clone())))));
    }
    if changes.is_empty() {
        return Ok(());
    }
    let written: usize = changes.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len)).sum();
    let refs: Vec<(&str, Option<Bytes>)> = changes.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    kv.write(&refs).await?;
    for (log, c) in &group {
        let mut l = log.borrow_mut();
        let t = &mut l.snapshot;
        t.saved = Some(c.coords);
        for base in &c.sealed_gone {
            t.sealed.remove(base);
        }
        for base in &c.chunks_gone {
            t.chunks.remove(base);
        }
        t.sealed.extend(c.sealed_all.iter().copied());
        t.chunks.extend(c.chunks_all.iter().copied());
    }
    crate::stats::update(|s| {
        s.snapshots_written += group.len() as u64;
        s.snapshot_bytes_written += written as u64;
    });
    Ok(())
}

/// A file change below the last checkpoint's mark in progress; captures resume once
/// it is dropped.
pub(crate) struct FileChange {
    log: Log,
}

impl Drop for FileChange {
    fn drop(&mut self) {
        match self.log.try_borrow_mut() {
            Ok(mut l) => l.snapshot.changing -= 1,
            // Left marked as changing: the log takes no more snapshots (it scans at
            // the next crash) rather than risk a stale one.
            Err(_) => tracing::warn!("log busy when its file change ended; its snapshots stop"),
        }
    }
}

/// Makes the log's snapshot untrusted, durably, before retention, compaction or
/// truncation changes its files; `stale` says which sealed segments the change may
/// rewrite (removed ones are found by the next capture). Hold the returned guard
/// until the change is complete. Never call it holding the log's io lock: the store
/// write needs a journal pass, which may wait for a checkpoint, which needs that lock.
pub(crate) async fn begin_file_change(log: &Log, stale: impl Fn(i64) -> bool) -> Result<FileChange, StorageError> {
    let keys = log.borrow().state_keys.clone();
    let Some(keys) = keys else {
        log.borrow_mut().snapshot.changing += 1;
        return Ok(FileChange { log: log.clone() });
    };
    let lock = keys.kv.snapshot_lock();
    let _permit = lock.acquire_permit(1).await.expect("the snapshot lock is never closed");
    {
        let mut l = log.borrow_mut();
        let t = &mut l.snapshot;
        t.generation += 1;
        t.changing += 1;
        t.saved = None;
        for (base, size) in t.sealed.iter_mut() {
            if stale(*base) {
                *size = u64::MAX;
            }
        }
        for (base, chunks) in t.chunks.iter_mut() {
            if stale(*base) {
                *chunks = 0;
            }
        }
    }
    let change = FileChange { log: log.clone() };
    keys.kv.delete(&keys.key(SNAPSHOT_KEY)).await?;
    Ok(change)
}

/// Restores the log from its checkpoint snapshot if it was taken at `mark` and the
/// files (already cut back to the mark) are exactly the segments it lists. Reads no
/// data: one stat per segment file.
pub(crate) async fn restore(
    log: &mut PartitionLog,
    bases: &[i64],
    keys: &StateKeys,
    snapshot: &Snapshot,
    mark: &Mark,
) -> Result<bool, StorageError> {
    if snapshot.coords != Coords::of(mark)
        || snapshot.active.base_offset != mark.segment_base
        || snapshot.active.size != mark.segment_size
        || snapshot.sealed.iter().map(|(b, _)| *b).chain([snapshot.active.base_offset]).ne(bases.iter().copied())
    {
        return Ok(false);
    }
    let mut states = Vec::with_capacity(bases.len());
    for &(base, size) in &snapshot.sealed {
        let state = keys.kv.get(&keys.key(&sealed_key(base))).and_then(|b| {
            let mut b = &b[..];
            let state = get_segment_state(&mut b)?;
            let entries = get_u32(&mut b)? as usize;
            b.is_empty().then_some((state, entries))
        });
        match state {
            Some((s, entries)) if s.base_offset == base && s.size == size => states.push((s, entries)),
            _ => return Ok(false),
        }
    }
    states.push((snapshot.active.clone(), snapshot.active_entries));
    let mut chunks = BTreeMap::new();
    for (state, entries) in states.iter_mut() {
        // The index's full chunks are entries of their own, its tail is in the state.
        let full = *entries / CHUNK_ENTRIES;
        if state.index.len() != *entries - full * CHUNK_ENTRIES {
            return Ok(false);
        }
        let mut index = Vec::with_capacity(*entries);
        for n in 0..full {
            let chunk = keys.kv.get(&keys.key(&chunk_key(state.base_offset, n)));
            if chunk.and_then(|c| decode_chunk(&c, &mut index)).is_none() {
                return Ok(false);
            }
        }
        index.append(&mut state.index);
        state.index = index;
        chunks.insert(state.base_offset, full);
    }
    let states: Vec<SegmentState> = states.into_iter().map(|(s, _)| s).collect();
    let mut segments = Vec::with_capacity(states.len());
    for state in &states {
        let path = segment::segment_path(&log.dir, state.base_offset);
        let mut seg = Segment::open(path.clone(), state.base_offset).await?;
        let file_len = seg.file.file_size().await.map_err(|e| StorageError::io("stat", &path, e))?;
        if file_len != state.size {
            return Ok(false);
        }
        seg.restore(state);
        seg.preallocated = file_len;
        segments.push(seg);
        glommio::yield_if_needed().await;
    }
    log.segments = segments;
    log.next_offset = snapshot.coords.next_offset;
    log.epochs = snapshot.epochs.clone();
    for h in &snapshot.producers {
        log.producers.note(h);
    }
    log.snapshot.saved = Some(snapshot.coords);
    log.snapshot.sealed = snapshot.sealed.iter().copied().collect();
    log.snapshot.chunks = chunks;
    Ok(true)
}

/// After an open that did not restore a snapshot: every sealed entry in the store is
/// stale (the next capture rewrites the ones still in the log and deletes the others).
pub(crate) fn forget_saved(log: &mut PartitionLog, keys: &StateKeys) {
    let prefix = keys.key(SEALED_PREFIX);
    let sealed = keys.kv.keys_with_prefix(&prefix);
    log.snapshot.saved = None;
    log.snapshot.sealed =
        sealed.iter().filter_map(|k| k[prefix.len()..].parse::<i64>().ok()).map(|b| (b, u64::MAX)).collect();
    let prefix = keys.key(INDEX_PREFIX);
    let chunks = keys.kv.keys_with_prefix(&prefix);
    log.snapshot.chunks = chunks
        .iter()
        .filter_map(|k| k[prefix.len()..].split('/').next()?.parse::<i64>().ok())
        .map(|b| (b, 0))
        .collect();
}

/// Deletes the log's snapshot durably (its files are about to be replaced at open).
pub(crate) async fn delete(keys: &StateKeys) -> Result<(), StorageError> {
    keys.kv.delete(&keys.key(SNAPSHOT_KEY)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip_and_truncation() {
        let snapshot = Snapshot {
            coords: Coords { segment_base: 50, segment_size: 8192, next_offset: 99 },
            epochs: vec![(0, 0), (3, 50)],
            producers: Vec::new(),
            sealed: vec![(0, 4096)],
            active: SegmentState {
                base_offset: 50,
                size: 8192,
                next_offset: 99,
                max_timestamp: 5,
                max_timestamp_offset: 60,
                rolling_timestamp: 1,
                bytes_since_index: 100,
                index: vec![IndexEntry { offset: 50, position: 0, max_timestamp_so_far: 1 }],
            },
            active_entries: 65,
        };
        let body = snapshot.encode();
        assert_eq!(Snapshot::decode(&body), Some(snapshot));
        for cut in 0..body.len() {
            assert!(Snapshot::decode(&body[..cut]).is_none(), "cut at {cut} accepted");
        }
    }
}
