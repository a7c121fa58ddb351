//! Several data directories through the real binary: shards spread their journals,
//! state stores and partitions over two `--data-dir`s, DescribeLogDirs reports each
//! directory with its own partitions, a restart finds partitions in both, and
//! `kill -9` under load loses no acknowledged batch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::kafka::*;
use crate::common::{partition_dirs, Broker, Conn};
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse};
use keel_protocol::batch::build_batch;

const PARTITIONS: i32 = 6;

fn two_dir_broker() -> Broker {
    Broker::start_with_dirs(2, "256M", &[], &["data2"])
}

/// (topic, partition, size, is future) of one replica.
type Replica = (String, i32, i64, bool);

/// Per directory: (error code, replicas, total bytes).
fn describe_log_dirs(c: &mut Conn) -> BTreeMap<String, (i16, Vec<Replica>, i64)> {
    let r: DescribeLogDirsResponse =
        c.call(ApiKey::DescribeLogDirs, 4, &DescribeLogDirsRequest::default().with_topics(None));
    r.results
        .iter()
        .map(|d| {
            let parts = d
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| (t.name.0.to_string(), p.partition_index, p.partition_size, p.is_future_key))
                })
                .collect();
            (d.log_dir.to_string(), (d.error_code, parts, d.total_bytes))
        })
        .collect()
}

fn produce_n(c: &mut Conn, topic: &str, partition: i32, n: usize, tag: &str) {
    for i in 0..n {
        let value = format!("{tag}-{partition}-{i}");
        let r = produce(c, -1, &[(topic, partition, build_batch(0, 0, &[(None, Some(value.as_bytes()))]))]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "produce to {topic}-{partition}");
    }
}

fn canonical(p: PathBuf) -> String {
    std::fs::canonicalize(p).unwrap().display().to_string()
}

#[test]
fn shards_spread_partitions_over_both_dirs_and_restart_finds_them() {
    let mut b = two_dir_broker();
    let (first, second) = (b.dir.join("data"), b.dir.join("data2"));
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "spread", PARTITIONS).topics[0].error_code, 0);
    for p in 0..PARTITIONS {
        produce_n(&mut c, "spread", p, 5, "a");
    }
    // Shard i's journal and state store live in dir i % 2.
    for (dir, shard) in [(&first, 0), (&second, 1)] {
        assert!(dir.join(format!(".journal/shard-{shard}")).is_dir(), "journal of shard {shard} in {}", dir.display());
        assert!(dir.join(format!(".kv/shard-{shard}")).is_dir(), "state store of shard {shard} in {}", dir.display());
    }
    assert!(!first.join(".journal/shard-1").exists() && !second.join(".journal/shard-0").exists());
    assert!(second.join("cluster").read_dir().is_err(), "metadata stays in the first dir");
    let (in_first, in_second) = (partition_dirs(&first, "spread"), partition_dirs(&second, "spread"));
    assert!(!in_first.is_empty() && !in_second.is_empty(), "both dirs hold partitions: {in_first:?} {in_second:?}");
    let mut all: Vec<i32> = in_first.iter().chain(&in_second).copied().collect();
    all.sort();
    assert_eq!(all, (0..PARTITIONS).collect::<Vec<_>>(), "each partition in exactly one dir");

    // DescribeLogDirs: both dirs, each with exactly its own partitions and real sizes.
    let dirs = describe_log_dirs(&mut c);
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    for (path, expected) in [(canonical(first.clone()), &in_first), (canonical(second.clone()), &in_second)] {
        let (error, parts, total) = &dirs[&path];
        assert_eq!(*error, 0);
        assert!(*total > 0);
        let mut listed: Vec<i32> = parts.iter().filter(|(t, ..)| t == "spread").map(|(_, p, ..)| *p).collect();
        listed.sort();
        assert_eq!(&listed, expected, "partitions listed under {path}");
        assert!(parts.iter().filter(|(t, ..)| t == "spread").all(|(_, _, size, future)| *size > 0 && !future));
    }

    // An orderly restart and a crash restart both find every partition where it was.
    for crash in [false, true] {
        if crash {
            b.kill9();
        } else {
            b.stop();
        }
        b.spawn();
        let mut c = b.connect();
        for p in 0..PARTITIONS {
            let values = read_all(&mut c, "spread", p);
            let expected: Vec<Bytes> = (0..5).map(|i| Bytes::from(format!("a-{p}-{i}"))).collect();
            assert_eq!(values, expected, "partition {p} after restart (crash: {crash})");
        }
        assert_eq!(partition_dirs(&first, "spread"), in_first);
        assert_eq!(partition_dirs(&second, "spread"), in_second);
    }
}

