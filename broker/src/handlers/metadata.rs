//! Metadata: brokers, topics and partitions; creates missing topics when allowed.

use std::rc::Rc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use uuid::Uuid;

use crate::cluster::controller;
use crate::cluster::nodes;
use crate::errors;
use crate::metadata::TopicMeta;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::partition::LEADER_EPOCH;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 13);

/// Authorized-operations bitfield for a topic with no ACLs: READ, WRITE, CREATE,
/// DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
pub const TOPIC_OPERATIONS_ALL: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;

pub async fn handle(shard: &Rc<Shard>, ctx: &RequestContext, version: i16, req: MetadataRequest) -> MetadataResponse {
    let meta = shard.meta();
    let node = shard.config.node_id;
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    let mut wanted: Vec<(Option<String>, Uuid)> = match &req.topics {
        None => meta.topics.keys().map(|n| (Some(n.clone()), Uuid::nil())).collect(),
        // As Kafka: a request that names any topic id is answered by id, its names
        // ignored (the Java consumer asks by id with empty names).
        Some(list) if list.iter().any(|t| !t.topic_id.is_nil()) => {
            list.iter().filter(|t| !t.topic_id.is_nil()).map(|t| (None, t.topic_id)).collect()
        }
        Some(list) => list.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)).collect(),
    };
    if version == 0 && req.topics.as_ref().map(|t| t.is_empty()).unwrap_or(false) {
        wanted = meta.topics.keys().map(|n| (Some(n.clone()), Uuid::nil())).collect();
    }
    // A topic asked for twice is answered once, as Kafka does.
    let mut seen = std::collections::HashSet::new();
    wanted.retain(|w| seen.insert(w.clone()));
    // As Kafka: every topic needs DESCRIBE; the list of all topics leaves out the
    // others, a named one is answered TOPIC_AUTHORIZATION_FAILED. Creating a missing
    // one needs CREATE on the cluster or on the topic.
    let all_topics = req.topics.is_none() || (version == 0 && req.topics.as_ref().is_some_and(|t| t.is_empty()));
    let mut refused: std::collections::HashSet<String> = std::collections::HashSet::new();
    wanted.retain(|(name, id)| {
        let Some(n) = name.clone().or_else(|| meta.topic_name(id).map(str::to_string)) else { return true };
        if all_topics {
            return super::allowed(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, &n);
        }
        if !super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, &n) {
            refused.insert(n);
        }
        true
    });
    let meta = if allow_create {
        let may_create_any =
            super::allowed(shard, ctx, acl::operation::CREATE, acl::resource::CLUSTER, acl::CLUSTER_NAME);
        let mut names = Vec::new();
        for n in wanted.iter().filter_map(|(n, _)| n.clone()) {
            if refused.contains(&n) || meta.topics.contains_key(&n) || !shard.config.auto_create_topics {
                continue;
            }
            if may_create_any || super::authorized(shard, ctx, acl::operation::CREATE, acl::resource::TOPIC, &n) {
                names.push(n);
            } else {
                refused.insert(n);
            }
        }
        controller::auto_create_topics(shard, names).await
    } else {
        meta
    };
    let asked: Vec<&TopicMeta> = wanted
        .iter()
        .filter_map(|(name, id)| name.as_deref().or_else(|| meta.topic_name(id)))
        .filter(|n| !refused.contains(*n))
        .filter_map(|n| meta.topics.get(n))
        .collect();
    nodes::await_elections(shard, &asked).await;
    let include_ops = req.include_topic_authorized_operations;
    let topics = wanted
        .into_iter()
        .map(|(name, id)| {
            let name = name.or_else(|| meta.topic_name(&id).map(str::to_string));
            if let Some(n) = name.as_ref().filter(|n| refused.contains(*n)) {
                return MetadataResponseTopic::default()
                    .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
                    .with_name(Some(TopicName(str_bytes(n))))
                    .with_topic_id(id)
                    .with_is_internal(n.starts_with("__"))
                    .with_topic_authorized_operations(OPERATIONS_NOT_REQUESTED);
            }
            match name.as_ref().and_then(|n| meta.topics.get(n).map(|t| (n, t))) {
                Some((n, t)) => {
                    let offline = shard.offline_partitions.borrow();
                    let ops = include_ops.then(|| super::operations(shard, ctx, acl::resource::TOPIC, n));
                    topic_response(shard, n, t, node, ops, |p| offline.contains(&(n.clone(), p)))
                }
                None => MetadataResponseTopic::default()
                    .with_error_code(match &name {
                        None => errors::UNKNOWN_TOPIC_ID,
                        // An illegal name can never exist: Kafka answers so, and
                        // clients fail at once instead of waiting for it.
                        Some(n) if controller::validate_topic_name(n).is_err() => errors::INVALID_TOPIC_EXCEPTION,
                        Some(_) => errors::UNKNOWN_TOPIC_OR_PARTITION,
                    })
                    .with_name(name.map(|n| TopicName(str_bytes(&n))))
                    .with_topic_id(id)
                    .with_topic_authorized_operations(OPERATIONS_NOT_REQUESTED),
            }
        })
        .collect();
    let brokers = nodes::brokers(shard, ctx.listener_name());
    MetadataResponse::default()
        .with_brokers(
            brokers
                .into_iter()
                .map(|(id, host, port)| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(id))
                        .with_host(str_bytes(&host))
                        .with_port(port)
                })
                .collect(),
        )
        .with_cluster_id(Some(str_bytes(&meta.cluster_id)))
        .with_controller_id(BrokerId(nodes::controller_id(shard)))
        .with_topics(topics)
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            super::describe_cluster::cluster_operations(shard, ctx)
        } else {
            OPERATIONS_NOT_REQUESTED
        })
}

