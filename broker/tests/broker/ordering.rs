//! Requests on one connection take effect in order, as Kafka promises: every pair a
//! client can observe, sent back to back without waiting for the first answer, on a
//! single node with one shard and with two, and on three nodes (replication factor 3;
//! admin changes sent to a node that is not the controller, partition requests to the
//! partition's leader). Each pair runs a few rounds, since a race shows only
//! sometimes. Also what an answer promises to other connections: once DeleteRecords
//! answers a low watermark, ListOffsets on another connection does not report less;
//! once a topic change is answered, Metadata from the answering node shows it.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{self as iac};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use keel_protocol::batch::build_batch;

use crate::common::cluster::Cluster;
use crate::common::kafka::{fetch_request, name, offset_commit_request, produce_request, records_of};
use crate::common::{Broker, Conn};
use crate::transactions::{add_partitions, init, produce_txn, read_committed, txn_batch, txn_id};

/// Rounds of each pair.
const ROUNDS: usize = 3;

/// Every node allows ACLs (the anonymous test client is a superuser).
const YAML: &str = "authorizer: standard\nsuperusers: [\"User:ANONYMOUS\"]\n";
/// The cluster's: the transaction pairs place a partition's leader and a group on the
/// transaction coordinator's node, where the leader balancer must not move them back
/// to their preferred replicas in the middle of a pair.
const CLUSTER_YAML: &str =
    "authorizer: standard\nsuperusers: [\"User:ANONYMOUS\"]\nauto_leader_rebalance_enable: false\n";

#[test]
fn one_shard_keeps_each_connections_order() {
    every_pair(&Target::Single(Broker::start_with_yaml(1, "512M", &[], YAML)));
}

#[test]
fn two_shards_keep_each_connections_order() {
    every_pair(&Target::Single(Broker::start_with_yaml(2, "512M", &[], YAML)));
}

#[test]
fn three_nodes_keep_each_connections_order() {
    every_pair(&Target::Cluster(Cluster::start_with_yaml(3, CLUSTER_YAML)));
}

fn every_pair(t: &Target) {
    for round in 0..ROUNDS {
        produce_then_fetch_and_list_offsets(t, round);
        delete_records_then_list_offsets_and_fetch(t, round);
        topic_changes_then_metadata(t, round);
        config_changes_then_describe_configs(t, round);
        offset_commit_then_offset_fetch(t, round);
        acl_changes_then_describe_acls(t, round);
        quota_change_then_describe_quotas(t, round);
    }
    transaction_end_then_offsets_and_read_committed(t);
}

/// A single node, or a cluster of three.
enum Target {
    Single(Broker),
    Cluster(Cluster),
}

impl Target {
    fn replication_factor(&self) -> i16 {
        match self {
            Target::Single(_) => 1,
            Target::Cluster(c) => c.nodes.len() as i16,
        }
    }

    fn connect(&self, node: i32) -> Conn {
        match self {
            Target::Single(b) => b.connect(),
            Target::Cluster(c) => c.try_connect(node).expect("the node answers"),
        }
    }

    /// A connection for admin changes: in a cluster, to a node that is not the
    /// controller, so that the change is relayed.
    fn admin(&self) -> Conn {
        match self {
            Target::Single(b) => b.connect(),
            Target::Cluster(c) => {
                let controller = c.controller(1).expect("a controller");
                self.connect(if controller == 1 { 2 } else { 1 })
            }
        }
    }

    /// Creates `topic` and waits until its partition 0 has a leader; returns a
    /// connection to that leader.
    fn create(&self, topic: &str, partitions: i32) -> Conn {
        let mut c = self.admin();
        let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &create_request(topic, partitions, self));
        assert_eq!(r.topics[0].error_code, 0, "{topic}: {:?}", r.topics[0].error_message);
        self.leader(topic)
    }

    fn leader(&self, topic: &str) -> Conn {
        match self {
            Target::Single(b) => b.connect(),
            Target::Cluster(c) => {
                let asking: Vec<i32> = (1..=c.nodes.len() as i32).collect();
                let (leader, _) = c.wait_for_leader(&asking, topic, 0, None);
                self.connect(leader)
            }
        }
    }

    /// The node coordinating `key` (0 a group, 1 a transactional id).
    fn coordinator(&self, key_type: i8, key: &str) -> i32 {
        let mut c = self.connect(1);
        let req = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(vec![StrBytes::from_string(key.to_string())]);
        for _ in 0..300 {
            let r: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, 4, &req);
            if r.coordinators[0].error_code == 0 {
                return r.coordinators[0].node_id.0;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no coordinator for {key}");
    }
}

