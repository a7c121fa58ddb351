//! Deterministic simulation of the whole storage layer on a simulated disk: the shard
//! journal and flush loop, partition logs (segments, rolls, truncation, the log start
//! offset and retention), the state store and the checkpoint snapshots that let a log
//! open without reading its data.
//!
//! A seed runs a shard through six lives. Each life opens everything on the simulated
//! disk ([`keel_storage::disk`]), checks that every log and every state-store key holds
//! what was acknowledged, then appends, truncates, moves log starts, runs retention,
//! compacts the last log (its records carry keys) and writes keys under a simulated
//! clock (whose ticks drive checkpoints) until the disk loses power: in half the lives
//! after a number of disk operations drawn from the seed, anywhere inside a pass, a
//! segment write, a checkpoint or a snapshot; in the others after the last step. The
//! disk then keeps what was durable and, of the rest, sectors at random (some turned to
//! garbage) and a prefix of the file creations, renames and removals whose directory
//! was not fsynced. A life may also fill the disk for a while: writes that grow it fail
//! with ENOSPC until it is freed.
//!
//! The checks after every power loss:
//! - each log holds every acknowledged batch at its offset, unchanged, but those a
//!   compaction pass may have removed (a later acknowledged record of the same key
//!   existed when it began); past them, only a prefix of the batches appended and not
//!   yet acknowledged (a truncation is acknowledged when it returns; one interrupted
//!   may be undone);
//! - the compacted log's latest record of each key is the latest acknowledged one or
//!   later, or none where that was a tombstone (a second test writes tombstones,
//!   every one past its retention): compaction never brings a deleted key back;
//! - its log start offset is the acknowledged one, or one being moved to;
//! - every batch served passes its CRC;
//! - each state-store key holds its acknowledged value or one being written.
//!
//! Nothing reads a real clock and glommio never preempts, so a seed replays alone:
//! `KEEL_STORAGE_SIM_SEED=<n> cargo test --release -p keel-storage --test storage simulation::`.
//! `KEEL_STORAGE_SIM_SEEDS=<n>` runs more seeds (200 by default in a release build, 10
//! in a debug one), from `KEEL_STORAGE_SIM_FIRST` (0). A run's memory grows by about
//! 150 KB a seed (a task caught mid-I/O by a power loss waits forever, as on a dead
//! machine, with what it holds), so runs of millions go in batches of 20,000, one
//! process each.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::LocalExecutorBuilder;
use keel_protocol::batch::build_batch;
use keel_storage::compaction::{self, CompactionPolicy};
use keel_storage::disk::{self, SimDisk};
use keel_storage::flush::FlushQueue;
use keel_storage::journal::{Journal, JournalConfig};
use keel_storage::kv::ShardKv;
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::retention::{self, RetentionPolicy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common;
use common::read_all;

const LOGS: usize = 4;
const LIVES: usize = 6;
const STEPS: usize = 120;
const KEYS: usize = 5;
/// The log whose records carry keys (the first byte of each value) and is compacted.
const COMPACTED: usize = LOGS - 1;
/// Keys of the compacted log's records.
const RECORD_KEYS: u8 = 6;

fn root() -> PathBuf {
    PathBuf::from("/sim")
}

fn journal_config() -> JournalConfig {
    JournalConfig {
        file_bytes: 64 << 10,
        checkpoint_interval: Duration::from_millis(40),
        spare_files_max: 1,
        live_files_max: 4,
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 16 << 10,
        cache_bytes_max: 4 << 10,
        preallocate_step_bytes: 8 << 10,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    }
}

fn log_dir(i: usize) -> PathBuf {
    root().join(format!("log-{i}"))
}

/// What a log must hold, as the driver knows it.
#[derive(Clone, Default, Debug)]
struct LogModel {
    /// Acknowledged batches: (offset, value).
    acked: Vec<(i64, Vec<u8>)>,
    /// Appended, not yet acknowledged, in order.
    in_flight: Vec<(i64, Vec<u8>)>,
    /// The acknowledged batches before a truncation that has not returned (or failed).
    before_cut: Option<Vec<(i64, Vec<u8>)>>,
    /// The acknowledged log start offset, and one being moved to.
    start: i64,
    start_in_flight: Option<i64>,
    /// Offsets compaction may have removed: acknowledged records a later acknowledged
    /// record of the same key superseded when a pass began, and tombstones that were
    /// their key's latest record then (every tombstone is past its retention).
    superseded: BTreeSet<i64>,
}

#[derive(Clone, Default)]
struct Model {
    logs: Vec<LogModel>,
    /// Whether the compacted log gets tombstones (a fifth of its records): a tombstone
    /// is kept in the model as its key alone, every other value has two bytes or more.
    tombstones: bool,
    /// Acknowledged state-store values (`None`: deleted), and per key the writes since
    /// that have not succeeded (one that failed, on a full disk, may still land).
    keys: BTreeMap<String, Option<Vec<u8>>>,
    keys_in_flight: BTreeMap<String, Vec<Option<Vec<u8>>>>,
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    appends: u64,
    acked: u64,
    truncations: u64,
    starts_moved: u64,
    retention_runs: u64,
    key_writes: u64,
    full_disk: u64,
    /// Lives whose power went out mid-work (the others lose it after their last step).
    cut_mid_work: u64,
    batches_checked: u64,
    snapshot_opens: u64,
    scanned_opens: u64,
    compactions: u64,
    tombstones: u64,
    /// Batches a read-back found removed by compaction.
    compacted_away: u64,
}

type Log = Rc<RefCell<PartitionLog>>;

/// Runs `f` until it completes or the power goes out, moving the simulated clock on by
/// a millisecond each time every other task has had its turn.
async fn guarded<T>(disk: &SimDisk, f: impl Future<Output = T>) -> Option<T> {
    let watch = async {
        loop {
            futures_lite::future::yield_now().await;
            if !disk.powered() {
                return None;
            }
            disk.advance(Duration::from_millis(1));
        }
    };
    futures_lite::future::or(async { Some(f.await) }, watch).await
}

/// Waits until `done` holds (or the power goes out).
async fn until(disk: &SimDisk, done: impl Fn() -> bool) -> bool {
    guarded(disk, async {
        while !done() {
            futures_lite::future::yield_now().await;
        }
    })
    .await
    .is_some()
}

/// Whether `got` is `acked` (from `start` on, less any of the `superseded` offsets)
/// followed by a prefix of `in_flight`.
fn holds(
    got: &[(i64, Vec<u8>)],
    acked: &[(i64, Vec<u8>)],
    start: i64,
    in_flight: &[(i64, Vec<u8>)],
    superseded: &BTreeSet<i64>,
) -> bool {
    let mut next = 0;
    for a in acked.iter().filter(|(o, _)| *o >= start) {
        if got.get(next) == Some(a) {
            next += 1;
        } else if !superseded.contains(&a.0) {
            return false;
        }
    }
    let extra = &got[next..];
    extra.len() <= in_flight.len() && extra.iter().zip(in_flight).all(|(g, f)| g == f)
}

/// Compaction never brings a key back: the latest record of each key the log holds is
/// its latest acknowledged one or later, or none where a pass could remove that one (a
/// tombstone, or a record whose successor a truncation cut since). An older value
/// showing again would be a deleted or overwritten key come back.
fn check_keys(
    i: usize,
    seed: u64,
    got: &[(i64, Vec<u8>)],
    acked: &[(i64, Vec<u8>)],
    start: i64,
    superseded: &BTreeSet<i64>,
) {
    let latest = |records: &[(i64, Vec<u8>)]| {
        let mut by_key = BTreeMap::new();
        for (offset, v) in records.iter().filter(|(o, _)| *o >= start) {
            by_key.insert(v[0], *offset);
        }
        by_key
    };
    let held = latest(got);
    for (key, offset) in latest(acked) {
        let ok = match held.get(&key) {
            Some(at) => *at >= offset,
            None => superseded.contains(&offset),
        };
        assert!(
            ok,
            "seed {seed} log {i}: key {key} acknowledged last at {offset}, the log's latest is {:?}",
            held.get(&key)
        );
    }
}

/// Checks a log after a power loss against its model, and makes the model what the
/// log now holds (survivors count as acknowledged: they are served from now on).
/// Returns how many acknowledged batches compaction removed.
fn check_log(i: usize, seed: u64, got: Vec<(i64, Vec<u8>)>, start: i64, m: &mut LogModel) -> u64 {
    let starts = [Some(m.start), m.start_in_flight];
    assert!(
        starts.contains(&Some(start)),
        "seed {seed} log {i}: log start {start} after restart, acknowledged {}, moving to {:?}",
        m.start,
        m.start_in_flight
    );
    let matched = if holds(&got, &m.acked, start, &m.in_flight, &m.superseded) {
        Some(&m.acked)
    } else {
        m.before_cut.as_ref().filter(|before| holds(&got, before, start, &[], &m.superseded))
    };
    if let (Some(acked), true) = (matched, i == COMPACTED) {
        check_keys(i, seed, &got, acked, start, &m.superseded);
    }
    assert!(
        matched.is_some(),
        "seed {seed} log {i} (start {start}): after restart holds {}, acknowledged {}, in flight {:?}, before a cut {:?}",
        summary(&got),
        summary(&m.acked),
        m.in_flight.iter().map(|(o, v)| (*o, v.len())).collect::<Vec<_>>(),
        m.before_cut.as_deref().map(summary)
    );
    let kept: BTreeSet<i64> = got.iter().map(|(o, _)| *o).collect();
    let removed = m.acked.iter().filter(|(o, _)| *o >= start && !kept.contains(o) && m.superseded.contains(o)).count();
    let superseded = std::mem::take(&mut m.superseded);
    *m = LogModel { acked: got, start, superseded, ..LogModel::default() };
    removed as u64
}

/// Offsets and value lengths, as runs of consecutive offsets: `3..=9 [..., 12, 40]`.
fn summary(batches: &[(i64, Vec<u8>)]) -> String {
    let (Some(first), Some(last)) = (batches.first(), batches.last()) else { return "[]".into() };
    let tail: Vec<_> = batches.iter().rev().take(3).rev().map(|(o, v)| (*o, v.len())).collect();
    let gaps: Vec<_> = batches.windows(2).filter(|w| w[1].0 != w[0].0 + 1).map(|w| (w[0].0, w[1].0)).collect();
    format!("{}..={} ({} batches, gaps {gaps:?}, last {tail:?})", first.0, last.0, batches.len())
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    let len = if rng.gen_ratio(1, 8) { rng.gen_range(2000..6000) } else { rng.gen_range(1..400) };
    (0..len).map(|_| rng.gen()).collect()
}

/// One life of the shard: open and check everything, then work until the power goes.
async fn life(disk: SimDisk, seed: u64, life: usize, mut model: Model, counts: &mut Counts) -> Model {
    disk::simulate(Some(disk.clone()));
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ life as u64);
    let Shard { flush, kv, logs, opened, .. } = Shard::open(disk.clone(), LOGS).await;
    for k in 0..KEYS {
        let key = format!("key-{k}");
        let got = kv.get(&key).map(|v| v.to_vec());
        let acked = model.keys.get(&key).cloned().flatten();
        let writing = model.keys_in_flight.get(&key).map(Vec::as_slice).unwrap_or_default();
        assert!(
            got == acked || writing.contains(&got),
            "seed {seed} life {life}: {key} holds {:?} bytes, acknowledged {:?}, being written {:?}",
            got.as_ref().map(Vec::len),
            acked.as_ref().map(Vec::len),
            writing.iter().map(|w| w.as_ref().map(Vec::len)).collect::<Vec<_>>()
        );
        model.keys.insert(key, got);
    }
    model.keys_in_flight.clear();
    for (i, (l, kind)) in logs.iter().zip(opened).enumerate() {
        match kind {
            keel_storage::OpenKind::Snapshot => counts.snapshot_opens += 1,
            _ => counts.scanned_opens += 1,
        }
        let got = read_all(l).await;
        counts.batches_checked += got.len() as u64;
        let start = l.borrow().log_start_offset;
        counts.compacted_away += check_log(i, seed, got, start, &mut model.logs[i]);
    }

    disk.power_off_after(rng.gen_range(1..1200));
    let full_from = rng.gen_ratio(1, 4).then(|| rng.gen_range(0..STEPS));
    for step in 0..STEPS {
        if full_from == Some(step) {
            disk.fill(rng.gen_range(0..64 << 10), Duration::from_millis(rng.gen_range(1..2000)));
            counts.full_disk += 1;
        }
        let done = match rng.gen_range(0..100) {
            0..70 => append_burst(&disk, &flush, &logs, &mut model, &mut rng, step, counts).await,
            70..78 => truncate(&disk, &logs, &mut model, &mut rng, counts).await,
            78..84 => move_start(&disk, &logs, &mut model, &mut rng, counts).await,
            84..94 => write_key(&disk, &kv, &mut model, &mut rng, counts).await,
            94..97 => {
                compact(&disk, &logs[COMPACTED], &mut model.logs[COMPACTED], model.tombstones, &mut rng, counts).await
            }
            _ => guarded(&disk, disk::sleep(Duration::from_millis(rng.gen_range(1..80)))).await.is_some(),
        };
        if !done {
            counts.cut_mid_work += 1;
            break;
        }
    }
    disk.cut_power();
    end_life(&disk, &flush).await;
    model
}

