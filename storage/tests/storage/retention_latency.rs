//! How much retention deleting ~1 GiB of segments stalls the shard, measured inside one
//! glommio executor: a "produce" task appends and flushes a small batch every
//! millisecond and records how late its timer fires (reactor stall) and how long the
//! append-to-durable takes, first with nothing else running, then while
//! `retention::enforce` deletes the segments from a low-share task queue, then while a
//! naive inline `std::fs::remove_file` loop deletes the same amount for comparison.
//! Ignored by default (it writes 2 GiB):
//! `cargo test -p keel-storage --release --test storage retention_latency:: -- --ignored --nocapture`.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::{Latency, LocalExecutorBuilder, Shares};
use keel_protocol::batch::build_batch;
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::retention::{self, RetentionPolicy};

use crate::common;

const SEGMENTS: usize = 16;
const SEGMENT_BYTES: u64 = 64 << 20;
const PHASE: Duration = Duration::from_secs(3);

async fn open(dir: &Path, segment_bytes_max: u64) -> Rc<RefCell<PartitionLog>> {
    let config = LogConfig { segment_bytes_max, ..LogConfig::default() };
    common::open_log(dir, config).await
}

/// Fills a log with `SEGMENTS` full segments.
async fn fill(dir: &Path) -> Rc<RefCell<PartitionLog>> {
    let l = open(dir, SEGMENT_BYTES).await;
    let value = vec![1u8; 256 << 10];
    let batch = build_batch(0, 1, &[(None, Some(&value[..]))]);
    while l.borrow().segment_count() <= SEGMENTS {
        log::roll_if_needed(&l, batch.len()).await.unwrap();
        l.borrow_mut().append(&batch, 0, None);
        log::flush(&l).await.unwrap();
    }
    l
}

#[derive(Default)]
struct Samples {
    timer_late_us: Vec<u64>,
    durable_us: Vec<u64>,
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0)
}

/// Appends and flushes one small batch per millisecond for `PHASE`.
async fn produce(l: Rc<RefCell<PartitionLog>>) -> Samples {
    let batch = build_batch(0, 1, &[(None, Some(&[7u8; 1024][..]))]);
    let mut s = Samples::default();
    let end = Instant::now() + PHASE;
    while Instant::now() < end {
        let before = Instant::now();
        glommio::timer::sleep(Duration::from_millis(1)).await;
        s.timer_late_us.push(before.elapsed().saturating_sub(Duration::from_millis(1)).as_micros() as u64);
        let start = Instant::now();
        log::roll_if_needed(&l, batch.len()).await.unwrap();
        l.borrow_mut().append(&batch, 0, None);
        log::flush(&l).await.unwrap();
        s.durable_us.push(start.elapsed().as_micros() as u64);
    }
    s
}

fn report(name: &str, mut s: Samples) {
    println!(
        "{name:<28} timer lateness p99 {:>6} us max {:>7} us | append+fsync p50 {:>5} us p99 {:>6} us max {:>7} us",
        pct(&mut s.timer_late_us, 0.99),
        pct(&mut s.timer_late_us, 1.0),
        pct(&mut s.durable_us, 0.5),
        pct(&mut s.durable_us, 0.99),
        pct(&mut s.durable_us, 1.0)
    );
}

#[test]
#[ignore]
fn retention_does_not_stall_the_shard() {
    let tmp = tempfile::tempdir_in(std::env::var("KEEL_LATENCY_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap();
    let data = tmp.path().to_path_buf();
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            keel_storage::prime_dma_probe(&data).await.unwrap();
            let hot = open(&data.join("hot-0"), 1 << 30).await;
            let low = glommio::executor().create_task_queue(Shares::Static(20), Latency::NotImportant, "housekeeping");

            report("idle", produce(hot.clone()).await);

            let bulk = fill(&data.join("bulk-0")).await;
            let policy = RetentionPolicy { delete: true, retention_ms: -1, retention_bytes: 0 };
            let deleting = glommio::spawn_local_into(
                async move {
                    let start = Instant::now();
                    let outcome = retention::enforce(&bulk, 0, &policy).await.unwrap();
                    (outcome.bytes_deleted, start.elapsed())
                },
                low,
            )
            .unwrap();
            report("retention::enforce (1 GiB)", produce(hot.clone()).await);
            let (bytes, took) = deleting.await;
            println!("  retention deleted {} MiB in {:?}", bytes >> 20, took);

            let bulk = fill(&data.join("naive-0")).await;
            let paths: Vec<_> = std::fs::read_dir(data.join("naive-0"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().map(|e| e == "log").unwrap_or(false))
                .collect();
            drop(bulk);
            glommio::timer::sleep(Duration::from_millis(50)).await;
            let naive = glommio::spawn_local_into(
                async move {
                    glommio::timer::sleep(Duration::from_millis(200)).await;
                    let start = Instant::now();
                    for p in paths {
                        std::fs::remove_file(p).unwrap();
                        glommio::yield_if_needed().await;
                    }
                    start.elapsed()
                },
                low,
            )
            .unwrap();
            report("inline remove_file (1 GiB)", produce(hot.clone()).await);
            println!("  inline removal took {:?}", naive.await);
        })
        .unwrap()
        .join()
        .unwrap();
}
