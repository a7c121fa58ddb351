//! DescribeTopicPartitions (KIP-966): topics and partitions with a response limit and a
//! cursor for paging, as Kafka 4.x's Admin client describes topics.

use std::rc::Rc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName};

use super::metadata::{OPERATIONS_NOT_REQUESTED, TOPIC_OPERATIONS_ALL};
use crate::cluster::controller::validate_topic_name;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::partition::LEADER_EPOCH;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 0);

/// Most partitions one answer describes, whatever the request's limit says (Kafka's
/// `max.request.partition.size.limit` default).
pub const RESPONSE_PARTITIONS_MAX: i32 = 2_000;

/// Pages as Kafka's `DescribeTopicPartitionsRequestHandler` and
/// `KRaftMetadataCache.describeTopicResponse` do: the named topics (or all), once each,
/// in name order from the cursor's topic on; a cursor naming a topic the list lacks,
/// or a negative partition, is INVALID_REQUEST for every topic named. Each topic
/// found takes as many partitions as the limit has left; a topic cut short sets the
/// cursor to its next partition, and once the limit is spent the next topic named,
/// known or not, is where the cursor points (partition 0). Unknown topics answer
/// UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name) and, as
/// every topic, the operations a broker without an authorizer allows.
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let meta = shard.meta();
    let node = BrokerId(shard.config.node_id);
    let cursor_topic = req.cursor.as_ref().map(|c| c.topic_name.0.to_string()).unwrap_or_default();
    let cursor_partition = req.cursor.as_ref().map(|c| c.partition_index).unwrap_or(0);
    // As Kafka: DESCRIBE on each topic; the list of all topics leaves out the others,
    // a named one is answered TOPIC_AUTHORIZATION_FAILED.
    let mut names: Vec<String> = if req.topics.is_empty() {
        meta.topics
            .keys()
            .filter(|n| super::allowed(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, n))
            .cloned()
            .collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.retain(|name| *name >= cursor_topic);
    names.sort();
    names.dedup();
    let cursor_missing = req.cursor.is_some() && !req.topics.is_empty() && !names.contains(&cursor_topic);
    if cursor_missing || cursor_partition < 0 {
        return invalid_request(req);
    }
    let mut budget = req.response_partition_limit.clamp(1, RESPONSE_PARTITIONS_MAX) as usize;
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names {
        if budget == 0 {
            next_cursor = Some(Cursor::default().with_topic_name(TopicName(str_bytes(&name))).with_partition_index(0));
            break;
        }
        if !req.topics.is_empty()
            && !super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, &name)
        {
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
                    .with_name(Some(TopicName(str_bytes(&name))))
                    .with_is_internal(name.starts_with("__"))
                    .with_topic_authorized_operations(OPERATIONS_NOT_REQUESTED),
            );
            continue;
        }
        let Some(t) = meta.topics.get(&name) else {
            let error = match validate_topic_name(&name) {
                Ok(()) => errors::UNKNOWN_TOPIC_OR_PARTITION,
                Err((code, _)) => code,
            };
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(error)
                    .with_name(Some(TopicName(str_bytes(&name))))
                    .with_is_internal(name.starts_with("__"))
                    .with_topic_authorized_operations(TOPIC_OPERATIONS_ALL),
            );
            continue;
        };
        let first = if name == cursor_topic { cursor_partition } else { 0 };
        let count = t.partitions.len() as i32;
        let end = count.min(first.saturating_add(budget as i32));
        let mut partitions = Vec::new();
        for p in first..end {
            if let Some(view) = crate::cluster::nodes::partition_view(shard, t, p) {
                // A replicated partition: its Raft leader, term, in-sync and offline
                // replicas, as Metadata answers. The eligible leader replicas (KIP-966)
                // stay empty, as Kafka answers without ELR: Raft's election restriction
                // already lets only a voter holding every committed entry lead.
                partitions.push(
                    DescribeTopicPartitionsResponsePartition::default()
                        .with_error_code(view.error_code())
                        .with_partition_index(p)
                        .with_leader_id(BrokerId(view.leader))
                        .with_leader_epoch(view.epoch)
                        .with_replica_nodes(view.replicas)
                        .with_isr_nodes(view.in_sync)
                        .with_offline_replicas(view.offline)
                        .with_eligible_leader_replicas(Some(vec![]))
                        .with_last_known_elr(Some(vec![])),
                );
                continue;
            }
            let answer = DescribeTopicPartitionsResponsePartition::default()
                .with_partition_index(p)
                .with_leader_epoch(LEADER_EPOCH)
                .with_replica_nodes(vec![node])
                .with_eligible_leader_replicas(Some(vec![]))
                .with_last_known_elr(Some(vec![]));
            // A partition on a failed data directory, as Metadata answers it.
            let offline = shard.offline_partitions.borrow().contains(&(name.clone(), p));
            partitions.push(if offline {
                answer
                    .with_error_code(errors::LEADER_NOT_AVAILABLE)
                    .with_leader_id(BrokerId(-1))
                    .with_isr_nodes(vec![])
                    .with_offline_replicas(vec![node])
            } else {
                answer.with_leader_id(node).with_isr_nodes(vec![node])
            });
        }
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(str_bytes(&name))))
                .with_topic_id(t.id)
                .with_is_internal(name.starts_with("__"))
                .with_partitions(partitions)
                .with_topic_authorized_operations(super::operations(shard, ctx, acl::resource::TOPIC, &name)),
        );
        if end < count {
            next_cursor =
                Some(Cursor::default().with_topic_name(TopicName(str_bytes(&name))).with_partition_index(end));
            break;
        }
        budget -= (end - first).max(0) as usize;
    }
    DescribeTopicPartitionsResponse::default().with_topics(topics).with_next_cursor(next_cursor)
}

/// Kafka's error answer: every topic named, in the request's order, with the error.
fn invalid_request(req: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            DescribeTopicPartitionsResponseTopic::default()
                .with_error_code(errors::INVALID_REQUEST)
                .with_name(Some(t.name))
                .with_topic_authorized_operations(OPERATIONS_NOT_REQUESTED)
        })
        .collect();
    DescribeTopicPartitionsResponse::default().with_topics(topics)
}