fn create_request(topic: &str, partitions: i32, t: &Target) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(t.replication_factor())])
        .with_timeout_ms(30_000)
}

/// Sends two requests back to back and reads both answers.
fn pipelined<A: Encodable, B: Encodable, RA: Decodable, RB: Decodable>(
    c: &mut Conn,
    first: (ApiKey, i16, &A),
    second: (ApiKey, i16, &B),
) -> (RA, RB) {
    let (first_id, a) = c.frame(first.0, first.1, first.2);
    let (second_id, b) = c.frame(second.0, second.1, second.2);
    c.send_raw(&[a, b].concat());
    let ra = answer(c, first.0, first.1, first_id);
    (ra, answer(c, second.0, second.1, second_id))
}

fn answer<R: Decodable>(c: &mut Conn, key: ApiKey, version: i16, correlation: i32) -> R {
    let mut frame = c.read_frame().expect("an answer");
    assert_eq!(i32::from_be_bytes(frame[..4].try_into().unwrap()), correlation, "{key:?} answered in order");
    let header = if key.response_header_version(version) >= 1 { 5 } else { 4 };
    let mut body = frame.split_off(header);
    R::decode(&mut body, version).expect("the answer decodes")
}

fn batch(value: &str) -> Bytes {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    build_batch(0, now, &[(None, Some(value.as_bytes()))])
}

fn list_offsets_request(topic: &str, timestamp: i64) -> ListOffsetsRequest {
    let p = ListOffsetsPartition::default().with_partition_index(0).with_timestamp(timestamp);
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![p])])
}

fn listed(r: &ListOffsetsResponse) -> (i16, i64) {
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

fn metadata_request(topic: &str) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(topic)))]))
        .with_allow_auto_topic_creation(false)
}

/// Produce (acks=all) then Fetch from its offset, and then ListOffsets latest; on a
/// single node also acks=0 then Fetch (a cluster serves consumers only what every
/// replica has, on Kafka as on Keel, so acks=0 promises nothing there).
fn produce_then_fetch_and_list_offsets(t: &Target, round: usize) {
    let topic = format!("order-produce-{round}");
    let mut c = t.create(&topic, 1);
    let produced: ProduceResponse = c.call(ApiKey::Produce, 11, &produce_request(-1, &[(&topic, 0, batch("x"))]));
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    let (produced, fetched): (ProduceResponse, FetchResponse) = pipelined(
        &mut c,
        (ApiKey::Produce, 11, &produce_request(-1, &[(&topic, 0, batch("a"))])),
        (ApiKey::Fetch, 12, &fetch_request(&[(&topic, 0, 1)], 0, 0)),
    );
    let p = &produced.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 1), "{topic}");
    let values: Vec<_> = records_of(&fetched.responses[0].partitions[0].records.clone().unwrap_or_default())
        .into_iter()
        .filter_map(|(_, _, v)| v)
        .collect();
    assert_eq!(values, [Bytes::from("a")], "a Fetch sees the Produce before it ({topic})");
    let (_, latest): (ProduceResponse, ListOffsetsResponse) = pipelined(
        &mut c,
        (ApiKey::Produce, 11, &produce_request(-1, &[(&topic, 0, batch("b"))])),
        (ApiKey::ListOffsets, 7, &list_offsets_request(&topic, -1)),
    );
    assert_eq!(listed(&latest), (0, 3), "ListOffsets sees the Produce before it ({topic})");
    if let Target::Single(_) = t {
        let (_, unanswered) = c.frame(ApiKey::Produce, 11, &produce_request(0, &[(&topic, 0, batch("c"))]));
        let (id, fetch) = c.frame(ApiKey::Fetch, 12, &fetch_request(&[(&topic, 0, 3)], 0, 0));
        c.send_raw(&[unanswered, fetch].concat());
        let fetched: FetchResponse = answer(&mut c, ApiKey::Fetch, 12, id);
        let records = fetched.responses[0].partitions[0].records.clone().unwrap_or_default();
        assert_eq!(records_of(&records).len(), 1, "a Fetch sees the acks=0 Produce before it ({topic})");
    }
}

