//! Divergences from Apache Kafka 4.4 that the differential tester (`compat/diff`) found,
//! each kept as its minimal sequence: in Produce, zstd in a request older than v7, the
//! log start offset of a sequence or epoch refusal, the append time of a retried batch
//! and a topic's own `compression.type`; in IncrementalAlterConfigs and AlterConfigs, a
//! config named twice and a bad value for a missing topic; in OffsetForLeaderEpoch, an
//! epoch past the latest; in DescribeTopicPartitions, paging and an unknown topic's
//! operations; in OffsetDelete, unknown topics and partitions; in ElectLeaders, a topic
//! named twice; in DeleteGroups, a group named twice; in DescribeQuorum, a partition
//! that is not the metadata log's; in ConsumerGroupDescribe, the regex and operations.
//! Two clients found: Metadata asked by topic id with empty names (the Java consumer),
//! and a sessionless Fetch with session id -1. One client test suite found: KIP-966's
//! cluster-level `min.insync.replicas`.

use crate::common::kafka::*;
use crate::common::{Broker, Conn};
use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use keel_protocol::batch::BatchHeader;

const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const GROUP_ID_NOT_FOUND: i16 = 69;
/// What Kafka 4.4 without an authorizer answers as a topic's authorized operations.
const TOPIC_OPERATIONS_ALL: i32 = 3576;
/// ... and as a group's.
const GROUP_OPERATIONS_ALL: i32 = 3400;
const TOPIC_RESOURCE: i8 = 2;
const OP_SET: i8 = 0;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;
/// The timestamp of a batch's first record; the others follow one second apart.
const FIRST_TIMESTAMP_MS: i64 = 1_700_000_000_000;

/// A batch of `count` records with `codec`, from producer `producer` (id, epoch, first
/// sequence) or none.
fn batch(codec: Compression, count: i32, producer: Option<(i64, i16, i32)>) -> Bytes {
    let (id, epoch, first) = producer.unwrap_or((-1, -1, -1));
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a batch where offset minus sequence changes.
            sequence: if first < 0 { i - 1 } else { first + i },
            timestamp: FIRST_TIMESTAMP_MS + i as i64 * 1000,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("v{i}"))),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: codec }).unwrap();
    buf.freeze()
}

/// One partition's answer to a produce at `version` with acks=-1.
fn produce_at(c: &mut Conn, version: i16, topic: &str, records: Bytes) -> produce_response::PartitionProduceResponse {
    let data = TopicProduceData::default()
        .with_name(name(topic))
        .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(records))]);
    let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![data]);
    let r: ProduceResponse = c.call(ApiKey::Produce, version, &req);
    r.responses[0].partition_responses[0].clone()
}

fn init_idempotent_producer(c: &mut Conn) -> (i64, i16) {
    let init: InitProducerIdResponse = c.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000),
    );
    assert_eq!(init.error_code, 0);
    (init.producer_id.0, init.producer_epoch)
}

/// Kafka: CreateTopics; Produce v6 of a zstd batch -> UNSUPPORTED_COMPRESSION_TYPE,
/// base offset -1, log start offset -1, nothing appended; the same at v7 is appended.
#[test]
fn zstd_before_produce_v7_is_refused() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "zstd", 1);
    let p = produce_at(&mut c, 6, "zstd", batch(Compression::Zstd, 2, None));
    assert_eq!((p.error_code, p.base_offset, p.log_start_offset), (UNSUPPORTED_COMPRESSION_TYPE, -1, -1));
    let p = produce_at(&mut c, 7, "zstd", batch(Compression::Zstd, 2, None));
    assert_eq!((p.error_code, p.base_offset), (0, 0), "zstd from Produce v7 on");
}

