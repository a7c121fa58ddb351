//! Helpers the storage integration tests share: an executor to run a test's future
//! on, and opening a log with its state keys in a standalone store beside it (as a
//! restarted broker would).
#![allow(dead_code)]

use std::cell::RefCell;
use std::future::Future;
use std::path::Path;
use std::rc::Rc;

use glommio::LocalExecutorBuilder;
use keel_storage::kv::ShardKv;
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::OpenKind;

/// Runs `f` on a fresh glommio executor and returns its output.
pub fn run<T: Send + 'static, F: Future<Output = T> + 'static>(f: impl FnOnce() -> F + Send + 'static) -> T {
    LocalExecutorBuilder::default().spawn(move || async move { f().await }).unwrap().join().unwrap()
}

/// Opens (recovering) the log in `dir`, telling how it was opened.
pub async fn open_log_reporting(dir: &Path, config: LogConfig) -> (Rc<RefCell<PartitionLog>>, OpenKind) {
    let keys = ShardKv::standalone_keys_for(dir).await.unwrap();
    let (log, kind) = PartitionLog::open_reporting(dir, config, Some(keys), |_| {}).await.unwrap();
    (Rc::new(RefCell::new(log)), kind)
}

/// Opens (recovering) the log in `dir`.
pub async fn open_log(dir: &Path, config: LogConfig) -> Rc<RefCell<PartitionLog>> {
    open_log_reporting(dir, config).await.0
}

/// Waits until the log's high watermark is past `offset`: the batch there is durable.
pub async fn wait_high_watermark(log: &Rc<RefCell<PartitionLog>>, offset: i64) {
    while log.borrow().high_watermark() <= offset {
        let changed = log.borrow().changed.wait();
        changed.await;
    }
}

/// Every batch of the log from its start to its high watermark, CRC-checked: (offset,
/// the first record's value).
pub async fn read_all(log: &Rc<RefCell<PartitionLog>>) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let (mut offset, end) = {
        let l = log.borrow();
        (l.log_start_offset, l.high_watermark())
    };
    while offset < end {
        let r = log::read(log, offset, 1 << 20, end).await.expect("read back");
        if r.batches.is_empty() {
            // Compaction removed every record from here to the high watermark.
            let cleaned = log.borrow().cleaned_upto();
            assert!(
                end <= cleaned,
                "nothing read at {offset} below the high watermark {end} (cleaned up to {cleaned})"
            );
            break;
        }
        for b in r.batches {
            let h = keel_protocol::batch::validate(&b).expect("every batch served passes its CRC");
            let body = keel_storage::batch_filter::decompressed_body(&h, &b).unwrap();
            let recs = keel_storage::batch_filter::parse_records(&h, &body).unwrap();
            // A tombstone as its key alone.
            let record = &recs[0];
            out.push((h.base_offset, record.value.or(record.key).expect("a tombstone has a key").to_vec()));
            offset = h.last_offset() + 1;
        }
    }
    out
}
