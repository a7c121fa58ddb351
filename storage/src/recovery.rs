//! Opening a log: the recovery scan, the clean-shutdown checkpoint after a clean stop,
//! or a journaled log's checkpoint snapshot after a crash; and `close`, which writes
//! the clean-shutdown checkpoint.
//!
//! **The scan** checks every segment and every batch's CRC. A torn, zeroed or corrupt
//! batch with no valid data after it in later segments is a torn write: the log is
//! truncated there (later segments hold only data never acknowledged, since a flush
//! syncs all files before the durable offset moves). When a later segment does start
//! with a valid batch, the bad batch was fsynced before it (the flush loop syncs a
//! sealed segment before writing the next), so it is damage on disk, not a torn write:
//! it is reported (error log, `damaged_segments_found`) and kept; reads reaching it
//! fail their CRC check and are answered with an error, and everything else stays
//! served. It costs time proportional to the whole log (10 GiB: 7–12 s).
//!
//! **After a clean stop**, `close` flushes, then records each segment's size, offsets,
//! timestamps and sparse index, the epoch cache and the producers' recent batch headers
//! under the partition's `clean` key in the shard's state store ([`crate::kv`]); the
//! next open checks the files still have exactly those sizes, restores that state
//! without reading a byte of data, and deletes the key (durably) before the log can
//! change, so a later crash never trusts a stale one. Start-up then costs one stat per
//! segment.
//!
//! **After a crash**, a journaled log ([`PartitionLog::open_journaled`]) first cuts its
//! files back to the last journal checkpoint's mark (what was written after it was
//! never fsynced). If the state store holds the log's checkpoint snapshot taken at that
//! mark ([`crate::log::snapshot`]) and the files are exactly the segments it lists, with the
//! sizes it says, the log is restored from it without reading data (`OpenKind::Snapshot`,
//! `opens_snapshot`); the producers' recent batch headers it holds go to `on_batch` as a
//! scan would report them. Otherwise (no snapshot, one taken at another mark, a file of
//! another size) a warning is logged and the log is scanned. Either way the journal
//! records after the mark are then replayed and what they added is fsynced, so a
//! crash-restart costs one stat per segment plus the journal since the last
//! checkpoint (at most `journal_file_bytes`, 64 MiB, per shard, or twice that when the
//! checkpoint left logs' tails in the interval before it), not the log's size.
//! A restore reads no batch, so damage inside a sealed segment is not found at open:
//! it is found when read, where every batch's CRC is checked and a failing one is
//! answered with an error, never served, exactly as after a scan that found it
//! ([`crate::log::verify`] reads a whole log so, for a broker's replica scrub).
//!
//! A log opened without state keys (the state store's own log) always scans.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use keel_protocol::batch::BatchHeader;

use crate::checkpoint::{CleanState, PartitionState, CLEAN_KEY, STATE_KEY};
use crate::error::StorageError;
use crate::fsync::sync_or_die;
use crate::journal::{Journal, LogJournal, LogRecovery, Mark, Record};
use crate::log::snapshot::{self, Snapshot, SNAPSHOT_KEY};
use crate::log::{self, note_epoch, LogConfig, PartitionLog};
use crate::segment::{self, Segment};
use crate::state::StateKeys;
use crate::PAGE;

/// How a log was opened, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    /// Restored from the clean-shutdown checkpoint without scanning.
    Clean,
    /// Every segment scanned.
    Scanned,
    /// After a crash, restored from the last journal checkpoint's snapshot without
    /// scanning (then the journal's records after it were replayed).
    Snapshot,
}

impl PartitionLog {
    /// Opens (recovering) or creates the log in `dir`. `on_batch` sees every valid
    /// batch after a scan, or, after a clean shutdown, each producer's recent batches
    /// (enough to rebuild idempotent-producer state).
    /// `state` says where the log's small state lives (log start offset, cleaner
    /// position, clean-shutdown checkpoint); without it none is read or kept.
    pub async fn open(
        dir: &Path,
        config: LogConfig,
        state: Option<StateKeys>,
        on_batch: impl FnMut(&BatchHeader),
    ) -> Result<PartitionLog, StorageError> {
        Ok(PartitionLog::open_reporting(dir, config, state, on_batch).await?.0)
    }