/// DeleteRecords then ListOffsets earliest, and then Fetch below the new start; and
/// ListOffsets on another connection after the answer.
fn delete_records_then_list_offsets_and_fetch(t: &Target, round: usize) {
    let topic = format!("order-delete-{round}");
    let mut c = t.create(&topic, 1);
    for v in ["a", "b", "c", "d", "e"] {
        let r: ProduceResponse = c.call(ApiKey::Produce, 11, &produce_request(-1, &[(&topic, 0, batch(v))]));
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let delete = |offset: i64| {
        let p = DeleteRecordsPartition::default().with_partition_index(0).with_offset(offset);
        DeleteRecordsRequest::default()
            .with_topics(vec![DeleteRecordsTopic::default().with_name(name(&topic)).with_partitions(vec![p])])
            .with_timeout_ms(30_000)
    };
    let (deleted, earliest): (DeleteRecordsResponse, ListOffsetsResponse) = pipelined(
        &mut c,
        (ApiKey::DeleteRecords, 2, &delete(2)),
        (ApiKey::ListOffsets, 7, &list_offsets_request(&topic, -2)),
    );
    let d = &deleted.topics[0].partitions[0];
    assert_eq!((d.error_code, d.low_watermark), (0, 2), "{topic}");
    assert_eq!(listed(&earliest), (0, 2), "ListOffsets sees the DeleteRecords before it ({topic})");
    let (_, fetched): (DeleteRecordsResponse, FetchResponse) = pipelined(
        &mut c,
        (ApiKey::DeleteRecords, 2, &delete(4)),
        (ApiKey::Fetch, 12, &fetch_request(&[(&topic, 0, 3)], 0, 0)),
    );
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(p.error_code, 1, "a Fetch below the new start is OFFSET_OUT_OF_RANGE ({topic})");
    let mut other = t.leader(&topic);
    let r: ListOffsetsResponse = other.call(ApiKey::ListOffsets, 7, &list_offsets_request(&topic, -2));
    assert_eq!(listed(&r), (0, 4), "another connection sees the answered low watermark ({topic})");
}

/// CreateTopics, CreatePartitions and DeleteTopics, each then Metadata of the topic.
fn topic_changes_then_metadata(t: &Target, round: usize) {
    let topic = format!("order-topic-{round}");
    let mut c = t.admin();
    let (created, meta): (CreateTopicsResponse, MetadataResponse) = pipelined(
        &mut c,
        (ApiKey::CreateTopics, 7, &create_request(&topic, 3, t)),
        (ApiKey::Metadata, 12, &metadata_request(&topic)),
    );
    assert_eq!(created.topics[0].error_code, 0, "{topic}");
    assert_eq!((meta.topics[0].error_code, meta.topics[0].partitions.len()), (0, 3), "Metadata after CreateTopics");
    let more = CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default().with_name(name(&topic)).with_count(5)])
        .with_timeout_ms(30_000);
    let (grown, meta): (CreatePartitionsResponse, MetadataResponse) =
        pipelined(&mut c, (ApiKey::CreatePartitions, 3, &more), (ApiKey::Metadata, 12, &metadata_request(&topic)));
    assert_eq!(grown.results[0].error_code, 0, "{topic}: {:?}", grown.results[0].error_message);
    assert_eq!(meta.topics[0].partitions.len(), 5, "Metadata after CreatePartitions ({topic})");
    let delete = DeleteTopicsRequest::default().with_topic_names(vec![name(&topic)]).with_timeout_ms(30_000);
    let (deleted, meta): (DeleteTopicsResponse, MetadataResponse) =
        pipelined(&mut c, (ApiKey::DeleteTopics, 5, &delete), (ApiKey::Metadata, 12, &metadata_request(&topic)));
    assert_eq!(deleted.responses[0].error_code, 0, "{topic}");
    assert_eq!(meta.topics[0].error_code, 3, "Metadata after DeleteTopics: UNKNOWN_TOPIC_OR_PARTITION ({topic})");
}

/// AlterConfigs and IncrementalAlterConfigs, each then DescribeConfigs.
fn config_changes_then_describe_configs(t: &Target, round: usize) {
    let topic = format!("order-config-{round}");
    drop(t.create(&topic, 1));
    let mut c = t.admin();
    let describe = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.clone()))
        .with_configuration_keys(Some(vec![StrBytes::from_static_str("retention.ms")]))]);
    let value = |r: &DescribeConfigsResponse| r.results[0].configs[0].value.as_ref().map(|v| v.to_string());
    let incremental =
        IncrementalAlterConfigsRequest::default().with_resources(vec![iac::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.clone()))
            .with_configs(vec![iac::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_static_str("1234567")))])]);
    let (altered, described): (IncrementalAlterConfigsResponse, DescribeConfigsResponse) =
        pipelined(&mut c, (ApiKey::IncrementalAlterConfigs, 1, &incremental), (ApiKey::DescribeConfigs, 4, &describe));
    assert_eq!(altered.responses[0].error_code, 0, "{topic}");
    assert_eq!(value(&described).as_deref(), Some("1234567"), "DescribeConfigs after IncrementalAlterConfigs");
    let legacy = AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.clone()))
        .with_configs(vec![AlterableConfig::default()
            .with_name(StrBytes::from_static_str("retention.ms"))
            .with_value(Some(StrBytes::from_static_str("7654321")))])]);
    let (altered, described): (AlterConfigsResponse, DescribeConfigsResponse) =
        pipelined(&mut c, (ApiKey::AlterConfigs, 2, &legacy), (ApiKey::DescribeConfigs, 4, &describe));
    assert_eq!(altered.responses[0].error_code, 0, "{topic}");
    assert_eq!(value(&described).as_deref(), Some("7654321"), "DescribeConfigs after AlterConfigs");
}

