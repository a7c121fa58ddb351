//! One request of a sequence, described by what it asks rather than by its bytes.
//!
//! A step names topics and groups by slot ("t0", "g0") instead of by full name, and it is
//! turned into a request only when it is sent: the full name comes from the sequence's
//! prefix and a topic's id from what that broker told us. So the same step can be sent
//! to two brokers that gave the topic different ids, and a sequence can be replayed under
//! a new prefix when it is shrunk to the minimal one that still diverges.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use uuid::Uuid;

use crate::admin_steps::AdminRequest;
use crate::group_steps::GroupRequest;
use crate::member_steps::{MemberRequest, SlotState};
use crate::txn_steps::TxnRequest;

/// Timestamp of the first record the tester produces; the rest follow one second apart.
/// Fixed so that ListOffsets by timestamp asks the same question of both brokers.
pub const RECORD_TIMESTAMP_BASE_MS: i64 = 1_700_000_000_000;

/// A config resource's type: a topic (DescribeConfigs, AlterConfigs).
const TOPIC_RESOURCE: i8 = 2;

/// A topic named by the sequence (a slot resolved under the sequence prefix) or a literal
/// name used as is (illegal or over-long names).
#[derive(Clone, Debug)]
pub enum Topic {
    Slot(&'static str),
    Literal(String),
    /// A slot's name padded with 'x' to this many characters (too long for a topic name).
    Padded(&'static str, usize),
    /// A topic id no broker knows; only meaningful for versions that address topics by id.
    UnknownId(u128),
}

#[derive(Clone, Debug)]
pub struct NewTopic {
    pub topic: Topic,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(&'static str, &'static str)>,
}

#[derive(Clone, Debug)]
pub struct Batch {
    /// Key and value of each record; `None` is a null key or value.
    pub records: Vec<(Option<String>, Option<String>)>,
    /// The producer's codec.
    pub codec: Compression,
    /// Each record carries two headers, one with a null value.
    pub headers: bool,
    /// One batch per record instead of one batch in all; Kafka takes exactly one v2
    /// batch per partition in a produce request.
    pub batch_per_record: bool,
}

#[derive(Clone, Debug)]
pub enum ConfigResource {
    Topic(Topic),
    Broker,
}

#[derive(Clone, Debug)]
pub enum Request {
    ApiVersions,
    Metadata {
        topics: Vec<Topic>,
        allow_auto_topic_creation: bool,
    },
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    /// `batch: None` sends an empty record set.
    Produce {
        acks: i16,
        topic: Topic,
        partition: i32,
        batch: Option<Batch>,
    },
    /// `isolation_level` 1 reads committed records only (up to the last stable offset).
    Fetch {
        topic: Topic,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        partition_max_bytes: i32,
        isolation_level: i8,
    },
    /// A Fetch of offset 0 carrying a fetch session id and epoch (v7+): epoch -1 with
    /// any id is a sessionless full fetch, any other epoch asks for a session.
    SessionFetch {
        topic: Topic,
        session_id: i32,
        session_epoch: i32,
    },
    ListOffsets {
        topic: Topic,
        partition: i32,
        timestamp: i64,
        isolation_level: i8,
    },
    DeleteTopics {
        topics: Vec<Topic>,
    },
    DeleteRecords {
        topic: Topic,
        partition: i32,
        offset: i64,
    },
    OffsetCommit {
        group: &'static str,
        topic: Topic,
        partition: i32,
        offset: i64,
    },
    /// `topics: None` asks for every committed offset of the group.
    OffsetFetch {
        group: &'static str,
        topics: Option<Vec<(Topic, Vec<i32>)>>,
    },
    FindCoordinator {
        group: &'static str,
    },
    DescribeConfigs {
        resource: ConfigResource,
        keys: Option<Vec<&'static str>>,
    },
    CreatePartitions {
        topic: Topic,
        count: i32,
        validate_only: bool,
    },
    DescribeGroups {
        groups: Vec<&'static str>,
    },
    ListGroups,
    /// AlterConfigs of a topic: the whole set of its configs becomes `configs`.
    AlterConfigs {
        topic: Topic,
        configs: Vec<(&'static str, &'static str)>,
        validate_only: bool,
    },
    /// IncrementalAlterConfigs of a topic: (name, operation, value); operations 0 SET,
    /// 1 DELETE, 2 APPEND, 3 SUBTRACT.
    IncrementalAlterConfigs {
        topic: Topic,
        ops: Vec<(&'static str, i8, Option<&'static str>)>,
        validate_only: bool,
    },
    /// A transactional producer's request or a transaction admin request (`txn_steps.rs`).
    Txn(TxnRequest),
    /// A consumer group member's request (`group_steps.rs`).
    Group(GroupRequest),
    /// An admin or cluster request (`admin_steps.rs`).
    Admin(AdminRequest),
    /// A request of one of a group's several members (`member_steps.rs`).
    Member(MemberRequest),
}

#[derive(Clone, Debug)]
pub struct Step {
    pub version: i16,
    pub request: Request,
    /// Written on the connection right after the step before it, before that step's
    /// answer is read. A step and the pipelined steps that follow it form one pipelined
    /// step: their requests go out back to back on one connection, then their answers
    /// are read in order, and each answer is compared on its own. Kafka handles a
    /// connection's requests one at a time, in order, so each sees the effects of those
    /// before it.
    pub pipelined: bool,
}

/// What the tester learned from one broker and needs to address it: topic ids and
/// producer ids differ between brokers and the broker's own node id names it in
/// DescribeConfigs.
#[derive(Default)]
pub struct BrokerContext {
    pub topic_ids: HashMap<String, Uuid>,
    pub node_id: i32,
    /// Per transactional id, every (producer id, epoch) the broker gave it, oldest first.
    pub producers: HashMap<String, Vec<(i64, i16)>>,
    /// Per group, the member id the broker last gave the sequence's member and the
    /// generation of its last successful JoinGroup.
    pub members: HashMap<String, (String, i32)>,
    /// Per (topic, partition), the leader epoch the broker's Metadata last showed.
    pub leader_epochs: HashMap<(String, i32), i32>,
    /// The log directories the broker described (DescribeLogDirs).
    pub log_dirs: Vec<String>,
    /// Per group member slot (`member_steps::slot_key`), what the broker told it.
    pub slots: HashMap<String, SlotState>,
}

/// Turns slots into full names for one sequence.
#[derive(Clone)]
pub struct Names {
    pub prefix: String,
}

impl Names {
    pub fn topic(&self, topic: &Topic) -> String {
        match topic {
            Topic::Slot(slot) => format!("{}{slot}", self.prefix),
            Topic::Literal(name) => name.clone(),
            Topic::Padded(slot, length) => {
                let name = format!("{}{slot}-", self.prefix);
                format!("{name}{}", "x".repeat(length.saturating_sub(name.len())))
            }
            Topic::UnknownId(_) => format!("{}unknown-id", self.prefix),
        }
    }

    pub fn group(&self, slot: &str) -> String {
        format!("{}{slot}", self.prefix)
    }

    /// A client id named in a client quota entity.
    pub fn client_id(&self, slot: &str) -> String {
        format!("{}{slot}", self.prefix)
    }

    pub fn transactional_id(&self, slot: &str) -> String {
        format!("{}{slot}", self.prefix)
    }

    pub fn topic_id(&self, topic: &Topic, context: &BrokerContext) -> Uuid {
        match topic {
            Topic::UnknownId(bits) => Uuid::from_u128(*bits),
            _ => context.topic_ids.get(&self.topic(topic)).copied().unwrap_or(Uuid::nil()),
        }
    }
}

impl Request {
    pub fn api_key(&self) -> ApiKey {
        match self {
            Request::ApiVersions => ApiKey::ApiVersions,
            Request::Metadata { .. } => ApiKey::Metadata,
            Request::CreateTopics { .. } => ApiKey::CreateTopics,
            Request::Produce { .. } => ApiKey::Produce,
            Request::Fetch { .. } | Request::SessionFetch { .. } => ApiKey::Fetch,
            Request::ListOffsets { .. } => ApiKey::ListOffsets,
            Request::DeleteTopics { .. } => ApiKey::DeleteTopics,
            Request::DeleteRecords { .. } => ApiKey::DeleteRecords,
            Request::OffsetCommit { .. } => ApiKey::OffsetCommit,
            Request::OffsetFetch { .. } => ApiKey::OffsetFetch,
            Request::FindCoordinator { .. } => ApiKey::FindCoordinator,
            Request::DescribeConfigs { .. } => ApiKey::DescribeConfigs,
            Request::CreatePartitions { .. } => ApiKey::CreatePartitions,
            Request::DescribeGroups { .. } => ApiKey::DescribeGroups,
            Request::ListGroups => ApiKey::ListGroups,
            Request::AlterConfigs { .. } => ApiKey::AlterConfigs,
            Request::IncrementalAlterConfigs { .. } => ApiKey::IncrementalAlterConfigs,
            Request::Txn(request) => request.api_key(),
            Request::Group(request) => request.api_key(),
            Request::Admin(request) => request.api_key(),
            Request::Member(request) => request.api_key(),
        }
    }

    /// Whether Kafka makes the request's effect visible only after it has answered:
    /// its controller commits topic, partition, config and client quota changes, and
    /// the broker applies them to the metadata its requests read a moment later, so a
    /// request right behind one of these may or may not see the change. ACL changes
    /// would be the same with an authorizer; without one (the tester's Kafka) they are
    /// refused at once.
    pub fn applied_after_answer(&self) -> bool {
        match self {
            Request::CreateTopics { validate_only, .. }
            | Request::CreatePartitions { validate_only, .. }
            | Request::AlterConfigs { validate_only, .. }
            | Request::IncrementalAlterConfigs { validate_only, .. } => !validate_only,
            Request::DeleteTopics { .. } | Request::Admin(AdminRequest::AlterClientQuotas { .. }) => true,
            _ => false,
        }
    }

    /// Produce with acks=0 is the one request a broker does not answer.
    pub fn expects_response(&self) -> bool {
        !matches!(self, Request::Produce { acks: 0, .. } | Request::Txn(TxnRequest::Produce { acks: 0, .. }))
    }

    /// A one-line account of the request for a divergence report.
    pub fn summary(&self, names: &Names) -> String {
        let topics = |topics: &[Topic]| topics.iter().map(|t| short(&names.topic(t))).collect::<Vec<_>>().join(", ");
        match self {
            Request::ApiVersions => "ApiVersions".into(),
            Request::Metadata { topics: list, allow_auto_topic_creation } => {
                format!("topics=[{}] allow_auto_topic_creation={allow_auto_topic_creation}", topics(list))
            }
            Request::CreateTopics { topics: list, validate_only } => {
                let list: Vec<String> = list
                    .iter()
                    .map(|t| {
                        let configs: Vec<String> = t.configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        format!(
                            "{} partitions={} replication_factor={} configs={{{}}}",
                            short(&names.topic(&t.topic)),
                            t.partitions,
                            t.replication_factor,
                            configs.join(",")
                        )
                    })
                    .collect();
                format!("[{}] validate_only={validate_only}", list.join("; "))
            }
            Request::Produce { acks, topic, partition, batch } => {
                let records = match batch {
                    None => "empty record set".to_string(),
                    Some(batch) => {
                        let records: Vec<String> = batch
                            .records
                            .iter()
                            .map(|(k, v)| {
                                format!("{}={}", k.as_deref().unwrap_or("null"), v.as_deref().unwrap_or("null"))
                            })
                            .collect();
                        let codec = match batch.codec {
                            Compression::None => String::new(),
                            codec => format!(" {codec:?}").to_lowercase(),
                        };
                        let headers = if batch.headers { " with headers" } else { "" };
                        let split = if batch.batch_per_record { " one batch per record" } else { "" };
                        format!("{} records [{}]{codec}{headers}{split}", records.len(), records.join(" "))
                    }
                };
                format!("acks={acks} {}/{partition} {records}", short(&names.topic(topic)))
            }
            Request::Fetch { topic, partition, offset, max_bytes, partition_max_bytes, isolation_level } => format!(
                "{}/{partition} offset={offset} max_bytes={max_bytes} partition_max_bytes={partition_max_bytes}{}",
                short(&names.topic(topic)),
                isolation(*isolation_level)
            ),
            Request::SessionFetch { topic, session_id, session_epoch } => {
                format!(
                    "{}/0 offset=0 session_id={session_id} session_epoch={session_epoch}",
                    short(&names.topic(topic))
                )
            }
            Request::ListOffsets { topic, partition, timestamp, isolation_level } => {
                format!(
                    "{}/{partition} timestamp={timestamp}{}",
                    short(&names.topic(topic)),
                    isolation(*isolation_level)
                )
            }
            Request::DeleteTopics { topics: list } => format!("[{}]", topics(list)),
            Request::DeleteRecords { topic, partition, offset } => {
                format!("{}/{partition} before offset={offset}", short(&names.topic(topic)))
            }
            Request::OffsetCommit { group, topic, partition, offset } => format!(
                "group={} generation=-1 {}/{partition} offset={offset}",
                names.group(group),
                short(&names.topic(topic))
            ),
            Request::OffsetFetch { group, topics: list } => match list {
                None => format!("group={} all topics", names.group(group)),
                Some(list) => {
                    let list: Vec<String> =
                        list.iter().map(|(t, p)| format!("{}{p:?}", short(&names.topic(t)))).collect();
                    format!("group={} [{}]", names.group(group), list.join(", "))
                }
            },
            Request::FindCoordinator { group } => format!("group={}", names.group(group)),
            Request::DescribeConfigs { resource, keys } => {
                let resource = match resource {
                    ConfigResource::Topic(topic) => format!("topic {}", short(&names.topic(topic))),
                    ConfigResource::Broker => "broker (its node id)".to_string(),
                };
                format!("{resource} keys={keys:?}")
            }
            Request::CreatePartitions { topic, count, validate_only } => {
                format!("{} count={count} validate_only={validate_only}", short(&names.topic(topic)))
            }
            Request::DescribeGroups { groups } => {
                let groups: Vec<String> = groups.iter().map(|g| names.group(g)).collect();
                format!("[{}]", groups.join(", "))
            }
            Request::ListGroups => "all groups (answer filtered to this sequence's groups)".into(),
            Request::AlterConfigs { topic, configs, validate_only } => {
                let configs: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("topic {} {{{}}} validate_only={validate_only}", short(&names.topic(topic)), configs.join(","))
            }
            Request::IncrementalAlterConfigs { topic, ops, validate_only } => {
                let ops: Vec<String> = ops
                    .iter()
                    .map(|(k, op, v)| {
                        let op = ["SET", "DELETE", "APPEND", "SUBTRACT"].get(*op as usize).copied().unwrap_or("?");
                        format!("{op} {k}={}", v.unwrap_or("null"))
                    })
                    .collect();
                format!("topic {} [{}] validate_only={validate_only}", short(&names.topic(topic)), ops.join(", "))
            }
            Request::Txn(request) => request.summary(names),
            Request::Group(request) => request.summary(names),
            Request::Admin(request) => request.summary(names),
            Request::Member(request) => request.summary(names),
        }
    }

    /// The request as sent to one broker at `version`.
    pub fn build(&self, version: i16, names: &Names, context: &BrokerContext) -> RequestKind {
        let topic_name = |t: &Topic| TopicName(StrBytes::from_string(names.topic(t)));
        let group_id = |g: &str| GroupId(StrBytes::from_string(names.group(g)));
        match self {
            Request::ApiVersions => RequestKind::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("keel-diff"))
                    .with_client_software_version(StrBytes::from_static_str("1")),
            ),
            Request::Metadata { topics, allow_auto_topic_creation } => RequestKind::Metadata(
                MetadataRequest::default()
                    .with_topics(Some(
                        topics.iter().map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t)))).collect(),
                    ))
                    .with_allow_auto_topic_creation(*allow_auto_topic_creation),
            ),
            Request::CreateTopics { topics, validate_only } => RequestKind::CreateTopics(
                CreateTopicsRequest::default().with_timeout_ms(10_000).with_validate_only(*validate_only).with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            CreatableTopic::default()
                                .with_name(topic_name(&t.topic))
                                .with_num_partitions(t.partitions)
                                .with_replication_factor(t.replication_factor)
                                .with_configs(
                                    t.configs
                                        .iter()
                                        .map(|(k, v)| {
                                            CreatableTopicConfig::default()
                                                .with_name(StrBytes::from_static_str(k))
                                                .with_value(Some(StrBytes::from_static_str(v)))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            ),
            Request::Produce { acks, topic, partition, batch } => {
                let records = match batch {
                    None => Bytes::new(),
                    Some(batch) => encode_batch(batch),
                };
                let mut data = TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
                    .with_index(*partition)
                    .with_records(Some(records))]);
                // Produce v13 (KIP-516) addresses topics by id instead of by name.
                if version >= 13 {
                    data = data.with_topic_id(names.topic_id(topic, context));
                } else {
                    data = data.with_name(topic_name(topic));
                }
                RequestKind::Produce(
                    ProduceRequest::default().with_acks(*acks).with_timeout_ms(10_000).with_topic_data(vec![data]),
                )
            }
            Request::Fetch { topic, partition, offset, max_bytes, partition_max_bytes, isolation_level } => {
                let mut fetch_topic = FetchTopic::default().with_partitions(vec![FetchPartition::default()
                    .with_partition(*partition)
                    .with_fetch_offset(*offset)
                    .with_partition_max_bytes(*partition_max_bytes)]);
                // Fetch v13 (KIP-516) addresses topics by id instead of by name.
                if version >= 13 {
                    fetch_topic = fetch_topic.with_topic_id(names.topic_id(topic, context));
                } else {
                    fetch_topic = fetch_topic.with_topic(topic_name(topic));
                }
                // Sessionless (session 0, epoch -1) and no waiting: each fetch stands alone.
                RequestKind::Fetch(
                    FetchRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_max_wait_ms(0)
                        .with_min_bytes(0)
                        .with_max_bytes(*max_bytes)
                        .with_isolation_level(*isolation_level)
                        .with_session_id(0)
                        .with_session_epoch(-1)
                        .with_topics(vec![fetch_topic]),
                )
            }
            Request::SessionFetch { topic, session_id, session_epoch } => {
                let fetch_topic = FetchTopic::default().with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)]);
                let fetch_topic = if version >= 13 {
                    fetch_topic.with_topic_id(names.topic_id(topic, context))
                } else {
                    fetch_topic.with_topic(topic_name(topic))
                };
                RequestKind::Fetch(
                    FetchRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_max_wait_ms(0)
                        .with_min_bytes(0)
                        .with_max_bytes(1 << 20)
                        .with_session_id(*session_id)
                        .with_session_epoch(*session_epoch)
                        .with_topics(vec![fetch_topic]),
                )
            }
            Request::ListOffsets { topic, partition, timestamp, isolation_level } => RequestKind::ListOffsets(
                ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_isolation_level(*isolation_level)
                    .with_topics(vec![ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(vec![
                        ListOffsetsPartition::default().with_partition_index(*partition).with_timestamp(*timestamp),
                    ])]),
            ),
            Request::DeleteTopics { topics } => {
                let mut request = DeleteTopicsRequest::default().with_timeout_ms(10_000);
                // v6 replaced the list of names with a list of (name, id) states.
                if version >= 6 {
                    request = request.with_topics(
                        topics.iter().map(|t| DeleteTopicState::default().with_name(Some(topic_name(t)))).collect(),
                    );
                } else {
                    request = request.with_topic_names(topics.iter().map(topic_name).collect());
                }
                RequestKind::DeleteTopics(request)
            }
            Request::DeleteRecords { topic, partition, offset } => {
                RequestKind::DeleteRecords(DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![
                    DeleteRecordsTopic::default().with_name(topic_name(topic)).with_partitions(vec![
                        DeleteRecordsPartition::default().with_partition_index(*partition).with_offset(*offset),
                    ]),
                ]))
            }
            Request::OffsetCommit { group, topic, partition, offset } => {
                let mut commit_topic =
                    OffsetCommitRequestTopic::default().with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(*partition)
                        .with_committed_offset(*offset)
                        .with_committed_metadata(Some(StrBytes::from_static_str("m")))]);
                // OffsetCommit v10 (KIP-848) addresses topics by id instead of by name.
                if version >= 10 {
                    commit_topic = commit_topic.with_topic_id(names.topic_id(topic, context));
                } else {
                    commit_topic = commit_topic.with_name(topic_name(topic));
                }
                RequestKind::OffsetCommit(
                    OffsetCommitRequest::default()
                        .with_group_id(group_id(group))
                        .with_generation_id_or_member_epoch(-1)
                        .with_member_id(StrBytes::new())
                        .with_retention_time_ms(-1)
                        .with_topics(vec![commit_topic]),
                )
            }
            Request::OffsetFetch { group, topics } => {
                let request = if version >= 8 {
                    // v8 batches groups; v10 (KIP-848) addresses topics by id.
                    let topics = topics.as_ref().map(|list| {
                        list.iter()
                            .map(|(t, partitions)| {
                                let entry =
                                    OffsetFetchRequestTopics::default().with_partition_indexes(partitions.clone());
                                if version >= 10 {
                                    entry.with_topic_id(names.topic_id(t, context))
                                } else {
                                    entry.with_name(topic_name(t))
                                }
                            })
                            .collect()
                    });
                    OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                        .with_group_id(group_id(group))
                        .with_member_epoch(-1)
                        .with_topics(topics)])
                } else {
                    let topics = topics.as_ref().map(|list| {
                        list.iter()
                            .map(|(t, partitions)| {
                                OffsetFetchRequestTopic::default()
                                    .with_name(topic_name(t))
                                    .with_partition_indexes(partitions.clone())
                            })
                            .collect()
                    });
                    OffsetFetchRequest::default().with_group_id(group_id(group)).with_topics(topics)
                };
                RequestKind::OffsetFetch(request)
            }
            Request::FindCoordinator { group } => {
                let key = StrBytes::from_string(names.group(group));
                // v4 (KIP-699) looks up a batch of keys.
                let request = if version >= 4 {
                    FindCoordinatorRequest::default().with_coordinator_keys(vec![key])
                } else {
                    FindCoordinatorRequest::default().with_key(key)
                };
                RequestKind::FindCoordinator(request.with_key_type(0))
            }
            Request::DescribeConfigs { resource, keys } => {
                let (resource_type, resource_name) = match resource {
                    ConfigResource::Topic(topic) => (2, names.topic(topic)),
                    ConfigResource::Broker => (4, context.node_id.to_string()),
                };
                let keys = keys.as_ref().map(|keys| keys.iter().map(|k| StrBytes::from_static_str(k)).collect());
                RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                    DescribeConfigsResource::default()
                        .with_resource_type(resource_type)
                        .with_resource_name(StrBytes::from_string(resource_name))
                        .with_configuration_keys(keys),
                ]))
            }
            Request::CreatePartitions { topic, count, validate_only } => RequestKind::CreatePartitions(
                CreatePartitionsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_validate_only(*validate_only)
                    .with_topics(vec![CreatePartitionsTopic::default()
                        .with_name(topic_name(topic))
                        .with_count(*count)
                        .with_assignments(None)]),
            ),
            Request::DescribeGroups { groups } => RequestKind::DescribeGroups(
                DescribeGroupsRequest::default().with_groups(groups.iter().map(|g| group_id(g)).collect()),
            ),
            Request::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
            Request::AlterConfigs { topic, configs, validate_only } => {
                use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
                let configs = configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_static_str(k))
                            .with_value(Some(StrBytes::from_static_str(v)))
                    })
                    .collect();
                RequestKind::AlterConfigs(
                    AlterConfigsRequest::default().with_validate_only(*validate_only).with_resources(vec![
                        AlterConfigsResource::default()
                            .with_resource_type(TOPIC_RESOURCE)
                            .with_resource_name(StrBytes::from_string(names.topic(topic)))
                            .with_configs(configs),
                    ]),
                )
            }
            Request::IncrementalAlterConfigs { topic, ops, validate_only } => {
                use kafka_protocol::messages::incremental_alter_configs_request::{
                    AlterConfigsResource, AlterableConfig,
                };
                let configs = ops
                    .iter()
                    .map(|(k, op, v)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_static_str(k))
                            .with_config_operation(*op)
                            .with_value(v.map(StrBytes::from_static_str))
                    })
                    .collect();
                RequestKind::IncrementalAlterConfigs(
                    IncrementalAlterConfigsRequest::default().with_validate_only(*validate_only).with_resources(vec![
                        AlterConfigsResource::default()
                            .with_resource_type(TOPIC_RESOURCE)
                            .with_resource_name(StrBytes::from_string(names.topic(topic)))
                            .with_configs(configs),
                    ]),
                )
            }
            Request::Txn(request) => request.build(version, names, context),
            Request::Group(request) => request.build(version, names, context),
            Request::Admin(request) => request.build(version, names, context),
            // A Collect step sends nothing; what it stands for is never encoded.
            Request::Member(request) => request
                .build(version, names, context)
                .unwrap_or_else(|| RequestKind::ApiVersions(ApiVersionsRequest::default())),
        }
    }
}

