//! The active segment is zero-filled ahead of its end, so appends overwrite written
//! blocks; the zero fill is never read as data, a sealed segment gives it back, and a
//! restart (clean or not) ends the log where the data ends.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use glommio::LocalExecutorBuilder;
use keel_protocol::batch::build_batch;
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::recovery;

use crate::common;

async fn open(dir: &Path, config: &LogConfig) -> Rc<RefCell<PartitionLog>> {
    common::open_log(dir, config.clone()).await
}

#[test]
fn active_segment_is_zero_filled_ahead_and_sealed_ones_are_trimmed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().to_path_buf();
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            keel_storage::prime_dma_probe(&data).await.unwrap();
            let dir = data.join("t-0");
            let step = 1u64 << 20;
            let config = LogConfig { segment_bytes_max: 4 << 20, preallocate_step_bytes: step, ..LogConfig::default() };
            let l = open(&dir, &config).await;
            let b = build_batch(0, 1, &[(None, Some(&[1u8; 1000][..]))]);
            log::roll_if_needed(&l, b.len()).await.unwrap();
            l.borrow_mut().append(&b, 0, None);
            log::flush(&l).await.unwrap();
            let first = dir.join(format!("{:020}.log", 0));
            let bytes = std::fs::read(&first).unwrap();
            assert!(bytes.len() >= 256 << 10, "zeros are written ahead: {} bytes", bytes.len());
            assert_eq!(&bytes[..b.len()], &b[..]);
            assert!(bytes[b.len()..].iter().all(|x| *x == 0), "past the data there are only zeros");

            // A crash: the next open scans and ends the log before the zero fill.
            drop(l);
            let l = open(&dir, &config).await;
            assert_eq!(l.borrow().log_end_offset(), 1, "zero fill is not read as data");
            log::roll_if_needed(&l, b.len()).await.unwrap();
            l.borrow_mut().append(&b, 0, None);
            log::flush(&l).await.unwrap();

            // A clean stop keeps the zero fill and restores without scanning.
            recovery::close(&l).await.unwrap();
            drop(l);
            let (l, kind) = common::open_log_reporting(&dir, config.clone()).await;
            assert_eq!(kind, keel_storage::OpenKind::Clean);
            assert_eq!(l.borrow().log_end_offset(), 2);

            log::roll(&l).await.unwrap();
            log::flush(&l).await.unwrap();
            let sealed = std::fs::metadata(&first).unwrap();
            assert_eq!(sealed.len(), 2 * b.len() as u64, "sealing cuts the zero fill off");
            drop(l);
            let l = common::open_log(&dir, LogConfig::default()).await;
            assert_eq!(l.borrow().log_end_offset(), 2);
        })
        .unwrap()
        .join()
        .unwrap();
}