    /// `open`, also telling whether the clean-shutdown checkpoint was used.
    pub async fn open_reporting(
        dir: &Path,
        config: LogConfig,
        keys: Option<StateKeys>,
        on_batch: impl FnMut(&BatchHeader),
    ) -> Result<(PartitionLog, OpenKind), StorageError> {
        PartitionLog::open_at_mark(dir, config, keys, None, None, on_batch).await
    }

    /// `open_reporting` for a journaled log whose files were cut back to `mark`: its
    /// checkpoint snapshot, if taken at that mark, spares the scan. `mark_end` is where
    /// the files must end, when nothing since the mark may have cut them shorter.
    async fn open_at_mark(
        dir: &Path,
        config: LogConfig,
        keys: Option<StateKeys>,
        mark: Option<Mark>,
        mark_end: Option<i64>,
        mut on_batch: impl FnMut(&BatchHeader),
    ) -> Result<(PartitionLog, OpenKind), StorageError> {
        let bases = list_segments(dir).await?;
        let saved = |name: &str| keys.as_ref().and_then(|k| k.kv.get(&k.key(name)));
        let state = saved(STATE_KEY).and_then(|b| PartitionState::decode(&b)).unwrap_or_default();
        let clean = saved(CLEAN_KEY).and_then(|b| CleanState::decode(&b));
        let clean_end = clean.as_ref().map(|c| c.next_offset);
        let mut log = PartitionLog::empty(dir, config);
        log.state_keys = keys.clone();
        let mut kind = OpenKind::Scanned;
        // Segments a checkpoint recorded, as (base offset, size), that nothing may
        // have changed since: when a restore fails, a file shorter than recorded was
        // cut while the node was down.
        let mut recorded: Vec<(i64, u64)> = Vec::new();
        let crash_snapshot = match (&clean, mark, &keys) {
            (None, Some(mark), Some(k)) => saved(SNAPSHOT_KEY).map(|b| (Snapshot::decode(&b), mark, k)),
            _ => None,
        };
        // While the snapshot is in the store no file change (retention, compaction, a
        // truncation) began since it was taken, each deleting it first: only then must
        // the files still reach the mark's end.
        let mark_end = mark_end.filter(|_| crash_snapshot.is_some());
        if let Some((snap, mark, k)) = crash_snapshot {
            let restored = match &snap {
                Some(snap) => snapshot::restore(&mut log, &bases, k, snap, &mark).await?,
                None => false,
            };
            match snap {
                Some(snap) if restored => {
                    kind = OpenKind::Snapshot;
                    snap.producers.iter().for_each(&mut on_batch);
                }
                _ => {
                    recorded = snap.map(|s| s.sealed).unwrap_or_default();
                    // A truncation journaled after the mark moved the mark down to its
                    // cut, and the files were cut there: a snapshot taken after the
                    // truncation (its record written again by the next pass, after
                    // the snapshot's mark) recorded those segments longer. Only the
                    // segments below the cut must still be as recorded.
                    if mark_end.is_none() {
                        recorded.retain(|(base, _)| *base < mark.segment_base);
                    }
                    tracing::warn!(dir = %dir.display(), "checkpoint snapshot does not match the files; scanning");
                    log = PartitionLog::empty(dir, log.config.clone());
                    log.state_keys = keys.clone();
                }
            }
        }
        if let Some(clean) = clean {
            if let Some(k) = &keys {
                k.kv.delete(&k.key(CLEAN_KEY)).await?;
            }
            if restore_clean(&mut log, &bases, &clean).await? {
                kind = OpenKind::Clean;
                for h in &clean.producers {
                    log.producers.note(h);
                    on_batch(h);
                }
            } else {
                recorded = clean.segments.iter().map(|s| (s.base_offset, s.size)).collect();
                tracing::warn!(dir = %dir.display(), "clean-shutdown checkpoint does not match the files; scanning");
                log = PartitionLog::empty(dir, log.config.clone());
            }
        }
        if kind == OpenKind::Scanned {
            scan_all(&mut log, &bases, state.cleaned_upto, &mut on_batch).await?;
            // What the checkpoint recorded was fsynced: a shorter log lost it, unless
            // what is missing lies below the log start (retention or DeleteRecords
            // removed the segments holding it, and the mark's with them).
            let durable_end = clean_end.or(mark_end).filter(|end| *end > state.log_start_offset);
            let why = match durable_end.filter(|end| log.next_offset < *end) {
                Some(end) => Some(format!(
                    "the log ends at {} before its checkpoint's end {end}: a segment was cut short",
                    log.next_offset
                )),
                None => shorter_than_recorded(dir, &bases, &recorded, state.log_start_offset).await?,
            };
            if let Some(why) = why {
                durable_records_missing(&mut log, why);
            }
        }
        if kind != OpenKind::Snapshot {
            if let Some(k) = &keys {
                snapshot::forget_saved(&mut log, k);
            }
        }
        if log.segments.is_empty() {
            // The new file's name must survive a power loss as its data will.
            log.segments.push(Segment::create(dir, state.log_start_offset.max(0)).await?);
            crate::disk::sync_dir(dir).await?;
            log.next_offset = state.log_start_offset.max(0);
        }
        log.log_start_offset = log.segments[0].base_offset;
        log.cleaned_upto = state.cleaned_upto;
        if state.log_start_offset > log.next_offset {
            // The checkpoint says records up to there were deleted, but recovery lost
            // even more: start empty where the deletions ended, as Kafka does.
            tracing::warn!(dir = %dir.display(), start = state.log_start_offset, end = log.next_offset,
                "log start offset past the recovered end; starting empty there");
            if let Some(k) = &keys {
                snapshot::delete(k).await?;
            }
            start_empty_at(&mut log, state.log_start_offset).await?;
        }
        log.advance_start(state.log_start_offset.min(log.next_offset));
        log.mark_all_durable(None);
        log.load_tail().await?;
        // Counted for partitions only: the state store's own log always scans.
        if keys.is_some() {
            crate::stats::update(|s| match kind {
                OpenKind::Clean => s.opens_clean += 1,
                OpenKind::Scanned => s.opens_scanned += 1,
                OpenKind::Snapshot => s.opens_snapshot += 1,
            });
        }
        Ok((log, kind))
    }
}