#[test]
fn kill_9_under_load_with_two_dirs_keeps_every_acknowledged_batch() {
    let mut b = two_dir_broker();
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "crashy", 4).topics[0].error_code, 0);
    let port = b.port;
    let producer = std::thread::spawn(move || {
        let mut c = Broker::connect_port(port);
        let mut acked: Vec<(i32, String)> = Vec::new();
        for i in 0.. {
            let p = i % 4;
            let value = format!("v{i}");
            let batch = build_batch(0, 0, &[(None, Some(value.as_bytes()))]);
            let (_, frame) = c.frame(
                ApiKey::Produce,
                11,
                &kafka_protocol::messages::ProduceRequest::default()
                    .with_acks(-1)
                    .with_timeout_ms(10_000)
                    .with_topic_data(vec![kafka_protocol::messages::produce_request::TopicProduceData::default()
                        .with_name(name("crashy"))
                        .with_partition_data(vec![
                            kafka_protocol::messages::produce_request::PartitionProduceData::default()
                                .with_index(p)
                                .with_records(Some(batch)),
                        ])]),
            );
            if std::io::Write::write_all(&mut c.stream, &frame).is_err() {
                break;
            }
            match c.read_frame() {
                Some(_) => acked.push((p, value)),
                None => break,
            }
        }
        acked
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    b.kill9();
    let acked = producer.join().unwrap();
    assert!(acked.len() > 50, "only {} acknowledged", acked.len());
    b.spawn();
    let mut c = b.connect();
    for p in 0..4 {
        let values: Vec<String> =
            read_all(&mut c, "crashy", p).into_iter().map(|v| String::from_utf8(v.to_vec()).unwrap()).collect();
        for (_, v) in acked.iter().filter(|(q, _)| *q == p) {
            assert!(values.contains(v), "acknowledged {v} of partition {p} lost");
        }
    }
}

fn alter_replica_log_dir(c: &mut Conn, dir: &Path, topic: &str, partition: i32) -> i16 {
    use kafka_protocol::messages::alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse};
    use kafka_protocol::protocol::StrBytes;
    let req = AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
        .with_path(StrBytes::from_string(dir.display().to_string()))
        .with_topics(vec![AlterReplicaLogDirTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![partition])])]);
    let r: AlterReplicaLogDirsResponse = c.call(ApiKey::AlterReplicaLogDirs, 2, &req);
    r.results[0].partitions[0].error_code
}

