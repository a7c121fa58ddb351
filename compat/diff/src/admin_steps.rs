//! The steps of the admin and cluster APIs: leader epochs, paged topic descriptions,
//! the cluster and its quorum, leader elections, reassignments, log directories, ACLs,
//! client quotas, group and offset deletion, and the inter-broker WriteTxnMarkers.
//!
//! What differs between brokers by construction is named, not given as numbers: a
//! partition's leader epoch is "the one this broker's Metadata showed" (Kafka starts at
//! 0, Keel at its Raft term), a replica is "this broker's node" or a node no cluster has,
//! a log directory is "the one this broker described" or a path that is none of its.
//! The numbers are looked up in what that broker answered (`BrokerContext`) when the
//! step is sent, as producer and topic ids are.

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::steps::{short, BrokerContext, Names, Topic};
use crate::txn_steps::Producer;

/// Which leader epoch a step sends, relative to the partition's current one on the
/// broker it goes to.
#[derive(Clone, Copy, Debug)]
pub enum LeaderEpoch {
    /// -1: "no epoch" (the current leader epoch is not checked).
    Undefined,
    /// The epoch the broker's Metadata last showed for the partition.
    Current,
    /// Past it: an epoch the partition never had.
    Ahead(i32),
}

/// A replica named in a reassignment.
#[derive(Clone, Copy, Debug)]
pub enum Replica {
    /// The broker's own node id.
    Own,
    /// A node id no cluster of one node has.
    Absent,
}

/// The log directory an AlterReplicaLogDirs step names.
#[derive(Clone, Copy, Debug)]
pub enum LogDir {
    /// The first directory the broker described (DescribeLogDirs).
    Own,
    /// A path that is no directory of the broker.
    Unknown,
}

/// The one ACL the tester creates and deletes, on a topic of its sequence: `User:keel-diff`
/// may READ it from any host. Resource type TOPIC (2), pattern LITERAL (3), operation
/// READ (3), permission ALLOW (3).
struct Acl;

impl Acl {
    const RESOURCE_TYPE: i8 = 2;
    const PATTERN_TYPE: i8 = 3;
    const PRINCIPAL: &'static str = "User:keel-diff";
    const HOST: &'static str = "*";
    const OPERATION: i8 = 3;
    const PERMISSION_TYPE: i8 = 3;
}

/// The quota entity type of a client id.
const CLIENT_ID_ENTITY: &str = "client-id";
/// DescribeClientQuotas' match type for one exact entity name.
const MATCH_EXACT: i8 = 0;

/// A path no broker of the run has as a log directory.
const LOG_DIR_NEVER_GIVEN: &str = "/nonexistent/keel-diff-log-dir";
/// A node id a cluster of one node does not have.
const NODE_ABSENT: i32 = 4_242;

pub type TopicPartitionList = Vec<(Topic, Vec<i32>)>;
/// Per topic, each partition's target replicas; `None` cancels its reassignment.
pub type ReassignmentList = Vec<(Topic, Vec<(i32, Option<Vec<Replica>>)>)>;