impl PartitionLog {
    /// Opens the log in `dir` as one of the shard journal's logs, named `key` in its
    /// records: cuts the segment files back to the last checkpoint's mark, opens
    /// them, then replays the journal's records for the log (see [`crate::journal`]).
    /// Replayed data is written to the segment files and fsynced before this returns.
    pub async fn open_journaled(
        dir: &Path,
        mut config: LogConfig,
        keys: Option<StateKeys>,
        journal: &Rc<Journal>,
        key: Bytes,
        mut on_batch: impl FnMut(&BatchHeader),
    ) -> Result<(PartitionLog, OpenKind), StorageError> {
        // Segment files are fsynced only at checkpoints: zeros written ahead of them
        // would buy nothing.
        config.preallocate_step_bytes = 0;
        let mut found = journal.take_recovered(&key);
        let clean = keys.as_ref().is_some_and(|k| k.kv.get(&k.key(CLEAN_KEY)).is_some());
        let had_segments = !list_segments(dir).await?.is_empty();
        if !clean {
            crate::journal::tail::restore(dir, &mut found).await?;
            mark_below_truncations(dir, &mut found, config.index_interval_bytes).await?;
            cut_to_mark(dir, &found).await?;
        }
        let mark = if clean || found.created { None } else { found.mark };
        // A truncation after the mark cut the files legitimately (so may one whose
        // journal record was not yet written; `open_at_mark` then finds no snapshot).
        let truncated = found.records.iter().any(|r| matches!(r, Record::Truncate { .. }));
        let mark_end = mark.filter(|_| !truncated).map(|m| m.next_offset);
        let (log, kind) = PartitionLog::open_at_mark(dir, config, keys, mark, mark_end, &mut on_batch).await?;
        let log = Rc::new(RefCell::new(log));
        let start = log.borrow().log_start_offset;
        // The journal must say a log it knows nothing of holds nothing, or a recovery
        // would trust its files as durable. That is so of a new log, and of an empty
        // one at offset 0 (created before a crash that came before its first batch;
        // one at a later offset may have a segment past the start the state store
        // keeps, where a `Create` replay would not put it).
        let pending_create = found.is_empty() && (!had_segments || log.borrow().next_offset == 0);
        // The log is not journaled while it replays: what it replays is in the journal
        // already, so a replayed truncation must not be recorded again (a later restart
        // would replay that copy after data appended since, and cut it).
        let replayed = replay(&log, found.records, &mut on_batch).await?;
        if replayed > 0 {
            tracing::info!(dir = %dir.display(), records = replayed, "journal replayed");
            log::flush(&log).await?;
        }
        // A replayed truncation at or below the log start restarts the log there (and
        // says so in the state store), but the start may have moved past it since
        // (DeleteRecords after the truncation): the log start never goes back.
        let end = log.borrow().next_offset;
        if log.borrow_mut().advance_start(start.min(end)) {
            crate::log::persist_state(&log).await?;
        }
        let mut l = Rc::try_unwrap(log).ok().expect("nothing else holds a log being opened").into_inner();
        l.mark_all_durable(found.mark.map(|m| m.high_watermark));
        l.checkpointed_base = found.mark.map_or(0, |m| m.segment_base);
        l.journal = Some(LogJournal {
            journal: journal.clone(),
            key,
            journaled_offset: l.next_offset,
            pending_truncate: None,
            pending_create,
            unsynced: Vec::new(),
            in_pass: false,
            records: Default::default(),
        });
        Ok((l, kind))
    }

