//! Scenarios of the admin and cluster APIs (`admin_steps.rs`): leader epochs, paged
//! topic descriptions, the cluster, its quorum and ACLs, elections and reassignments,
//! log directories, deleting groups and offsets, and transaction markers written as a
//! coordinator writes them.

use kafka_protocol::messages::ApiKey;
use rand::seq::SliceRandom;
use rand::Rng;

use super::{Sequence, UNKNOWN};
use crate::admin_steps::{AdminRequest, LeaderEpoch, LogDir, Replica};
use crate::steps::{Request, Topic};
use crate::txn_steps::{Epoch, Producer, TxnRequest};

/// KRaft's metadata log, the one partition DescribeQuorum describes.
const METADATA_TOPIC: &str = "__cluster_metadata";

fn admin(s: &mut Sequence, request: AdminRequest) {
    s.push(Request::Admin(request));
}

/// OffsetForLeaderEpoch on a topic with records: the current epoch (the log end), no
/// epoch, an epoch past the latest (Kafka: -1 and -1), a current leader epoch ahead of
/// the partition's, a partition out of range, an unknown topic, one entry twice.
pub(super) fn leader_epochs(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 2, vec![]);
    for _ in 0..s.rng.gen_range(1..=3) {
        s.produce_acked(t0.clone(), 0);
    }
    s.metadata(vec![t0.clone()]);
    for _ in 0..s.rng.gen_range(1..=3) {
        let count = s.rng.gen_range(1..=3);
        let entries = (0..count)
            .map(|_| match s.rng.gen_range(0..8) {
                0 => (t0.clone(), 0, LeaderEpoch::Undefined, LeaderEpoch::Current),
                1 => (t0.clone(), 0, LeaderEpoch::Current, LeaderEpoch::Current),
                2 => (t0.clone(), 0, LeaderEpoch::Undefined, LeaderEpoch::Ahead(s.rng.gen_range(1..=3))),
                3 => (t0.clone(), 0, LeaderEpoch::Ahead(1), LeaderEpoch::Current),
                4 => (t0.clone(), 1, LeaderEpoch::Undefined, LeaderEpoch::Current),
                5 => (t0.clone(), 7, LeaderEpoch::Undefined, LeaderEpoch::Current),
                6 => (UNKNOWN, 0, LeaderEpoch::Undefined, LeaderEpoch::Current),
                _ => (t0.clone(), 0, LeaderEpoch::Undefined, LeaderEpoch::Undefined),
            })
            .collect::<Vec<_>>();
        let mut entries = entries;
        if s.chance(0.2) {
            let first = entries[0].clone();
            entries.push(first);
        }
        admin(s, AdminRequest::OffsetForLeaderEpoch { entries });
    }
}

/// DescribeTopicPartitions of two topics and an unknown one with small partition
/// limits and cursors, so that paging stops inside a topic, at its end, and starts at a
/// cursor that names a topic and partition (or an unknown topic).
pub(super) fn describe_topic_partitions(s: &mut Sequence) {
    let (t0, t1) = (Topic::Slot("t0"), Topic::Slot("t1"));
    s.create(t0.clone(), 3, vec![]);
    s.create(t1.clone(), 2, vec![]);
    for _ in 0..s.rng.gen_range(2..=4) {
        let mut topics = vec![t0.clone(), t1.clone(), UNKNOWN];
        topics.shuffle(s.rng);
        topics.truncate(s.rng.gen_range(1..=3));
        let limit = *[1, 2, 3, 4, 2000].choose(s.rng).expect("non-empty");
        let cursor = match s.rng.gen_range(0..5) {
            0 => Some((t0.clone(), s.rng.gen_range(0..=3))),
            1 => Some((t1.clone(), s.rng.gen_range(0..=1))),
            2 => Some((UNKNOWN, 0)),
            _ => None,
        };
        admin(s, AdminRequest::DescribeTopicPartitions { topics, limit, cursor });
    }
}