fn offset_fetch_request(group: &str, topic: &str) -> OffsetFetchRequest {
    OffsetFetchRequest::default().with_group_id(GroupId(StrBytes::from_string(group.to_string()))).with_topics(Some(
        vec![OffsetFetchRequestTopic::default().with_name(name(topic)).with_partition_indexes(vec![0])],
    ))
}

/// OffsetCommit then OffsetFetch, on the group's coordinator.
fn offset_commit_then_offset_fetch(t: &Target, round: usize) {
    let topic = format!("order-offsets-{round}");
    drop(t.create(&topic, 1));
    let group = format!("order-group-{round}");
    for offset in [5, 9] {
        // A commit refused with a retriable error (the coordinator moved or is still
        // loading, as a loaded machine's elections make it) says nothing of the order:
        // find the coordinator again and send the pair again, as a client retries.
        let mut attempts = 0;
        loop {
            let mut c = t.connect(t.coordinator(0, &group));
            let (committed, fetched): (OffsetCommitResponse, OffsetFetchResponse) = pipelined(
                &mut c,
                (ApiKey::OffsetCommit, 8, &offset_commit_request(&group, &topic, &[(0, offset)])),
                (ApiKey::OffsetFetch, 7, &offset_fetch_request(&group, &topic)),
            );
            let code = committed.topics[0].partitions[0].error_code;
            attempts += 1;
            if RETRIABLE_COORDINATOR_ERRORS.contains(&code) && attempts < 100 {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            assert_eq!(code, 0, "{group}: OffsetCommit");
            assert_eq!(fetched.error_code, 0, "{group}: OffsetFetch");
            assert_eq!(fetched.topics[0].partitions[0].committed_offset, offset, "OffsetFetch after OffsetCommit");
            break;
        }
    }
}

/// REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
const RETRIABLE_COORDINATOR_ERRORS: [i16; 4] = [7, 14, 15, 16];

/// CreateAcls then DescribeAcls, DeleteAcls then DescribeAcls.
fn acl_changes_then_describe_acls(t: &Target, round: usize) {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    let resource = format!("order-acl-{round}");
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let creation = AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(s(&resource))
        .with_resource_pattern_type(3)
        .with_principal(s("User:alice"))
        .with_host(s("*"))
        .with_operation(3)
        .with_permission_type(3);
    let describe = DescribeAclsRequest::default()
        .with_resource_type_filter(2)
        .with_resource_name_filter(Some(s(&resource)))
        .with_pattern_type_filter(3)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1);
    let mut c = t.admin();
    let (created, described): (CreateAclsResponse, DescribeAclsResponse) = pipelined(
        &mut c,
        (ApiKey::CreateAcls, 3, &CreateAclsRequest::default().with_creations(vec![creation])),
        (ApiKey::DescribeAcls, 3, &describe),
    );
    assert_eq!(created.results[0].error_code, 0, "{resource}");
    assert_eq!(described.resources.len(), 1, "DescribeAcls after CreateAcls ({resource})");
    let filter = DeleteAclsFilter::default()
        .with_resource_type_filter(2)
        .with_resource_name_filter(Some(s(&resource)))
        .with_pattern_type_filter(3)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1);
    let (deleted, described): (DeleteAclsResponse, DescribeAclsResponse) = pipelined(
        &mut c,
        (ApiKey::DeleteAcls, 3, &DeleteAclsRequest::default().with_filters(vec![filter])),
        (ApiKey::DescribeAcls, 3, &describe),
    );
    assert_eq!(deleted.filter_results[0].matching_acls.len(), 1, "{resource}");
    assert!(described.resources.is_empty(), "DescribeAcls after DeleteAcls ({resource})");
}