    /// Appends a batch read back from the journal, keeping its offsets.
    fn append_replayed(&mut self, batch: &[u8], header: &BatchHeader) {
        assert!(header.base_offset >= self.next_offset, "replayed batches come in offset order");
        if header.base_offset > self.next_offset {
            tracing::warn!(dir = %self.dir.display(), from = self.next_offset, to = header.base_offset,
                "journal replay skips missing offsets");
            self.next_offset = header.base_offset;
        }
        self.append(batch, header.partition_leader_epoch, None);
    }
}

/// Cuts a journaled log's files back to what the last checkpoint fsynced: bytes after
/// the mark were written without an fsync and may be torn or missing; the journal
/// holds them. A log created after the checkpoint loses every file.
async fn cut_to_mark(dir: &Path, found: &LogRecovery) -> Result<(), StorageError> {
    if !found.created && found.mark.is_none() {
        return Ok(());
    }
    let mut removed = false;
    for base in list_segments(dir).await? {
        let path = segment::segment_path(dir, base);
        match found.mark {
            Some(mark) if !found.created && base < mark.segment_base => {}
            Some(mark) if !found.created && base == mark.segment_base => {
                let seg = Segment::open(path.clone(), base).await?;
                let size = seg.file.file_size().await.map_err(|e| StorageError::io("stat", &path, e))?;
                if size > mark.segment_size {
                    seg.file.truncate(mark.segment_size).await.map_err(|e| StorageError::io("truncate", &path, e))?;
                    sync_or_die(&seg.file, &path).await;
                } else if size < mark.segment_size {
                    tracing::error!(path = %path.display(), size, expected = mark.segment_size,
                        "segment shorter than its checkpoint said");
                }
            }
            _ => {
                remove_file(&path).await?;
                removed = true;
            }
        }
    }
    if removed {
        crate::disk::sync_dir(dir).await?;
    }
    Ok(())
}