/// Kafka: an idempotent producer's sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER) and old
/// epoch (INVALID_PRODUCER_EPOCH) are answered with the partition's log start offset,
/// not -1.
#[test]
fn sequence_and_epoch_refusals_carry_the_log_start_offset() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "seq", 1);
    let (id, epoch) = init_idempotent_producer(&mut c);
    assert_eq!(produce_at(&mut c, 9, "seq", batch(Compression::None, 2, Some((id, epoch, 0)))).error_code, 0);
    let gap = produce_at(&mut c, 9, "seq", batch(Compression::None, 1, Some((id, epoch, 5))));
    assert_eq!((gap.error_code, gap.log_start_offset), (OUT_OF_ORDER_SEQUENCE_NUMBER, 0));
    assert_eq!(produce_at(&mut c, 9, "seq", batch(Compression::None, 1, Some((id, epoch + 1, 0)))).error_code, 0);
    let fenced = produce_at(&mut c, 9, "seq", batch(Compression::None, 1, Some((id, epoch, 2))));
    assert_eq!((fenced.error_code, fenced.log_start_offset), (INVALID_PRODUCER_EPOCH, 0));
}

/// Kafka: a retry of an idempotent batch still in the producer's window is answered
/// with its first offset and, as log append time, the max timestamp of the batch first
/// written (a CreateTime topic answers -1 otherwise).
#[test]
fn a_retried_batch_is_answered_with_its_timestamp() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "retry", 1);
    let (id, epoch) = init_idempotent_producer(&mut c);
    let first = produce_at(&mut c, 9, "retry", batch(Compression::None, 2, Some((id, epoch, 0))));
    assert_eq!((first.error_code, first.base_offset, first.log_append_time_ms), (0, 0, -1));
    let retry = produce_at(&mut c, 9, "retry", batch(Compression::None, 2, Some((id, epoch, 0))));
    assert_eq!((retry.error_code, retry.base_offset, retry.log_append_time_ms), (0, 0, FIRST_TIMESTAMP_MS + 1000));
}

/// Kafka: a topic with `compression.type=gzip` stores an lz4 batch as gzip (same
/// records, header fields and timestamps); `compression.type=producer` keeps lz4.
#[test]
fn a_topic_codec_recompresses_batches() {
    let b = Broker::start(1);
    let mut c = b.connect();
    for (topic, codec, stored) in [("gz", "gzip", 1), ("as-sent", "producer", 3), ("plain", "uncompressed", 0)] {
        assert_eq!(create_topic_with_configs(&mut c, topic, 1, &[("compression.type", codec)]).topics[0].error_code, 0);
        let sent = batch(Compression::Lz4, 3, None);
        assert_eq!(produce_at(&mut c, 9, topic, sent.clone()).error_code, 0);
        let f = fetch(&mut c, &[(topic, 0, 0)], 5000, 1);
        let records = f.responses[0].partitions[0].records.clone().unwrap();
        let h = BatchHeader::parse(&records).unwrap();
        keel_protocol::batch::validate(&records).expect("a valid batch");
        assert_eq!(h.compression(), stored, "{topic}: codec");
        let sent_header = BatchHeader::parse(&sent).unwrap();
        assert_eq!(
            (h.base_timestamp, h.max_timestamp, h.records_count),
            (sent_header.base_timestamp, sent_header.max_timestamp, 3)
        );
        assert_eq!(records_of(&records), records_of(&sent), "{topic}: the same records");
    }
}

/// IncrementalAlterConfigs v1 of one topic: (name, operation, value) -> error code.
fn incremental_alter(c: &mut Conn, topic: &str, ops: &[(&str, i8, &str)]) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let configs = ops
        .iter()
        .map(|(n, op, v)| {
            AlterableConfig::default()
                .with_name(n.to_string().into())
                .with_config_operation(*op)
                .with_value(Some(v.to_string().into()))
        })
        .collect();
    let resource = AlterConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name(topic.to_string().into())
        .with_configs(configs);
    let r: IncrementalAlterConfigsResponse = c.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![resource]),
    );
    r.responses[0].error_code
}

/// DescribeConfigs v4 of one topic config's value.
fn topic_config(c: &mut Conn, topic: &str, config: &str) -> Option<String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let resource = DescribeConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name(topic.to_string().into())
        .with_configuration_keys(Some(vec![config.to_string().into()]));
    let r: DescribeConfigsResponse =
        c.call(ApiKey::DescribeConfigs, 4, &DescribeConfigsRequest::default().with_resources(vec![resource]));
    r.results[0].configs.first().and_then(|e| e.value.as_ref().map(|v| v.to_string()))
}