/// A partition whose data directory failed is answered as Kafka 4 answers a
/// single-replica partition on a failed log directory: no leader
/// (LEADER_NOT_AVAILABLE), an empty ISR, and this node among the offline replicas.
fn topic_response(
    shard: &Shard,
    name: &str,
    t: &TopicMeta,
    node: i32,
    ops: Option<i32>,
    offline: impl Fn(i32) -> bool,
) -> MetadataResponseTopic {
    let partitions = (0..t.partitions.len() as i32)
        .map(|p| {
            if let Some(view) = nodes::partition_view(shard, t, p) {
                return replicated_partition(p, view);
            }
            if offline(p) {
                return MetadataResponsePartition::default()
                    .with_error_code(errors::LEADER_NOT_AVAILABLE)
                    .with_partition_index(p)
                    .with_leader_id(BrokerId(-1))
                    .with_leader_epoch(LEADER_EPOCH)
                    .with_replica_nodes(vec![BrokerId(node)])
                    .with_isr_nodes(vec![])
                    .with_offline_replicas(vec![BrokerId(node)]);
            }
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(node))
                .with_leader_epoch(LEADER_EPOCH)
                .with_replica_nodes(vec![BrokerId(node)])
                .with_isr_nodes(vec![BrokerId(node)])
        })
        .collect();
    topic_with_partitions(name, t, partitions, ops)
}

/// A replicated partition: its Raft leader and term (LEADER_NOT_AVAILABLE while it has
/// none), its in-sync and offline replicas as its leader told.
fn replicated_partition(p: i32, view: nodes::PartitionView) -> MetadataResponsePartition {
    MetadataResponsePartition::default()
        .with_error_code(view.error_code())
        .with_partition_index(p)
        .with_leader_id(BrokerId(view.leader))
        .with_leader_epoch(view.epoch)
        .with_replica_nodes(view.replicas)
        .with_isr_nodes(view.in_sync)
        .with_offline_replicas(view.offline)
}

fn topic_with_partitions(
    name: &str,
    t: &TopicMeta,
    partitions: Vec<MetadataResponsePartition>,
    ops: Option<i32>,
) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(name))))
        .with_topic_id(t.id)
        .with_is_internal(name.starts_with("__"))
        .with_partitions(partitions)
        .with_topic_authorized_operations(ops.unwrap_or(OPERATIONS_NOT_REQUESTED))
}
