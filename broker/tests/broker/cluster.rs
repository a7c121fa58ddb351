//! Replication through the real binary: three `keel` processes on loopback form a
//! cluster, create a topic with replication factor 3, acknowledge `acks=all` writes
//! once a majority has them, and keep every acknowledged record through `kill -9` of
//! partition leaders, restarts and catch-up.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::cluster::{produce_all, produce_records, produce_request, read_all, try_read_all, Cluster};
use crate::common::kafka::*;
use crate::common::Conn;
use keel_protocol::batch::build_batch;

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const INVALID_REPLICATION_FACTOR: i16 = 38;

#[test]
fn three_nodes_replicate_and_keep_acknowledged_records_through_leader_kills() {
    let mut c = Cluster::start(3);
    let all = [1, 2, 3];
    assert_eq!(c.create_topic("r3", 3, 3), 0, "{}", c.logs());
    assert_eq!(c.create_topic("too-wide", 1, 4), INVALID_REPLICATION_FACTOR);
    // A non-controller relays CreateTopics to the controller; every node learns the
    // leaders of partitions it hosts no replica of.
    let controller = c.controller(1).unwrap();
    let other = all.iter().copied().find(|n| *n != controller).unwrap();
    let mut k = c.try_connect(other).unwrap();
    let req = kafka_protocol::messages::CreateTopicsRequest::default()
        .with_topics(vec![kafka_protocol::messages::create_topics_request::CreatableTopic::default()
            .with_name(name("r1"))
            .with_num_partitions(3)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    let created: kafka_protocol::messages::CreateTopicsResponse =
        k.call(kafka_protocol::messages::ApiKey::CreateTopics, 7, &req);
    assert_eq!(created.topics[0].error_code, 0, "CreateTopics through node {other}");
    for p in 0..3 {
        let (leader, _) = c.wait_for_leader(&all, "r1", p, None);
        let acked = produce_all(&c, &all, "r1", p, &[format!("single-{p}")]);
        assert_eq!(read_all(&c, leader, "r1", p), acked);
    }
    let leaders: Vec<i32> = (0..3).map(|p| c.wait_for_leader(&all, "r3", p, None).0).collect();
    // Every node hosts the metadata group and the three r3 groups, and coalesces the
    // heartbeats of all the groups it leads into frames per peer.
    for id in all {
        let b = c.node(id);
        assert!(b.metric("keel_raft_groups", 0) >= 4, "groups on node {id}");
        assert!(b.metric("keel_raft_frames_sent_total", 0) > 0, "frames from node {id}");
        assert_eq!(b.metric("keel_raft_bad_frames_total", 0), 0, "bad frames on node {id}");
    }
    // DescribeQuorum (KIP-595) through any node: the controller leads the metadata
    // quorum of all three voters.
    for id in all {
        use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
        let req = kafka_protocol::messages::DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(name("__cluster_metadata"))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let mut k = c.try_connect(id).unwrap();
        let q: kafka_protocol::messages::DescribeQuorumResponse =
            k.call(kafka_protocol::messages::ApiKey::DescribeQuorum, 2, &req);
        let p = &q.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "DescribeQuorum through node {id}");
        assert_eq!(p.leader_id.0, c.controller(id).unwrap());
        assert_eq!(p.current_voters.len(), 3);
        assert!(p.high_watermark > 0);
        assert_eq!(q.nodes.len(), 3);
    }
    // DescribeTopicPartitions (what `kafka-topics --describe` asks) agrees with Metadata.
    for id in all {
        use kafka_protocol::messages::describe_topic_partitions_request::TopicRequest;
        let req = kafka_protocol::messages::DescribeTopicPartitionsRequest::default()
            .with_topics(vec![TopicRequest::default().with_name(name("r3"))])
            .with_response_partition_limit(100);
        let mut k = c.try_connect(id).unwrap();
        let d: kafka_protocol::messages::DescribeTopicPartitionsResponse =
            k.call(kafka_protocol::messages::ApiKey::DescribeTopicPartitions, 0, &req);
        for p in &d.topics[0].partitions {
            assert_eq!(p.replica_nodes.len(), 3, "replicas of r3-{} through node {id}", p.partition_index);
            assert_eq!(Some(p.leader_id.0), c.leader(id, "r3", p.partition_index).map(|(l, _)| l));
        }
    }
    let led: u64 = all.iter().map(|id| c.node(*id).metric("keel_raft_groups_led", 0)).sum();
    assert!(led >= 1 + 3 + 3, "metadata, r1 and r3 groups each have a leader: {led}");
    let distinct: std::collections::BTreeSet<_> = leaders.iter().collect();
    assert!(distinct.len() >= 2, "leaders spread over nodes: {leaders:?}");
    // Replicas, ISR and the controller as a client sees them.
    let m = c.metadata(1, Some(&["r3"])).unwrap();
    for p in &m.topics[0].partitions {
        assert_eq!(p.replica_nodes.len(), 3);
    }

    let mut acked: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for p in 0..3 {
        let values: Vec<String> = (0..30).map(|i| format!("first-{p}-{i}")).collect();
        acked.insert(p, produce_all(&c, &all, "r3", p, &values));
    }
    // A follower refuses clients.
    let (leader0, epoch0) = c.wait_for_leader(&all, "r3", 0, None);
    let follower = all.iter().copied().find(|n| *n != leader0).unwrap();
    let mut k = c.try_connect(follower).unwrap();
    let r = produce(&mut k, -1, &[("r3", 0, build_batch(0, 0, &[(None, Some(b"nope"))]))]);
    assert_eq!(r.responses[0].partition_responses[0].error_code, NOT_LEADER_OR_FOLLOWER);
    let f = fetch(&mut k, &[("r3", 0, 0)], 0, 1);
    assert_eq!(f.responses[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);

    // Kill the leader of partition 0: the others elect a new one in a later term,
    // which has every acknowledged record and takes more.
    c.node(leader0).kill9();
    let survivors: Vec<i32> = all.iter().copied().filter(|n| *n != leader0).collect();
    let (leader1, epoch1) = c.wait_for_leader(&survivors, "r3", 0, Some(leader0));
    assert!(epoch1 > epoch0, "a new leader epoch: {epoch0} then {epoch1}");
    eprintln!("partition 0: leader {leader0} (epoch {epoch0}) killed; node {leader1} leads in epoch {epoch1}");
    assert_eq!(read_all(&c, leader1, "r3", 0), acked[&0], "acknowledged records on the new leader");
    let more: Vec<String> = (0..30).map(|i| format!("second-0-{i}")).collect();
    let more = produce_all(&c, &survivors, "r3", 0, &more);
    acked.get_mut(&0).unwrap().extend(more);

    // The old leader comes back and catches up; then the new leader dies, and the
    // partition is led by one of the other two, with everything acknowledged.
    c.node(leader0).spawn();
    std::thread::sleep(Duration::from_secs(2));
    c.node(leader1).kill9();
    let rest: Vec<i32> = all.iter().copied().filter(|n| *n != leader1).collect();
    let (leader2, epoch2) = c.wait_for_leader(&rest, "r3", 0, Some(leader1));
    eprintln!("partition 0: leader {leader1} killed; node {leader2} leads in epoch {epoch2}");
    assert_eq!(read_all(&c, leader2, "r3", 0), acked[&0], "acknowledged records after a second failover");
    c.node(leader1).spawn();
    // The restarted node asks its peers for every leader at once (they tell it all
    // only every 30 s otherwise), RF 1 partitions it hosts no replica of included.
    c.wait_until("the restarted node knows every RF 1 leader", Duration::from_secs(10), |c| {
        (0..3).all(|p| c.leader(leader1, "r1", p).is_some_and(|(leader, _)| leader > 0))
    });
    for p in 0..3 {
        let (leader, _) = c.wait_for_leader(&all, "r3", p, None);
        assert_eq!(read_all(&c, leader, "r3", p), acked[&p], "partition {p} after both restarts");
        eprintln!("partition {p}: {} acknowledged records read back from leader {leader}", acked[&p].len());
    }
}

#[test]
fn a_replica_back_from_an_outage_catches_up_from_disk() {
    // No applied entry stays in memory: every append to a replica that is behind reads
    // the batches back from the leader's partition log.
    let mut c = Cluster::start_with_yaml(3, "raft_log_memory_bytes: 0\n");
    let all = [1, 2, 3];
    assert_eq!(c.create_topic("catch-up", 1, 3), 0, "{}", c.logs());
    let (leader, _) = c.wait_for_leader(&all, "catch-up", 0, None);
    let mut others = all.iter().copied().filter(|n| *n != leader);
    let (away, other) = (others.next().unwrap(), others.next().unwrap());
    let value = |phase: &str, i: usize| format!("{phase}-{i}-{}", "x".repeat(4000));
    let mut acked = produce_all(&c, &all, "catch-up", 0, &(0..50).map(|i| value("before", i)).collect::<Vec<_>>());

    // One replica misses about 2 MB: more than one append message (1 MiB) can carry.
    c.node(away).kill9();
    let during: Vec<String> = (0..500).map(|i| value("during", i)).collect();
    acked.extend(produce_all(&c, &[leader, other], "catch-up", 0, &during));
    c.node(away).spawn();
    c.wait_until("the leader read the missed entries back from disk", Duration::from_secs(60), |c| {
        c.nodes[(leader - 1) as usize].metric("keel_raft_entries_read_back_total", 0) >= 500
    });
    assert!(
        c.node(leader).metric("keel_raft_log_memory_bytes", 0) < 1 << 20,
        "the leader holds no more than its unapplied entries in memory"
    );

    // Without the third replica, acks=all needs the one that was away: it has the whole
    // log, so it accepts the leader's next appends.
    c.node(other).kill9();
    let after: Vec<String> = (0..20).map(|i| value("after", i)).collect();
    acked.extend(produce_all(&c, &[leader, away], "catch-up", 0, &after));
    // And it can lead with everything acknowledged.
    c.node(leader).kill9();
    c.node(other).spawn();
    let (now, _) = c.wait_for_leader(&[away, other], "catch-up", 0, Some(leader));
    assert_eq!(read_all(&c, now, "catch-up", 0), acked, "acknowledged records after the catch-up");
}

#[test]
fn retention_and_compaction_work_below_what_every_replica_has() {
    let mut c = Cluster::start(3);
    let all = [1, 2, 3];
    let small_segments = [("segment.bytes", "65536"), ("retention.bytes", "150000")];
    assert_eq!(c.create_topic_with_configs("kept", 1, 3, &small_segments), 0, "{}", c.logs());
    let compacted = [("segment.bytes", "65536"), ("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0.01")];
    assert_eq!(c.create_topic_with_configs("keyed", 1, 3, &compacted), 0);
    let value = |i: usize| format!("{i}-{}", "v".repeat(4000));
    let acked = produce_all(&c, &all, "kept", 0, &(0..300).map(value).collect::<Vec<_>>());
    let keyed: Vec<(Option<String>, String)> = (0..300).map(|i| (Some(format!("key-{}", i % 10)), value(i))).collect();
    produce_records(&c, &all, "keyed", 0, &keyed);

    // Retention removes whole segments below what every replica has: the log start
    // moves, and what remains is the acknowledged tail.
    let start_on = |c: &Cluster, id: i32| c.try_connect(id).map(|mut k| list_offset(&mut k, "kept", 0, -2));
    let mut leader = 0;
    c.wait_until("retention moved the log start", Duration::from_secs(60), |c| {
        leader = c.wait_for_leader(&all, "kept", 0, None).0;
        start_on(c, leader).is_some_and(|(error, start)| error == 0 && start > 0)
    });
    let tail = read_all(&c, leader, "kept", 0);
    assert!(tail.len() < acked.len(), "retention removed records: {} of {} left", tail.len(), acked.len());
    assert_eq!(tail[..], acked[acked.len() - tail.len()..], "the tail is what was acknowledged last");

    // Compaction rewrites segments below that point: fewer records, the latest of each key.
    let mut left = Vec::new();
    c.wait_until("compaction removed superseded records", Duration::from_secs(60), |c| {
        let (keyed_leader, _) = c.wait_for_leader(&all, "keyed", 0, None);
        left = try_read_all(c, keyed_leader, "keyed", 0).unwrap_or_default();
        !left.is_empty() && left.len() < 300
    });
    for key in 0..10 {
        let latest = value(290 + key);
        assert!(left.contains(&latest), "the latest value of key-{key} is kept");
    }

    // DeleteRecords commits a new log start through the Raft log: the leader answers
    // once its own log start got there, and every replica follows.
    let mut k = c.try_connect(leader).unwrap();
    let (_, end) = list_offset(&mut k, "kept", 0, -1);
    let target = end - 5;
    assert_eq!(delete_records(&mut k, "kept", 0, target), (0, target), "DeleteRecords on a replicated topic");
    assert_eq!(list_offset(&mut k, "kept", 0, -2), (0, target));
    assert_eq!(read_all(&c, leader, "kept", 0), acked[acked.len() - 5..]);

    // Every replica trimmed its own log and restarts from its record: kill the leaders,
    // restart them, and the others serve the same tail.
    c.node(leader).kill9();
    let rest: Vec<i32> = all.iter().copied().filter(|n| *n != leader).collect();
    let (next, _) = c.wait_for_leader(&rest, "kept", 0, Some(leader));
    c.wait_until("the next leader has the deleted records' log start", Duration::from_secs(10), |c| {
        c.try_connect(next).is_some_and(|mut k| list_offset(&mut k, "kept", 0, -2) == (0, target))
    });
    let served = read_all(&c, next, "kept", 0);
    assert!(acked.ends_with(&served), "node {next} serves an acknowledged tail");
    c.node(leader).spawn();
    c.node(next).kill9();
    let rest: Vec<i32> = all.iter().copied().filter(|n| *n != next).collect();
    let (last, _) = c.wait_for_leader(&rest, "kept", 0, Some(next));
    let served = read_all(&c, last, "kept", 0);
    assert!(acked.ends_with(&served) && !served.is_empty(), "node {last} serves an acknowledged tail");
}

/// Acknowledged values and when each was acknowledged, from a producer that asks the
/// nodes on `ports` who leads and follows leader changes.
fn produce_until(
    ports: Vec<u16>,
    topic: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<(String, Instant)> {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, ProduceResponse};
    let connect = |port: u16| {
        let s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        Some(Conn::from_stream(s))
    };
    let leader_port = || {
        for port in &ports {
            let Some(mut k) = connect(*port) else { continue };
            let req = MetadataRequest::default()
                .with_topics(Some(vec![kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(name(topic)))]));
            let Some(m): Option<MetadataResponse> = k.try_call(ApiKey::Metadata, 12, &req) else { continue };
            let leader = m.topics.first().and_then(|t| t.partitions.first()).map(|p| p.leader_id.0).unwrap_or(-1);
            if let Some(b) = m.brokers.iter().find(|b| b.node_id.0 == leader) {
                return Some(b.port as u16);
            }
        }
        None
    };
    let mut acked = Vec::new();
    let mut conn: Option<Conn> = None;
    let mut i = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if conn.is_none() {
            conn = leader_port().and_then(connect);
            if conn.is_none() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        }
        let value = format!("rolling-{i}");
        let req = produce_request(topic, 0, build_batch(0, 0, &[(None, Some(value.as_bytes()))]));
        let r: Option<ProduceResponse> = conn.as_mut().unwrap().try_call(ApiKey::Produce, 11, &req);
        match r.map(|r| r.responses[0].partition_responses[0].error_code) {
            Some(0) => {
                acked.push((value, Instant::now()));
                i += 1;
            }
            _ => {
                conn = None;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    acked
}

#[test]
fn a_rolling_restart_with_sigterm_hands_leadership_over_and_loses_nothing() {
    let mut c = Cluster::start(3);
    let all = [1, 2, 3];
    assert_eq!(c.create_topic("rolling", 1, 3), 0);
    c.wait_for_leader(&all, "rolling", 0, None);
    let ports: Vec<u16> = c.nodes.iter().map(|b| b.port).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let stop = stop.clone();
        std::thread::spawn(move || produce_until(ports, "rolling", stop))
    };
    std::thread::sleep(Duration::from_millis(500));
    for node in all {
        let (leader, _) = c.wait_for_leader(&all, "rolling", 0, None);
        c.node(node).stop();
        let rest: Vec<i32> = all.iter().copied().filter(|n| *n != node).collect();
        if leader == node {
            // SIGTERM moved the leadership before the node went.
            let (now, _) = c.wait_for_leader(&rest, "rolling", 0, Some(node));
            assert_ne!(now, node);
        }
        std::thread::sleep(Duration::from_millis(500));
        c.node(node).spawn();
        c.wait_for_leader(&all, "rolling", 0, None);
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = producer.join().unwrap();
    let gap = acked.windows(2).map(|w| w[1].1 - w[0].1).max().unwrap_or_default();
    eprintln!("rolling restart: {} records acknowledged, longest gap between acknowledgements {gap:?}", acked.len());
    let (leader, _) = c.wait_for_leader(&all, "rolling", 0, None);
    let values: Vec<String> = acked.into_iter().map(|(v, _)| v).collect();
    assert!(values.len() > 10, "the producer made progress: {}", values.len());
    assert_eq!(read_all(&c, leader, "rolling", 0), values, "every acknowledged record, once, in order");
}

/// A replica whose segment file was damaged while it was down (one bit flipped in a
/// batch every replica has) is never served and never elected, and is rebuilt from
/// its leader: its node finds the bad CRC when it reads the log back at start (the
/// Raft restore, or the scrub that reads the rest), leaves the partition's group and
/// asks for a rebuild. The leader takes it out of the group, adds it back empty and
/// sends it the log; made the preferred replica, it then leads and serves every
/// acknowledged record.
#[test]
fn a_damaged_replica_is_never_served_and_is_rebuilt_from_its_leader() {
    rebuilt_after(Damage::FlippedBit, false);
}

/// The same with the replica's segment cut to half its size while its node was down:
/// records its checkpoint had made durable are gone, which its node reads as damage,
/// not as a torn write (that would leave it voting with committed entries missing).
#[test]
fn a_replica_cut_short_is_rebuilt_from_its_leader() {
    rebuilt_after(Damage::CutShort, false);
}

/// The same with the damaged node killed as soon as it finds the damage, so that the
/// rebuild goes on while it is down: restarted, it resets the copy from before the
/// rebuild (damaged, its group's record naming it a voter still) and never the new one.
#[test]
fn a_replica_killed_during_its_rebuild_is_rebuilt_after_its_restart() {
    rebuilt_after(Damage::FlippedBit, true);
}

enum Damage {
    FlippedBit,
    CutShort,
}

fn rebuilt_after(damage: Damage, kill_when_found: bool) {
    let mut c = Cluster::start_with_yaml(3, "leader_imbalance_check_interval_ms: 1000\n");
    let all = [1, 2, 3];
    assert_eq!(c.create_topic("damaged", 1, 3), 0, "{}", c.logs());
    let (leader, _) = c.wait_for_leader(&all, "damaged", 0, None);
    let damaged = all.iter().copied().find(|n| *n != leader).unwrap();
    let values: Vec<String> = (0..200).map(|i| format!("v{i}-{}", "x".repeat(1000))).collect();
    let acked = produce_all(&c, &all, "damaged", 0, &values);
    // Appends reach a follower's segment files from its journal; an orderly stop
    // writes them all out.
    std::thread::sleep(Duration::from_secs(1));
    c.node(damaged).stop();
    let segment = c.node(damaged).dir.join("data").join("damaged-0").join("00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).expect("the damaged replica's segment");
    assert!(bytes.len() > 150_000, "the replica to damage holds {} bytes", bytes.len());
    let middle = bytes.len() / 2;
    let found = match damage {
        Damage::FlippedBit => {
            bytes[middle] ^= 0x10;
            "batch CRC mismatch"
        }
        Damage::CutShort => {
            bytes.truncate(middle);
            "a segment was cut short"
        }
    };
    std::fs::write(&segment, &bytes).unwrap();
    c.node(damaged).spawn();
    // Bounds generous for a loaded host: CI once timed out here or below.
    c.wait_until("the damaged replica is found out", Duration::from_secs(90), |c| {
        c.nodes[(damaged - 1) as usize].log().contains(found)
    });
    if kill_when_found {
        c.node(damaged).kill9();
        std::thread::sleep(Duration::from_secs(2));
        c.node(damaged).spawn();
    }

    // The others serve everything (leadership may move between them on a busy host);
    // the damaged node never serves its log (damaged, or rebuilt by now and a follower).
    let mut served = Vec::new();
    c.wait_until("a leader serves every record", Duration::from_secs(60), |c| {
        let others: Vec<i32> = all.iter().copied().filter(|n| *n != damaged).collect();
        let now = c.leader(others[0], "damaged", 0).map(|(l, _)| l).filter(|l| others.contains(l));
        served = now.and_then(|l| try_read_all(c, l, "damaged", 0).ok()).unwrap_or_default();
        !served.is_empty()
    });
    assert_eq!(served, acked);
    let mut k = c.try_connect(damaged).expect("the damaged node answers");
    let r = fetch(&mut k, &[("damaged", 0, 0)], 0, 1);
    let p = &r.responses[0].partitions[0];
    assert!(
        p.error_code != 0 && p.records.as_ref().is_none_or(|b| b.is_empty()),
        "the damaged replica served its log: {p:?}"
    );

    // Rebuilt: deleted, added back empty, and in sync again.
    c.wait_until("the damaged replica is rebuilt and in sync", Duration::from_secs(90), |c| {
        c.nodes[(damaged - 1) as usize].log().contains("deleting this replica to rebuild it from its leader")
            && c.all_in_sync(&all, "damaged", 3)
    });
    if let Damage::FlippedBit = damage {
        let flipped = bytes[middle];
        assert!(!std::fs::read(&segment).is_ok_and(|b| b.get(middle) == Some(&flipped)), "the damaged copy is gone");
    }
    // Made the preferred replica, it leads and serves every acknowledged record.
    let order: Vec<i32> = std::iter::once(damaged).chain(all.iter().copied().filter(|n| *n != damaged)).collect();
    assert_eq!(c.reassign(leader, "damaged", 0, Some(&order)), 0);
    c.wait_until("the rebuilt replica leads", Duration::from_secs(60), |c| {
        all.iter().all(|id| c.leader(*id, "damaged", 0).map(|(l, _)| l) == Some(damaged))
    });
    assert_eq!(read_all(&c, damaged, "damaged", 0), acked);
    let more: Vec<String> = (200..220).map(|i| format!("v{i}")).collect();
    assert_eq!(produce_all(&c, &all, "damaged", 0, &more), more);
    let expected: Vec<String> = acked.iter().chain(&more).cloned().collect();
    assert_eq!(read_all(&c, damaged, "damaged", 0), expected);
}

/// ACLs are cluster metadata: created through any node (relayed to the controller),
/// every node's authorizer and DescribeAcls see them. The nodes reach each other over
/// PLAINTEXT, as User:ANONYMOUS, which is a superuser, as Kafka's broker principal must be.
#[test]
fn acls_are_replicated_with_the_metadata() {
    let c = Cluster::start_with_yaml(3, "authorizer: standard\nsuperusers: [\"User:ANONYMOUS\"]\n");
    let creation = kafka_protocol::messages::create_acls_request::AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(kafka_protocol::protocol::StrBytes::from_static_str("replicated-"))
        .with_resource_pattern_type(4)
        .with_principal(kafka_protocol::protocol::StrBytes::from_static_str("User:alice"))
        .with_host(kafka_protocol::protocol::StrBytes::from_static_str("*"))
        .with_operation(3)
        .with_permission_type(3);
    let request = kafka_protocol::messages::CreateAclsRequest::default().with_creations(vec![creation]);
    c.wait_until("the ACL is created", Duration::from_secs(30), |c| {
        let Some(mut conn) = c.try_connect(1) else { return false };
        let r: Option<kafka_protocol::messages::CreateAclsResponse> =
            conn.try_call(kafka_protocol::messages::ApiKey::CreateAcls, 3, &request);
        r.is_some_and(|r| r.results[0].error_code == 0)
    });
    let describe = kafka_protocol::messages::DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(1)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1);
    c.wait_until("every node has the ACL", Duration::from_secs(30), |c| {
        (1..=3).all(|id| {
            let Some(mut conn) = c.try_connect(id) else { return false };
            let r: Option<kafka_protocol::messages::DescribeAclsResponse> =
                conn.try_call(kafka_protocol::messages::ApiKey::DescribeAcls, 3, &describe);
            r.is_some_and(|r| r.resources.len() == 1 && r.resources[0].resource_name.as_str() == "replicated-")
        })
    });
}

/// A leader that finds a corrupt batch while reading its log back for a follower
/// that was away (the entries are no longer in memory, nor in the batch cache) is
/// taken out and rebuilt, as a client read that meets one makes it: another replica
/// leads, brings the follower up to date, and nothing acknowledged is lost. Before,
/// the leader only logged it, kept leading, and the follower never caught up.
#[test]
fn a_leader_that_reads_a_corrupt_batch_back_for_a_follower_is_rebuilt() {
    let mut c = Cluster::start_with_yaml(3, "auto_leader_rebalance_enable: false\n");
    let all = [1, 2, 3];
    let segment_bytes = (4 << 20).to_string();
    assert_eq!(c.create_topic_with_configs("reread", 1, 3, &[("segment.bytes", &segment_bytes)]), 0);
    let (leader, _) = c.wait_for_leader(&all, "reread", 0, None);
    let away = all.iter().copied().find(|n| *n != leader).unwrap();
    let mut acked = produce_all(&c, &all, "reread", 0, &["before".to_string()]);
    c.node(away).stop();
    // More than the batch cache (an eighth of 256 MB) and the group's entries in memory.
    let values: Vec<String> = (0..640).map(|i| format!("v{i}-{}", "x".repeat(64 << 10))).collect();
    let up: Vec<i32> = all.iter().copied().filter(|n| *n != away).collect();
    acked.extend(produce_all(&c, &up, "reread", 0, &values));
    let first = c.node(leader).dir.join("data").join("reread-0").join("00000000000000000000.log");
    let mut bytes = std::fs::read(&first).unwrap();
    assert!(bytes.len() > 3 << 20, "the first segment holds {} bytes", bytes.len());
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&first, &bytes).unwrap();

    c.node(away).spawn();
    c.wait_until("the leader finds its log damaged", Duration::from_secs(60), |c| {
        c.nodes[(leader - 1) as usize].log().contains("damaged replica")
    });
    c.wait_until("the partition is whole again", Duration::from_secs(120), |c| {
        c.nodes[(leader - 1) as usize].log().contains("deleting this replica to rebuild it from its leader")
            && c.all_in_sync(&all, "reread", 3)
    });
    // The follower that was away leads and serves every acknowledged record.
    c.move_leader(&all, "reread", away, Duration::from_secs(60));
    assert_eq!(read_all(&c, away, "reread", 0), acked);
}