/// Kafka: IncrementalAlterConfigs naming cleanup.policy twice (SUBTRACT delete, APPEND
/// compact) -> INVALID_REQUEST, nothing changed; on a missing topic too; and AlterConfigs
/// naming it twice.
#[test]
fn a_config_named_twice_is_refused() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "twice", 1);
    let ops = [("cleanup.policy", OP_SUBTRACT, "delete"), ("cleanup.policy", OP_APPEND, "compact")];
    assert_eq!(incremental_alter(&mut c, "twice", &ops), INVALID_REQUEST);
    assert_eq!(topic_config(&mut c, "twice", "cleanup.policy").as_deref(), Some("delete"));
    assert_eq!(incremental_alter(&mut c, "missing", &ops), INVALID_REQUEST);
    // AlterConfigs v1 {cleanup.policy=compact, cleanup.policy=bogus}: the same.
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let configs = ["compact", "bogus"].map(|v| {
        AlterableConfig::default().with_name("cleanup.policy".to_string().into()).with_value(Some(v.to_string().into()))
    });
    let resource = AlterConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name("twice".to_string().into())
        .with_configs(configs.to_vec());
    let r: AlterConfigsResponse =
        c.call(ApiKey::AlterConfigs, 1, &AlterConfigsRequest::default().with_resources(vec![resource]));
    assert_eq!(r.responses[0].error_code, INVALID_REQUEST);
    assert_eq!(topic_config(&mut c, "twice", "cleanup.policy").as_deref(), Some("delete"));
}

/// Kafka: a bad value for a missing topic is INVALID_CONFIG (values are checked
/// before the topic is looked up), in IncrementalAlterConfigs and AlterConfigs.
#[test]
fn a_bad_value_for_a_missing_topic_is_invalid_config() {
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let b = Broker::start(1);
    let mut c = b.connect();
    assert_eq!(incremental_alter(&mut c, "missing", &[("retention.ms", OP_SET, "not-a-number")]), INVALID_CONFIG);
    let resource = AlterConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name("missing".to_string().into())
        .with_configs(vec![AlterableConfig::default()
            .with_name("retention.ms".to_string().into())
            .with_value(Some("not-a-number".to_string().into()))]);
    let r: AlterConfigsResponse =
        c.call(ApiKey::AlterConfigs, 2, &AlterConfigsRequest::default().with_resources(vec![resource]));
    assert_eq!(r.responses[0].error_code, INVALID_CONFIG);
    assert_eq!(incremental_alter(&mut c, "missing", &[("retention.ms", OP_SET, "60000")]), 3, "then unknown");
}

fn offset_for_leader_epoch(c: &mut Conn, topic: &str, partition: i32, epoch: i32) -> (i16, i32, i64) {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
    let entry = OffsetForLeaderPartition::default()
        .with_partition(partition)
        .with_current_leader_epoch(-1)
        .with_leader_epoch(epoch);
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default().with_topic(name(topic)).with_partitions(vec![entry])]);
    let r: OffsetForLeaderEpochResponse = c.call(ApiKey::OffsetForLeaderEpoch, 3, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

/// Kafka: CreateTopics; Produce of 2 records; OffsetForLeaderEpoch v3 of epoch 2 (the
/// partition's latest is 0) -> end offset -1 and leader epoch -1 (UNDEFINED), no
/// error; epoch 0 ends at the log end; a partition out of range is unknown.
#[test]
fn an_epoch_past_the_latest_has_no_end() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "epochs", 2);
    assert_eq!(produce_at(&mut c, 8, "epochs", batch(Compression::Gzip, 2, None)).error_code, 0);
    assert_eq!(offset_for_leader_epoch(&mut c, "epochs", 0, 2), (0, -1, -1));
    assert_eq!(offset_for_leader_epoch(&mut c, "epochs", 0, 0), (0, 0, 2));
    assert_eq!(offset_for_leader_epoch(&mut c, "epochs", 0, -1), (0, -1, -1));
    assert_eq!(offset_for_leader_epoch(&mut c, "epochs", 7, 0), (UNKNOWN_TOPIC_OR_PARTITION, -1, -1));
}

