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
    let table: Vec<(ApiKey, i16, i16)> = APIS.iter().map(|a| (a.key, a.versions.0, a.versions.1)).collect();
    assert_eq!(table, ADVERTISED);
}

#[test]
fn each_api_once() {
    for (i, api) in APIS.iter().enumerate() {
        assert!(!APIS[..i].iter().any(|a| a.key == api.key), "{:?} is listed twice", api.key);
        assert!(!APIS[..i].iter().any(|a| a.module == api.module), "{} handles two APIs", api.module);
    }
}

#[test]
fn relays_what_it_did() {
    let mut relayed: Vec<ApiKey> = APIS.iter().filter(|a| a.relay).map(|a| a.key).collect();
    let mut before = RELAYED.to_vec();
    relayed.sort_by_key(|k| *k as i16);
    before.sort_by_key(|k| *k as i16);
    assert_eq!(relayed, before);
}

/// Each advertised version of each API decodes, as `prepare` decodes it, into the
/// request type its registry line dispatches on; no other API has a handler.
#[test]
fn every_advertised_version_dispatches() {
    use bytes::BytesMut;
    for key in ApiKey::iter() {
        assert_eq!(sample(key).is_some(), api(key).is_some(), "{key:?}");
    }
    for api in APIS {
        let body = sample(api.key).unwrap();
        for version in api.versions.0..=api.versions.1 {
            let header = RequestHeader::default()
                .with_request_api_key(api.key as i16)
                .with_request_api_version(version)
                .with_correlation_id(7);
            let mut frame = BytesMut::new();
            header.encode(&mut frame, api.key.request_header_version(version)).unwrap();
            body.encode(&mut frame, version).unwrap();
            let decoded = frame::decode_request(frame.freeze()).unwrap();
            assert_eq!((decoded.api_key, decoded.version), (api.key, version));
            assert_eq!(std::mem::discriminant(&decoded.body), std::mem::discriminant(&body), "{:?}", api.key);
        }
    }
}

/// Every handler file has its registry line (`on_shard` gathers the handlers'
/// cross-shard requests and serves no API).
#[test]
fn every_handler_is_registered() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/handlers");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|name| name.strip_suffix(".rs").map(str::to_string))
        .filter(|name| !["mod", "tests", "on_shard"].contains(&name.as_str()))
        .collect();
    let mut registered: Vec<String> = APIS.iter().map(|a| a.module.to_string()).collect();
    files.sort();
    registered.sort();
    assert_eq!(files, registered);
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
