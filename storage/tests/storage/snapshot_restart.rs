//! Checkpoint snapshots: a journaled log reopened after a crash restores the state its
//! last checkpoint recorded instead of scanning, and ends up exactly where a scan
//! would (data, offsets, high watermark, idempotent producers' recent batches); a
//! snapshot whose files retention, compaction or truncation changed is never trusted.
//!
//! Each "life" runs on its own executor with the shard's journal, flush loop and state
//! store, as a broker shard does; a life ends without a clean close (a crash).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use keel_protocol::batch::{build_batch, BatchHeader};
use keel_storage::flush::FlushQueue;
use keel_storage::journal::{Journal, JournalConfig};
use keel_storage::kv::ShardKv;
use keel_storage::log::snapshot;
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::{compaction, retention, stats, CompactionPolicy, OpenKind, RetentionPolicy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common;

const PRODUCERS: i64 = 3;

/// An index entry per batch, so segments fill whole index chunks (64 entries) that
/// the snapshot keeps apart from their state.
fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 256 << 10,
        index_interval_bytes: 1,
        cache_bytes_max: 16 << 10,
        ..LogConfig::default()
    }
}

struct Life {
    flush: Rc<FlushQueue>,
    kv: Rc<ShardKv>,
    log: Rc<RefCell<PartitionLog>>,
    kind: OpenKind,
    /// Headers the open reported, as the broker rebuilds producer state from them.
    seen: Vec<BatchHeader>,
}

/// A shard's journal, flush loop and state store under `root`, as a broker shard opens
/// them; checkpoints run only when the test asks for one.
async fn shard_storage(root: &Path) -> (Rc<Journal>, Rc<FlushQueue>, Rc<ShardKv>) {
    keel_storage::prime_dma_probe(root).await.unwrap();
    let config =
        JournalConfig { checkpoint_interval: std::time::Duration::from_secs(3600), ..JournalConfig::default() };
    let journal = Journal::open(&root.join(".journal"), config).await.unwrap();
    let flush = FlushQueue::with_journal(None, journal.clone());
    glommio::spawn_local(flush.clone().run()).detach();
    let kv = ShardKv::open(&root.join(".kv"), flush.clone()).await.unwrap();
    (journal, flush, kv)
}

async fn open(root: &Path) -> Life {
    let (journal, flush, kv) = shard_storage(root).await;
    let mut seen = Vec::new();
    let (log, kind) = PartitionLog::open_journaled(
        &root.join("t-0"),
        log_config(),
        Some(kv.keys("t-0/")),
        &journal,
        Bytes::from_static(b"t-0"),
        |h| seen.push(*h),
    )
    .await
    .unwrap();
    let log = Rc::new(RefCell::new(log));
    flush.register(&log);
    journal.finish_recovery();
    Life { flush, kv, log, kind, seen }
}