fn describe_topic_partitions(
    c: &mut Conn,
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> DescribeTopicPartitionsResponse {
    use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
    let req = DescribeTopicPartitionsRequest::default()
        .with_topics(topics.iter().map(|t| TopicRequest::default().with_name(name(t))).collect())
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(t, p)| Cursor::default().with_topic_name(name(t)).with_partition_index(p)));
    c.call(ApiKey::DescribeTopicPartitions, 0, &req)
}

/// Kafka: CreateTopics t1 (2 partitions); DescribeTopicPartitions [t1, t9] with limit
/// 2 -> t1 with both partitions and the cursor at t9/0 (t9 unknown, not answered: the
/// limit is spent); from cursor t9/0 over [t1, t9, t0] -> only t9,
/// UNKNOWN_TOPIC_OR_PARTITION with the operations of a broker without an authorizer
/// (3576); a cursor naming a topic the list lacks -> INVALID_REQUEST for each topic.
#[test]
fn describe_topic_partitions_pages_as_kafka() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "t1", 2);
    let r = describe_topic_partitions(&mut c, &["t1", "t9"], 2, None);
    assert_eq!(r.topics.len(), 1);
    assert_eq!((r.topics[0].name.as_ref().unwrap().0.as_str(), r.topics[0].partitions.len()), ("t1", 2));
    let cursor = r.next_cursor.expect("a cursor at the topic the limit did not reach");
    assert_eq!((cursor.topic_name.0.as_str(), cursor.partition_index), ("t9", 0));

    let r = describe_topic_partitions(&mut c, &["t1", "t9", "t0"], 2, Some(("t9", 0)));
    assert_eq!(r.topics.len(), 1);
    let t9 = &r.topics[0];
    assert_eq!((t9.name.as_ref().unwrap().0.as_str(), t9.error_code), ("t9", UNKNOWN_TOPIC_OR_PARTITION));
    assert_eq!(t9.topic_authorized_operations, TOPIC_OPERATIONS_ALL);
    assert!(r.next_cursor.is_none());

    let r = describe_topic_partitions(&mut c, &["t1"], 2, Some(("t0", 0)));
    assert_eq!(r.topics.len(), 1);
    assert_eq!(r.topics[0].error_code, INVALID_REQUEST);

    // A cut inside a topic points at its next partition.
    let r = describe_topic_partitions(&mut c, &["t1"], 1, None);
    assert_eq!(r.topics[0].partitions.len(), 1);
    let cursor = r.next_cursor.expect("a cursor inside t1");
    assert_eq!((cursor.topic_name.0.as_str(), cursor.partition_index), ("t1", 1));
}

fn offset_delete(c: &mut Conn, group: &str, topic: &str, partitions: &[i32]) -> OffsetDeleteResponse {
    use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
    let topic = OffsetDeleteRequestTopic::default().with_name(name(topic)).with_partitions(
        partitions.iter().map(|p| OffsetDeleteRequestPartition::default().with_partition_index(*p)).collect(),
    );
    let req = OffsetDeleteRequest::default().with_group_id(GroupId(group.to_string().into())).with_topics(vec![topic]);
    c.call(ApiKey::OffsetDelete, 0, &req)
}

