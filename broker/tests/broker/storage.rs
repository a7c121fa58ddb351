//! The storage engine through the real binary: retention, DeleteRecords, compaction
//! and write caching. The log start offset moves, ListOffsets earliest follows it,
//! fetches below it answer OFFSET_OUT_OF_RANGE, old segments leave the disk, a
//! compacted topic keeps exactly the latest value of each key, and all of it survives
//! a restart.

use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::{Broker, Conn};
use bytes::Bytes;
use keel_protocol::batch::{build_batch, split_and_validate};

const OFFSET_OUT_OF_RANGE: i16 = 1;
const EARLIEST: i64 = -2;
const LATEST: i64 = -1;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn produce_one(c: &mut Conn, topic: &str, key: &str, value: Option<&[u8]>, timestamp: i64) -> i64 {
    let batch = build_batch(0, timestamp, &[(Some(key.as_bytes()), value)]);
    let r = produce(c, -1, &[(topic, 0, batch)]);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce to {topic}");
    p.base_offset
}

/// Segment files of a partition and their total size.
fn segments(b: &Broker, topic: &str) -> (usize, u64) {
    let dir = b.dir.join("data").join(format!("{topic}-0"));
    let mut count = 0;
    let mut bytes = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().ends_with(".log") {
            count += 1;
            bytes += e.metadata().unwrap().len();
        }
    }
    (count, bytes)
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every (offset, key, value) from `from` to the high watermark.
fn read_from(c: &mut Conn, topic: &str, from: i64) -> Vec<(i64, Option<Bytes>, Option<Bytes>)> {
    read_partition_from(c, topic, 0, from)
}

/// Every (offset, key, value) of partition `partition` from `from` to the high watermark.
fn read_partition_from(
    c: &mut Conn,
    topic: &str,
    partition: i32,
    from: i64,
) -> Vec<(i64, Option<Bytes>, Option<Bytes>)> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let r = fetch(c, &[(topic, partition, offset)], 0, 1);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch {topic} at {offset}");
        let records = p.records.clone().unwrap_or_default();
        let batches = split_and_validate(&records).unwrap();
        let Some((last, _)) = batches.last() else {
            break;
        };
        out.extend(records_of(&records).into_iter().filter(|(o, _, _)| *o >= offset));
        offset = last.last_offset() + 1;
        if offset >= p.high_watermark {
            break;
        }
    }
    out
}

#[test]
fn delete_records_moves_the_log_start_and_survives_restart() {
    let mut b = Broker::start(1);
    let mut c = b.connect();
    let r = create_topic_with_configs(&mut c, "dr", 1, &[("segment.bytes", "4096")]);
    assert_eq!(r.topics[0].error_code, 0);
    for i in 0..40 {
        assert_eq!(produce_one(&mut c, "dr", &format!("k{i}"), Some(&[b'x'; 300]), now_ms()), i);
    }
    let (files_before, _) = segments(&b, "dr");
    assert!(files_before >= 3, "small segments roll: {files_before}");

    assert_eq!(delete_records(&mut c, "dr", 0, 25), (0, 25));
    assert_eq!(list_offset(&mut c, "dr", 0, EARLIEST), (0, 25));
    let f = fetch(&mut c, &[("dr", 0, 10)], 0, 1);
    let p = &f.responses[0].partitions[0];
    // As from Kafka, an error answer carries no log start (-1); ListOffsets gives it.
    assert_eq!((p.error_code, p.log_start_offset), (OFFSET_OUT_OF_RANGE, -1));
    assert_eq!(read_from(&mut c, "dr", 25).first().map(|r| r.0), Some(25));
    // Past the high watermark is refused; below the start changes nothing.
    assert_eq!(delete_records(&mut c, "dr", 0, 41).0, OFFSET_OUT_OF_RANGE);
    assert_eq!(delete_records(&mut c, "dr", 0, 10), (0, 25));
    wait_for("segments below the log start to be deleted", Duration::from_secs(10), || {
        segments(&b, "dr").0 < files_before
    });

    b.kill9();
    b.spawn();
    let mut c = b.connect();
    assert_eq!(list_offset(&mut c, "dr", 0, EARLIEST), (0, 25), "the log start offset is durable");
    assert_eq!(read_from(&mut c, "dr", 25).len(), 15);
    assert_eq!(delete_records(&mut c, "dr", 0, -1), (0, 40), "-1 deletes up to the high watermark");
    assert_eq!(list_offset(&mut c, "dr", 0, EARLIEST), (0, 40));
}

#[test]
fn delete_records_is_refused_on_compact_only_topics() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic_with_configs(&mut c, "compacted", 1, &[("cleanup.policy", "compact")]);
    produce_one(&mut c, "compacted", "k", Some(b"v"), now_ms());
    assert_eq!(delete_records(&mut c, "compacted", 0, 1).0, 44, "POLICY_VIOLATION");
    assert_eq!(delete_records(&mut c, "nope", 0, 1).0, 3, "UNKNOWN_TOPIC_OR_PARTITION");
}

