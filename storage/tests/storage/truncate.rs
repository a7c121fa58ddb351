//! `truncate(offset)` as a Raft follower uses it: cut at a batch boundary inside a
//! closed segment, across segments, below the log start; the epoch cache, the high
//! watermark and the files follow, and new appends after the cut survive restarts.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use keel_protocol::batch::{build_batch, BatchHeader};
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::{recovery, retention};

use crate::common;
use common::{open_log, run};

fn config() -> LogConfig {
    LogConfig { segment_bytes_max: 4096, index_interval_bytes: 512, cache_bytes_max: 8192, ..LogConfig::default() }
}

async fn open(dir: &Path) -> Rc<RefCell<PartitionLog>> {
    keel_storage::prime_dma_probe(dir.parent().unwrap()).await.unwrap();
    open_log(dir, config()).await
}

/// Appends `n` two-record batches in `epoch`, flushing at the end.
async fn append(l: &Rc<RefCell<PartitionLog>>, n: usize, epoch: i32, tag: &str) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    for i in 0..n {
        let value = format!("{tag}-{i}-{}", "v".repeat(400));
        let b = build_batch(0, 1000 + i as i64, &[(Some(b"a"), Some(value.as_bytes())), (Some(b"b"), Some(b"x"))]);
        log::roll_if_needed(l, b.len()).await.unwrap();
        out.push(l.borrow_mut().append(&b, epoch, None));
    }
    log::flush(l).await.unwrap();
    out
}

/// (offset, value) of every record from the log start.
async fn records(l: &Rc<RefCell<PartitionLog>>) -> Vec<(i64, String)> {
    let (mut offset, hw) = (l.borrow().log_start_offset, l.borrow().high_watermark());
    let mut out = Vec::new();
    while offset < hw {
        let r = log::read(l, offset, 1 << 16, i64::MAX).await.unwrap();
        assert!(!r.batches.is_empty());
        for b in r.batches {
            let mut buf = b.clone();
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap();
            for rec in set.records.into_iter().filter(|r| r.offset >= offset) {
                out.push((rec.offset, String::from_utf8_lossy(&rec.value.unwrap()).into_owned()));
            }
            offset = BatchHeader::parse(&b).unwrap().last_offset() + 1;
        }
    }
    out
}

#[test]
fn truncate_cuts_across_segments_and_survives_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    run(move || async move {
        let l = open(&dir).await;
        append(&l, 20, 1, "e1").await;
        let second = append(&l, 20, 3, "e3").await;
        assert!(l.borrow().segment_count() >= 4, "batches span several segments");
        assert_eq!(l.borrow().epochs(), &[(1, 0), (3, 40)]);
        // Cut in the middle of epoch 3, inside an older segment.
        let cut = second[5].base_offset;
        log::truncate(&l, cut).await.unwrap();
        assert_eq!((l.borrow().log_end_offset(), l.borrow().high_watermark()), (cut, cut));
        assert_eq!(l.borrow().epochs(), &[(1, 0), (3, 40)]);
        assert_eq!(records(&l).await.len() as i64, cut);
        // The new leader's entries take the offsets after the cut.
        let third = append(&l, 10, 5, "e5").await;
        assert_eq!(third[0].base_offset, cut);
        assert_eq!(l.borrow().epochs(), &[(1, 0), (3, 40), (5, cut)]);
        let before = records(&l).await;
        assert_eq!(before.len() as i64, cut + 20);
        assert!(before[cut as usize].1.starts_with("e5-0-"));
        // Cutting exactly at an epoch boundary drops the epoch.
        log::truncate(&l, cut).await.unwrap();
        assert_eq!(l.borrow().epochs(), &[(1, 0), (3, 40)]);
        append(&l, 10, 5, "e5").await;
        drop(l);

        let l = open(&dir).await;
        assert_eq!(records(&l).await, before, "a crash restart reads the truncated log");
        assert_eq!(l.borrow().epochs(), &[(1, 0), (3, 40), (5, cut)]);
        recovery::close(&l).await.unwrap();
        drop(l);
        let l = open(&dir).await;
        assert_eq!(records(&l).await, before, "a clean restart reads the truncated log");
    });
}

#[test]
fn truncate_inside_a_batch_removes_the_whole_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    run(move || async move {
        let l = open(&dir).await;
        let batches = append(&l, 6, 0, "x").await;
        // Offset 7 is the second record of the batch at 6.
        assert_eq!(batches[3].base_offset, 6);
        log::truncate(&l, 7).await.unwrap();
        assert_eq!(l.borrow().log_end_offset(), 6);
        assert_eq!(records(&l).await.len(), 6);
        // At or past the end nothing changes.
        log::truncate(&l, 6).await.unwrap();
        log::truncate(&l, 100).await.unwrap();
        assert_eq!(l.borrow().log_end_offset(), 6);
    });
}

#[test]
fn truncate_below_the_log_start_restarts_the_log_there() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    run(move || async move {
        let l = open(&dir).await;
        append(&l, 30, 2, "x").await;
        assert_eq!(retention::delete_records(&l, 30).await.unwrap(), 30);
        log::truncate(&l, 20).await.unwrap();
        {
            let lb = l.borrow();
            assert_eq!((lb.log_start_offset, lb.log_end_offset(), lb.high_watermark()), (20, 20, 20));
            assert_eq!(lb.segment_count(), 1);
            assert!(lb.epochs().is_empty());
        }
        append(&l, 3, 4, "after").await;
        drop(l);
        let l = open(&dir).await;
        let lb = l.borrow();
        assert_eq!((lb.log_start_offset, lb.log_end_offset()), (20, 26), "the restart point is durable");
    });
}
