//! Appends, flushes, restarts and reads back through DMA reads on a real file system,
//! including a torn and a corrupted tail.

use std::cell::RefCell;
use std::rc::Rc;

use keel_protocol::batch::build_batch;
use keel_storage::log::{self, LogConfig, PartitionLog};

use crate::common;
use common::{open_log, run};

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 64 << 10,
        index_interval_bytes: 1024,
        cache_bytes_max: 0,
        read_ahead_bytes: 8192,
        ..LogConfig::default()
    }
}

async fn open(dir: &std::path::Path) -> Rc<RefCell<PartitionLog>> {
    keel_storage::prime_dma_probe(dir.parent().unwrap()).await.unwrap();
    open_log(dir, small_config()).await
}

async fn append_n(l: &Rc<RefCell<PartitionLog>>, n: usize, value_len: usize) {
    for i in 0..n {
        let value = vec![(i % 251) as u8; value_len];
        let b = build_batch(0, 1000 + i as i64, &[(Some(format!("k{i}").as_bytes()), Some(&value))]);
        log::roll_if_needed(l, b.len()).await.unwrap();
        l.borrow_mut().append(&b, 0, None);
        if i % 7 == 0 {
            log::flush(l).await.unwrap();
        }
    }
    log::flush(l).await.unwrap();
}

async fn read_all(l: &Rc<RefCell<PartitionLog>>) -> Vec<(i64, usize)> {
    let mut out = Vec::new();
    let mut offset = 0;
    let end = l.borrow().high_watermark();
    while offset < end {
        let r = log::read(l, offset, 3000, i64::MAX).await.unwrap();
        assert!(!r.batches.is_empty(), "no progress at {offset}");
        for b in r.batches {
            let h = keel_protocol::batch::validate(&b).unwrap();
            if h.base_offset >= offset {
                out.push((h.base_offset, b.len()));
            }
            offset = h.last_offset() + 1;
        }
    }
    out
}

#[test]
fn survives_restart_with_dma_reads_across_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    run(move || async move {
        let l = open(&dir).await;
        append_n(&l, 300, 700).await;
        let before = read_all(&l).await;
        assert_eq!(before.len(), 300);
        assert!(before.iter().enumerate().all(|(i, (o, _))| *o == i as i64));
        drop(l);
        let l = open(&dir).await;
        assert_eq!(l.borrow().log_end_offset(), 300);
        assert_eq!(read_all(&l).await, before);
        append_n(&l, 10, 5000).await;
        assert_eq!(l.borrow().log_end_offset(), 310);
        assert_eq!(read_all(&l).await.len(), 310);
    });
}

#[test]
fn torn_and_corrupt_tails_are_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let d = dir.clone();
    run(move || async move {
        let l = open(&d).await;
        append_n(&l, 20, 100).await;
    });
    let seg = dir.join(format!("{:020}.log", 0));
    let starts = batch_starts(&std::fs::read(&seg).unwrap());
    assert_eq!(starts.len(), 21, "20 batches and the end");
    // Tear the last batch in half.
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(starts[20] as u64 - 50).unwrap();
    let d = dir.clone();
    run(move || async move {
        let l = open(&d).await;
        assert_eq!(l.borrow().log_end_offset(), 19);
        assert_eq!(read_all(&l).await.len(), 19);
    });
    // Flip a byte inside the 10th batch: recovery keeps the 9 before it.
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[starts[9] + 70] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    run(move || async move {
        let l = open(&dir).await;
        assert_eq!(l.borrow().log_end_offset(), 9);
        append_n(&l, 3, 100).await;
        assert_eq!(read_all(&l).await.len(), 12);
    });
}

/// Positions where each batch starts, and where the data ends (zero padding excluded).
fn batch_starts(file: &[u8]) -> Vec<usize> {
    let mut out = vec![0];
    let mut pos = 0;
    while let Some(Ok(len)) = keel_protocol::batch::peek_batch_len(&file[pos..]) {
        if pos + len > file.len() || file[pos + 16] != 2 {
            break;
        }
        pos += len;
        out.push(pos);
    }
    out
}
