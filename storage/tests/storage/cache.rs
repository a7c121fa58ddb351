//! The shard's batch-cache budget: after a flush pass the caches of all logs fit in
//! it, the largest are cut first, small ones keep everything, and evicted batches
//! are still served (from their segments).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use glommio::LocalExecutorBuilder;
use keel_protocol::batch::build_batch;
use keel_storage::cache::ShardCache;
use keel_storage::flush::FlushQueue;
use keel_storage::log::{self, LogConfig, PartitionLog};

async fn append(flush: &FlushQueue, l: &Rc<RefCell<PartitionLog>>, count: usize, size: usize) {
    for i in 0..count {
        let b = build_batch(0, i as i64, &[(None, Some(&vec![i as u8; size][..]))]);
        log::roll_if_needed(l, b.len()).await.unwrap();
        l.borrow_mut().append(&b, 0, None);
    }
    flush.mark_dirty(l);
    let end = l.borrow().log_end_offset();
    while l.borrow().high_watermark() < end {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

#[test]
fn caches_of_all_logs_fit_the_shard_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().to_path_buf();
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            keel_storage::prime_dma_probe(&data).await.unwrap();
            let limit = 64 << 10;
            let cache = ShardCache::new(limit);
            let flush = FlushQueue::with_cache(cache.clone());
            glommio::spawn_local(flush.clone().run()).detach();
            let config = LogConfig { cache_bytes_max: limit, ..LogConfig::default() };
            let mut logs = Vec::new();
            for name in ["hot", "warm", "quiet"] {
                let l = PartitionLog::open(&data.join(name), config.clone(), None, |_| {}).await.unwrap();
                let l = Rc::new(RefCell::new(l));
                cache.adopt(&l);
                logs.push(l);
            }
            append(&flush, &logs[2], 1, 1000).await;
            append(&flush, &logs[1], 4, 4000).await;
            append(&flush, &logs[0], 30, 4000).await;
            // The pass that made the hot log durable evicted; a later one may be needed
            // if its appends were split over passes.
            append(&flush, &logs[2], 1, 1000).await;

            assert!(cache.used() <= limit, "{} bytes cached, budget {limit}", cache.used());
            let cached = |i: usize| logs[i].borrow().cache_bytes();
            assert_eq!(cached(2), logs[2].borrow().size_bytes() as usize, "a quiet log keeps its batches");
            assert_eq!(cached(1), logs[1].borrow().size_bytes() as usize, "a small log keeps its batches");
            assert!(cached(0) < logs[0].borrow().size_bytes() as usize / 2, "the hot log was cut: {}", cached(0));
            assert_eq!(cache.used(), cached(0) + cached(1) + cached(2));

            // Evicted batches are read from disk, the newest still come from memory.
            for offset in [0i64, 29] {
                let r = log::read(&logs[0], offset, 1, 30).await.unwrap();
                let header = keel_protocol::batch::validate(&r.batches[0]).unwrap();
                assert_eq!(header.base_offset, offset);
            }
            drop(logs);
            assert_eq!(cache.used(), 0, "dropped logs give their cache back");
        })
        .unwrap()
        .join()
        .unwrap();
}
