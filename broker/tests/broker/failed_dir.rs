//! A data directory whose device fails takes only its partitions offline.
//!
//! The second data directory is an ext4 file system on a loop device. Device-mapper
//! (`dmsetup` with an `error` target) would be the natural way to fail it, but this
//! kernel has no device-mapper driver (`/dev/mapper/control` is missing), so the file
//! system is shut down instead with `EXT4_IOC_SHUTDOWN` (what xfstests' `godown`
//! does): from then on every read, write and fdatasync on it fails with EIO, as on a
//! dead drive. Needs root (to mount and to shut the file system down); without it
//! the test prints SKIPPED and why.

use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::loopfs::LoopFs;
use crate::common::{partition_dirs, Broker, Conn};
use kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, MetadataRequest, MetadataResponse,
};
use keel_protocol::batch::build_batch;

const KAFKA_STORAGE_ERROR: i16 = 56;
const LEADER_NOT_AVAILABLE: i16 = 5;

fn produce_code(c: &mut Conn, topic: &str, p: i32, value: &str) -> i16 {
    let r = produce(c, -1, &[(topic, p, build_batch(0, 0, &[(None, Some(value.as_bytes()))]))]);
    r.responses[0].partition_responses[0].error_code
}

#[test]
fn a_failed_dir_takes_only_its_partitions_offline() {
    let fs = match LoopFs::create(256 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            println!("SKIPPED: a_failed_dir_takes_only_its_partitions_offline: {why}");
            return;
        }
    };
    let failing = fs.mount.join("keel");
    let mut b = Broker::start_with_dirs(2, "256M", &[], &[failing.to_str().unwrap()]);
    let healthy = b.dir.join("data");
    let mut c = b.connect();
    assert_eq!(create_topic(&mut c, "fail", 6).topics[0].error_code, 0);
    for p in 0..6 {
        assert_eq!(produce_code(&mut c, "fail", p, "before"), 0);
    }
    let (up, down) = (partition_dirs(&healthy, "fail"), partition_dirs(&failing, "fail"));
    assert!(!up.is_empty() && !down.is_empty(), "partitions in both dirs: {up:?} {down:?}");

    fs.fail();
    // The first write after the failure finds it; produce until every partition of
    // the failed dir refuses.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    loop {
        n += 1;
        let codes: Vec<(i32, i16)> =
            (0..6).map(|p| (p, produce_code(&mut c, "fail", p, &format!("after-{n}")))).collect();
        for (p, code) in &codes {
            if up.contains(p) {
                assert_eq!(*code, 0, "partition {p} in the healthy dir keeps taking produce");
            }
        }
        if codes.iter().filter(|(p, _)| down.contains(p)).all(|(_, code)| *code == KAFKA_STORAGE_ERROR) {
            break;
        }
        assert!(Instant::now() < deadline, "failed dir's partitions still answer {codes:?}: {}", b.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(b.is_running(), "the broker stays up");
    println!("failed dir partitions {down:?} offline after {n} produce rounds; {up:?} kept serving");

    // Fetch and ListOffsets: storage error for the failed dir, data for the other.
    for p in 0..6 {
        let r = fetch(&mut c, &[("fail", p, 0)], 0, 1);
        let part = &r.responses[0].partitions[0];
        let (list_code, _) = list_offset(&mut c, "fail", p, -1);
        if down.contains(&p) {
            assert_eq!(part.error_code, KAFKA_STORAGE_ERROR, "fetch of offline partition {p}");
            assert_eq!(list_code, KAFKA_STORAGE_ERROR, "list offsets of offline partition {p}");
        } else {
            assert_eq!(part.error_code, 0, "fetch of partition {p}");
            let values: Vec<_> =
                records_of(part.records.as_ref().unwrap()).into_iter().map(|(_, _, v)| v.unwrap()).collect();
            assert_eq!(values.first().map(|v| &v[..]), Some(&b"before"[..]));
            assert_eq!(values.len(), n + 1, "partition {p} took every produce");
            assert_eq!(list_code, 0);
        }
    }

    // Metadata: the failed dir's partitions have no leader and an offline replica.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m: MetadataResponse = c.call(ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(None));
        let t = m.topics.iter().find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("fail")).unwrap();
        let offline: Vec<i32> =
            t.partitions.iter().filter(|p| !p.offline_replicas.is_empty()).map(|p| p.partition_index).collect();
        if offline == down {
            for p in &t.partitions {
                if down.contains(&p.partition_index) {
                    assert_eq!((p.error_code, p.leader_id.0), (LEADER_NOT_AVAILABLE, -1));
                    assert!(p.isr_nodes.is_empty());
                } else {
                    assert_eq!((p.error_code, p.leader_id.0), (0, 1));
                }
            }
            break;
        }
        assert!(Instant::now() < deadline, "metadata lists offline {offline:?}, expected {down:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // DescribeTopicPartitions (the AdminClient's describeTopics) agrees with Metadata.
    {
        use kafka_protocol::messages::describe_topic_partitions_request::TopicRequest;
        use kafka_protocol::messages::{DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
        let req = DescribeTopicPartitionsRequest::default()
            .with_topics(vec![TopicRequest::default().with_name(name("fail"))])
            .with_response_partition_limit(100);
        let r: DescribeTopicPartitionsResponse = c.call(ApiKey::DescribeTopicPartitions, 0, &req);
        for p in &r.topics[0].partitions {
            let offline = down.contains(&p.partition_index);
            assert_eq!(p.leader_id.0, if offline { -1 } else { 1 }, "leader of partition {}", p.partition_index);
            assert_eq!(p.offline_replicas.len(), usize::from(offline));
        }
    }

    // DescribeLogDirs: the failed dir with KAFKA_STORAGE_ERROR, the other as before.
    let r: DescribeLogDirsResponse =
        c.call(ApiKey::DescribeLogDirs, 4, &DescribeLogDirsRequest::default().with_topics(None));
    assert_eq!(r.results.len(), 2);
    for d in &r.results {
        let failed = d.log_dir.as_str().starts_with(fs.mount.to_str().unwrap());
        assert_eq!(d.error_code, if failed { KAFKA_STORAGE_ERROR } else { 0 }, "{}", d.log_dir.as_str());
        if !failed {
            let listed: Vec<i32> = d
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == "fail")
                .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
                .collect();
            assert_eq!(listed, up);
        }
    }
    assert!(b.is_running(), "the broker stays up: {}", b.log());
    let log = b.log();
    let failure = log.lines().find(|l| l.contains("data directory failed")).unwrap_or_default();
    println!("broker log: {failure}");
    b.kill9();
}
