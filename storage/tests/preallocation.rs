//! The active segment reserves disk space ahead of its end in steps (fallocate keeping
//! the file size, so recovery sees only written bytes), and a sealed segment gives the
//! unused reservation back.

use std::cell::RefCell;
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;

use glommio::LocalExecutorBuilder;
use keel_protocol::batch::build_batch;
use keel_storage::log::{self, LogConfig, PartitionLog};

#[test]
fn active_segment_is_reserved_in_steps_and_sealed_ones_are_trimmed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().to_path_buf();
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            keel_storage::prime_dma_probe(&data).await.unwrap();
            let dir = data.join("t-0");
            let step = 1u64 << 20;
            let config = LogConfig { segment_bytes_max: 4 << 20, preallocate_step_bytes: step, ..LogConfig::default() };
            let l = Rc::new(RefCell::new(PartitionLog::open(&dir, config, |_| {}).await.unwrap()));
            let b = build_batch(0, 1, &[(None, Some(&[1u8; 1000][..]))]);
            log::roll_if_needed(&l, b.len()).await.unwrap();
            l.borrow_mut().append(&b, 0, None);
            log::flush(&l).await.unwrap();
            let first = dir.join(format!("{:020}.log", 0));
            let meta = std::fs::metadata(&first).unwrap();
            assert_eq!(meta.len(), 4096, "the file size is what was written");
            if meta.blocks() * 512 < step {
                eprintln!("file system without fallocate: nothing reserved, nothing to check");
                return;
            }
            log::roll(&l).await.unwrap();
            log::flush(&l).await.unwrap();
            let sealed = std::fs::metadata(&first).unwrap();
            assert_eq!(sealed.len(), b.len() as u64);
            assert!(sealed.blocks() * 512 < step, "sealing gives the reservation back: {} blocks", sealed.blocks());
            drop(l);
            let l = PartitionLog::open(&dir, LogConfig::default(), |_| {}).await.unwrap();
            assert_eq!(l.log_end_offset(), 1, "reserved space is not read as data");
        })
        .unwrap()
        .join()
        .unwrap();
}