fn with_producer(batch: &Bytes, producer_id: i64, base_sequence: i32) -> Bytes {
    let mut b = BytesMut::from(&batch[..]);
    b[43..51].copy_from_slice(&producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// Appends `count` keyed batches from rotating idempotent producers and waits until
/// they are durable (acks=all); returns what was appended.
async fn append(life: &Life, count: usize, from: usize) -> Vec<(i64, Vec<u8>, BatchHeader)> {
    let l = &life.log;
    let mut last = 0;
    let mut appended = Vec::new();
    for i in from..from + count {
        let key = format!("key-{}", i % 7);
        let value = vec![i as u8; 3000];
        let batch = build_batch(0, i as i64, &[(Some(key.as_bytes()), Some(&value))]);
        let producer = i as i64 % PRODUCERS;
        let batch = with_producer(&batch, 1000 + producer, (i as i64 / PRODUCERS) as i32);
        log::roll_if_needed(l, batch.len()).await.unwrap();
        let header = l.borrow_mut().append(&batch, 0, None);
        last = header.last_offset();
        appended.push((header.base_offset, value, header));
    }
    life.flush.mark_dirty(l);
    common::wait_high_watermark(l, last).await;
    appended
}

/// Every (offset, value) served from the log start to the high watermark.
async fn read_all(l: &Rc<RefCell<PartitionLog>>) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let (mut offset, end) = (l.borrow().log_start_offset, l.borrow().high_watermark());
    while offset < end {
        let r = log::read(l, offset, 1 << 20, end).await.expect("read back");
        assert!(!r.batches.is_empty(), "nothing read at {offset} below the high watermark {end}");
        for b in r.batches {
            let h = keel_protocol::batch::validate(&b).expect("every batch served passes its CRC");
            let body = keel_storage::batch_filter::decompressed_body(&h, &b).unwrap();
            for rec in keel_storage::batch_filter::parse_records(&h, &body).unwrap() {
                out.push((rec.offset, rec.value.map(<[u8]>::to_vec).unwrap_or_default()));
            }
            offset = h.last_offset() + 1;
        }
    }
    out
}

/// The last five batches of each producer, as the broker's dedup state keeps them.
fn recent_batches(headers: &[BatchHeader]) -> BTreeMap<i64, Vec<(i64, i32)>> {
    let mut by_producer: BTreeMap<i64, Vec<(i64, i32)>> = BTreeMap::new();
    for h in headers.iter().filter(|h| h.producer_id >= 0) {
        by_producer.entry(h.producer_id).or_default().push((h.base_offset, h.base_sequence));
    }
    for batches in by_producer.values_mut() {
        batches.sort_unstable();
        batches.dedup();
        let keep = batches.len().saturating_sub(5);
        batches.drain(..keep);
    }
    by_producer
}

struct Seen {
    kind: OpenKind,
    data: Vec<(i64, Vec<u8>)>,
    end: i64,
    high_watermark: i64,
    start: i64,
    recent: BTreeMap<i64, Vec<(i64, i32)>>,
    opens: stats::StorageStats,
    segments: usize,
    damaged: Option<String>,
}

async fn observe(life: &Life) -> Seen {
    let l = &life.log;
    let (end, high_watermark, start, segments, damaged) = {
        let l = l.borrow();
        (l.log_end_offset(), l.high_watermark(), l.log_start_offset, l.segment_count(), l.damaged_at_open.clone())
    };
    Seen {
        kind: life.kind,
        data: read_all(l).await,
        end,
        high_watermark,
        start,
        recent: recent_batches(&life.seen),
        opens: stats::snapshot(),
        segments,
        damaged,
    }
}

fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    (tmp, root)
}

#[test]
fn crash_reopen_restores_the_snapshot_without_scanning() {
    let (_tmp, root) = tempdir();
    let r = root.clone();
    let before = common::run(move || async move {
        let life = open(&r).await;
        let mut appended = append(&life, 400, 0).await;
        life.flush.checkpoint().await.unwrap();
        assert!(life.kv.get("t-0/snapshot").is_some(), "the checkpoint wrote no snapshot");
        let chunks = life.kv.keys_with_prefix(&format!("t-0/{}", snapshot::INDEX_PREFIX)).len();
        assert!(chunks > 3, "the snapshot holds {chunks} index chunks: the test exercises none");
        // Acknowledged after the checkpoint: only the journal holds it durably.
        appended.extend(append(&life, 100, 400).await);
        let l = life.log.borrow();
        Seen {
            kind: life.kind,
            data: appended.iter().map(|(o, v, _)| (*o, v.clone())).collect(),
            end: l.log_end_offset(),
            high_watermark: l.high_watermark(),
            start: l.log_start_offset,
            recent: recent_batches(&appended.iter().map(|(_, _, h)| *h).collect::<Vec<_>>()),
            opens: stats::snapshot(),
            segments: l.segment_count(),
            damaged: None,
        }
    });
    assert!(before.segments > 3, "the test needs sealed segments: {}", before.segments);
    let r = root.clone();
    let after = common::run(move || async move { observe(&open(&r).await).await });
    assert_eq!(after.kind, OpenKind::Snapshot, "a crash-reopen with a current snapshot scanned");
    assert_eq!((after.opens.opens_snapshot, after.opens.opens_scanned), (1, 0), "the open read the segments");
    assert_eq!(after.segments, before.segments);
    assert_eq!((after.end, after.high_watermark, after.start), (before.end, before.high_watermark, before.start));
    assert_eq!(after.data, before.data, "data differs after the snapshot restore");
    assert_eq!(after.recent, before.recent, "idempotent producers' recent batches differ from the log's");
    assert_eq!(after.recent.len(), PRODUCERS as usize);

    // The same files opened by a scan (no snapshot) give the same state.
    let r = root.clone();
    let scanned = common::run(move || async move {
        let life = open(&r).await;
        // The replay above fsynced the tail; a new checkpoint moves the mark there.
        life.flush.checkpoint().await.unwrap();
        life.kv.delete("t-0/snapshot").await.unwrap();
        drop(life);
        observe(&open(&r).await).await
    });
    assert_eq!(scanned.kind, OpenKind::Scanned);
    assert_eq!((scanned.end, scanned.high_watermark), (after.end, after.high_watermark));
    assert_eq!(scanned.data, after.data);
    assert_eq!(scanned.recent, after.recent, "producer state after a restore differs from a scan's");
}