#[derive(Clone, Debug)]
pub enum AdminRequest {
    /// (topic, partition, current leader epoch, asked epoch) per entry.
    OffsetForLeaderEpoch {
        entries: Vec<(Topic, i32, LeaderEpoch, LeaderEpoch)>,
    },
    /// `cursor`: (topic, first partition) to continue from.
    DescribeTopicPartitions {
        topics: Vec<Topic>,
        limit: i32,
        cursor: Option<(Topic, i32)>,
    },
    DescribeCluster {
        include_operations: bool,
    },
    /// `topics: None` names every partition.
    ElectLeaders {
        election_type: i8,
        topics: Option<TopicPartitionList>,
    },
    ListReassignments {
        topics: Option<TopicPartitionList>,
    },
    /// `replicas: None` cancels a reassignment.
    AlterReassignments {
        topics: ReassignmentList,
    },
    DescribeLogDirs {
        topics: Option<TopicPartitionList>,
    },
    AlterReplicaLogDirs {
        dir: LogDir,
        topics: TopicPartitionList,
    },
    /// Any operation and permission, for any principal and host.
    DescribeAcls {
        resource_type: i8,
        resource_name: Option<Topic>,
        pattern_type: i8,
    },
    /// The ACL `Acl` describes, on a topic.
    CreateAcls {
        topic: Topic,
    },
    /// Deletes what matches the ACL `Acl` describes, on a topic.
    DeleteAcls {
        topic: Topic,
    },
    /// Sets (`Some`) or removes (`None`) each quota of a client id slot.
    AlterClientQuotas {
        client: &'static str,
        quotas: Vec<(&'static str, Option<f64>)>,
    },
    /// The quotas of exactly this client id slot; `strict` leaves out entities that
    /// name more than a client id.
    DescribeClientQuotas {
        client: &'static str,
        strict: bool,
    },
    DeleteGroups {
        groups: Vec<&'static str>,
    },
    OffsetDelete {
        group: &'static str,
        topics: TopicPartitionList,
    },
    /// The metadata log's partition (`__cluster_metadata`/0) or another one.
    DescribeQuorum {
        topic: &'static str,
        partition: i32,
    },
    /// A transaction marker as a coordinator would send it, for `producer`.
    WriteTxnMarkers {
        producer: Producer,
        commit: bool,
        topics: TopicPartitionList,
    },
}

impl BrokerContext {
    fn leader_epoch(&self, names: &Names, topic: &Topic, partition: i32, epoch: LeaderEpoch) -> i32 {
        let current = self.leader_epochs.get(&(names.topic(topic), partition)).copied().unwrap_or(0);
        match epoch {
            LeaderEpoch::Undefined => -1,
            LeaderEpoch::Current => current,
            LeaderEpoch::Ahead(by) => current + by,
        }
    }

    fn replica(&self, replica: Replica) -> BrokerId {
        match replica {
            Replica::Own => BrokerId(self.node_id),
            Replica::Absent => BrokerId(NODE_ABSENT),
        }
    }
}

impl AdminRequest {
    pub fn api_key(&self) -> ApiKey {
        match self {
            AdminRequest::OffsetForLeaderEpoch { .. } => ApiKey::OffsetForLeaderEpoch,
            AdminRequest::DescribeTopicPartitions { .. } => ApiKey::DescribeTopicPartitions,
            AdminRequest::DescribeCluster { .. } => ApiKey::DescribeCluster,
            AdminRequest::ElectLeaders { .. } => ApiKey::ElectLeaders,
            AdminRequest::ListReassignments { .. } => ApiKey::ListPartitionReassignments,
            AdminRequest::AlterReassignments { .. } => ApiKey::AlterPartitionReassignments,
            AdminRequest::DescribeLogDirs { .. } => ApiKey::DescribeLogDirs,
            AdminRequest::AlterReplicaLogDirs { .. } => ApiKey::AlterReplicaLogDirs,
            AdminRequest::DescribeAcls { .. } => ApiKey::DescribeAcls,
            AdminRequest::CreateAcls { .. } => ApiKey::CreateAcls,
            AdminRequest::DeleteAcls { .. } => ApiKey::DeleteAcls,
            AdminRequest::AlterClientQuotas { .. } => ApiKey::AlterClientQuotas,
            AdminRequest::DescribeClientQuotas { .. } => ApiKey::DescribeClientQuotas,
            AdminRequest::DeleteGroups { .. } => ApiKey::DeleteGroups,
            AdminRequest::OffsetDelete { .. } => ApiKey::OffsetDelete,
            AdminRequest::DescribeQuorum { .. } => ApiKey::DescribeQuorum,
            AdminRequest::WriteTxnMarkers { .. } => ApiKey::WriteTxnMarkers,
        }
    }