/// Ends a life whose power is out: its flush loops stop, its sleepers wake, and
/// every task of it runs until it waits on the dead disk or on something of its own
/// that nothing will touch again. The next life runs on the same executor (glommio
/// keeps an eventfd for every executor ever started) and never meets them.
async fn end_life(disk: &SimDisk, flush: &FlushQueue) {
    flush.stop();
    disk.advance(Duration::from_secs(3600));
    for _ in 0..256 {
        futures_lite::future::yield_now().await;
    }
}

async fn append_burst(
    disk: &SimDisk,
    flush: &Rc<FlushQueue>,
    logs: &[Log],
    model: &mut Model,
    rng: &mut StdRng,
    step: usize,
    counts: &mut Counts,
) -> bool {
    let mut waits = Vec::new();
    for _ in 0..rng.gen_range(1..6) {
        let i = rng.gen_range(0..LOGS);
        let mut v = value(rng);
        let batch = if i == COMPACTED {
            v[0] = rng.gen_range(0..RECORD_KEYS);
            if model.tombstones && rng.gen_ratio(1, 5) {
                v.truncate(1);
                counts.tombstones += 1;
                build_batch(0, step as i64, &[(Some(&v[..1]), None)])
            } else {
                if model.tombstones && v.len() == 1 {
                    v.push(0);
                }
                build_batch(0, step as i64, &[(Some(&v[..1]), Some(&v))])
            }
        } else {
            build_batch(0, step as i64, &[(None, Some(&v))])
        };
        let l = &logs[i];
        if guarded(disk, log::roll_if_needed(l, batch.len())).await.is_none() {
            return false;
        }
        let h = l.borrow_mut().append(&batch, 0, None);
        flush.mark_dirty(l);
        counts.appends += 1;
        model.logs[i].in_flight.push((h.base_offset, v));
        waits.push((i, h.base_offset));
    }
    for (i, offset) in waits {
        let l = &logs[i];
        if !until(disk, || l.borrow().high_watermark() > offset).await {
            return false;
        }
        let m = &mut model.logs[i];
        let at = m.in_flight.iter().position(|(o, _)| *o == offset).expect("an appended batch is in flight");
        let acked: Vec<_> = m.in_flight.drain(..=at).collect();
        counts.acked += acked.len() as u64;
        m.acked.extend(acked);
        m.before_cut = None;
    }
    true
}

