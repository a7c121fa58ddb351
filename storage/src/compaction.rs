//! Compaction (`cleanup.policy=compact`): in the closed, durable segments, only the
//! latest record of each key stays; tombstones (null values) go once older than
//! `delete.retention.ms`; records without a key go (Kafka refuses them on compacted
//! topics); control batches stay as they are. Offsets never change.
//!
//! One pass, as Kafka's cleaner: the dirty part (from the last pass's end to the last
//! closed segment old enough for `min.compaction.lag.ms`, and wholly below the last
//! stable offset) is read to build a map from
//! key hash to latest offset; then every segment from the log start to the end of what
//! the map covers is rewritten without the records a later one supersedes. The map has
//! a byte budget: when the dirty part has more keys than fit, the pass stops where the
//! map filled and the next pass continues from there. Hashes are 128-bit, keyed per
//! pass with random keys, so no producer can craft a collision that deletes another
//! key's latest value.
//!
//! **Transactions.** As Kafka's cleaner, a pass stops at the last stable offset (an
//! open transaction may still abort, so its records must supersede nothing), a record
//! of an aborted transaction supersedes nothing (else a read_committed reader would
//! lose the key's committed value), and aborted records themselves are removed. The
//! partition tells both through [`Transactions`]; markers stay.
//!
//! On a journaled log only segments wholly below the segment of the last checkpoint's
//! mark are rewritten: after a crash recovery cuts that segment back to the mark,
//! drops the later ones and replays the journal's copies of their records, which would
//! undo a rewrite there (a pass that needs more asks the journal for a checkpoint).
//!
//! A segment is rewritten to `<name>.cleaned`, fsynced, and renamed over the original
//! under the log's io lock, after checking the log still holds the same segment file
//! (a truncation may have replaced it meanwhile). Rename is atomic, so a crash leaves
//! the old or the new segment, and recovery removes a stray `.cleaned` file. Readers
//! holding the old file keep reading it. The work yields between batches and runs in
//! the caller's (low-share) task queue.

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::rc::Rc;

use bytes::Bytes;
use keel_protocol::batch::BatchHeader;

use crate::batch_filter::{self, RawRecord};
use crate::error::StorageError;
use crate::log::persist_state;
use crate::log::PartitionLog;
use crate::segment;
use crate::segment_io::{SegmentReader, SegmentWriter};

/// Bytes a key-map entry costs, hash table overhead included.
const KEY_MAP_ENTRY_BYTES: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionPolicy {
    /// Records younger than this (by segment max timestamp) are not compacted.
    pub min_compaction_lag_ms: i64,
    /// How long a tombstone stays readable after it is written.
    pub delete_retention_ms: i64,
    /// Compact only when dirty bytes / compactable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// Memory for the key map of one pass.
    pub key_map_bytes_max: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            min_compaction_lag_ms: 0,
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            key_map_bytes_max: 16 << 20,
        }
    }
}

/// What a pass must know of the partition's transactions.
#[derive(Debug, Clone, Default)]
pub struct Transactions {
    /// The last stable offset: records from here on may belong to an open transaction.
    pub stable_upto: i64,
    /// Aborted transactions by producer id: (first offset, abort marker offset).
    aborted: HashMap<i64, Vec<(i64, i64)>>,
}

impl Transactions {
    /// `aborted`: (producer id, first offset, marker offset) of each aborted transaction.
    pub fn new(stable_upto: i64, aborted: impl IntoIterator<Item = (i64, i64, i64)>) -> Transactions {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for (producer_id, first, marker) in aborted {
            by_producer.entry(producer_id).or_default().push((first, marker));
        }
        Transactions { stable_upto, aborted: by_producer }
    }

    /// A partition without transactions.
    pub fn none() -> Transactions {
        Transactions { stable_upto: i64::MAX, aborted: HashMap::new() }
    }

