//! Damage on disk, then restart: a torn tail is truncated at the last valid batch;
//! damage inside the log (valid data after it) is reported and kept, its batch never
//! served while everything else still is; and no flipped byte anywhere ever makes the
//! log serve a record that differs from what was written.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use keel_protocol::batch::{build_batch, BatchHeader};
use keel_storage::log::{self, LogConfig, PartitionLog};
use keel_storage::StorageError;
use rand::{Rng, SeedableRng};

use crate::common;
use common::{open_log, run};

fn config() -> LogConfig {
    LogConfig { segment_bytes_max: 8192, index_interval_bytes: 1024, cache_bytes_max: 0, ..LogConfig::default() }
}

async fn open(dir: &Path) -> Rc<RefCell<PartitionLog>> {
    keel_storage::prime_dma_probe(dir.parent().unwrap()).await.unwrap();
    open_log(dir, config()).await
}

/// Writes 60 one-record batches and returns offset -> value.
fn write_log(dir: &Path) -> BTreeMap<i64, Vec<u8>> {
    let dir = dir.to_path_buf();
    run(move || async move {
        let l = open(&dir).await;
        let mut written = BTreeMap::new();
        for i in 0..60i64 {
            let value = format!("value-{i}-{}", "w".repeat(300)).into_bytes();
            let b = build_batch(0, 1000 + i, &[(Some(b"k"), Some(&value))]);
            log::roll_if_needed(&l, b.len()).await.unwrap();
            let h = l.borrow_mut().append(&b, 0, None);
            written.insert(h.base_offset, value);
            log::flush(&l).await.unwrap();
        }
        written
    })
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map(|e| e == "log").unwrap_or(false))
        .collect();
    files.sort();
    files
}

/// Reads every offset one at a time: Ok(value) or the error it got.
fn read_each(dir: &Path) -> (i64, BTreeMap<i64, Result<Vec<u8>, String>>) {
    let dir = dir.to_path_buf();
    run(move || async move {
        let l = open(&dir).await;
        let end = l.borrow().high_watermark();
        let mut out = BTreeMap::new();
        for offset in 0..end {
            let got = match log::read(&l, offset, 1, i64::MAX).await {
                Ok(r) => match r.batches.first() {
                    Some(b) => {
                        let h = keel_protocol::batch::validate(b).expect("every served batch passes its CRC");
                        if h.base_offset != offset {
                            continue;
                        }
                        let mut buf = b.clone();
                        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap();
                        Ok(set.records[0].value.clone().unwrap().to_vec())
                    }
                    None => continue,
                },
                Err(e @ StorageError::Corrupt { .. }) => Err(e.to_string()),
                Err(e) => panic!("unexpected error at {offset}: {e}"),
            };
            out.insert(offset, got);
        }
        (end, out)
    })
}

fn batch_positions(file: &Path) -> Vec<usize> {
    let data = std::fs::read(file).unwrap();
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 61 <= data.len() {
        let h = BatchHeader::parse(&data[pos..]).unwrap();
        out.push(pos);
        pos += h.total_len();
    }
    out
}

fn flip(file: &Path, position: usize) {
    let mut data = std::fs::read(file).unwrap();
    data[position] ^= 0x5a;
    std::fs::write(file, &data).unwrap();
}

#[test]
fn damage_inside_the_log_is_reported_and_not_served() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let written = write_log(&dir);
    let files = segment_files(&dir);
    assert!(files.len() >= 3);
    // Flip a byte in the body of the third batch of the first segment.
    let third = batch_positions(&files[0])[2];
    flip(&files[0], third + 100);
    let (end, got) = read_each(&dir);
    assert_eq!(end, 60, "later data is kept");
    for (offset, value) in &written {
        match got.get(offset) {
            Some(Ok(v)) => assert_eq!(v, value, "offset {offset} served changed"),
            Some(Err(_)) => assert!(*offset >= 2, "offset {offset} before the damage refused"),
            None => panic!("offset {offset} neither served nor refused"),
        }
    }
    assert!(got.get(&2).unwrap().is_err(), "the damaged batch is not served");
    let first_of_second_segment = got.iter().filter(|(_, r)| r.is_err()).map(|(o, _)| *o).max().unwrap() + 1;
    assert!(got.range(first_of_second_segment..).all(|(_, r)| r.is_ok()), "later segments are served");
}

#[test]
fn torn_sealed_segment_without_later_data_is_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    write_log(&dir);
    let files = segment_files(&dir);
    // As after a crash between a roll and the seal write: the old segment's last batch
    // is torn and the segments after it never got data.
    let last = *batch_positions(&files[0]).last().unwrap();
    std::fs::OpenOptions::new().write(true).open(&files[0]).unwrap().set_len(last as u64 + 40).unwrap();
    for f in &files[1..] {
        std::fs::OpenOptions::new().write(true).open(f).unwrap().set_len(0).unwrap();
    }
    let (end, got) = read_each(&dir);
    let kept = batch_positions(&files[0]).len() as i64;
    assert_eq!(end, kept, "truncated at the last valid batch");
    assert!(got.values().all(|r| r.is_ok()));
    assert_eq!(segment_files(&dir).len(), 1, "segments after the torn one are removed");
}

#[test]
fn no_flipped_byte_ever_serves_different_data() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..12 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("t-0");
        let written = write_log(&dir);
        let files = segment_files(&dir);
        let file = &files[rng.gen_range(0..files.len())];
        let len = std::fs::metadata(file).unwrap().len() as usize;
        if len == 0 {
            continue;
        }
        let position = rng.gen_range(0..len);
        flip(file, position);
        let (_, got) = read_each(&dir);
        for (offset, r) in got {
            if let Ok(v) = r {
                assert_eq!(
                    Some(&v),
                    written.get(&offset),
                    "round {round}: flip at {position} of {file:?} served bad data"
                );
            }
        }
    }
}