async fn truncate(disk: &SimDisk, logs: &[Log], model: &mut Model, rng: &mut StdRng, counts: &mut Counts) -> bool {
    let i = rng.gen_range(0..LOGS);
    let m = &mut model.logs[i];
    let Some(&(last, _)) = m.acked.last() else { return true };
    if !m.in_flight.is_empty() || last < m.start {
        return true;
    }
    let back = rng.gen_range(0..=m.acked.len().min(4));
    let offset = m.acked[m.acked.len() - back.max(1)].0.max(m.start + 1);
    if offset > last {
        return true;
    }
    let before = m.acked.clone();
    m.acked.retain(|(o, _)| *o < offset);
    m.before_cut.get_or_insert(before);
    counts.truncations += 1;
    match guarded(disk, log::truncate(&logs[i], offset)).await {
        None => false,
        Some(r) => {
            // Durable once it returns. A full disk may refuse the truncation's own
            // writes: the log is then as before, or cut.
            let m = &mut model.logs[i];
            if r.is_ok() {
                m.before_cut = None;
            } else if logs[i].borrow().high_watermark() > offset {
                m.acked = m.before_cut.take().expect("set before the truncation");
            }
            true
        }
    }
}

/// A compaction pass over the compacted log (whatever is cleanable, now). Records a
/// later acknowledged record of their key supersedes may go from here on.
async fn compact(
    disk: &SimDisk,
    l: &Log,
    m: &mut LogModel,
    tombstones: bool,
    rng: &mut StdRng,
    counts: &mut Counts,
) -> bool {
    let mut latest = BTreeMap::new();
    for (offset, v) in m.acked.iter().rev() {
        if latest.insert(v[0], *offset).is_some() || tombstones && v.len() == 1 {
            m.superseded.insert(*offset);
        }
    }
    // A small key map stops a pass early; the next one continues from there.
    let key_map_bytes_max = if rng.gen_bool(0.5) { 64 } else { 1 << 20 };
    let policy = CompactionPolicy {
        min_compaction_lag_ms: 0,
        min_cleanable_dirty_ratio: 0.0,
        key_map_bytes_max,
        ..CompactionPolicy::default()
    };
    counts.compactions += 1;
    guarded(disk, compaction::compact(l, i64::MAX / 2, &policy, true, compaction::Transactions::none())).await.is_some()
}

