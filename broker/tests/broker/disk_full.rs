//! A full disk refuses writes, loses nothing, and takes writes again once space returns.
//!
//! The second data directory (the home of shard 1: its journal, state store and
//! partitions) is a small ext4 file system on a loop device, filled by a file of zeros
//! until little room is left. Producing to its partitions must then fail with
//! KAFKA_STORAGE_ERROR rather than hang or crash, the other shard's partitions keep
//! taking writes, and after the filler is removed the same partitions take writes
//! again without a restart. Every acknowledged record must be readable, in order,
//! before and after a kill -9. Needs root (to mount); without it the test prints
//! SKIPPED and why.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::loopfs::LoopFs;
use crate::common::{partition_dirs, Broker, Conn};
use keel_protocol::batch::build_batch;

const KAFKA_STORAGE_ERROR: i16 = 56;
/// Room left on the file system once the filler is written.
const ROOM_BYTES: u64 = 20 << 20;
/// One record per produce request.
const VALUE_BYTES: usize = 128 << 10;

fn produce_value(c: &mut Conn, topic: &str, p: i32, value: &str) -> i16 {
    let r = produce(c, -1, &[(topic, p, build_batch(0, 0, &[(None, Some(value.as_bytes()))]))]);
    r.responses[0].partition_responses[0].error_code
}

fn value(p: i32, i: usize) -> String {
    let head = format!("p{p}-{i}-");
    format!("{head}{}", "x".repeat(VALUE_BYTES - head.len()))
}

/// Writes zeros to `path` until the file system has only `room` bytes free.
fn fill(fs: &LoopFs, path: &std::path::Path, room: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 1 << 20];
    while fs.free_bytes() > room + chunk.len() as u64 {
        f.write_all(&chunk).unwrap();
        f.sync_data().unwrap();
    }
}

fn read_strings(c: &mut Conn, topic: &str, p: i32) -> Vec<String> {
    read_all(c, topic, p).into_iter().map(|v| String::from_utf8(v.to_vec()).unwrap()).collect()
}

#[test]
fn a_full_disk_refuses_writes_loses_nothing_and_recovers_when_space_returns() {
    let fs = match LoopFs::create(128 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            println!("SKIPPED: a_full_disk_refuses_writes_loses_nothing_and_recovers_when_space_returns: {why}");
            return;
        }
    };
    let small = fs.mount.join("keel");
    let mut b = Broker::start_with_dirs(2, "256M", &[], &[small.to_str().unwrap()]);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "full", 4).topics[0].error_code, 0);
    let (roomy, cramped) = (partition_dirs(&b.dir.join("data"), "full"), partition_dirs(&small, "full"));
    assert!(!roomy.is_empty() && !cramped.is_empty(), "partitions in both dirs: {roomy:?} {cramped:?}");

    let filler = fs.mount.join("filler");
    fill(&fs, &filler, ROOM_BYTES);
    // Produce to the cramped partitions until each refuses; the roomy ones keep taking
    // writes meanwhile. At most twice the room's worth of requests.
    let mut acked: Vec<Vec<String>> = vec![Vec::new(); 4];
    let mut sent = 0;
    let mut refused = Vec::new();
    let rounds_max = 2 * ROOM_BYTES as usize / VALUE_BYTES;
    for round in 0..rounds_max {
        for &p in &cramped {
            let v = value(p, round);
            sent += 1;
            match produce_value(&mut c, "full", p, &v) {
                0 => acked[p as usize].push(v),
                KAFKA_STORAGE_ERROR => refused.push((p, round)),
                code => panic!("partition {p} round {round}: error {code}, not KAFKA_STORAGE_ERROR: {}", b.log()),
            }
        }
        let p = roomy[round % roomy.len()];
        let v = value(p, round);
        assert_eq!(produce_value(&mut c, "full", p, &v), 0, "partition {p} on the roomy disk takes writes");
        acked[p as usize].push(v);
        if cramped.iter().all(|p| refused.iter().any(|(q, _)| q == p)) && refused.len() >= 2 * cramped.len() {
            break;
        }
    }
    assert!(
        cramped.iter().all(|p| refused.iter().any(|(q, _)| q == p)),
        "every cramped partition refused once the disk was full ({sent} requests, refused {refused:?}, {} free): {}",
        fs.free_bytes(),
        b.log()
    );
    assert!(b.is_running(), "the broker stays up on a full disk");
    let cramped_acked: usize = cramped.iter().map(|p| acked[*p as usize].len()).sum();
    println!("disk full: {cramped_acked} writes of {} KiB acknowledged, then refused: {refused:?}", VALUE_BYTES >> 10);

    // Space returns: writes resume without a restart.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    for &p in &cramped {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut i = 0;
        loop {
            let v = value(p, 100_000 + i);
            match produce_value(&mut c, "full", p, &v) {
                0 => {
                    acked[p as usize].push(v);
                    break;
                }
                KAFKA_STORAGE_ERROR => {}
                code => panic!("partition {p} after space returned: error {code}"),
            }
            assert!(Instant::now() < deadline, "partition {p} still refuses 60 s after space returned: {}", b.log());
            i += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    println!("disk full: writes resumed {} ms after space returned", freed.elapsed().as_millis());

    check_log(&mut c, &acked, "before a restart");
    b.kill9();
    b.spawn();
    let mut c = b.connect();
    check_log(&mut c, &acked, "after kill -9");
}

/// Every acknowledged record is in its partition, once and in order. A refused write
/// may also be there (as after a timeout, a client cannot know it was not written;
/// idempotent producers' retries are deduplicated), but nothing that was never sent.
fn check_log(c: &mut Conn, acked: &[Vec<String>], when: &str) {
    for (p, acked) in acked.iter().enumerate() {
        let log = read_strings(c, "full", p as i32);
        let mut seen = std::collections::HashSet::new();
        for v in &log {
            assert!(v.starts_with(&format!("p{p}-")), "partition {p} {when}: a record never sent to it");
            assert!(seen.insert(v), "partition {p} {when}: a record twice");
        }
        let kept: Vec<&String> = log.iter().filter(|v| acked.contains(v)).collect();
        assert_eq!(
            kept.len(),
            acked.len(),
            "partition {p} {when}: every acknowledged record ({} in the log)",
            log.len()
        );
        assert!(kept.iter().zip(acked).all(|(a, b)| *a == b), "partition {p} {when}: acknowledged records in order");
        println!("disk full: partition {p} {when}: {} records, {} acknowledged", log.len(), acked.len());
    }
}