    pub fn summary(&self, names: &Names) -> String {
        let list = |topics: &Option<TopicPartitionList>| match topics {
            None => "null (all)".to_string(),
            Some(topics) => partitions(names, topics),
        };
        match self {
            AdminRequest::OffsetForLeaderEpoch { entries } => {
                let entries: Vec<String> = entries
                    .iter()
                    .map(|(t, p, current, asked)| {
                        format!("{}/{p} current={current:?} epoch={asked:?}", short(&names.topic(t)))
                    })
                    .collect();
                format!("[{}]", entries.join(", "))
            }
            AdminRequest::DescribeTopicPartitions { topics, limit, cursor } => {
                let topics: Vec<String> = topics.iter().map(|t| short(&names.topic(t))).collect();
                let cursor = cursor.as_ref().map(|(t, p)| format!("{}/{p}", short(&names.topic(t))));
                format!("[{}] limit={limit} cursor={}", topics.join(", "), cursor.unwrap_or("null".into()))
            }
            AdminRequest::DescribeCluster { include_operations } => {
                format!("include_cluster_authorized_operations={include_operations}")
            }
            AdminRequest::ElectLeaders { election_type, topics } => {
                format!("type={election_type} {}", list(topics))
            }
            AdminRequest::ListReassignments { topics } => list(topics),
            AdminRequest::AlterReassignments { topics } => {
                let topics: Vec<String> = topics
                    .iter()
                    .map(|(t, ps)| {
                        let ps: Vec<String> = ps.iter().map(|(p, r)| format!("{p}->{r:?}")).collect();
                        format!("{}[{}]", short(&names.topic(t)), ps.join(" "))
                    })
                    .collect();
                format!("[{}]", topics.join(", "))
            }
            AdminRequest::DescribeLogDirs { topics } => list(topics),
            AdminRequest::AlterReplicaLogDirs { dir, topics } => format!("dir={dir:?} {}", partitions(names, topics)),
            AdminRequest::DescribeAcls { resource_type, resource_name, pattern_type } => {
                let name = resource_name.as_ref().map(|t| short(&names.topic(t)));
                format!("resource_type={resource_type} name={name:?} pattern_type={pattern_type}")
            }
            AdminRequest::CreateAcls { topic } | AdminRequest::DeleteAcls { topic } => {
                format!("{} may READ topic {} (literal) from {}", Acl::PRINCIPAL, short(&names.topic(topic)), Acl::HOST)
            }
            AdminRequest::AlterClientQuotas { client, quotas } => {
                let quotas: Vec<String> = quotas
                    .iter()
                    .map(|(key, value)| match value {
                        Some(value) => format!("{key}={value}"),
                        None => format!("remove {key}"),
                    })
                    .collect();
                format!("client-id={} [{}]", names.client_id(client), quotas.join(", "))
            }
            AdminRequest::DescribeClientQuotas { client, strict } => {
                format!("client-id={} strict={strict}", names.client_id(client))
            }
            AdminRequest::DeleteGroups { groups } => {
                let groups: Vec<String> = groups.iter().map(|g| names.group(g)).collect();
                format!("[{}]", groups.join(", "))
            }
            AdminRequest::OffsetDelete { group, topics } => {
                format!("group={} {}", names.group(group), partitions(names, topics))
            }
            AdminRequest::DescribeQuorum { topic, partition } => format!("{topic}/{partition}"),
            AdminRequest::WriteTxnMarkers { producer, commit, topics } => format!(
                "producer={}/{:?} {} {}",
                producer.txn,
                producer.epoch,
                if *commit { "commit" } else { "abort" },
                partitions(names, topics)
            ),
        }
    }