#[test]
fn alter_replica_log_dirs_moves_a_partition_while_it_serves() {
    let mut b = Broker::start_with_dirs(1, "256M", &[], &["data2"]);
    let (first, second) = (b.dir.join("data"), b.dir.join("data2"));
    let mut c = b.connect();
    let created = create_topic_with_configs(&mut c, "mover", 2, &[("segment.bytes", "65536")]);
    assert_eq!(created.topics[0].error_code, 0);
    for i in 0..400 {
        let value = format!("pre-{i}-{}", "x".repeat(400));
        let r = produce(&mut c, -1, &[("mover", 0, build_batch(0, 0, &[(None, Some(value.as_bytes()))]))]);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    assert_eq!(partition_dirs(&first, "mover"), vec![0, 1]);

    // Errors as Kafka's.
    assert_eq!(alter_replica_log_dir(&mut c, &b.dir.join("nowhere"), "mover", 0), 57, "LOG_DIR_NOT_FOUND");
    assert_eq!(alter_replica_log_dir(&mut c, &second, "mover", 9), 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(alter_replica_log_dir(&mut c, &second, "nosuch", 0), 3, "UNKNOWN_TOPIC_OR_PARTITION");

    // Produce continuously while the partition moves.
    let port = b.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producing = stop.clone();
    let producer = std::thread::spawn(move || {
        let mut c = Broker::connect_port(port);
        let mut acked = Vec::new();
        let mut i = 0;
        while !producing.load(std::sync::atomic::Ordering::Relaxed) || i < 50 {
            let value = format!("live-{i}");
            let r = produce(&mut c, -1, &[("mover", 0, build_batch(0, 0, &[(None, Some(value.as_bytes()))]))]);
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "produce during the move");
            acked.push(value);
            i += 1;
        }
        acked
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(alter_replica_log_dir(&mut c, &second, "mover", 0), 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let dirs = describe_log_dirs(&mut c);
        let (_, in_second, _) = &dirs[&canonical(second.clone())];
        let (_, in_first, _) = &dirs[&canonical(first.clone())];
        let moved = in_second.iter().any(|(t, p, _, future)| t == "mover" && *p == 0 && !future)
            && !in_first.iter().any(|(t, p, ..)| t == "mover" && *p == 0);
        if moved {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "partition not moved: {dirs:?}\n{}", b.log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = producer.join().unwrap();
    assert_eq!(partition_dirs(&second, "mover"), vec![0]);
    // The old directory is removed after the switch DescribeLogDirs reports.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while partition_dirs(&first, "mover") != vec![1] {
        assert!(std::time::Instant::now() < deadline, "the old directory stays: {}", b.log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Moving it where it is answers NONE.
    assert_eq!(alter_replica_log_dir(&mut c, &second, "mover", 0), 0);

    let check = |c: &mut Conn| {
        let values: Vec<String> =
            read_all(c, "mover", 0).into_iter().map(|v| String::from_utf8(v.to_vec()).unwrap()).collect();
        let pre: Vec<String> = (0..400).map(|i| format!("pre-{i}-{}", "x".repeat(400))).collect();
        let expected: Vec<String> = pre.into_iter().chain(acked.iter().cloned()).collect();
        assert_eq!(values.len(), expected.len(), "no loss, no duplicate");
        assert!(values == expected, "records in order after the move");
    };
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&mut c)));
    assert!(checked.is_ok(), "after the move: {}", b.log());
    // After a crash the partition is found in its new directory, whole.
    b.kill9();
    b.spawn();
    let mut c = b.connect();
    check(&mut c);
    assert_eq!(partition_dirs(&first, "mover"), vec![1]);
    let r = produce(&mut c, -1, &[("mover", 0, build_batch(0, 0, &[(None, Some(b"after"))]))]);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

/// `kill -9` at different moments of a move: after every restart the partition is
/// whole in exactly one directory, with every acknowledged record once, no `.future`
/// copy left behind, and it can be moved again.
#[test]
fn kill_9_during_a_move_leaves_the_partition_whole_in_one_dir() {
    let mut b = Broker::start_with_dirs(1, "256M", &[], &["data2"]);
    let dirs = [b.dir.join("data"), b.dir.join("data2")];
    let mut c = b.connect();
    let created = create_topic_with_configs(&mut c, "crashmove", 1, &[("segment.bytes", "65536")]);
    assert_eq!(created.topics[0].error_code, 0);
    let mut expected: Vec<String> = Vec::new();
    for (round, delay_ms) in [0u64, 5, 20, 50, 100, 200, 400, 800].into_iter().enumerate() {
        for i in 0..300 {
            let value = format!("r{round}-{i}-{}", "y".repeat(300));
            let r = produce(&mut c, -1, &[("crashmove", 0, build_batch(0, 0, &[(None, Some(value.as_bytes()))]))]);
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
            expected.push(value);
        }
        let here = dirs.iter().position(|d| partition_dirs(d, "crashmove") == vec![0]).expect("in one dir");
        assert_eq!(alter_replica_log_dir(&mut c, &dirs[1 - here], "crashmove", 0), 0);
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        b.kill9();
        b.spawn();
        c = b.connect();
        let holders: Vec<usize> = (0..2).filter(|i| partition_dirs(&dirs[*i], "crashmove") == vec![0]).collect();
        assert_eq!(holders.len(), 1, "round {round}: the partition is in exactly one dir");
        println!("round {round}: killed {delay_ms} ms after the request; partition in dir {} (was {here})", holders[0]);
        for d in &dirs {
            let leftovers: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".future"))
                .collect();
            assert!(leftovers.is_empty(), "round {round}: no unfinished copy left in {}", d.display());
        }
        let values: Vec<String> =
            read_all(&mut c, "crashmove", 0).into_iter().map(|v| String::from_utf8(v.to_vec()).unwrap()).collect();
        assert_eq!(values.len(), expected.len(), "round {round} (kill after {delay_ms} ms): no loss, no duplicate");
        assert!(values == expected, "round {round}: records in order");
    }
    let log = b.log();
    for what in ["partition moved", "finishing a partition move", "removing an unfinished", "removing the source"] {
        println!("{what}: {} times", log.matches(what).count());
    }
}

/// Data directories moved while the broker was down (a renamed mount point, a copy to
/// a new disk) are found where they now are, after an orderly stop and after a crash:
/// the state store records each partition's directory by path, and a record naming a
/// directory no longer configured is followed to the one that holds the partition.
#[test]
fn data_dirs_moved_while_down_are_found_where_they_now_are() {
    let mut b = two_dir_broker();
    let original = b.dir.clone();
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "moved", PARTITIONS).topics[0].error_code, 0);
    for p in 0..PARTITIONS {
        produce_n(&mut c, "moved", p, 3, "a");
    }
    let moved = original.with_file_name(format!("{}-moved", original.file_name().unwrap().to_string_lossy()));
    for (round, crash) in [(1, false), (2, true)] {
        if crash {
            b.kill9();
        } else {
            b.stop();
        }
        // Both directories move; the broker is started on their new paths.
        let (from, to) = if round == 1 { (&original, &moved) } else { (&moved, &original) };
        std::fs::rename(from, to).unwrap();
        b.dir = to.clone();
        b.spawn();
        let mut c = b.connect();
        for p in 0..PARTITIONS {
            let values = read_all(&mut c, "moved", p);
            let expected: Vec<Bytes> = (0..round * 3)
                .map(|i| Bytes::from(format!("{}-{p}-{}", if i < 3 { "a" } else { "b" }, i % 3)))
                .collect();
            assert_eq!(values, expected, "partition {p} after move {round} (crash: {crash}): {}", b.log());
            produce_n(&mut c, "moved", p, 3, "b");
        }
        assert!(!b.log().contains("cannot open partition"), "{}", b.log());
    }
    b.stop();
}