/// AlterClientQuotas then DescribeClientQuotas.
fn quota_change_then_describe_quotas(t: &Target, round: usize) {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    let client = format!("order-client-{round}");
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let entity = vec![EntityData::default().with_entity_type(s("client-id")).with_entity_name(Some(s(&client)))];
    let alter = AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(entity)
        .with_ops(vec![OpData::default().with_key(s("producer_byte_rate")).with_value(1024.0 * (round + 1) as f64)])]);
    let describe = DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
        .with_entity_type(s("client-id"))
        .with_match_type(0)
        .with_match(Some(s(&client)))]);
    let mut c = t.admin();
    let (altered, described): (AlterClientQuotasResponse, DescribeClientQuotasResponse) =
        pipelined(&mut c, (ApiKey::AlterClientQuotas, 1, &alter), (ApiKey::DescribeClientQuotas, 1, &describe));
    assert_eq!(altered.entries[0].error_code, 0, "{client}");
    let values: Vec<f64> = described.entries.iter().flatten().flat_map(|e| e.values.iter().map(|v| v.value)).collect();
    assert_eq!(values, [1024.0 * (round + 1) as f64], "DescribeClientQuotas after AlterClientQuotas ({client})");
}

/// A transaction's TxnOffsetCommit then OffsetFetch (not before the end), EndTxn then
/// OffsetFetch, and EndTxn then a read_committed Fetch, on one connection: in a
/// cluster, the node that coordinates the transaction is made the partition's leader
/// and the group is one that node coordinates.
fn transaction_end_then_offsets_and_read_committed(t: &Target) {
    let id = "order-txn";
    let coordinator = t.coordinator(1, id);
    let topic = "order-txn-out";
    drop(t.create(topic, 1));
    drop(t.create("order-txn-in", 1));
    if let Target::Cluster(cluster) = t {
        let asking: Vec<i32> = (1..=cluster.nodes.len() as i32).collect();
        cluster.move_leader(&asking, topic, coordinator, Duration::from_secs(60));
    }
    let group = (0..1000)
        .map(|i| format!("order-txn-group-{i}"))
        .find(|g| t.coordinator(0, g) == coordinator)
        .expect("a group the transaction's coordinator coordinates");
    let mut c = t.connect(coordinator);
    let producer = init(&mut c, id, 60_000);
    assert_eq!(add_partitions(&mut c, id, producer, topic, &[0]), 0);
    assert_eq!(produce_txn(&mut c, id, topic, 0, txn_batch(producer, 0, &["a", "b"])).0, 0);
    let added: AddOffsetsToTxnResponse = c.call(
        ApiKey::AddOffsetsToTxn,
        3,
        &AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn_id(id))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_group_id(GroupId(StrBytes::from_string(group.clone()))),
    );
    assert_eq!(added.error_code, 0);
    let commit = {
        use kafka_protocol::messages::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id(id))
            .with_group_id(GroupId(StrBytes::from_string(group.clone())))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(name("order-txn-in")).with_partitions(
                vec![TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(42)],
            )])
    };
    let (committed, fetched): (TxnOffsetCommitResponse, OffsetFetchResponse) = pipelined(
        &mut c,
        (ApiKey::TxnOffsetCommit, 3, &commit),
        (ApiKey::OffsetFetch, 7, &offset_fetch_request(&group, "order-txn-in")),
    );
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, -1, "not visible before the transaction commits");
    let end_txn = EndTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(true);
    let (ended, fetched): (EndTxnResponse, OffsetFetchResponse) = pipelined(
        &mut c,
        (ApiKey::EndTxn, 3, &end_txn),
        (ApiKey::OffsetFetch, 7, &offset_fetch_request(&group, "order-txn-in")),
    );
    assert_eq!(ended.error_code, 0);
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, 42, "OffsetFetch after EndTxn");
    // A second transaction, ended with a read_committed Fetch behind it.
    assert_eq!(add_partitions(&mut c, id, producer, topic, &[0]), 0);
    assert_eq!(produce_txn(&mut c, id, topic, 0, txn_batch(producer, 2, &["c"])).0, 0);
    let read = fetch_request(&[(topic, 0, 0)], 0, 0).with_isolation_level(1);
    let (ended, fetched): (EndTxnResponse, FetchResponse) =
        pipelined(&mut c, (ApiKey::EndTxn, 3, &end_txn), (ApiKey::Fetch, 12, &read));
    assert_eq!(ended.error_code, 0);
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(p.last_stable_offset, p.high_watermark, "a read_committed Fetch after EndTxn sees it ended");
    assert_eq!(read_committed(&mut c, topic, 0, 0).0, ["a", "b", "c"]);
}