/// Kafka: CreateTopics t0 (2 partitions); OffsetCommit of g0 for t0/0; OffsetDelete of
/// g0 for t9/0 and t9/1 (no such topic) -> UNKNOWN_TOPIC_OR_PARTITION for each; for
/// t0/0 and t0/7 -> NONE and UNKNOWN_TOPIC_OR_PARTITION.
#[test]
fn offset_delete_of_unknown_partitions() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "t0", 2);
    let commit: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 5, &offset_commit_request("g0", "t0", &[(0, 9)]));
    assert_eq!(commit.topics[0].partitions[0].error_code, 0);
    let r = offset_delete(&mut c, "g0", "t9", &[0, 1]);
    assert_eq!(r.error_code, 0);
    let codes: Vec<i16> = r.topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, [UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION]);
    let r = offset_delete(&mut c, "g0", "t0", &[0, 7]);
    let mut codes: Vec<(i32, i16)> = r.topics[0].partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
    codes.sort_unstable();
    assert_eq!(codes, [(0, 0), (7, UNKNOWN_TOPIC_OR_PARTITION)]);
}

/// Kafka: ElectLeaders v2 (preferred) of [t0[0], t0[1]], t0 unknown -> two topic
/// entries, each with its partition UNKNOWN_TOPIC_OR_PARTITION; of every partition
/// (null) -> each topic, with an empty list.
#[test]
fn elect_leaders_answers_each_topic_entry() {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    let b = Broker::start(1);
    let mut c = b.connect();
    let entry = |p: i32| TopicPartitions::default().with_topic(name("t0")).with_partitions(vec![p]);
    let req = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_topic_partitions(Some(vec![entry(0), entry(1)]))
        .with_timeout_ms(5_000);
    let r: ElectLeadersResponse = c.call(ApiKey::ElectLeaders, 2, &req);
    let answered: Vec<(String, Vec<(i32, i16)>)> = r
        .replica_election_results
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partition_result.iter().map(|p| (p.partition_id, p.error_code)).collect()))
        .collect();
    assert_eq!(
        answered,
        [
            ("t0".to_string(), vec![(0, UNKNOWN_TOPIC_OR_PARTITION)]),
            ("t0".to_string(), vec![(1, UNKNOWN_TOPIC_OR_PARTITION)])
        ]
    );
    // Kafka: ElectLeaders v1 (unclean) of every partition (null) -> every topic, each
    // with no partitions (a single node's are all ELECTION_NOT_NEEDED, left out).
    create_topic(&mut c, "t1", 2);
    let req = ElectLeadersRequest::default().with_election_type(1).with_topic_partitions(None).with_timeout_ms(5_000);
    let r: ElectLeadersResponse = c.call(ApiKey::ElectLeaders, 1, &req);
    let t1 = r.replica_election_results.iter().find(|t| t.topic.0.as_str() == "t1").expect("t1 answered");
    assert!(t1.partition_result.is_empty());
}

/// Kafka: DeleteGroups v0 of [g0, g0], g0 unknown -> one answer, GROUP_ID_NOT_FOUND.
#[test]
fn delete_groups_answers_a_group_once() {
    let b = Broker::start(1);
    let mut c = b.connect();
    let g0 = GroupId("g0".to_string().into());
    let r: DeleteGroupsResponse =
        c.call(ApiKey::DeleteGroups, 0, &DeleteGroupsRequest::default().with_groups_names(vec![g0.clone(), g0]));
    let answered: Vec<(&str, i16)> = r.results.iter().map(|g| (g.group_id.0.as_str(), g.error_code)).collect();
    assert_eq!(answered, [("g0", GROUP_ID_NOT_FOUND)]);
}