async fn move_start(disk: &SimDisk, logs: &[Log], model: &mut Model, rng: &mut StdRng, counts: &mut Counts) -> bool {
    let i = rng.gen_range(0..LOGS);
    let l = &logs[i];
    let (start, hw) = (l.borrow().log_start_offset, l.borrow().high_watermark());
    if hw <= start || !model.logs[i].in_flight.is_empty() {
        return true;
    }
    let target = rng.gen_range(start..=hw.min(start + 8));
    model.logs[i].start_in_flight = Some(target);
    counts.starts_moved += 1;
    let Some(moved) = guarded(disk, retention::delete_records(l, target)).await else { return false };
    if let Ok(now) = moved {
        let m = &mut model.logs[i];
        m.start = now;
        m.start_in_flight = None;
    }
    counts.retention_runs += 1;
    let policy = RetentionPolicy { delete: true, retention_ms: -1, retention_bytes: -1 };
    guarded(disk, retention::enforce(l, 0, &policy)).await.is_some()
}

async fn write_key(disk: &SimDisk, kv: &Rc<ShardKv>, model: &mut Model, rng: &mut StdRng, counts: &mut Counts) -> bool {
    let key = format!("key-{}", rng.gen_range(0..KEYS));
    let v = (!rng.gen_ratio(1, 5)).then(|| value(rng));
    model.keys_in_flight.entry(key.clone()).or_default().push(v.clone());
    counts.key_writes += 1;
    let written = match &v {
        Some(v) => guarded(disk, kv.put(&key, Bytes::from(v.clone()))).await,
        None => guarded(disk, kv.delete(&key)).await,
    };
    match written {
        None => false,
        Some(r) => {
            if r.is_ok() {
                model.keys_in_flight.remove(&key);
                model.keys.insert(key, v);
            }
            true
        }
    }
}