/// What a single node says of itself: DescribeCluster, DescribeQuorum (of the metadata
/// log and of partitions that are none), DescribeAcls without an authorizer,
/// DescribeLogDirs (all topics, chosen ones, unknown ones) and AlterReplicaLogDirs (to
/// the broker's own directory, to one it does not have, for unknown partitions).
pub(super) fn cluster(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 2, vec![]);
    s.produce_acked(t0.clone(), 0);
    let include_operations = s.chance(0.5);
    admin(s, AdminRequest::DescribeCluster { include_operations });
    let (topic, partition) =
        *[(METADATA_TOPIC, 0), (METADATA_TOPIC, 1), ("no-such-quorum", 0)].choose(s.rng).expect("non-empty");
    admin(s, AdminRequest::DescribeQuorum { topic, partition });
    // resource type ANY (1) or TOPIC (2); pattern ANY (1), LITERAL (3), MATCH (4), PREFIXED (5).
    let (resource_type, resource_name, pattern_type) =
        *[(1, None, 1), (2, Some("t"), 3), (2, None, 4), (2, Some("t"), 5)].choose(s.rng).expect("non-empty");
    let resource_name = resource_name.map(|name| Topic::Literal(name.into()));
    admin(s, AdminRequest::DescribeAcls { resource_type, resource_name, pattern_type });
    let topics = match s.rng.gen_range(0..3) {
        0 => None,
        1 => Some(vec![(t0.clone(), vec![0, 1])]),
        _ => Some(vec![(t0.clone(), vec![0, 7]), (UNKNOWN, vec![0])]),
    };
    admin(s, AdminRequest::DescribeLogDirs { topics });
    let dir = if s.chance(0.6) { LogDir::Own } else { LogDir::Unknown };
    let mut topics = vec![(t0.clone(), vec![0])];
    if s.chance(0.4) {
        topics.push((UNKNOWN, vec![0]));
    }
    if s.chance(0.3) {
        topics[0].1.push(7);
    }
    admin(s, AdminRequest::AlterReplicaLogDirs { dir, topics });
}

/// ElectLeaders (preferred, unclean; a topic named twice; partitions out of range;
/// unknown topics; every partition), ListPartitionReassignments and
/// AlterPartitionReassignments (to the node that has the partition, to a node no
/// cluster has, cancelling when none is under way).
pub(super) fn elections_and_reassignments(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 2, vec![]);
    for _ in 0..s.rng.gen_range(1..=2) {
        let election_type = if s.chance(0.5) { 0 } else { 1 };
        let topics = match s.rng.gen_range(0..5) {
            0 => None,
            1 => Some(vec![(t0.clone(), vec![0, 1])]),
            2 => Some(vec![(t0.clone(), vec![0]), (t0.clone(), vec![1])]),
            3 => Some(vec![(t0.clone(), vec![0, 7]), (UNKNOWN, vec![0])]),
            _ => Some(vec![(t0.clone(), vec![0, 0])]),
        };
        // v0 knows only preferred elections.
        match election_type {
            0 => admin(s, AdminRequest::ElectLeaders { election_type, topics }),
            _ => {
                if let Some(version) = s.version_at_least(ApiKey::ElectLeaders, 1) {
                    s.push_at(version, Request::Admin(AdminRequest::ElectLeaders { election_type, topics }));
                }
            }
        }
    }
    let topics = match s.rng.gen_range(0..3) {
        0 => None,
        1 => Some(vec![(t0.clone(), vec![0, 1])]),
        _ => Some(vec![(t0.clone(), vec![7]), (UNKNOWN, vec![0])]),
    };
    admin(s, AdminRequest::ListReassignments { topics });
    let partitions = (0..s.rng.gen_range(1..=2))
        .map(|_| match s.rng.gen_range(0..4) {
            0 => (0, Some(vec![Replica::Own])),
            1 => (0, Some(vec![Replica::Absent])),
            2 => (1, None),
            _ => (7, Some(vec![Replica::Own])),
        })
        .collect();
    let mut topics = vec![(t0.clone(), partitions)];
    if s.chance(0.3) {
        topics.push((UNKNOWN, vec![(0, Some(vec![Replica::Own]))]));
    }
    admin(s, AdminRequest::AlterReassignments { topics });
    admin(s, AdminRequest::ListReassignments { topics: None });
}