    fn aborted(&self, h: &BatchHeader) -> bool {
        h.is_transactional()
            && !h.is_control()
            && self
                .aborted
                .get(&h.producer_id)
                .is_some_and(|ranges| ranges.iter().any(|(first, marker)| (*first..*marker).contains(&h.base_offset)))
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionOutcome {
    /// Offsets below this are now compacted.
    pub cleaned_upto: i64,
    pub segments_rewritten: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
}

/// The part of the log one pass may touch.
struct Range {
    /// Segments [0, segment_count) are closed, durable and old enough.
    segment_count: usize,
    /// Base offset of the first segment not compactable.
    end: i64,
    first_dirty: i64,
    log_start: i64,
}

/// What may be compacted of `log`'s segments wholly below `bound`.
fn compactable(log: &PartitionLog, bound: i64, now_ms: i64, policy: &CompactionPolicy, force: bool) -> Option<Range> {
    let lag_limit = now_ms.saturating_sub(policy.min_compaction_lag_ms);
    let mut count = 0;
    for (i, seg) in log.segments.iter().enumerate() {
        let Some(next) = log.segments.get(i + 1) else {
            break;
        };
        if next.base_offset > bound || seg.max_timestamp > lag_limit {
            break;
        }
        count = i + 1;
    }
    let end = log.segments.get(count).map(|s| s.base_offset)?;
    let first_dirty = log.cleaned_upto.max(log.log_start_offset);
    if count == 0 || first_dirty >= end {
        return None;
    }
    let live = log.segments[..count]
        .iter()
        .enumerate()
        .filter(|(i, _)| log.segments[i + 1].base_offset > log.log_start_offset);
    let (mut total, mut dirty) = (0u64, 0u64);
    for (i, seg) in live {
        total += seg.size;
        if log.segments[i + 1].base_offset > first_dirty {
            dirty += seg.size;
        }
    }
    let ratio = if total == 0 { 0.0 } else { dirty as f64 / total as f64 };
    (force || ratio >= policy.min_cleanable_dirty_ratio).then_some(Range {
        segment_count: count,
        end,
        first_dirty,
        log_start: log.log_start_offset,
    })
}

/// Runs one compaction pass if enough of the log is dirty (always when `force`).
/// Returns `None` when there was nothing to do.
pub async fn compact(
    log: &Rc<RefCell<PartitionLog>>,
    now_ms: i64,
    policy: &CompactionPolicy,
    force: bool,
    txns: Transactions,
) -> Result<Option<CompactionOutcome>, StorageError> {
    let hw = log.borrow().cleanable_end().min(txns.stable_upto);
    if compactable(&log.borrow(), hw, now_ms, policy, force).is_none() {
        return Ok(None);
    }
    // Only segments a crash leaves as they are get rewritten
    // (`PartitionLog::rewritable_offset`): fsynced, and on a journaled log below its
    // last checkpoint's mark, from where recovery replays the journal. If the work
    // reaches past that, fsync the log's files, or ask the journal for a checkpoint.
    if compactable(&log.borrow(), log.borrow().rewritable_offset().min(txns.stable_upto), now_ms, policy, force)
        .is_none()
    {
        let journal = log.borrow().journal.as_ref().map(|j| j.journal.clone());
        match journal {
            Some(journal) => journal.checkpoint_soon().await,
            None => {
                crate::log::flush(log).await?;
            }
        }
    }
    let settled = log.borrow().rewritable_offset().min(txns.stable_upto);
    let Some(range) = compactable(&log.borrow(), settled, now_ms, policy, force) else {
        return Ok(None);
    };
    let map = KeyMap::build(log, &range, policy.key_map_bytes_max, txns).await?;
    let mut outcome = CompactionOutcome { cleaned_upto: map.covered_upto, ..Default::default() };
    let bases: Vec<i64> = log.borrow().segments[..range.segment_count].iter().map(|s| s.base_offset).collect();
    // The cleaned offset is durable before any segment is rewritten: a rewrite may end
    // a segment short of the next one's base, which recovery takes for a torn tail
    // unless it lies below the cleaned offset. A crash before the rewrites end leaves
    // older records of some keys there that later passes, whose maps cover only what
    // came after, do not remove: duplicates kept, never a record lost.
    {
        let mut l = log.borrow_mut();
        l.cleaned_upto = l.cleaned_upto.max(map.covered_upto);
    }
    persist_state(log).await?;
    for (i, base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied().unwrap_or(range.end);
        if next_base <= range.log_start {
            continue;
        }
        if *base >= map.covered_upto {
            break;
        }
        rewrite_segment(log, *base, &map, now_ms, policy, &mut outcome).await?;
    }
    if outcome.segments_rewritten > 0 {
        crate::stats::update(|s| {
            s.compaction_passes += 1;
            s.compaction_records_removed += outcome.records_removed;
            s.compaction_bytes_reclaimed += outcome.bytes_before.saturating_sub(outcome.bytes_after);
        });
    }
    Ok(Some(outcome))
}

/// Key hash → latest offset over the dirty range, up to `covered_upto`, of records
/// not aborted.
struct KeyMap {
    latest: HashMap<u128, i64>,
    hashers: (RandomState, RandomState),
    covered_upto: i64,
    txns: Transactions,
}

impl KeyMap {
    fn hash(&self, key: &[u8]) -> u128 {
        ((self.hashers.0.hash_one(key) as u128) << 64) | self.hashers.1.hash_one(key) as u128
    }

    async fn build(
        log: &Rc<RefCell<PartitionLog>>,
        range: &Range,
        bytes_max: usize,
        txns: Transactions,
    ) -> Result<KeyMap, StorageError> {
        let entries_max = (bytes_max / KEY_MAP_ENTRY_BYTES).max(1);
        let mut map = KeyMap {
            latest: HashMap::new(),
            hashers: (RandomState::new(), RandomState::new()),
            covered_upto: range.end,
            txns,
        };
        let readers: Vec<SegmentReader> = {
            let l = log.borrow();
            let segs = &l.segments[..range.segment_count];
            segs.iter()
                .enumerate()
                .filter(|(i, _)| l.segments[i + 1].base_offset > range.first_dirty)
                .map(|(_, s)| SegmentReader::new(s))
                .collect()
        };
        for mut reader in readers {
            while let Some((h, batch)) = reader.next().await? {
                if h.last_offset() < range.first_dirty || h.is_control() || map.txns.aborted(&h) {
                    continue;
                }
                let body = batch_filter::decompressed_body(&h, &batch).map_err(|r| corrupt(log, &h, r))?;
                let records = batch_filter::parse_records(&h, &body).map_err(|r| corrupt(log, &h, r))?;
                let fresh = records.iter().filter(|r| r.key.is_some()).count();
                if map.latest.len() + fresh > entries_max && h.base_offset > range.first_dirty {
                    // The map is full: this pass covers the dirty range up to here.
                    map.covered_upto = h.base_offset;
                    return Ok(map);
                }
                for r in records.iter().filter(|r| r.offset >= range.first_dirty) {
                    if let Some(key) = r.key {
                        let hash = map.hash(key);
                        map.latest.insert(hash, r.offset);
                    }
                }
                glommio::yield_if_needed().await;
            }
        }
        Ok(map)
    }

    /// Kafka's rule: a record stays if it is past what the map covers, or it is the
    /// latest of its key and not an expired tombstone.
    fn keeps(&self, r: &RawRecord<'_>, now_ms: i64, delete_retention_ms: i64) -> bool {
        if r.offset >= self.covered_upto {
            return true;
        }
        let Some(key) = r.key else { return false };
        let superseded = self.latest.get(&self.hash(key)).map(|&latest| latest > r.offset).unwrap_or(false);
        let expired_tombstone = r.value.is_none() && r.timestamp.saturating_add(delete_retention_ms) <= now_ms;
        !superseded && !expired_tombstone
    }
}

fn corrupt(log: &Rc<RefCell<PartitionLog>>, h: &BatchHeader, reason: String) -> StorageError {
    let path = log.borrow().dir.clone();
    tracing::error!(path = %path.display(), offset = h.base_offset, %reason, "undecodable batch stops compaction");
    StorageError::Corrupt { path, position: 0, reason }
}

/// Rewrites the segment based at `base` without the records `map` supersedes, and
/// swaps it in. Leaves the segment untouched when nothing in it would go.
async fn rewrite_segment(
    log: &Rc<RefCell<PartitionLog>>,
    base: i64,
    map: &KeyMap,
    now_ms: i64,
    policy: &CompactionPolicy,
    outcome: &mut CompactionOutcome,
) -> Result<(), StorageError> {
    let (original, path, interval, mut reader) = {
        let l = log.borrow();
        let Some(seg) = l.segments.iter().find(|s| s.base_offset == base) else {
            return Ok(());
        };
        (Rc::clone(&seg.file), seg.path.clone(), l.config.index_interval_bytes, SegmentReader::new(seg))
    };
    let cleaned_path = cleaned_path(&path);
    let mut writer = SegmentWriter::create(cleaned_path.clone(), base, interval).await?;
    let (mut removed, mut before) = (0u64, 0u64);
    while let Some((h, batch)) = reader.next().await? {
        before += batch.len() as u64;
        match filter_batch(log, map, &h, &batch, now_ms, policy)? {
            Filtered::Unchanged => writer.push(&h, &batch).await?,
            Filtered::Rebuilt(b, n) => {
                removed += n;
                let nh = keel_protocol::batch::validate(&b).map_err(|e| corrupt(log, &h, e.to_string()))?;
                writer.push(&nh, &b).await?;
            }
            Filtered::Dropped(n) => removed += n,
        }
        glommio::yield_if_needed().await;
    }
    if removed == 0 && writer.size() == before {
        writer.abandon().await;
        return Ok(());
    }
    let mut rebuilt = writer.finish().await?;
    let _change = crate::log::snapshot::begin_file_change(log, |b| b == base).await?;
    let lock = log.borrow().io_lock();
    let permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    let still_there =
        log.borrow().segments.iter().position(|s| s.base_offset == base && Rc::ptr_eq(&s.file, &original));
    let Some(i) = still_there else {
        drop(permit);
        segment::release_file(rebuilt.file, Some(&cleaned_path)).await;
        return Ok(());
    };
    let after = rebuilt.size;
    // An emptied segment goes altogether, unless it is the first: its name keeps the
    // log start offset across restarts. The offsets it held stay unused.
    let remove = after == 0 && i > 0;
    {
        // Cached copies of the rewritten batches would serve what compaction removed.
        let mut l = log.borrow_mut();
        let seg_end = l.segments.get(i + 1).map(|s| s.base_offset).unwrap_or(i64::MAX);
        l.drop_cached_below(seg_end);
    }
    let old = if remove {
        let old = log.borrow_mut().segments.remove(i);
        segment::release_file(rebuilt.file, Some(&cleaned_path)).await;
        crate::disk::remove(&path, "remove emptied segment").await?;
        old
    } else {
        crate::disk::rename(&cleaned_path, &path, "rename cleaned segment").await?;
        rebuilt.path = path.clone();
        std::mem::replace(&mut log.borrow_mut().segments[i], rebuilt)
    };
    drop(permit);
    let dir = log.borrow().dir.clone();
    crate::disk::sync_dir(&dir).await?;
    tracing::info!(path = %path.display(), before, after, removed, "compacted segment");
    segment::release_file(old.file, None).await;
    outcome.segments_rewritten += 1;
    outcome.bytes_before += before;
    outcome.bytes_after += after;
    outcome.records_removed += removed;
    Ok(())
}

enum Filtered {
    Unchanged,
    /// The rebuilt batch and how many records left it.
    Rebuilt(Bytes, u64),
    Dropped(u64),
}

fn filter_batch(
    log: &Rc<RefCell<PartitionLog>>,
    map: &KeyMap,
    h: &BatchHeader,
    batch: &Bytes,
    now_ms: i64,
    policy: &CompactionPolicy,
) -> Result<Filtered, StorageError> {
    if h.is_control() || h.base_offset >= map.covered_upto || h.records_count == 0 {
        return Ok(Filtered::Unchanged);
    }
    let body = batch_filter::decompressed_body(h, batch).map_err(|r| corrupt(log, h, r))?;
    let records = batch_filter::parse_records(h, &body).map_err(|r| corrupt(log, h, r))?;
    let aborted = map.txns.aborted(h);
    let kept: Vec<RawRecord<'_>> =
        records.iter().filter(|r| !aborted && map.keeps(r, now_ms, policy.delete_retention_ms)).copied().collect();
    let removed = (records.len() - kept.len()) as u64;
    if removed == 0 {
        return Ok(Filtered::Unchanged);
    }
    if kept.is_empty() && !(h.has_producer_id() && log.borrow().producers.is_recent(h.producer_id, h.base_offset)) {
        return Ok(Filtered::Dropped(removed));
    }
    let rebuilt = batch_filter::rebuild(h, batch, &kept).map_err(|r| corrupt(log, h, r))?;
    Ok(Filtered::Rebuilt(rebuilt, removed))
}

fn cleaned_path(path: &std::path::Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".cleaned");
    path.with_file_name(name)
}