/// Kafka: DescribeQuorum v2 of no-such-quorum/0 -> UNKNOWN_TOPIC_OR_PARTITION and no
/// nodes; of __cluster_metadata/0 -> its leader and one node.
#[test]
fn describe_quorum_of_another_partition() {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    let b = Broker::start(1);
    let mut c = b.connect();
    let mut ask = |topic: &str| -> DescribeQuorumResponse {
        let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(name(topic))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        c.call(ApiKey::DescribeQuorum, 2, &req)
    };
    let r = ask("no-such-quorum");
    assert_eq!(r.topics[0].partitions[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    assert!(r.nodes.is_empty(), "no nodes with a partition error");
    let r = ask("__cluster_metadata");
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(r.nodes.len(), 1);
}

/// Kafka: ConsumerGroupHeartbeat v0 joining g0 (subscribed to t0); ConsumerGroupDescribe
/// v0 of g0 with authorized operations -> 3400 (a broker without an authorizer) and the
/// member's `subscribed_topic_regex` "" (not null).
#[test]
fn consumer_group_describe_operations_and_regex() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "t0", 2);
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId("g0".to_string().into()))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![name("t0")]))
        .with_topic_partitions(Some(vec![]));
    let r: ConsumerGroupHeartbeatResponse = c.call(ApiKey::ConsumerGroupHeartbeat, 0, &join);
    assert_eq!(r.error_code, 0);
    let req = ConsumerGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId("g0".to_string().into())])
        .with_include_authorized_operations(true);
    let r: ConsumerGroupDescribeResponse = c.call(ApiKey::ConsumerGroupDescribe, 0, &req);
    let g = &r.groups[0];
    assert_eq!((g.error_code, g.authorized_operations), (0, GROUP_OPERATIONS_ALL));
    assert_eq!(g.members[0].subscribed_topic_regex.as_deref(), Some(""));
}

/// JoinGroup v5 of `member` ("" to join) in group g0 on `c`, sent without waiting.
fn join_group(member: &str, metadata: &[u8]) -> JoinGroupRequest {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    JoinGroupRequest::default()
        .with_group_id(GroupId("g0".to_string().into()))
        .with_session_timeout_ms(30_000)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(member.to_string().into())
        .with_protocol_type("consumer".to_string().into())
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name("range".to_string().into())
            .with_metadata(Bytes::copy_from_slice(metadata))])
}

/// Kafka: m0 joins g0 and syncs its assignment; m1 joins (MEMBER_ID_REQUIRED, then with
/// its id, its answer waiting for m0) and m0 rejoins; m0 syncs assignments for both;
/// LeaveGroup of m1 starts a rebalance; DescribeGroups v5 -> PreparingRebalance, m0
/// with no metadata but still its last assignment.
#[test]
fn a_rebalancing_group_describes_the_last_assignments() {
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    let b = Broker::start(1);
    let (mut c0, mut c1) = (b.connect(), b.connect());
    let r: JoinGroupResponse = c0.call(ApiKey::JoinGroup, 5, &join_group("", b"m0"));
    let m0 = r.member_id.to_string();
    let r: JoinGroupResponse = c0.call(ApiKey::JoinGroup, 5, &join_group(&m0, b"m0"));
    assert_eq!(r.error_code, 0);
    let sync = |generation: i32, assignments: Vec<(&str, &[u8])>| {
        SyncGroupRequest::default()
            .with_group_id(GroupId("g0".to_string().into()))
            .with_generation_id(generation)
            .with_member_id(m0.clone().into())
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(m.to_string().into())
                            .with_assignment(Bytes::copy_from_slice(a))
                    })
                    .collect(),
            )
    };
    let s: SyncGroupResponse = c0.call(ApiKey::SyncGroup, 3, &sync(r.generation_id, vec![(&m0, b"first")]));
    assert_eq!(s.error_code, 0);
    let r: JoinGroupResponse = c1.call(ApiKey::JoinGroup, 5, &join_group("", b"m1"));
    let m1 = r.member_id.to_string();
    let (_, frame) = c1.frame(ApiKey::JoinGroup, 5, &join_group(&m1, b"m1"));
    c1.send_raw(&frame);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let r: JoinGroupResponse = c0.call(ApiKey::JoinGroup, 5, &join_group(&m0, b"m0"));
    assert_eq!(r.error_code, 0);
    assert!(c1.read_frame().is_some(), "m1's JoinGroup answered once m0 rejoined");
    let s: SyncGroupResponse =
        c0.call(ApiKey::SyncGroup, 3, &sync(r.generation_id, vec![(&m0, b"second"), (&m1, b"other")]));
    assert_eq!(s.error_code, 0);
    let leave = LeaveGroupRequest::default().with_group_id(GroupId("g0".to_string().into())).with_member_id(m1.into());
    let l: LeaveGroupResponse = c1.call(ApiKey::LeaveGroup, 2, &leave);
    assert_eq!(l.error_code, 0);
    let d: DescribeGroupsResponse = c0.call(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![GroupId("g0".to_string().into())]),
    );
    let g = &d.groups[0];
    assert_eq!(g.group_state.as_str(), "PreparingRebalance");
    assert_eq!(g.members.len(), 1);
    assert!(g.members[0].member_metadata.is_empty());
    assert_eq!(&g.members[0].member_assignment[..], b"second");
}