/// A simple group's committed offsets deleted (OffsetDelete: known and unknown topics,
/// partitions out of range, an unknown group), then the group itself (DeleteGroups,
/// with an unknown group and a name given twice), and what OffsetFetch sees after.
pub(super) fn delete_groups(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 2, vec![]);
    s.metadata(vec![t0.clone()]);
    s.push(Request::FindCoordinator { group: "g0" });
    for partition in 0..2 {
        let offset = s.rng.gen_range(0..10);
        s.push(Request::OffsetCommit { group: "g0", topic: t0.clone(), partition, offset });
    }
    let mut topics = vec![(t0.clone(), vec![0])];
    match s.rng.gen_range(0..4) {
        0 => topics.push((UNKNOWN, vec![0])),
        1 => topics[0].1.push(7),
        2 => topics = vec![(UNKNOWN, vec![0, 1])],
        _ => {}
    }
    let group = if s.chance(0.2) { "g1" } else { "g0" };
    admin(s, AdminRequest::OffsetDelete { group, topics });
    s.push(Request::OffsetFetch { group: "g0", topics: Some(vec![(t0.clone(), vec![0, 1])]) });
    let groups = match s.rng.gen_range(0..3) {
        0 => vec!["g0"],
        1 => vec!["g0", "g1"],
        _ => vec!["g0", "g0"],
    };
    admin(s, AdminRequest::DeleteGroups { groups });
    s.push(Request::OffsetFetch { group: "g0", topics: Some(vec![(t0, vec![0, 1])]) });
    s.push(Request::DescribeGroups { groups: vec!["g0"] });
    admin(s, AdminRequest::DeleteGroups { groups: vec!["g0"] });
}

/// WriteTxnMarkers as a transaction coordinator sends it to a partition leader: for an
/// idempotent producer that wrote to the partition, for a producer id no broker gave,
/// with an epoch ahead and then the one before; for unknown topics and partitions;
/// then what Fetch (at both isolation levels) and ListOffsets see.
pub(super) fn txn_markers(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0.clone(), 2, vec![("segment.ms", super::SEGMENT_MS_NO_TIME_ROLL)]);
    s.push(Request::Txn(TxnRequest::InitProducerId { txn: "p0" }));
    let current = Producer { txn: "p0", epoch: Epoch::Current };
    let records = s.rng.gen_range(1..=3);
    let produce =
        TxnRequest::Produce { producer: current, acks: -1, topic: t0.clone(), partition: 0, base_sequence: 0, records };
    s.push(Request::Txn(produce));
    for _ in 0..s.rng.gen_range(1..=3) {
        let epoch = *[Epoch::Current, Epoch::Current, Epoch::Ahead, Epoch::UnknownId].choose(s.rng).expect("non-empty");
        let mut topics = vec![(t0.clone(), vec![0])];
        match s.rng.gen_range(0..4) {
            0 => topics.push((UNKNOWN, vec![0])),
            1 => topics[0].1.push(7),
            2 => topics[0].1.push(1),
            _ => {}
        }
        let commit = s.chance(0.5);
        admin(s, AdminRequest::WriteTxnMarkers { producer: Producer { txn: "p0", epoch }, commit, topics });
    }
    for isolation_level in [0, 1] {
        let (max_bytes, partition_max_bytes) = (1 << 20, 1 << 20);
        s.push(Request::Fetch {
            topic: t0.clone(),
            partition: 0,
            offset: 0,
            max_bytes,
            partition_max_bytes,
            isolation_level,
        });
    }
    s.push(Request::ListOffsets { topic: t0, partition: 0, timestamp: -1, isolation_level: 1 });
}