/// Runs one seed: its lives one after another, a power loss between them.
async fn run_seed(seed: u64, tombstones: bool, counts: &mut Counts) -> keel_storage::disk::SimStats {
    let disk = SimDisk::new();
    let mut model = Model { logs: vec![LogModel::default(); LOGS], tombstones, ..Model::default() };
    let mut rng = StdRng::seed_from_u64(seed);
    for n in 0..LIVES {
        model = life(disk.clone(), seed, n, model, counts).await;
        disk.power_cycle(&mut rng);
    }
    disk.discard();
    disk.stats()
}

/// Seeds past the default range that found a bug, run every time: 118 fails without
/// `mark_below_truncations` in `storage/src/recovery.rs` (a truncation after the last
/// checkpoint removed its segment; found as seed 310 before the power cuts moved to
/// mid-work). Seed 78, in the default range, fails if compaction may rewrite a
/// journaled log's segments above its last checkpoint's mark (`checkpointed_base` in
/// `storage/src/log.rs`): a record it removed came back after a power loss. Seed 0
/// fails without the directory fsync after a log's first segment file is created
/// (`storage/src/recovery.rs`), and without `disk::create_dir_durably`: a state-store
/// key went with the file's name, or with its directory's.
const FOUND_BUGS: &[u64] = &[118];

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("KEEL_STORAGE_SIM_SEED") {
        return vec![s.parse().expect("KEEL_STORAGE_SIM_SEED is a number")];
    }
    let default = if cfg!(debug_assertions) { 10 } else { 200 };
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
    let n = var("KEEL_STORAGE_SIM_SEEDS").unwrap_or(default);
    let first = var("KEEL_STORAGE_SIM_FIRST").unwrap_or(0);
    (first..first + n).chain(FOUND_BUGS.iter().copied().filter(|s| !(first..first + n).contains(s))).collect()
}