#[test]
fn retention_bytes_deletes_the_oldest_segments() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic_with_configs(&mut c, "rb", 1, &[("segment.bytes", "4096"), ("retention.bytes", "10000")]);
    for i in 0..60 {
        produce_one(&mut c, "rb", &format!("k{i}"), Some(&[b'y'; 300]), now_ms());
    }
    wait_for("retention.bytes to delete segments", Duration::from_secs(10), || {
        list_offset(&mut c, "rb", 0, EARLIEST).1 > 0
    });
    let (_, bytes) = segments(&b, "rb");
    assert!(bytes <= 10_000 + 4096, "{bytes} bytes left on disk");
    let start = list_offset(&mut c, "rb", 0, EARLIEST).1;
    let f = fetch(&mut c, &[("rb", 0, 0)], 0, 1);
    assert_eq!(f.responses[0].partitions[0].error_code, OFFSET_OUT_OF_RANGE);
    let rest = read_from(&mut c, "rb", start);
    assert_eq!(rest.first().map(|r| r.0), Some(start));
    assert_eq!(rest.last().map(|r| r.0), Some(59));
}

#[test]
fn retention_ms_deletes_expired_segments_including_the_active_one() {
    let b = Broker::start(1);
    let mut c = b.connect();
    // Time checks run every tenth of retention.ms: here every second.
    create_topic_with_configs(&mut c, "rt", 1, &[("segment.bytes", "4096"), ("retention.ms", "10000")]);
    let hour_ago = now_ms() - 3_600_000;
    for i in 0..30 {
        produce_one(&mut c, "rt", &format!("k{i}"), Some(&[b'z'; 300]), hour_ago);
    }
    wait_for("every expired record to be deleted", Duration::from_secs(10), || {
        list_offset(&mut c, "rt", 0, EARLIEST).1 == 30
    });
    assert_eq!(list_offset(&mut c, "rt", 0, LATEST), (0, 30));
    assert_eq!(produce_one(&mut c, "rt", "fresh", Some(b"now"), now_ms()), 30);
    assert_eq!(read_from(&mut c, "rt", 30).len(), 1);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(list_offset(&mut c, "rt", 0, EARLIEST), (0, 30), "fresh records stay");
}

