//! Start-up time after a clean close versus after a crash, on a log of
//! `KEEL_RESTART_MB` megabytes (default 256). Ignored by default (it writes that much):
//! `cargo test -p keel-storage --release --test storage restart_time:: -- --ignored --nocapture`.
//! It also prints the append throughput of writing that log (4 MiB per flush pass),
//! to set against the disk's sequential O_DIRECT bandwidth measured with fio.
//!
//! `journaled_crash_restart` does the same through a journaled log, as a broker shard
//! writes every partition, and times the open after a crash (no clean close).

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use glommio::LocalExecutorBuilder;
use keel_protocol::batch::build_batch;
use keel_storage::flush::FlushQueue;
use keel_storage::journal::{Journal, JournalConfig};
use keel_storage::kv::ShardKv;
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::{recovery, OpenKind};

use crate::common;

fn config() -> LogConfig {
    LogConfig { segment_bytes_max: 64 << 20, ..LogConfig::default() }
}

async fn open(dir: &Path) -> (Rc<RefCell<PartitionLog>>, OpenKind, f64) {
    let start = Instant::now();
    let (l, kind) = common::open_log_reporting(dir, config()).await;
    (l, kind, start.elapsed().as_secs_f64() * 1000.0)
}

#[test]
#[ignore]
fn clean_restart_skips_the_scan() {
    let megabytes: usize = std::env::var("KEEL_RESTART_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(256);
    let tmp = tempfile::tempdir_in(std::env::var("KEEL_RESTART_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap();
    let data = tmp.path().to_path_buf();
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            keel_storage::prime_dma_probe(&data).await.unwrap();
            let dir = data.join("t-0");
            let (l, _, _) = open(&dir).await;
            let value = vec![7u8; 16 << 10];
            let records = [(None, Some(&value[..])); 4];
            let batch = build_batch(0, 1, &records);
            let batches = (megabytes << 20) / batch.len();
            let writing = Instant::now();
            for i in 0..batches {
                log::roll_if_needed(&l, batch.len()).await.unwrap();
                l.borrow_mut().append(&batch, 0, None);
                if i % 64 == 63 {
                    log::flush(&l).await.unwrap();
                }
            }
            log::flush(&l).await.unwrap();
            let write_secs = writing.elapsed().as_secs_f64();
            println!(
                "append + flush every 64 batches: {megabytes} MiB in {write_secs:.2} s = {:.0} MB/s",
                (batches * batch.len()) as f64 / write_secs / 1e6
            );
            let end = l.borrow().log_end_offset();
            drop(l);
            let (l, kind, scanned_ms) = open(&dir).await;
            assert_eq!((kind, l.borrow().log_end_offset()), (OpenKind::Scanned, end));
            recovery::close(&l).await.unwrap();
            drop(l);
            let (l, kind, clean_ms) = open(&dir).await;
            assert_eq!((kind, l.borrow().log_end_offset()), (OpenKind::Clean, end));
            let segments = l.borrow().segment_count();
            println!("{megabytes} MiB in {segments} segments: open after crash {scanned_ms:.1} ms, after clean close {clean_ms:.1} ms");
        })
        .unwrap()
        .join()
        .unwrap();
}

/// One broker life for the journaled variant: the shard's journal, flush loop and
/// state store, and the log opened through them as the broker opens a partition.
struct JournaledShard {
    journal: Rc<Journal>,
    flush: Rc<FlushQueue>,
    log: Rc<RefCell<PartitionLog>>,
    kind: OpenKind,
}

async fn open_journaled_shard(data: &Path) -> JournaledShard {
    let start = Instant::now();
    let before = keel_storage::stats::snapshot();
    let journal = Journal::open(&data.join(".journal"), JournalConfig::default()).await.unwrap();
    let journal_ms = start.elapsed().as_secs_f64() * 1000.0;
    let after = keel_storage::stats::snapshot();
    let (files, mib) = (
        after.journal_files_read - before.journal_files_read,
        (after.journal_bytes_read - before.journal_bytes_read) >> 20,
    );
    let flush = FlushQueue::with_journal(None, journal.clone());
    glommio::spawn_local(flush.clone().run()).detach();
    let kv = ShardKv::open(&data.join(".kv"), flush.clone()).await.unwrap();
    let kv_ms = start.elapsed().as_secs_f64() * 1000.0 - journal_ms;
    println!(
        "  journal read {journal_ms:.1} ms ({files} files, {mib} MiB), state store opened {kv_ms:.1} ms ({} KiB of log)",
        kv.log_bytes() >> 10
    );
    let keys = kv.keys("t-0/");
    let (log, kind) = PartitionLog::open_journaled(
        &data.join("t-0"),
        config(),
        Some(keys),
        &journal,
        Bytes::from_static(b"t-0"),
        |_| {},
    )
    .await
    .unwrap();
    let log = Rc::new(RefCell::new(log));
    flush.register(&log);
    journal.finish_recovery();
    JournaledShard { journal, flush, log, kind }
}

/// Writes `KEEL_RESTART_MB` through a journaled log as a broker shard does (journal
/// passes, segment writes behind them, checkpoints every 64 MiB of journal), stops
/// without a clean close (a crash: the executor ends, nothing is flushed), and times
/// the next open, journal replay included.
#[test]
#[ignore]
fn journaled_crash_restart() {
    let megabytes: usize = std::env::var("KEEL_RESTART_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(256);
    let tmp = tempfile::tempdir_in(std::env::var("KEEL_RESTART_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap();
    let data = tmp.path().to_path_buf();
    let data2 = data.clone();
    let (end, checkpoints) = common::run(move || async move {
        keel_storage::prime_dma_probe(&data2).await.unwrap();
        let shard = open_journaled_shard(&data2).await;
        let l = shard.log.clone();
        let value = vec![7u8; 16 << 10];
        let records = [(None, Some(&value[..])); 4];
        let batch = build_batch(0, 1, &records);
        let batches = (megabytes << 20) / batch.len();
        let writing = Instant::now();
        let mut last = 0;
        for i in 0..batches {
            log::roll_if_needed(&l, batch.len()).await.unwrap();
            last = l.borrow_mut().append(&batch, 0, None).last_offset();
            if i % 64 == 63 || i + 1 == batches {
                shard.flush.mark_dirty(&l);
                common::wait_high_watermark(&l, last).await;
            }
        }
        let write_secs = writing.elapsed().as_secs_f64();
        println!(
            "journaled append, acks=all every 64 batches: {megabytes} MiB in {write_secs:.2} s = {:.0} MB/s",
            (batches * batch.len()) as f64 / write_secs / 1e6
        );
        assert!(last > 0);
        let end = l.borrow().high_watermark();
        (end, shard.journal.checkpoints.get())
    });
    let data3 = data.clone();
    let (kind, ms, reopened_end, segments) = common::run(move || async move {
        keel_storage::prime_dma_probe(&data3).await.unwrap();
        let start = Instant::now();
        let shard = open_journaled_shard(&data3).await;
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        let (high_watermark, segments) = {
            let l = shard.log.borrow();
            (l.high_watermark(), l.segment_count())
        };
        (shard.kind, ms, high_watermark, segments)
    });
    assert!(reopened_end >= end, "acknowledged data lost: {reopened_end} < {end}");
    assert_eq!(kind, OpenKind::Snapshot, "the crash-restart scanned instead of using its checkpoint snapshot");
    println!(
        "{megabytes} MiB in {segments} segments, {checkpoints} checkpoints: open after a crash ({kind:?}) {ms:.1} ms"
    );
}