#[test]
fn acknowledged_data_survives_power_loss_anywhere_in_the_storage_layer() {
    run_seeds(false);
}

/// The same with tombstones in the compacted log, every one past its retention: a
/// pass may remove a key's last tombstone, never bring an older value of it back.
#[test]
fn compaction_with_tombstones_never_brings_a_deleted_key_back() {
    run_seeds(true);
}

fn run_seeds(tombstones: bool) {
    let started = Instant::now();
    let mut counts = Counts::default();
    let mut totals = keel_storage::disk::SimStats::default();
    let seeds = seeds();
    let n = seeds.len();
    let (counts, totals, stats) = on_executor(move || async move {
        for seed in seeds {
            disk::simulate(None);
            let s = run_seed(seed, tombstones, &mut counts).await;
            totals.writes += s.writes;
            totals.syncs += s.syncs;
            totals.power_losses += s.power_losses;
            totals.sectors_lost += s.sectors_lost;
            totals.sectors_garbage += s.sectors_garbage;
            totals.truncations_lost += s.truncations_lost;
            totals.name_changes_lost += s.name_changes_lost;
            totals.writes_refused += s.writes_refused;
        }
        (counts, totals, keel_storage::stats::snapshot())
    });
    let secs = started.elapsed().as_secs_f64();
    println!(
        "storage simulation{}: {} seeds in {secs:.1} s ({:.1} seeds/s); {counts:?}; disk: {totals:?}",
        if tombstones { " with tombstones" } else { "" },
        n,
        n as f64 / secs
    );
    assert!(counts.acked > 0 && totals.power_losses > 0, "the simulation acknowledged nothing");
    assert!(counts.snapshot_opens > 0, "no log ever opened from a checkpoint snapshot");
    println!(
        "checkpoint tails left {}, written back at open {}, replayed {}",
        stats.checkpoint_tails_left, stats.tails_written_back, stats.tails_replayed
    );
    if n >= 50 {
        assert!(stats.tails_written_back > 0, "no checkpoint tail was ever written back from the journal");
    }
}

/// A seed's outcome (what it did and what its disk saw) depends on the seed alone, not
/// on what ran before it on the thread: a failing seed found in a long run replays
/// alone. (Segment writes were once ordered by the logs' addresses, which depend on
/// everything allocated before.)
#[test]
fn a_seed_run_alone_does_what_it_did_after_others() {
    let outcome =
        |seed: u64, counts: Counts, disk: keel_storage::disk::SimStats| format!("seed {seed}: {counts:?} {disk:?}");
    let together = on_executor(move || async move {
        let mut outcomes = Vec::new();
        for seed in 0..40 {
            disk::simulate(None);
            let mut counts = Counts::default();
            let disk = run_seed(seed, false, &mut counts).await;
            outcomes.push(outcome(seed, counts, disk));
        }
        outcomes
    });
    for seed in [13u64, 27, 39] {
        let alone = on_executor(move || async move {
            let mut counts = Counts::default();
            let disk = run_seed(seed, false, &mut counts).await;
            outcome(seed, counts, disk)
        });
        assert_eq!(alone, together[seed as usize]);
    }
}

/// Runs `f` on a fresh executor that never preempts a task (`yield_if_needed` would
/// otherwise yield by real time).
fn on_executor<T: Send + 'static, F: Future<Output = T> + 'static>(f: impl FnOnce() -> F + Send + 'static) -> T {
    LocalExecutorBuilder::default().preempt_timer(Duration::from_secs(3600)).spawn(f).unwrap().join().unwrap()
}