/// WriteTxnMarkers v1 of producer (`id`, `epoch`) committing partitions 0 and 1 of `topic`.
fn write_markers(c: &mut Conn, topic: &str, id: i64, epoch: i16) -> Vec<i16> {
    use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch)
        .with_transaction_result(true)
        .with_coordinator_epoch(0)
        .with_topics(vec![WritableTxnMarkerTopic::default().with_name(name(topic)).with_partition_indexes(vec![0, 1])]);
    let r: WriteTxnMarkersResponse =
        c.call(ApiKey::WriteTxnMarkers, 1, &WriteTxnMarkersRequest::default().with_markers(vec![marker]));
    r.markers[0].topics[0].partitions.iter().map(|p| p.error_code).collect()
}

/// Kafka: CreateTopics (2 partitions); InitProducerId of an idempotent producer;
/// WriteTxnMarkers with the epoch after its own, on partitions it never wrote to ->
/// NONE (the marker starts the producer's state there); then with its own, older,
/// epoch -> INVALID_PRODUCER_EPOCH on both.
#[test]
fn a_marker_fences_older_epochs_of_a_producer_new_to_the_partition() {
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "markers", 2);
    let (id, epoch) = init_idempotent_producer(&mut c);
    assert_eq!(write_markers(&mut c, "markers", id, epoch + 1), [0, 0]);
    assert_eq!(write_markers(&mut c, "markers", id, epoch), [INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_EPOCH]);
}

/// Kafka answers a Metadata request that names any topic id by id and ignores its
/// names; the Java consumer (KIP-848 with a SubscriptionPattern) asks by id with empty
/// names, which Keel took for an illegal topic name (INVALID_TOPIC_EXCEPTION) and the
/// consumer failed its reconciliation.
#[test]
fn metadata_asked_by_topic_id_ignores_the_names() {
    const UNKNOWN_TOPIC_ID: i16 = 100;
    let b = Broker::start(1);
    let mut c = b.connect();
    let id = create_topic(&mut c, "by-id", 2).topics[0].topic_id;
    let unknown = kafka_protocol::protocol::StrBytes::from_static_str("");
    let ask = |id| {
        metadata_request::MetadataRequestTopic::default().with_topic_id(id).with_name(Some(TopicName(unknown.clone())))
    };
    let req = MetadataRequest::default()
        .with_topics(Some(vec![ask(id), ask(uuid::Uuid::from_u128(42))]))
        .with_allow_auto_topic_creation(true);
    let m: MetadataResponse = c.call(ApiKey::Metadata, 12, &req);
    let answers: Vec<(i16, Option<&str>, usize)> =
        m.topics.iter().map(|t| (t.error_code, t.name.as_ref().map(|n| n.0.as_str()), t.partitions.len())).collect();
    assert_eq!(answers, vec![(0, Some("by-id"), 2), (UNKNOWN_TOPIC_ID, None, 0)]);
}