/// Moves the mark below the truncations after it. A truncation that cut below the mark
/// (its record is durable before it cuts a file) may have removed the mark's segment,
/// cut others and created newer ones that were never fsynced: the files are cut at the
/// lowest such truncation instead, where they are durable (below the mark), and the
/// replay applies the truncations again.
async fn mark_below_truncations(dir: &Path, found: &mut LogRecovery, interval: u64) -> Result<(), StorageError> {
    let Some(mark) = found.mark.filter(|_| !found.created) else { return Ok(()) };
    let truncations = found.records.iter().filter_map(|r| match r {
        Record::Truncate { offset, .. } => Some(*offset),
        _ => None,
    });
    let Some(cut) = truncations.min().filter(|t| *t < mark.next_offset) else { return Ok(()) };
    let holding = list_segments(dir).await?.into_iter().filter(|b| *b <= cut && *b <= mark.segment_base).max();
    let (segment_base, segment_size, next_offset) = match holding {
        None => (cut, 0, cut),
        Some(base) => {
            let mut seg = Segment::open(segment::segment_path(dir, base), base).await?;
            let (mut size, mut next, mut past) = (0, base, false);
            seg.scan(interval, |h, bytes| {
                past |= h.last_offset() >= cut;
                if !past {
                    size += bytes.len() as u64;
                    next = h.last_offset() + 1;
                }
            })
            .await?;
            let _ = seg.file.close_rc().await;
            (base, size, next)
        }
    };
    tracing::info!(dir = %dir.display(), cut, "a truncation after the last checkpoint cut below it: recovering from the cut");
    found.mark = Some(Mark {
        segment_base,
        segment_size,
        next_offset,
        high_watermark: mark.high_watermark.min(next_offset),
        ..mark
    });
    Ok(())
}

/// Replays a log's journal records; returns how many changed it.
async fn replay(
    log: &Rc<RefCell<PartitionLog>>,
    records: Vec<Record>,
    on_batch: &mut impl FnMut(&BatchHeader),
) -> Result<usize, StorageError> {
    let mut changed = 0;
    for record in records {
        match record {
            Record::Data { batches: chunks, .. } => {
                for chunk in chunks {
                    let batches = keel_protocol::batch::split_and_validate(&chunk)
                        .map_err(|e| corrupt_journal(log, &format!("a journal record holds a bad batch: {e}")))?;
                    for (header, batch) in batches {
                        if header.base_offset < log.borrow().next_offset {
                            continue;
                        }
                        log::roll_if_needed(log, batch.len()).await?;
                        log.borrow_mut().append_replayed(&batch, &header);
                        on_batch(&header);
                        changed += 1;
                    }
                }
            }
            Record::Truncate { offset, .. } => {
                crate::log::truncate(log, offset).await?;
                changed += 1;
            }
            Record::Create { .. } | Record::Checkpoint { .. } | Record::Pass { .. } => {}
        }
    }
    Ok(changed)
}

fn corrupt_journal(log: &Rc<RefCell<PartitionLog>>, reason: &str) -> StorageError {
    StorageError::Corrupt { path: log.borrow().dir.clone(), position: 0, reason: reason.to_string() }
}

/// Removes a segment file on glommio's blocking thread.
async fn remove_file(path: &Path) -> Result<(), StorageError> {
    crate::disk::remove(path, "remove segment").await
}