/// Runs `f` on a fresh executor with the storage on `disk` (one life of a shard, which
/// ends when the executor does).
fn on_disk<T: Send + 'static, F: Future<Output = T> + 'static>(
    disk: &SimDisk,
    f: impl FnOnce() -> F + Send + 'static,
) -> T {
    let disk = disk.clone();
    on_executor(move || async move {
        disk::simulate(Some(disk));
        f().await
    })
}

/// A shard's storage opened on the simulated disk: its flush loop and `n` logs.
struct Shard {
    disk: SimDisk,
    flush: Rc<FlushQueue>,
    kv: Rc<ShardKv>,
    logs: Vec<Log>,
    /// How each log opened.
    opened: Vec<keel_storage::OpenKind>,
}

impl Shard {
    /// Opens (recovering) the journal, the state store and `n` logs, as a shard does.
    async fn open(disk: SimDisk, n: usize) -> Shard {
        let journal = Journal::open(&root().join(".journal"), journal_config()).await.expect("journal opens");
        let flush = FlushQueue::with_journal(None, journal.clone());
        glommio::spawn_local(flush.clone().run()).detach();
        let kv = ShardKv::open(&root().join(".kv"), flush.clone()).await.expect("state store opens");
        let (mut logs, mut opened) = (Vec::new(), Vec::new());
        for i in 0..n {
            let keys = kv.keys(&format!("partition/{i}/"));
            let key = Bytes::from(format!("log-{i:03}"));
            let (l, kind) = PartitionLog::open_journaled(&log_dir(i), log_config(), Some(keys), &journal, key, |_| {})
                .await
                .expect("log opens");
            let l = Rc::new(RefCell::new(l));
            flush.register(&l);
            logs.push(l);
            opened.push(kind);
        }
        journal.finish_recovery();
        Shard { disk, flush, kv, logs, opened }
    }

    /// Appends one batch per value to log `i` (each value `len` bytes of it) and waits
    /// until they are durable.
    async fn append(&self, i: usize, values: std::ops::Range<u8>, len: usize) {
        let l = &self.logs[i];
        let mut last = -1;
        for v in values {
            let batch = build_batch(0, 0, &[(None, Some(&vec![v; len][..]))]);
            log::roll_if_needed(l, batch.len()).await.unwrap();
            last = l.borrow_mut().append(&batch, 0, None).base_offset;
            self.flush.mark_dirty(l);
        }
        assert!(until(&self.disk, || l.borrow().high_watermark() > last).await);
    }

    /// Log `i`'s start offset and its batches' (offset, value).
    async fn contents(&self, i: usize) -> (i64, Vec<(i64, u8)>) {
        let l = &self.logs[i];
        let got = read_all(l).await.into_iter().map(|(o, v)| (o, v[0])).collect();
        let start = l.borrow().log_start_offset;
        (start, got)
    }
}

fn batches(offsets: std::ops::Range<i64>, first_value: u8) -> Vec<(i64, u8)> {
    offsets.enumerate().map(|(n, o)| (o, first_value + n as u8)).collect()
}

/// Seeds 8 and 10 of the simulation, as scenarios. Log 0: a truncation below the
/// checkpoint mark, then the power goes (its file was cut, its journal record missing:
/// recovery replayed the cut batches after the mark onto the shorter file, leaving a
/// hole). Log 1: a truncation and an append, a restart, a checkpoint and an append,
/// then the power goes (the restart recorded the replayed truncation again, after the
/// new mark, and the next restart cut the batch it had replayed). Log 2: DeleteRecords
/// after a truncation (the replayed truncation moved the log start back).
#[test]
fn a_truncation_survives_power_loss_before_and_after_a_restart() {
    let disk = SimDisk::new();
    let mut rng = StdRng::seed_from_u64(0);
    on_disk(&disk, {
        let disk = disk.clone();
        move || async move {
            let shard = Shard::open(disk, 3).await;
            for i in 0..3 {
                shard.append(i, 0..10, 1).await;
            }
            shard.flush.checkpoint().await.unwrap();
            for i in 0..3 {
                shard.append(i, 10..15, 1).await;
            }
            for i in 0..3 {
                log::truncate(&shard.logs[i], 5).await.unwrap();
            }
            shard.append(1, 50..51, 1).await;
            shard.append(2, 50..55, 1).await;
            retention::delete_records(&shard.logs[2], 7).await.unwrap();
        }
    });
    disk.power_cycle_keeping(0.0, &mut rng);
    on_disk(&disk, {
        let disk = disk.clone();
        move || async move {
            let shard = Shard::open(disk, 3).await;
            assert_eq!(shard.contents(0).await, (0, batches(0..5, 0)), "log 0 after a truncation and a power loss");
            let mut want = batches(0..5, 0);
            want.push((5, 50));
            assert_eq!(shard.contents(1).await, (0, want), "log 1 after a truncation and a power loss");
            assert_eq!(shard.contents(2).await, (7, batches(7..10, 52)), "log 2 after DeleteRecords and a power loss");
            shard.flush.checkpoint().await.unwrap();
            shard.append(1, 60..61, 1).await;
        }
    });
    disk.power_cycle_keeping(0.0, &mut rng);
    on_disk(&disk, {
        let disk = disk.clone();
        move || async move {
            let shard = Shard::open(disk, 3).await;
            let mut want = batches(0..5, 0);
            want.extend([(5, 50), (6, 60)]);
            assert_eq!(shard.contents(1).await, (0, want), "log 1 after a restart, a checkpoint and a power loss");
        }
    });
}