/// A v2 record batch with base offset 0, no producer id (not idempotent) and
/// deterministic CreateTime timestamps (or one such batch per record).
///
/// kafka-protocol's encoder starts a new batch whenever offset minus sequence changes, so
/// each record's sequence is its offset - 1: constant difference, one batch, and a base
/// sequence of -1 (none), as a producer without a producer id sends. With
/// `batch_per_record`, every sequence is -1 and every record gets its own batch.
fn encode_batch(batch: &Batch) -> Bytes {
    let records: Vec<Record> = batch
        .records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if batch.batch_per_record { -1 } else { i as i32 - 1 },
            timestamp: RECORD_TIMESTAMP_BASE_MS + i as i64 * 1000,
            key: key.clone().map(Bytes::from),
            value: value.clone().map(Bytes::from),
            headers: if batch.headers { record_headers(i) } else { IndexMap::new() },
        })
        .collect();
    let options = RecordEncodeOptions { version: 2, compression: batch.codec };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encoding an in-memory v2 batch cannot fail");
    buf.freeze()
}

/// The headers of record `index` in a batch with headers: one with a value, one null.
fn record_headers(index: usize) -> IndexMap<StrBytes, Option<Bytes>> {
    let mut headers = IndexMap::new();
    headers.insert(StrBytes::from_static_str("trace"), Some(Bytes::from(format!("h{index}"))));
    headers.insert(StrBytes::from_static_str("empty"), None);
    headers
}

/// How a report shows an isolation level: nothing for read_uncommitted, the default.
fn isolation(level: i8) -> &'static str {
    if level == 1 {
        " read_committed"
    } else {
        ""
    }
}

/// Shortens the 250-character name in reports.
pub fn short(name: &str) -> String {
    if name.len() > 40 {
        format!("{}...({} chars)", &name[..20], name.len())
    } else {
        name.to_string()
    }
}