    pub fn build(&self, version: i16, names: &Names, context: &BrokerContext) -> RequestKind {
        let topic_name = |t: &Topic| TopicName(StrBytes::from_string(names.topic(t)));
        match self {
            AdminRequest::OffsetForLeaderEpoch { entries } => {
                // Entries of one topic go in one topic entry, in the order first named.
                let mut topics: Vec<OffsetForLeaderTopic> = Vec::new();
                for (topic, partition, current, asked) in entries {
                    let entry = OffsetForLeaderPartition::default()
                        .with_partition(*partition)
                        .with_current_leader_epoch(context.leader_epoch(names, topic, *partition, *current))
                        .with_leader_epoch(context.leader_epoch(names, topic, *partition, *asked));
                    let name = topic_name(topic);
                    match topics.iter_mut().find(|t| t.topic == name) {
                        Some(t) => t.partitions.push(entry),
                        None => {
                            topics.push(OffsetForLeaderTopic::default().with_topic(name).with_partitions(vec![entry]))
                        }
                    }
                }
                // -1: a consumer's request; a follower would send its broker id.
                RequestKind::OffsetForLeaderEpoch(
                    OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(topics),
                )
            }
            AdminRequest::DescribeTopicPartitions { topics, limit, cursor } => RequestKind::DescribeTopicPartitions(
                DescribeTopicPartitionsRequest::default()
                    .with_topics(topics.iter().map(|t| TopicRequest::default().with_name(topic_name(t))).collect())
                    .with_response_partition_limit(*limit)
                    .with_cursor(
                        cursor
                            .as_ref()
                            .map(|(t, p)| Cursor::default().with_topic_name(topic_name(t)).with_partition_index(*p)),
                    ),
            ),
            AdminRequest::DescribeCluster { include_operations } => RequestKind::DescribeCluster(
                DescribeClusterRequest::default()
                    .with_include_cluster_authorized_operations(*include_operations)
                    .with_endpoint_type(if version >= 1 { 1 } else { 0 }),
            ),
            AdminRequest::ElectLeaders { election_type, topics } => {
                let topics = topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .map(|(t, ps)| TopicPartitions::default().with_topic(topic_name(t)).with_partitions(ps.clone()))
                        .collect()
                });
                let mut request = ElectLeadersRequest::default().with_topic_partitions(topics).with_timeout_ms(5_000);
                if version >= 1 {
                    request = request.with_election_type(*election_type);
                }
                RequestKind::ElectLeaders(request)
            }
            AdminRequest::ListReassignments { topics } => RequestKind::ListPartitionReassignments(
                ListPartitionReassignmentsRequest::default().with_timeout_ms(5_000).with_topics(topics.as_ref().map(
                    |topics| {
                        topics
                            .iter()
                            .map(|(t, ps)| {
                                ListPartitionReassignmentsTopics::default()
                                    .with_name(topic_name(t))
                                    .with_partition_indexes(ps.clone())
                            })
                            .collect()
                    },
                )),
            ),
            AdminRequest::AlterReassignments { topics } => {
                let topics = topics
                    .iter()
                    .map(|(t, ps)| {
                        let partitions = ps
                            .iter()
                            .map(|(p, replicas)| {
                                ReassignablePartition::default().with_partition_index(*p).with_replicas(
                                    replicas.as_ref().map(|rs| rs.iter().map(|r| context.replica(*r)).collect()),
                                )
                            })
                            .collect();
                        ReassignableTopic::default().with_name(topic_name(t)).with_partitions(partitions)
                    })
                    .collect();
                RequestKind::AlterPartitionReassignments(
                    AlterPartitionReassignmentsRequest::default()
                        .with_timeout_ms(5_000)
                        .with_allow_replication_factor_change(true)
                        .with_topics(topics),
                )
            }
            AdminRequest::DescribeLogDirs { topics } => RequestKind::DescribeLogDirs(
                DescribeLogDirsRequest::default().with_topics(topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .map(|(t, ps)| {
                            DescribableLogDirTopic::default().with_topic(topic_name(t)).with_partitions(ps.clone())
                        })
                        .collect()
                })),
            ),
            AdminRequest::AlterReplicaLogDirs { dir, topics } => {
                let path = match dir {
                    LogDir::Own => context.log_dirs.first().cloned().unwrap_or_default(),
                    LogDir::Unknown => LOG_DIR_NEVER_GIVEN.to_string(),
                };
                let topics = topics
                    .iter()
                    .map(|(t, ps)| {
                        AlterReplicaLogDirTopic::default().with_name(topic_name(t)).with_partitions(ps.clone())
                    })
                    .collect();
                RequestKind::AlterReplicaLogDirs(AlterReplicaLogDirsRequest::default().with_dirs(vec![
                    AlterReplicaLogDir::default().with_path(StrBytes::from_string(path)).with_topics(topics),
                ]))
            }
            AdminRequest::DescribeAcls { resource_type, resource_name, pattern_type } => {
                RequestKind::DescribeAcls(
                    DescribeAclsRequest::default()
                        .with_resource_type_filter(*resource_type)
                        .with_resource_name_filter(
                            resource_name.as_ref().map(|t| StrBytes::from_string(names.topic(t))),
                        )
                        .with_pattern_type_filter(*pattern_type)
                        // ANY operation (1), ANY permission (1).
                        .with_operation(1)
                        .with_permission_type(1),
                )
            }
            AdminRequest::CreateAcls { topic } => {
                RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(vec![AclCreation::default()
                    .with_resource_type(Acl::RESOURCE_TYPE)
                    .with_resource_name(StrBytes::from_string(names.topic(topic)))
                    .with_resource_pattern_type(Acl::PATTERN_TYPE)
                    .with_principal(StrBytes::from_static_str(Acl::PRINCIPAL))
                    .with_host(StrBytes::from_static_str(Acl::HOST))
                    .with_operation(Acl::OPERATION)
                    .with_permission_type(Acl::PERMISSION_TYPE)]))
            }
            AdminRequest::DeleteAcls { topic } => {
                RequestKind::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
                    .with_resource_type_filter(Acl::RESOURCE_TYPE)
                    .with_resource_name_filter(Some(StrBytes::from_string(names.topic(topic))))
                    .with_pattern_type_filter(Acl::PATTERN_TYPE)
                    .with_principal_filter(Some(StrBytes::from_static_str(Acl::PRINCIPAL)))
                    .with_host_filter(Some(StrBytes::from_static_str(Acl::HOST)))
                    .with_operation(Acl::OPERATION)
                    .with_permission_type(Acl::PERMISSION_TYPE)]))
            }
            AdminRequest::AlterClientQuotas { client, quotas } => {
                let ops = quotas
                    .iter()
                    .map(|(key, value)| {
                        OpData::default()
                            .with_key(StrBytes::from_static_str(key))
                            .with_value(value.unwrap_or(0.0))
                            .with_remove(value.is_none())
                    })
                    .collect();
                RequestKind::AlterClientQuotas(AlterClientQuotasRequest::default().with_entries(vec![
                    EntryData::default()
                        .with_entity(vec![EntityData::default()
                            .with_entity_type(StrBytes::from_static_str(CLIENT_ID_ENTITY))
                            .with_entity_name(Some(StrBytes::from_string(names.client_id(client))))])
                        .with_ops(ops),
                ]))
            }
            AdminRequest::DescribeClientQuotas { client, strict } => RequestKind::DescribeClientQuotas(
                DescribeClientQuotasRequest::default().with_strict(*strict).with_components(vec![
                    ComponentData::default()
                        .with_entity_type(StrBytes::from_static_str(CLIENT_ID_ENTITY))
                        .with_match_type(MATCH_EXACT)
                        .with_match(Some(StrBytes::from_string(names.client_id(client)))),
                ]),
            ),
            AdminRequest::DeleteGroups { groups } => RequestKind::DeleteGroups(
                DeleteGroupsRequest::default()
                    .with_groups_names(groups.iter().map(|g| GroupId(StrBytes::from_string(names.group(g)))).collect()),
            ),
            AdminRequest::OffsetDelete { group, topics } => RequestKind::OffsetDelete(
                OffsetDeleteRequest::default()
                    .with_group_id(GroupId(StrBytes::from_string(names.group(group))))
                    .with_topics(
                        topics
                            .iter()
                            .map(|(t, ps)| {
                                OffsetDeleteRequestTopic::default().with_name(topic_name(t)).with_partitions(
                                    ps.iter()
                                        .map(|p| OffsetDeleteRequestPartition::default().with_partition_index(*p))
                                        .collect(),
                                )
                            })
                            .collect(),
                    ),
            ),
            AdminRequest::DescribeQuorum { topic, partition } => {
                RequestKind::DescribeQuorum(DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
                    .with_topic_name(TopicName(StrBytes::from_static_str(topic)))
                    .with_partitions(vec![PartitionData::default().with_partition_index(*partition)])]))
            }
            AdminRequest::WriteTxnMarkers { producer, commit, topics } => {
                let (id, epoch) = context.producer(names, *producer);
                let topics = topics
                    .iter()
                    .map(|(t, ps)| {
                        WritableTxnMarkerTopic::default().with_name(topic_name(t)).with_partition_indexes(ps.clone())
                    })
                    .collect();
                RequestKind::WriteTxnMarkers(WriteTxnMarkersRequest::default().with_markers(vec![
                    WritableTxnMarker::default()
                        .with_producer_id(ProducerId(id))
                        .with_producer_epoch(epoch)
                        .with_transaction_result(*commit)
                        .with_topics(topics)
                        .with_coordinator_epoch(0),
                ]))
            }
        }
    }
}

fn partitions(names: &Names, topics: &TopicPartitionList) -> String {
    let topics: Vec<String> = topics.iter().map(|(t, ps)| format!("{}{ps:?}", short(&names.topic(t)))).collect();
    format!("[{}]", topics.join(", "))
}