/// Seed 9144 of the cluster simulation (5 nodes), as a scenario: a log created, the
/// power lost before its first batch; after the restart, batches filling several
/// segments and the power lost again before a checkpoint, some unsynced sectors kept.
/// The journal knew nothing of the empty log, so the second restart trusted its
/// unsynced files: a lost sector in the first segment, with data in a later one, was
/// taken for damage on disk, and the replica refused to start.
#[test]
fn an_empty_log_recovers_from_its_journal_after_a_second_power_loss() {
    for seed in 0..20 {
        let disk = SimDisk::new();
        let mut rng = StdRng::seed_from_u64(seed);
        on_disk(&disk, {
            let disk = disk.clone();
            move || async move {
                Shard::open(disk, 1).await;
            }
        });
        disk.power_cycle_keeping(0.0, &mut rng);
        on_disk(&disk, {
            let disk = disk.clone();
            move || async move {
                let shard = Shard::open(disk, 1).await;
                shard.append(0, 0..40, 1000).await;
                assert!(shard.logs[0].borrow().segment_count() > 1, "the batches fill several segments");
            }
        });
        disk.power_cycle_keeping(0.5, &mut rng);
        on_disk(&disk, {
            let disk = disk.clone();
            move || async move {
                let shard = Shard::open(disk, 1).await;
                let (start, got) = shard.contents(0).await;
                assert_eq!((start, got.len()), (0, 40), "seed {seed}: every acknowledged batch, once");
                assert!(got.iter().enumerate().all(|(i, (o, v))| *o == i as i64 && *v == i as u8), "seed {seed}");
            }
        });
    }
}

/// Seed 11276 of the cluster simulation (5 nodes), as a scenario: batches filling
/// several segments of a new log, the power lost before any of them is durable. The
/// rolls made the later segments' names durable at once: the restart took the empty
/// first segment and an empty later one for a log ending at the later one's base,
/// claiming offsets it held nothing for (the Raft layer could not read its entries
/// back, and the node could not start).
#[test]
fn a_log_whose_batches_never_reached_the_disk_ends_where_its_data_does() {
    let disk = SimDisk::new();
    let mut rng = StdRng::seed_from_u64(0);
    on_disk(&disk, {
        let disk = disk.clone();
        move || async move {
            let shard = Shard::open(disk, 1).await;
            let l = &shard.logs[0];
            for v in 0..40u8 {
                // Not marked dirty: no flush pass takes these batches.
                let batch = build_batch(0, 0, &[(None, Some(&vec![v; 1000][..]))]);
                log::roll_if_needed(l, batch.len()).await.unwrap();
                l.borrow_mut().append(&batch, 0, None);
            }
            assert!(l.borrow().segment_count() > 1, "the batches fill several segments");
        }
    });
    disk.power_cycle_keeping(0.0, &mut rng);
    on_disk(&disk, {
        let disk = disk.clone();
        move || async move {
            let shard = Shard::open(disk, 1).await;
            assert_eq!(shard.logs[0].borrow().log_end_offset(), 0, "the log ends where its data does");
            shard.append(0, 0..3, 10).await;
            assert_eq!(shard.contents(0).await, (0, batches(0..3, 0)));
        }
    });
}