/// Creates `dir` if needed and lists its segments' base offsets, removing the output
/// of a compaction that never completed; on glommio's blocking thread, off the reactor.
async fn list_segments(dir: &Path) -> Result<Vec<i64>, StorageError> {
    let mut bases = Vec::new();
    for name in crate::disk::create_and_list(dir, "list log dir").await? {
        if let Some(base) = segment::parse_segment_name(&name) {
            bases.push(base);
        } else if name.ends_with(".cleaned") {
            remove_file(&dir.join(name)).await?;
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

async fn scan_all(
    log: &mut PartitionLog,
    bases: &[i64],
    cleaned_upto: i64,
    on_batch: &mut impl FnMut(&BatchHeader),
) -> Result<(), StorageError> {
    let mut torn = false;
    for (i, &base) in bases.iter().enumerate() {
        let path = segment::segment_path(&log.dir, base);
        if torn {
            tracing::error!(path = %path.display(), "removing segment written after a torn one");
            remove_file(&path).await?;
            continue;
        }
        let mut seg = Segment::open(path.clone(), base.max(log.next_offset)).await?;
        let (epochs, producers) = (&mut log.epochs, &mut log.producers);
        let outcome = seg
            .scan(log.config.index_interval_bytes, |h, _| {
                note_epoch(epochs, h);
                producers.note(h);
                on_batch(h);
            })
            .await?;
        let file_len = seg.file.file_size().await.map_err(|e| StorageError::io("stat", &path, e))?;
        let rot = match &outcome.stopped {
            Some(_) => later_segment_has_data(&log.dir, &bases[i + 1..]).await?,
            None => false,
        };
        if let Some(reason) = outcome.stopped {
            if rot {
                // Written and fsynced before later data: this is damage, not a torn
                // write. Keep the bytes; reads reaching them fail their CRC check.
                crate::stats::update(|s| s.damaged_segments_found += 1);
                tracing::error!(path = %path.display(), position = outcome.valid_len, %reason,
                    "damaged batch inside the log: it and the rest of this segment are not served");
                seg.size = file_len;
                seg.written_size = file_len;
            } else if outcome.zero_tail {
                // Zero fill written ahead of the data: the log simply ends here.
                tracing::debug!(path = %path.display(), valid_len = outcome.valid_len, "log ends before its zero fill");
                torn = true;
            } else {
                crate::stats::update(|s| s.recovery_truncations += 1);
                tracing::warn!(path = %path.display(), valid_len = outcome.valid_len, %reason,
                    "log recovery truncates at the last valid batch");
                torn = true;
            }
        }
        if !rot && file_len != outcome.valid_len {
            seg.file.truncate(outcome.valid_len).await.map_err(|e| StorageError::io("truncate", &path, e))?;
            sync_or_die(&seg.file, &path).await;
        }
        // A segment ending before the next one's base lost its last batches, unless
        // compaction removed them: a roll makes the next file's name durable at once,
        // while the batches before it reach the disk at the next fsync (on a journaled
        // log, the next checkpoint). With no data after it, that is a torn tail; with
        // data after it, records that were durable are missing.
        let next_base = bases.get(i + 1).copied();
        if let Some(next_base) =
            next_base.filter(|b| !torn && !rot && seg.next_offset < *b && seg.next_offset >= cleaned_upto)
        {
            let why = format!(
                "{} ends at offset {} before the next segment's base {next_base}",
                path.display(),
                seg.next_offset
            );
            if later_segment_has_data(&log.dir, &bases[i + 1..]).await? {
                durable_records_missing(log, why);
            } else {
                crate::stats::update(|s| s.recovery_truncations += 1);
                tracing::warn!(%why, "log recovery truncates at the last valid batch");
                torn = true;
            }
        }
        log.next_offset = seg.next_offset;
        log.segments.push(seg);
    }
    Ok(())
}

/// Reports records found missing that were fsynced: logged, counted, and the log marked
/// damaged.
fn durable_records_missing(log: &mut PartitionLog, why: String) {
    crate::stats::update(|s| s.damaged_segments_found += 1);
    tracing::error!(dir = %log.dir.display(), %why, "records that were durable are missing");
    log.damaged_at_open = Some(why);
}

/// True when one of the segments based at `bases` starts with a valid batch. The
/// flush loop fsyncs a sealed segment before it writes the next one, so valid data in
/// a later segment proves every earlier segment was complete on disk.
async fn later_segment_has_data(dir: &Path, bases: &[i64]) -> Result<bool, StorageError> {
    for &base in bases {
        let path = segment::segment_path(dir, base);
        let seg = Segment::open(path.clone(), base).await?;
        let head = segment::read_file(&seg.file, &path, 0, keel_protocol::batch::BATCH_LOG_OVERHEAD).await?;
        if let Some(Ok(len)) = keel_protocol::batch::peek_batch_len(&head) {
            let first = segment::read_file(&seg.file, &path, 0, len).await?;
            if first.len() == len && keel_protocol::batch::validate(&first).is_ok() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Restores the log from a clean-shutdown checkpoint if the files match it exactly.
async fn restore_clean(log: &mut PartitionLog, bases: &[i64], clean: &CleanState) -> Result<bool, StorageError> {
    if clean.segments.iter().map(|s| s.base_offset).ne(bases.iter().copied()) || clean.segments.is_empty() {
        return Ok(false);
    }
    let last = clean.segments.len() - 1;
    for (i, state) in clean.segments.iter().enumerate() {
        let path = segment::segment_path(&log.dir, state.base_offset);
        let mut seg = Segment::open(path.clone(), state.base_offset).await?;
        let file_len = seg.file.file_size().await.map_err(|e| StorageError::io("stat", &path, e))?;
        let padded = state.size.div_ceil(PAGE) * PAGE;
        // The active segment's last page is written whole and may be followed by the
        // zero fill written ahead of it.
        if file_len != state.size && !(i == last && file_len >= padded) {
            return Ok(false);
        }
        seg.restore(state);
        seg.preallocated = file_len;
        log.segments.push(seg);
    }
    log.next_offset = clean.next_offset;
    log.epochs = clean.epochs.clone();
    Ok(true)
}

/// Why a segment file is missing, or shorter than `recorded` (base offset, size)
/// says a checkpoint left it, if one is: a segment cut (even at a batch boundary, which
/// a scan takes for the end of the segment) or removed while the node was down.
/// Segments below the log start do not count.
async fn shorter_than_recorded(
    dir: &Path,
    bases: &[i64],
    recorded: &[(i64, u64)],
    log_start: i64,
) -> Result<Option<String>, StorageError> {
    for &(base, size) in recorded.iter().filter(|(base, _)| *base >= log_start) {
        if !bases.contains(&base) {
            return Ok(Some(format!("segment {base} recorded at a checkpoint is missing: a segment was cut short")));
        }
        let path = segment::segment_path(dir, base);
        let file = Segment::open(path.clone(), base).await?.file;
        let len = file.file_size().await.map_err(|e| StorageError::io("stat", &path, e))?;
        let _ = file.close_rc().await;
        if len < size {
            return Ok(Some(format!(
                "segment {base} holds {len} bytes where a checkpoint recorded {size}: a segment was cut short"
            )));
        }
    }
    Ok(None)
}

/// Replaces every segment with one empty segment starting at `offset`.
async fn start_empty_at(log: &mut PartitionLog, offset: i64) -> Result<(), StorageError> {
    for seg in std::mem::take(&mut log.segments) {
        segment::release_file(seg.file, Some(&seg.path)).await;
    }
    log.segments.push(Segment::create(&log.dir, offset).await?);
    crate::disk::sync_dir(&log.dir).await?;
    log.next_offset = offset;
    log.epochs.clear();
    log.producers = Default::default();
    Ok(())
}

/// Flushes the log and writes the clean-shutdown checkpoint. Nothing may be appended
/// afterwards (a later change would only make the next open fall back to a scan).
pub async fn close(log: &Rc<RefCell<PartitionLog>>) -> Result<(), StorageError> {
    let lock = log.borrow().io_lock();
    let _permit = lock.acquire_permit(1).await.expect("the io lock is never closed");
    log::flush_locked(log).await?;
    let (keys, body) = {
        let l = log.borrow();
        let clean = CleanState {
            next_offset: l.next_offset,
            epochs: l.epochs.clone(),
            producers: l.producers.headers(),
            segments: l.segments.iter().map(Segment::state).collect(),
        };
        (l.state_keys.clone(), clean.encode())
    };
    match keys {
        Some(k) => k.kv.put(&k.key(CLEAN_KEY), body.into()).await,
        None => Ok(()),
    }
}