/// Rewrites the saved metadata without `topic`, its version moved by `delta`, leaving
/// the topic's partitions on disk: with a later version, what a crash between saving a
/// topic's deletion and removing its partitions leaves (and what a node that learned
/// of a deletion from a later metadata version holds); with an earlier one, a metadata
/// copy whose save failed.
fn drop_topic_from_saved_metadata(b: &Broker, topic: &str, delta: i64) {
    let path = b.dir.join("data/cluster/metadata.json");
    let mut meta: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(meta["topics"].as_object_mut().unwrap().remove(topic).is_some(), "{topic} in the saved metadata");
    meta["version"] = (meta["version"].as_i64().unwrap() + delta).into();
    std::fs::write(&path, serde_json::to_vec_pretty(&meta).unwrap()).unwrap();
}

#[test]
fn partitions_of_a_topic_deleted_before_they_were_removed_go_at_the_next_start() {
    let mut b = two_dir_broker();
    let (first, second) = (b.dir.join("data"), b.dir.join("data2"));
    let on_disk = |topic: &str| partition_dirs(&first, topic).len() + partition_dirs(&second, topic).len();
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "kept", 2).topics[0].error_code, 0);
    assert_eq!(create_topic(&mut c, "gone", PARTITIONS).topics[0].error_code, 0);
    for p in 0..PARTITIONS {
        produce_n(&mut c, "gone", p, 3, "g");
    }
    for p in 0..2 {
        produce_n(&mut c, "kept", p, 3, "k");
    }
    assert_eq!(on_disk("gone"), PARTITIONS as usize);
    b.kill9();
    let metadata = b.dir.join("data/cluster/metadata.json");
    let saved = std::fs::read(&metadata).unwrap();

    // An older metadata copy without the topic proves nothing: the partitions stay.
    drop_topic_from_saved_metadata(&b, "gone", -1);
    b.spawn();
    assert_eq!(on_disk("gone"), PARTITIONS as usize, "partitions removed on an older metadata copy");
    b.kill9();

    // A later version without it: the topic was deleted, and its partitions go, in
    // both data directories, before the broker serves.
    std::fs::write(&metadata, &saved).unwrap();
    drop_topic_from_saved_metadata(&b, "gone", 1);
    b.spawn();
    assert_eq!(on_disk("gone"), 0, "a deleted topic's partitions left: {}", b.log());
    assert!(b.log().contains("removing a partition left behind by a crash or a restart: its topic was deleted"));
    // Their records went with them, and the live topic kept everything.
    b.stop();
    b.spawn();
    assert_eq!(on_disk("gone"), 0);
    let mut c = b.connect();
    for p in 0..2 {
        let expected: Vec<Bytes> = (0..3).map(|i| Bytes::from(format!("k-{p}-{i}"))).collect();
        assert_eq!(read_all(&mut c, "kept", p), expected, "kept-{p}");
    }
    assert_eq!(b.log().matches("its topic was deleted").count(), PARTITIONS as usize);
}