#[test]
fn compaction_keeps_exactly_the_latest_value_of_each_key() {
    let mut b = Broker::start(1);
    let mut c = b.connect();
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "4096"),
        ("segment.ms", "100"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "0"),
    ];
    create_topic_with_configs(&mut c, "cmp", 1, &configs);
    let mut latest = std::collections::BTreeMap::new();
    for i in 0..300 {
        let key = format!("k{}", i % 20);
        let value = format!("value-{i}-{}", "p".repeat(i % 50));
        produce_one(&mut c, "cmp", &key, Some(value.as_bytes()), now_ms());
        latest.insert(key, value);
    }
    for k in ["k18", "k19"] {
        produce_one(&mut c, "cmp", k, None, now_ms());
        latest.remove(k);
    }
    // A later record rolls the segment holding the last writes (segment.ms), so every
    // written key is in a closed segment compaction may clean.
    std::thread::sleep(Duration::from_millis(300));
    let last = produce_one(&mut c, "cmp", "zz-roll", Some(b"r"), now_ms());
    latest.insert("zz-roll".into(), "r".into());
    let expected: Vec<(String, String)> = latest.into_iter().collect();
    let compacted = |c: &mut Conn| {
        let mut got: Vec<(String, String)> = read_from(c, "cmp", 0)
            .into_iter()
            .map(|(_, k, v)| (k.map(lossy).unwrap_or_default(), v.map(lossy).unwrap_or_else(|| "<tombstone>".into())))
            .collect();
        got.sort();
        got
    };
    // Generous: on a loaded host the segment fsyncs a pass waits for can take seconds.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = compacted(&mut c);
        if got == expected {
            break;
        }
        if Instant::now() > deadline {
            let log = b.log();
            let compaction_lines: Vec<&str> = log.lines().filter(|l| l.contains("compaction")).collect();
            panic!(
                "compaction did not leave one record per key in 60 s\n got {got:?}\n expected {expected:?}\n compaction in the log:\n{}\n log tail:\n{}",
                compaction_lines.join("\n"),
                log.lines().rev().take(30).collect::<Vec<_>>().join("\n") // newest first
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(list_offset(&mut c, "cmp", 0, LATEST), (0, last + 1), "offsets are kept");
    assert_eq!(list_offset(&mut c, "cmp", 0, EARLIEST), (0, 0));

    b.kill9();
    b.spawn();
    let mut c = b.connect();
    assert_eq!(compacted(&mut c), expected, "the compacted log survives a restart");
}

#[test]
fn write_caching_topics_answer_acks_all_and_serve_after_the_flush() {
    let b = Broker::start(1);
    let mut c = b.connect();
    let r = create_topic_with_configs(&mut c, "wc", 1, &[("write.caching", "true")]);
    assert_eq!(r.topics[0].error_code, 0, "write.caching is a topic config");
    for i in 0..20 {
        assert_eq!(produce_one(&mut c, "wc", &format!("k{i}"), Some(b"v"), now_ms()), i);
    }
    // The high watermark still waits for the fsync, so consumers never read a record
    // a crash could lose; it gets there within a flush pass.
    wait_for("the high watermark to reach the log end", Duration::from_secs(5), || {
        list_offset(&mut c, "wc", 0, LATEST).1 == 20
    });
    assert_eq!(read_from(&mut c, "wc", 0).len(), 20);
}

fn lossy(b: impl AsRef<[u8]>) -> String {
    String::from_utf8_lossy(b.as_ref()).into_owned()
}

/// The shard's cap on bytes appended and not yet written to segment files holds while
/// four connections produce 64 KiB batches to eight partitions flat out (acks=1, so
/// nothing else paces them): `keel_unflushed_bytes`, sampled throughout, never passes
/// the cap by more than one batch, every produce succeeds, and every record is read
/// back.
#[test]
fn the_shard_unflushed_bytes_cap_holds_under_flat_out_produce() {
    const CAP: u64 = 256 << 10;
    const BATCH_VALUE_BYTES: usize = 64 << 10;
    const PARTITIONS: i32 = 8;
    let b = Broker::start_with_yaml(1, "256M", &[], &format!("unflushed_bytes_max_per_shard: {CAP}\n"));
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "uf", PARTITIONS).topics[0].error_code, 0);
    assert_eq!(b.metric("keel_unflushed_bytes_max", 0), CAP);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, admin) = (stop.clone(), b.admin_port);
        std::thread::spawn(move || {
            let mut peak = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = admin_get(admin, "/metrics");
                let v = text
                    .lines()
                    .find_map(|l| l.strip_prefix("keel_unflushed_bytes{shard=\"0\"} "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .expect("keel_unflushed_bytes is reported");
                peak = peak.max(v as u64);
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let value = vec![b'u'; BATCH_VALUE_BYTES];
    let producers: Vec<_> = (0..4)
        .map(|_| {
            let (port, value) = (b.port, value.clone());
            std::thread::spawn(move || {
                let mut c = Broker::connect_port(port);
                let deadline = Instant::now() + Duration::from_secs(3);
                let mut sent = 0u64;
                while Instant::now() < deadline {
                    let parts: Vec<(&str, i32, Bytes)> = (0..PARTITIONS)
                        .map(|p| ("uf", p, build_batch(0, now_ms(), &[(None, Some(&value[..]))])))
                        .collect();
                    let r = produce(&mut c, 1, &parts);
                    for p in &r.responses[0].partition_responses {
                        assert_eq!(p.error_code, 0, "produce to partition {}", p.index);
                    }
                    sent += PARTITIONS as u64;
                }
                sent
            })
        })
        .collect();
    let sent: u64 = producers.into_iter().map(|t| t.join().unwrap()).sum();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    let batch_bytes = build_batch(0, 0, &[(None, Some(&value[..]))]).len() as u64;
    assert!(peak <= CAP + batch_bytes, "unflushed bytes reached {peak}, cap {CAP} + one batch of {batch_bytes}");
    let read: u64 = (0..PARTITIONS).map(|p| read_partition_from(&mut c, "uf", p, 0).len() as u64).sum();
    assert_eq!(read, sent, "every acknowledged record is read back");
    eprintln!("unflushed cap {CAP}: peak {peak} bytes, {sent} batches of {batch_bytes} bytes");
}

fn admin_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// After a restart the batch cache is empty, so a fetch from the start reads the disk
/// up to the log end; a batch appended since, only partly written (the segment's
/// written size ends on a page inside it), must end the read, not fail it.
#[test]
fn a_read_from_disk_stops_before_a_partly_written_batch() {
    let mut b = Broker::start(1);
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "partly", 1).topics[0].error_code, 0);
    for i in 0..50 {
        produce_one(&mut c, "partly", &format!("k{i}"), Some(&[b'a'; 333]), now_ms());
    }
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(b.child.as_ref().unwrap().id() as i32, libc::SIGTERM) };
    b.child.take().unwrap().wait().unwrap();
    b.spawn();
    let mut c = b.connect();
    for i in 50..100 {
        produce_one(&mut c, "partly", &format!("k{i}"), Some(&[b'b'; 77]), now_ms());
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read_from(&mut c, "partly", 0).len(), 100);
}