/// Kafka's `FetchManager`: session epoch -1 is a sessionless full fetch and 0 opens a
/// session, whatever the session id; any other epoch asks for a session, which an
/// unknown id does not name (FETCH_SESSION_ID_NOT_FOUND, no topics). Some clients send
/// session id -1 with epoch -1 for a plain fetch, which Keel took for a session.
#[test]
fn a_fetch_with_epoch_minus_one_is_sessionless_whatever_its_session_id() {
    const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
    let b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "sessionless", 1);
    let p = produce_at(&mut c, 9, "sessionless", batch(Compression::None, 2, None));
    assert_eq!(p.error_code, 0);
    for version in [7, 11, 12] {
        for (session_id, session_epoch) in [(-1, -1), (0, -1), (12345, -1), (0, 0), (12345, 3), (0, 1), (-1, -2)] {
            let req = fetch_request(&[("sessionless", 0, 0)], 100, 1)
                .with_session_id(session_id)
                .with_session_epoch(session_epoch);
            let r: FetchResponse = c.call(ApiKey::Fetch, version, &req);
            let asked = format!("v{version} session {session_id} epoch {session_epoch}");
            if matches!(session_epoch, 0 | -1) {
                assert_eq!(r.error_code, 0, "{asked}");
                assert_eq!(r.responses.len(), 1, "{asked}");
                let records = r.responses[0].partitions[0].records.clone().expect("records");
                assert_eq!(records_of(&records).len(), 2, "{asked}");
            } else {
                assert_eq!((r.error_code, r.responses.len()), (FETCH_SESSION_ID_NOT_FOUND, 0), "{asked}");
            }
        }
    }
}

/// Kafka 4.1+ (KIP-966): the controller records `min.insync.replicas` as a cluster-level
/// config when it first activates, so DescribeConfigs of a topic without its own value
/// reports it as DYNAMIC_DEFAULT_BROKER_CONFIG (3), not a default, with that synonym
/// first; the cluster's broker resource ("") lists it too. The recorded value is the
/// broker's static default when it has one, and stays across a restart.
#[test]
fn min_insync_replicas_is_a_cluster_level_config_as_kip_966_records_it() {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::protocol::StrBytes;
    const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
    let describe = |c: &mut Conn, resource_type: i8, name: &str| {
        let req = DescribeConfigsRequest::default().with_include_synonyms(true).with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configuration_keys(Some(vec![StrBytes::from_static_str("min.insync.replicas")])),
        ]);
        let r: DescribeConfigsResponse = c.call(ApiKey::DescribeConfigs, 4, &req);
        let e = r.results[0].configs[0].clone();
        let synonyms: Vec<(String, i8)> = e.synonyms.iter().map(|s| (s.name.to_string(), s.source)).collect();
        (e.value.map(|v| v.to_string()), e.config_source, synonyms)
    };
    let mut b = Broker::start(1);
    let mut c = b.connect();
    create_topic(&mut c, "plain", 1);
    let (value, source, synonyms) = describe(&mut c, TOPIC_RESOURCE, "plain");
    assert_eq!((value.as_deref(), source), (Some("1"), DYNAMIC_DEFAULT_BROKER_CONFIG));
    assert_eq!(synonyms[0], ("min.insync.replicas".to_string(), DYNAMIC_DEFAULT_BROKER_CONFIG));
    let (value, source, _) = describe(&mut c, 4, "");
    assert_eq!((value.as_deref(), source), (Some("1"), DYNAMIC_DEFAULT_BROKER_CONFIG));
    b.stop();
    b.spawn();
    let mut c = b.connect();
    assert_eq!(describe(&mut c, TOPIC_RESOURCE, "plain").1, DYNAMIC_DEFAULT_BROKER_CONFIG);
    // Altered on the broker, it is the broker's own: DYNAMIC_BROKER_CONFIG.
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_static_str("1"))
            .with_configs(vec![kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig::default(
            )
            .with_name(StrBytes::from_static_str("min.insync.replicas"))
            .with_config_operation(OP_SET)
            .with_value(Some(StrBytes::from_static_str("1")))]),
    ]);
    let r: IncrementalAlterConfigsResponse = c.call(ApiKey::IncrementalAlterConfigs, 1, &alter);
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(describe(&mut c, TOPIC_RESOURCE, "plain").1, 2, "DYNAMIC_BROKER_CONFIG once altered");

    let b = Broker::start_with_yaml(1, "512M", &[], "topic_defaults:\n  min.insync.replicas: 2\n");
    let mut c = b.connect();
    create_topic(&mut c, "plain", 1);
    let (value, source, _) = describe(&mut c, TOPIC_RESOURCE, "plain");
    assert_eq!((value.as_deref(), source), (Some("2"), DYNAMIC_DEFAULT_BROKER_CONFIG));
}
