//! Model test: random sequences of append, flush, roll, retention, DeleteRecords,
//! compaction, truncation and restart (crash or clean) against real files, checked
//! after every step against an in-memory model of what the log must hold.
//!
//! Each case is seeded; a failure prints its seed, and `KEEL_MODEL_SEED=<n>` replays
//! just that case. `KEEL_MODEL_CASES` and `KEEL_MODEL_STEPS` run longer searches.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use glommio::LocalExecutorBuilder;
use keel_protocol::batch::build_batch;
use keel_storage::compaction::{self, CompactionPolicy};
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::recovery;
use keel_storage::retention::{self, RetentionPolicy, SegmentSummary};
use keel_storage::{OpenKind, StorageError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common;

#[derive(Clone, PartialEq)]
struct Rec {
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: i64,
}

impl std::fmt::Debug for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned());
        let value = self.value.as_ref().map(|v| (v.len(), v.first().copied()));
        write!(f, "{}:{:?}={:?}@{}", self.offset, key, value, self.timestamp)
    }
}

/// What the log must hold.
#[derive(Default)]
struct Model {
    records: Vec<Rec>,
    /// (base, last) offsets of every batch appended and not truncated.
    batches: Vec<(i64, i64)>,
    start: i64,
    end: i64,
    durable: i64,
    now: i64,
}

impl Model {
    fn visible(&self) -> Vec<&Rec> {
        self.records.iter().filter(|r| r.offset >= self.start && r.offset < self.durable).collect()
    }

    fn drop_below(&mut self, offset: i64) {
        self.records.retain(|r| r.offset >= offset);
        self.batches.retain(|&(_, last)| last >= offset);
    }

    fn truncate(&mut self, offset: i64) {
        let cut = self.batches.iter().find(|&&(_, last)| last >= offset).map(|&(base, _)| base).unwrap_or(self.end);
        self.records.retain(|r| r.offset < cut);
        self.batches.retain(|&(base, _)| base < cut);
        self.end = cut;
        self.durable = cut;
    }

    /// Kafka's compaction rule over offsets below `upto`.
    fn compact(&mut self, upto: i64, now: i64, delete_retention_ms: i64) {
        let snapshot = self.records.clone();
        self.records.retain(|r| {
            if r.offset >= upto {
                return true;
            }
            let Some(key) = &r.key else { return false };
            let superseded =
                snapshot.iter().any(|o| o.offset > r.offset && o.offset < upto && o.key.as_ref() == Some(key));
            let expired = r.value.is_none() && r.timestamp + delete_retention_ms <= now;
            !superseded && !expired
        });
    }
}

fn config(rng: &mut StdRng) -> LogConfig {
    LogConfig {
        segment_bytes_max: rng.gen_range(1500..6000),
        segment_ms_max: if rng.gen_bool(0.3) { rng.gen_range(2_000..20_000) } else { i64::MAX },
        index_interval_bytes: 512,
        cache_bytes_max: if rng.gen_bool(0.5) { 0 } else { 16 << 10 },
        read_ahead_bytes: 4096,
        preallocate_step_bytes: if rng.gen_bool(0.5) { 0 } else { 16 << 10 },
    }
}

async fn open(dir: &Path, config: &LogConfig) -> (Rc<RefCell<PartitionLog>>, OpenKind) {
    common::open_log_reporting(dir, config.clone()).await
}

/// A batch of records, some keyless, some tombstones, some from an idempotent producer.
fn make_batch(rng: &mut StdRng, m: &Model, seq: &mut i32) -> (Bytes, Vec<Rec>) {
    let n = rng.gen_range(1..5);
    let mut recs = Vec::new();
    for i in 0..n {
        let key = (!rng.gen_bool(0.05)).then(|| format!("k{}", rng.gen_range(0..12)).into_bytes());
        let value = (!rng.gen_bool(0.1)).then(|| vec![rng.gen::<u8>(); rng.gen_range(0..300)]);
        recs.push(Rec { offset: m.end + i, key, value, timestamp: m.now - rng.gen_range(0..3000) });
    }
    let pairs: Vec<_> = recs.iter().map(|r| (r.key.as_deref(), r.value.as_deref())).collect();
    let base_ts = recs[0].timestamp;
    let built = build_batch(0, base_ts, &pairs);
    // build_batch stamps every record with base_ts; the model follows it.
    for r in &mut recs {
        r.timestamp = base_ts;
    }
    let batch = if rng.gen_bool(0.3) {
        let b = with_producer(&built, 7, 0, *seq);
        *seq += n as i32;
        b
    } else {
        built
    };
    (batch, recs)
}