/// A checkpoint fsyncs the log's whole pages and leaves the rest to the journal. A
/// power loss that takes everything after those pages loses nothing: the open writes
/// the tail back from the journal, and the files then match the snapshot again.
#[test]
fn a_tail_left_to_the_journal_is_written_back_after_a_power_loss() {
    let (_tmp, root) = tempdir();
    let r = root.clone();
    let (before, tails) = common::run(move || async move {
        let life = open(&r).await;
        let appended = append(&life, 401, 0).await;
        life.flush.checkpoint().await.unwrap();
        let data: Vec<(i64, Vec<u8>)> = appended.into_iter().map(|(o, v, _)| (o, v)).collect();
        (data, stats::snapshot().checkpoint_tails_left)
    });
    assert_eq!(tails, 1, "the checkpoint wrote the log's partial last page");
    let r = root.clone();
    let mark = common::run(move || async move {
        keel_storage::prime_dma_probe(&r).await.unwrap();
        let journal = Journal::open(&r.join(".journal"), JournalConfig::default()).await.unwrap();
        journal.take_recovered(&Bytes::from_static(b"t-0")).mark.expect("the checkpoint's mark")
    });
    let tail = mark.tail.expect("the mark leaves the tail to the journal");
    assert!(tail.size < mark.segment_size);
    // The power loss: the segment keeps only what the checkpoint fsynced.
    let newest = segment_files(&root).pop().unwrap();
    std::fs::OpenOptions::new().write(true).open(&newest).unwrap().set_len(tail.size).unwrap();
    let r = root.clone();
    let (after, written_back) = common::run(move || async move {
        let life = open(&r).await;
        let written_back = stats::snapshot().tails_written_back;
        (observe(&life).await, written_back)
    });
    assert_eq!(written_back, 1, "the tail was not written back from the journal");
    assert_eq!(after.kind, OpenKind::Snapshot, "the open scanned instead of restoring the snapshot");
    assert_eq!(std::fs::metadata(&newest).unwrap().len(), mark.segment_size);
    assert_eq!(after.data, before, "acknowledged batches differ after the power loss");
}

/// A segment cut short below the last checkpoint while the shard was down (records
/// that checkpoint made durable are gone: damage, not a torn write) makes the open
/// report the log damaged, so the broker rebuilds such a replica from its leader
/// instead of serving a log with a hole or voting with committed entries missing. An
/// intact crash-reopen, scanned, reports nothing.
#[test]
fn a_segment_cut_below_the_checkpoint_reads_as_damage() {
    let (_tmp, root) = tempdir();
    write_log(&root, 400, 50, false);
    // Scanned (no snapshot), nothing lost: not damage.
    let r = root.clone();
    let intact = common::run(move || async move {
        let life = open(&r).await;
        life.flush.checkpoint().await.unwrap();
        life.kv.delete("t-0/snapshot").await.unwrap();
        drop(life);
        let life = open(&r).await;
        let damaged = life.log.borrow().damaged_at_open.clone();
        // A snapshot again: while one is in the store, no file change began since.
        life.flush.checkpoint().await.unwrap();
        (life.kind, damaged)
    });
    assert_eq!(intact, (OpenKind::Scanned, None));

    let segments = segment_files(&root);
    let newest = segments.last().unwrap();
    let size = std::fs::metadata(newest).unwrap().len();
    assert!(size > 8192, "the newest segment holds {size} bytes");
    std::fs::OpenOptions::new().write(true).open(newest).unwrap().set_len(size / 2).unwrap();
    let (kind, damaged) = reopen(&root);
    assert_eq!(kind, OpenKind::Scanned);
    let why = damaged.expect("a log cut below its checkpoint is reported damaged");
    assert!(why.contains("cut short"), "{why}");
}

