//! Catch-up reads from disk with read-ahead: a consumer reading in order gets every
//! batch once, in order, and after a truncation (and new appends at the same
//! offsets) never the data read ahead before it.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use glommio::LocalExecutorBuilder;
use keel_protocol::batch::{build_batch, validate};
use keel_storage::log::{self, LogConfig, PartitionLog};

async fn append(l: &Rc<RefCell<PartitionLog>>, count: usize, epoch: i32, fill: u8) {
    for i in 0..count {
        let b = build_batch(0, i as i64, &[(None, Some(&vec![fill; 3000][..]))]);
        log::roll_if_needed(l, b.len()).await.unwrap();
        l.borrow_mut().append(&b, epoch, None);
    }
    log::flush(l).await.unwrap();
}

/// Reads from `from` to the end in steps of `max_bytes`, pausing between reads as a
/// consumer does, and returns (offset, leader epoch) of every batch.
async fn read_all(l: &Rc<RefCell<PartitionLog>>, from: i64, max_bytes: usize) -> Vec<(i64, i32)> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let r = log::read(l, next, max_bytes, i64::MAX).await.unwrap();
        if r.batches.is_empty() {
            return out;
        }
        for b in &r.batches {
            let h = validate(b).unwrap();
            if h.last_offset() >= next {
                out.push((h.base_offset, h.partition_leader_epoch));
                next = h.last_offset() + 1;
            }
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

#[test]
fn in_order_reads_see_every_batch_once_and_nothing_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().to_path_buf();
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            keel_storage::prime_dma_probe(&data).await.unwrap();
            let config = LogConfig {
                segment_bytes_max: 256 << 10,
                cache_bytes_max: 0,
                read_ahead_bytes: 16 << 10,
                ..LogConfig::default()
            };
            let l = PartitionLog::open(&data.join("t-0"), config, None, |_| {}).await.unwrap();
            let l = Rc::new(RefCell::new(l));
            append(&l, 300, 1, 1).await;
            let expected: Vec<(i64, i32)> = (0..300).map(|o| (o, 1)).collect();
            assert_eq!(read_all(&l, 0, 10_000).await, expected, "segments crossed, reads ahead used");

            // Read part of the way (leaving a read-ahead behind), truncate below it,
            // append other batches at the same offsets: the next read sees only those.
            let first = log::read(&l, 100, 10_000, i64::MAX).await.unwrap();
            let next = validate(first.batches.last().unwrap()).unwrap().last_offset() + 1;
            glommio::timer::sleep(Duration::from_millis(20)).await;
            log::truncate(&l, 90).await.unwrap();
            append(&l, 50, 2, 2).await;
            let after = read_all(&l, next, 10_000).await;
            let want: Vec<(i64, i32)> = (next..140).map(|o| (o, 2)).collect();
            assert_eq!(after, want, "no batch read ahead before the truncation is served");
        })
        .unwrap()
        .join()
        .unwrap();
}