fn with_producer(batch: &Bytes, producer_id: i64, epoch: i16, base_sequence: i32) -> Bytes {
    let mut b = BytesMut::from(&batch[..]);
    b[43..51].copy_from_slice(&producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// Every record the log serves from its start to its high watermark.
async fn read_all(l: &Rc<RefCell<PartitionLog>>, max_bytes: usize) -> Vec<Rec> {
    let (mut offset, hw) = (l.borrow().log_start_offset, l.borrow().high_watermark());
    let mut out = Vec::new();
    while offset < hw {
        let r = log::read(l, offset, max_bytes, i64::MAX).await.expect("read");
        if r.batches.is_empty() {
            break;
        }
        for b in r.batches {
            let h = keel_protocol::batch::validate(&b).expect("served batches are valid");
            let mut buf = b.clone();
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).expect("decodes");
            for rec in set.records.into_iter().filter(|r| r.offset >= offset) {
                out.push(Rec {
                    offset: rec.offset,
                    key: rec.key.map(|k| k.to_vec()),
                    value: rec.value.map(|v| v.to_vec()),
                    timestamp: rec.timestamp,
                });
            }
            offset = h.last_offset() + 1;
        }
    }
    out
}

async fn check(l: &Rc<RefCell<PartitionLog>>, m: &Model, rng: &mut StdRng, step: usize, op: &str) {
    let ctx = format!("after step {step} ({op})");
    {
        let lb = l.borrow();
        assert_eq!(lb.log_start_offset, m.start, "log start {ctx}");
        assert_eq!(lb.log_end_offset(), m.end, "log end {ctx}");
        assert_eq!(lb.high_watermark(), m.durable, "high watermark {ctx}");
    }
    let got = read_all(l, rng.gen_range(1..4000)).await;
    let want: Vec<Rec> = m.visible().into_iter().cloned().collect();
    assert_eq!(got, want, "records {ctx}");
    if let Some(probe) = want.get(rng.gen_range(0..want.len().max(1))) {
        let expect = want.iter().filter(|r| r.timestamp >= probe.timestamp).map(|r| (r.offset, r.timestamp)).next();
        let found = log::offset_for_timestamp(l, probe.timestamp).await.expect("timestamp lookup");
        assert_eq!(found, expect, "offset for timestamp {} {ctx}", probe.timestamp);
    }
}

async fn run_case(seed: u64, steps: usize, dir: &Path) {
    let mut rng = StdRng::seed_from_u64(seed);
    let cfg = config(&mut rng);
    let (mut l, _) = open(dir, &cfg).await;
    let mut m = Model { now: 1_000_000, ..Model::default() };
    let mut seq = 0;
    for step in 0..steps {
        m.now += rng.gen_range(0..4000);
        let op = match rng.gen_range(0..100) {
            0..=44 => {
                let (batch, recs) = make_batch(&mut rng, &m, &mut seq);
                log::roll_if_needed_at(&l, batch.len(), recs[0].timestamp).await.expect("roll");
                let h = l.borrow_mut().append(&batch, 0, None);
                assert_eq!(h.base_offset, m.end);
                m.batches.push((h.base_offset, h.last_offset()));
                m.end = h.last_offset() + 1;
                m.records.extend(recs);
                "append"
            }
            45..=59 => {
                log::flush(&l).await.expect("flush");
                m.durable = m.end;
                "flush"
            }
            60..=64 => {
                log::roll(&l).await.expect("roll");
                "roll"
            }
            65..=71 => {
                let policy = RetentionPolicy {
                    delete: rng.gen_bool(0.8),
                    retention_ms: [-1, 5_000, 20_000, 60_000][rng.gen_range(0..4)],
                    retention_bytes: [-1, 2_000, 8_000][rng.gen_range(0..3)],
                };
                let (expected, flushed) = expected_retention(&l, &m, &policy);
                let outcome = retention::enforce(&l, m.now, &policy).await.expect("retention");
                if flushed {
                    m.durable = m.end;
                }
                m.start = expected;
                assert_eq!(outcome.log_start_offset, m.start, "retention start, step {step}");
                m.drop_below(m.start);
                "retention"
            }
            72..=76 => {
                let target = match rng.gen_range(0..4) {
                    0 => -1,
                    1 => m.durable + rng.gen_range(1..5),
                    _ => rng.gen_range(m.start..=m.durable),
                };
                match retention::delete_records(&l, target).await {
                    Ok(start) => {
                        assert!(target <= m.durable, "delete records past the high watermark accepted");
                        let t = if target == -1 { m.durable } else { target };
                        m.start = m.start.max(t);
                        assert_eq!(start, m.start);
                        m.drop_below(m.start);
                    }
                    Err(StorageError::OffsetOutOfRange { .. }) => assert!(target > m.durable),
                    Err(e) => panic!("delete records: {e}"),
                }
                "delete records"
            }
            77..=84 => {
                let policy = CompactionPolicy {
                    min_compaction_lag_ms: 0,
                    delete_retention_ms: [0, 10_000, 1 << 40][rng.gen_range(0..3)],
                    min_cleanable_dirty_ratio: 0.0,
                    key_map_bytes_max: if rng.gen_bool(0.3) { 48 * 4 } else { 1 << 20 },
                };
                if let Some(outcome) = compaction::compact(&l, m.now, &policy, true, compaction::Transactions::none())
                    .await
                    .expect("compaction")
                {
                    if std::env::var("KEEL_MODEL_TRACE").is_ok() {
                        eprintln!("compaction {outcome:?} {policy:?}");
                    }
                    m.compact(outcome.cleaned_upto, m.now, policy.delete_retention_ms);
                }
                "compaction"
            }
            85..=89 => {
                // Raft cuts on batch boundaries: a batch base, the end, or the start.
                let offset = match rng.gen_range(0..4) {
                    0 => rng.gen_range(m.start.saturating_sub(2).max(0)..=m.start),
                    1 => m.end,
                    _ => {
                        let bases: Vec<i64> = m.batches.iter().map(|&(b, _)| b).filter(|&b| b > m.start).collect();
                        bases.get(rng.gen_range(0..bases.len().max(1))).copied().unwrap_or(m.end)
                    }
                };
                log::truncate(&l, offset).await.expect("truncate");
                if offset >= m.end {
                    // Nothing to cut: the log is left as it was.
                } else if offset <= m.start {
                    m.records.clear();
                    m.batches.clear();
                    m.start = offset;
                    m.end = offset;
                    m.durable = offset;
                } else {
                    m.truncate(offset);
                }
                "truncate"
            }
            90..=94 => {
                drop(l);
                let (reopened, kind) = open(dir, &cfg).await;
                assert_eq!(kind, OpenKind::Scanned, "a crash leaves no clean marker");
                l = reopened;
                m.truncate_unflushed();
                "crash restart"
            }
            _ => {
                recovery::close(&l).await.expect("close");
                drop(l);
                let (reopened, kind) = open(dir, &cfg).await;
                assert_eq!(kind, OpenKind::Clean, "a clean close is trusted at open");
                l = reopened;
                m.durable = m.end;
                "clean restart"
            }
        };
        if std::env::var("KEEL_MODEL_TRACE").is_ok() {
            let lb = l.borrow();
            eprintln!(
                "step {step} {op}: start {} end {} hw {} segments {:?} cleaned {}",
                lb.log_start_offset,
                lb.log_end_offset(),
                lb.high_watermark(),
                lb.segment_bases(),
                lb.cleaned_upto()
            );
        }
        check(&l, &m, &mut rng, step, op).await;
    }
}

impl Model {
    /// After a crash only what was flushed remains, and the log ends there: segment
    /// files rolled after it hold nothing and go (a replicated log's offsets are its
    /// Raft indexes, which must have no gaps).
    fn truncate_unflushed(&mut self) {
        let durable = self.durable;
        self.records.retain(|r| r.offset < durable);
        self.batches.retain(|&(base, _)| base < durable);
        self.end = durable;
        self.durable = self.end;
        if self.start > self.end {
            self.start = self.end;
        }
    }
}

/// The log start offset retention must reach and whether it flushes (it rolls and
/// flushes first when the active segment must go too).
fn expected_retention(l: &Rc<RefCell<PartitionLog>>, m: &Model, policy: &RetentionPolicy) -> (i64, bool) {
    let lb = l.borrow();
    let bases = lb.segment_bases();
    let summaries: Vec<SegmentSummary> = retention::segment_summaries(&lb);
    for (i, s) in summaries.iter().enumerate() {
        let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let newest =
            m.records.iter().filter(|r| r.offset >= s.base_offset && r.offset < next).map(|r| r.timestamp).max();
        assert!(newest.unwrap_or(-1) <= s.max_timestamp, "segment {} max timestamp below its records'", s.base_offset);
    }
    let plan = retention::plan(&summaries, m.start, m.durable, m.end, m.now, policy);
    if plan.roll_active {
        (m.end, true)
    } else if plan.delete_count > 0 {
        (m.start.max(bases[plan.delete_count]), false)
    } else {
        (m.start, false)
    }
}

fn cases() -> Vec<u64> {
    if let Some(seed) = std::env::var("KEEL_MODEL_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let n = std::env::var("KEEL_MODEL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    (1..=n).collect()
}

#[test]
fn random_operations_match_the_model() {
    let steps: usize = std::env::var("KEEL_MODEL_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(250);
    for seed in cases() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().to_path_buf();
        let result = LocalExecutorBuilder::default()
            .spawn(move || async move {
                keel_storage::prime_dma_probe(&data).await.unwrap();
                run_case(seed, steps, &data.join("t-0")).await;
            })
            .unwrap()
            .join();
        assert!(result.is_ok(), "model case failed: replay with KEEL_MODEL_SEED={seed}");
    }
}