/// A life of the log under `root`: `before` batches, a checkpoint, `after` more, then
/// a clean shutdown or a crash. Returns what was acknowledged: (offset, leader epoch,
/// value).
fn write_log(root: &Path, before: usize, after: usize, clean: bool) -> Vec<(i64, i32, Vec<u8>)> {
    let r = root.to_path_buf();
    common::run(move || async move {
        let life = open(&r).await;
        let mut acked = append(&life, before, 0).await;
        life.flush.checkpoint().await.unwrap();
        acked.extend(append(&life, after, before).await);
        if clean {
            keel_storage::recovery::close(&life.log).await.unwrap();
        }
        acked.into_iter().map(|(o, v, h)| (o, h.partition_leader_epoch, v)).collect()
    })
}

/// Opens the log under `root` again: how, and the damage it reported.
fn reopen(root: &Path) -> (OpenKind, Option<String>) {
    let r = root.to_path_buf();
    common::run(move || async move {
        let life = open(&r).await;
        let damaged = life.log.borrow().damaged_at_open.clone();
        (life.kind, damaged)
    })
}

/// The log's segment files, oldest first.
fn segment_files(root: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(root.join("t-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    segments
}

/// Where each batch of a segment file starts (a batch is 12 bytes of offset and
/// length, then that length).
fn batch_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![0usize];
    while let Some(&at) = starts.last().filter(|at| **at + 12 <= bytes.len()) {
        let len = u32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        starts.push(at + 12 + len);
    }
    starts.retain(|b| *b < bytes.len());
    starts
}

/// The oldest segment file cut at the batch boundary nearest its middle: a scan takes
/// that for the end of the segment and goes on with the next one, leaving a hole.
fn cut_oldest_segment_at_a_boundary(root: &Path) {
    let segments = segment_files(root);
    assert!(segments.len() > 2, "the test needs sealed segments: {segments:?}");
    let oldest = &segments[0];
    let bytes = std::fs::read(oldest).unwrap();
    let cut = batch_starts(&bytes).into_iter().min_by_key(|b| b.abs_diff(bytes.len() / 2)).unwrap();
    assert!(cut > 0 && cut < bytes.len(), "no boundary inside the segment ({cut} of {})", bytes.len());
    std::fs::OpenOptions::new().write(true).open(oldest).unwrap().set_len(cut as u64).unwrap();
}

/// A sealed segment cut exactly at a batch boundary while the shard was down, after a
/// clean shutdown or after a crash whose checkpoint snapshot lists it: the log end is
/// where it was, so only the sizes the checkpoint recorded show the hole, and the open
/// reports the log damaged.
#[test]
fn a_sealed_segment_cut_at_a_batch_boundary_reads_as_damage() {
    for clean in [true, false] {
        let (_tmp, root) = tempdir();
        write_log(&root, 300, 20, clean);
        cut_oldest_segment_at_a_boundary(&root);
        let (kind, damaged) = reopen(&root);
        assert_eq!(kind, OpenKind::Scanned, "clean {clean}");
        let why = damaged.unwrap_or_else(|| panic!("clean {clean}: a hole below the checkpoint was not reported"));
        assert!(why.contains("where a checkpoint recorded"), "clean {clean}: {why}");
    }
}

/// Damage done to a segment file while the shard is down.
#[derive(Debug, Clone, Copy)]
enum Damage {
    None,
    CutInside,
    CutAtBoundary,
    Removed,
    Flipped,
    /// A bit of a batch header's fields the CRC does not cover (base offset, length,
    /// leader epoch, magic).
    FlippedHeader,
}

/// What the open and a read of everything made of a damaged log.
#[derive(Debug, Default)]
struct Verdicts {
    reported_at_open: usize,
    failed_a_read: usize,
    intact: usize,
}

/// Damage to the files of a log, done while the shard is down, is never silent: a
/// seeded mix of logs (several segments, a checkpoint, appends after it, a crash or a
/// clean shutdown) each gets one of: nothing, a cut anywhere or exactly at a batch
/// boundary, a removed file, one flipped bit anywhere or in the header fields a batch's
/// CRC does not cover. Reopened, the log must report the
/// damage at open, or fail the read that meets it, or serve every acknowledged record
/// as it was, leader epochs included (the damage fell on what the journal replays).
/// Serving less, or other records, without an error is the failure; so is reporting an undamaged log.
/// `KEEL_DAMAGE_SEEDS=n` runs more seeds (40 by default).
#[test]
fn damage_to_a_stopped_log_is_never_silent() {
    let seeds: u64 = std::env::var("KEEL_DAMAGE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let mut verdicts: BTreeMap<String, Verdicts> = BTreeMap::new();
    for seed in 0..seeds {
        let (damage, verdict) = damage_round(seed);
        let v = verdicts.entry(format!("{damage:?}")).or_default();
        match verdict {
            Verdict::ReportedAtOpen => v.reported_at_open += 1,
            Verdict::FailedARead => v.failed_a_read += 1,
            Verdict::Intact => v.intact += 1,
        }
    }
    println!("damage to a stopped log, {seeds} seeds: {verdicts:?}");
    let none = verdicts.get("None");
    assert!(none.is_none_or(|v| v.reported_at_open + v.failed_a_read == 0), "an undamaged log read as damaged");
}

enum Verdict {
    ReportedAtOpen,
    FailedARead,
    Intact,
}

fn damage_round(seed: u64) -> (Damage, Verdict) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (before, after, clean) = (rng.gen_range(150..400usize), rng.gen_range(0..60usize), rng.gen_bool(0.5));
    let (_tmp, root) = tempdir();
    let acked = write_log(&root, before, after, clean);
    let segments = segment_files(&root);
    let file = &segments[rng.gen_range(0..segments.len())];
    let bytes = std::fs::read(file).unwrap();
    let damage = match rng.gen_range(0..6) {
        _ if bytes.is_empty() => Damage::None,
        0 => Damage::None,
        1 => Damage::CutInside,
        2 => Damage::CutAtBoundary,
        3 => Damage::Removed,
        4 => Damage::Flipped,
        _ => Damage::FlippedHeader,
    };
    let boundaries = batch_starts(&bytes);
    let set_len = |len: usize| std::fs::OpenOptions::new().write(true).open(file).unwrap().set_len(len as u64).unwrap();
    match damage {
        Damage::None => {}
        Damage::CutInside => set_len(rng.gen_range(0..bytes.len())),
        Damage::CutAtBoundary => set_len(boundaries[rng.gen_range(0..boundaries.len())]),
        Damage::Removed => std::fs::remove_file(file).unwrap(),
        Damage::Flipped | Damage::FlippedHeader => {
            let mut flipped = bytes.clone();
            let at = match damage {
                Damage::Flipped => rng.gen_range(0..flipped.len()),
                _ => (boundaries[rng.gen_range(0..boundaries.len())] + rng.gen_range(0..17)).min(flipped.len() - 1),
            };
            flipped[at] ^= 1 << rng.gen_range(0..8);
            std::fs::write(file, flipped).unwrap();
        }
    }
    let what = format!("seed {seed}: {damage:?} in {} ({} bytes), clean {clean}", file.display(), bytes.len());
    let r = root.clone();
    let (damaged, read) = common::run(move || async move {
        let life = open(&r).await;
        let damaged = life.log.borrow().damaged_at_open.clone();
        (damaged, try_read_all(&life.log).await)
    });
    let verdict = match (damaged, read) {
        (Some(_), _) => Verdict::ReportedAtOpen,
        (None, Err(_)) => Verdict::FailedARead,
        (None, Ok(served)) => {
            assert_eq!(served.len(), acked.len(), "{what}: records served silently differ from those acknowledged");
            let first = served.iter().zip(&acked).position(|(a, b)| a != b);
            let show = |r: Option<&(i64, i32, Vec<u8>)>| r.map(|(o, e, v)| (*o, *e, v.len(), v.first().copied()));
            assert!(
                served == acked,
                "{what}: records served silently differ from those acknowledged, first at {first:?}: served {:?}, acknowledged {:?}",
                first.and_then(|i| show(served.get(i))),
                first.and_then(|i| show(acked.get(i)))
            );
            Verdict::Intact
        }
    };
    (damage, verdict)
}

/// As [`read_all`], with each record's batch leader epoch, and an error for a read or a
/// batch that fails.
async fn try_read_all(l: &Rc<RefCell<PartitionLog>>) -> Result<Vec<(i64, i32, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let (mut offset, end) = (l.borrow().log_start_offset, l.borrow().high_watermark());
    while offset < end {
        let r = log::read(l, offset, 1 << 20, end).await.map_err(|e| e.to_string())?;
        if r.batches.is_empty() {
            return Err(format!("nothing read at {offset} below the high watermark {end}"));
        }
        for b in r.batches {
            let h = keel_protocol::batch::validate(&b).map_err(|e| e.to_string())?;
            let body = keel_storage::batch_filter::decompressed_body(&h, &b).map_err(|e| e.to_string())?;
            for rec in keel_storage::batch_filter::parse_records(&h, &body).map_err(|e| e.to_string())? {
                out.push((rec.offset, h.partition_leader_epoch, rec.value.map(<[u8]>::to_vec).unwrap_or_default()));
            }
            offset = h.last_offset() + 1;
        }
    }
    Ok(out)
}

/// A change to the files below the mark, made after the checkpoint that wrote the
/// snapshot and before the crash.
#[derive(Debug, Clone, Copy)]
enum Change {
    Retention,
    Compaction,
    Truncation,
}

async fn change_files(life: &Life, change: Change) {
    let l = &life.log;
    match change {
        Change::Retention => {
            let policy = RetentionPolicy { delete: true, retention_ms: -1, retention_bytes: 100 << 10 };
            let outcome = retention::enforce(l, i64::MAX / 2, &policy).await.unwrap();
            assert!(outcome.segments_deleted > 0, "retention deleted nothing");
        }
        Change::Compaction => {
            let policy = CompactionPolicy { min_cleanable_dirty_ratio: 0.0, ..CompactionPolicy::default() };
            let outcome =
                compaction::compact(l, i64::MAX / 2, &policy, true, compaction::Transactions::none()).await.unwrap();
            assert!(outcome.is_some_and(|o| o.segments_rewritten > 0), "compaction rewrote nothing: {outcome:?}");
        }
        Change::Truncation => {
            let end = l.borrow().log_end_offset();
            log::truncate(l, end / 2).await.unwrap();
        }
    }
}

#[test]
fn snapshots_of_changed_files_are_not_trusted() {
    for change in [Change::Retention, Change::Compaction, Change::Truncation] {
        let (_tmp, root) = tempdir();
        let r = root.clone();
        let before = common::run(move || async move {
            let life = open(&r).await;
            append(&life, 300, 0).await;
            life.flush.checkpoint().await.unwrap();
            assert!(life.kv.get("t-0/snapshot").is_some(), "the checkpoint wrote no snapshot");
            change_files(&life, change).await;
            assert!(life.kv.get("t-0/snapshot").is_none(), "{change:?} left the snapshot in place");
            observe(&life).await
        });
        let r = root.clone();
        let after = common::run(move || async move { observe(&open(&r).await).await });
        assert_eq!(after.kind, OpenKind::Scanned, "{change:?}: a snapshot of changed files was trusted");
        assert_eq!(after.damaged, None, "{change:?}: a change the log made itself read as damage");
        assert_eq!((after.end, after.start), (before.end, before.start), "{change:?}");
        assert_eq!(after.data, before.data, "{change:?}: data differs after the crash");

        // The next checkpoint writes a snapshot of the changed files, trusted again.
        let r = root.clone();
        let again = common::run(move || async move {
            let life = open(&r).await;
            append(&life, 200, 1000).await;
            change_files(&life, change).await;
            life.flush.checkpoint().await.unwrap();
            let seen = observe(&life).await;
            let sealed = life.kv.keys_with_prefix(&format!("t-0/{}", snapshot::SEALED_PREFIX)).len();
            assert_eq!(sealed, seen.segments - 1, "{change:?}: sealed entries of removed segments were kept");
            let prefix = format!("t-0/{}", snapshot::INDEX_PREFIX);
            let bases = life.log.borrow().segment_bases();
            for key in life.kv.keys_with_prefix(&prefix) {
                let base: i64 = key[prefix.len()..].split('/').next().unwrap().parse().unwrap();
                assert!(bases.contains(&base), "{change:?}: index chunk {key} of a removed segment was kept");
            }
            seen
        });
        let r = root.clone();
        let last = common::run(move || async move { observe(&open(&r).await).await });
        assert_eq!(last.kind, OpenKind::Snapshot, "{change:?}: the rewritten snapshot was not used");
        assert_eq!((last.end, last.start, last.segments), (again.end, again.start, again.segments), "{change:?}");
        assert_eq!(last.data, again.data, "{change:?}: data differs after the restore");
    }
}

/// What checkpoint snapshots cost the state store at 1,000 partitions: every
/// partition takes 64 KiB (four 16 KiB batches) per round, a checkpoint follows each
/// round (1,000 × 64 KiB is about what the broker's 64 MiB journal trigger covers),
/// then a round where a tenth of them change. Prints the bytes written per checkpoint.
/// `cargo test -p keel-storage --release --test storage snapshot_restart:: -- --ignored --nocapture`
#[test]
#[ignore]
fn snapshot_bytes_per_checkpoint_at_1000_partitions() {
    const PARTITIONS: usize = 1000;
    let (_tmp, root) = tempdir();
    common::run(move || async move {
        let (journal, flush, kv) = shard_storage(&root).await;
        let log_config = LogConfig { segment_bytes_max: 8 << 20, cache_bytes_max: 64 << 10, ..LogConfig::default() };
        let mut logs = Vec::new();
        for i in 0..PARTITIONS {
            let (log, _) = PartitionLog::open_journaled(
                &root.join(format!("t-{i}")),
                log_config.clone(),
                Some(kv.keys(&format!("t-{i}/"))),
                &journal,
                Bytes::from(format!("t-{i}")),
                |_| {},
            )
            .await
            .unwrap();
            let log = Rc::new(RefCell::new(log));
            flush.register(&log);
            logs.push(log);
        }
        journal.finish_recovery();
        let value = vec![1u8; 16 << 10];
        let batch = with_producer(&build_batch(0, 1, &[(None, Some(&value))]), 7, 0);
        for round in 0..6 {
            let changed = if round == 5 { PARTITIONS / 10 } else { PARTITIONS };
            // A hundred partitions per pass: glommio 0.9 counts a task's waker clones
            // in 15 bits, and one segment-writing task writing a thousand logs at
            // once (each pending DMA write re-registering its waker) overflows it.
            for group in logs[..changed].chunks(100) {
                let mut last = Vec::new();
                for l in group {
                    for _ in 0..4 {
                        log::roll_if_needed(l, batch.len()).await.unwrap();
                        l.borrow_mut().append(&batch, 0, None);
                    }
                    last.push((l.clone(), l.borrow().log_end_offset()));
                    flush.mark_dirty(l);
                }
                for (l, end) in last {
                    while l.borrow().high_watermark() < end {
                        let w = l.borrow().changed.wait();
                        w.await;
                    }
                }
                glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
            }
            let before = stats::snapshot();
            let kv_before = kv.log_bytes();
            flush.checkpoint().await.unwrap();
            let after = stats::snapshot();
            println!(
                "round {round}: {changed} partitions changed (64 KiB each): {} snapshots, {} KiB of snapshot entries, \
                 state store log +{} KiB",
                after.snapshots_written - before.snapshots_written,
                (after.snapshot_bytes_written - before.snapshot_bytes_written) >> 10,
                kv.log_bytes().saturating_sub(kv_before) >> 10,
            );
        }
    });
}
