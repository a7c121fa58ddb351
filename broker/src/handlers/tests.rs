//! The API table's invariants, and what it was before the registry, written down once:
//! a change to what Keel advertises or relays must change these lists too.

use kafka_protocol::messages::ApiKey::{self, *};

use super::*;

/// ApiVersions' table as Keel answered it: API, min and max version, in this order.
const ADVERTISED: &[(ApiKey, i16, i16)] = &[
    (Produce, 3, 13),
    (Fetch, 4, 17),
    (ListOffsets, 1, 10),
    (Metadata, 0, 13),
    (ApiVersions, 0, 4),
    (CreateTopics, 2, 7),
    (DeleteTopics, 1, 6),
    (InitProducerId, 0, 5),
    (OffsetForLeaderEpoch, 2, 4),
    (DescribeConfigs, 1, 4),
    (AlterConfigs, 0, 2),
    (DescribeLogDirs, 1, 4),
    (AlterReplicaLogDirs, 1, 2),
    (CreatePartitions, 0, 3),
    (IncrementalAlterConfigs, 0, 1),
    (DescribeCluster, 0, 2),
    (DescribeTopicPartitions, 0, 0),
    (DescribeAcls, 1, 3),
    (CreateAcls, 1, 3),
    (DeleteAcls, 1, 3),
    (DescribeClientQuotas, 0, 1),
    (AlterClientQuotas, 0, 1),
    (DescribeQuorum, 0, 2),
    (DeleteRecords, 0, 2),
    (ElectLeaders, 0, 2),
    (AlterPartitionReassignments, 0, 1),
    (ListPartitionReassignments, 0, 0),
    (SaslHandshake, 0, 1),
    (SaslAuthenticate, 0, 2),
    (DescribeUserScramCredentials, 0, 0),
    (AlterUserScramCredentials, 0, 0),
    (OffsetCommit, 2, 9),
    (OffsetFetch, 1, 9),
    (FindCoordinator, 0, 6),
    (JoinGroup, 0, 9),
    (Heartbeat, 0, 4),
    (LeaveGroup, 0, 5),
    (SyncGroup, 0, 5),
    (DescribeGroups, 0, 6),
    (ListGroups, 0, 5),
    (DeleteGroups, 0, 2),
    (OffsetDelete, 0, 0),
    (ConsumerGroupHeartbeat, 0, 1),
    (ConsumerGroupDescribe, 0, 1),
    (AddPartitionsToTxn, 0, 5),
    (AddOffsetsToTxn, 0, 4),
    (EndTxn, 0, 5),
    (TxnOffsetCommit, 0, 5),
    (WriteTxnMarkers, 1, 1),
    (DescribeTransactions, 0, 0),
    (ListTransactions, 0, 1),
    (DescribeProducers, 0, 0),
];

/// The requests a node that is not the controller relays to it.
const RELAYED: &[ApiKey] = &[
    CreateTopics,
    DeleteTopics,
    CreatePartitions,
    AlterConfigs,
    IncrementalAlterConfigs,
    DescribeQuorum,
    AlterPartitionReassignments,
    AlterUserScramCredentials,
    CreateAcls,
    DeleteAcls,
    AlterClientQuotas,
];

#[test]
fn advertises_what_it_did() {
    let table: Vec<(ApiKey, i16, i16)> = SUPPORTED.to_vec();
    assert_eq!(table, ADVERTISED);
}

#[test]
fn each_api_once() {
    for (i, (key, _, _)) in SUPPORTED.iter().enumerate() {
        assert!(!SUPPORTED[..i].iter().any(|(k, _, _)| k == key), "{key:?} is listed twice");
    }
}

#[test]
fn relays_what_it_did() {
    let mut relayed = crate::replication::cluster::CONTROLLER_APIS.to_vec();
    let mut before = RELAYED.to_vec();
    relayed.sort_by_key(|k| *k as i16);
    before.sort_by_key(|k| *k as i16);
    assert_eq!(relayed, before);
}

#[test]
fn api_versions_answers_the_table() {
    use kafka_protocol::messages::ApiVersionsResponse;
    use kafka_protocol::protocol::Decodable;
    // Size prefix and correlation id, then a v0 body.
    let mut body = api_versions::unsupported_version_response(7).unwrap().split_off(8);
    let answer = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    let table: Vec<(ApiKey, i16, i16)> =
        answer.api_keys.iter().map(|a| (ApiKey::try_from(a.api_key).unwrap(), a.min_version, a.max_version)).collect();
    assert_eq!(table, ADVERTISED);
}
