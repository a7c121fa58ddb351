//! DescribeTopicPartitions (KIP-966): topics and partitions with a response limit and a
//! cursor for paging, as Kafka 4.x's Admin client describes topics.

use std::rc::Rc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName};

use super::metadata::{OPERATIONS_NOT_REQUESTED, TOPIC_OPERATIONS_ALL};
use super::str_bytes;
use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::partition::LEADER_EPOCH;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 0);

pub fn handle(
    shard: &Rc<Shard>,
    _ctx: &RequestContext,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let meta = shard.meta();
    let node = BrokerId(shard.config.node_id);
    let mut names: Vec<String> = if req.topics.is_empty() {
        meta.topics.keys().cloned().collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.sort();
    let (cursor_topic, cursor_partition) = match &req.cursor {
        Some(c) => (Some(c.topic_name.0.to_string()), c.partition_index),
        None => (None, 0),
    };
    let mut budget = req.response_partition_limit.max(1) as usize;
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names {
        if cursor_topic.as_ref().map(|c| &name < c).unwrap_or(false) {
            continue;
        }
        let Some(t) = meta.topics.get(&name) else {
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                    .with_name(Some(TopicName(str_bytes(&name))))
                    .with_topic_authorized_operations(OPERATIONS_NOT_REQUESTED),
            );
            continue;
        };
        let first = if cursor_topic.as_deref() == Some(name.as_str()) { cursor_partition.max(0) } else { 0 };
        let mut partitions = Vec::new();
        for p in first..t.partitions.len() as i32 {
            if budget == 0 {
                next_cursor =
                    Some(Cursor::default().with_topic_name(TopicName(str_bytes(&name))).with_partition_index(p));
                break;
            }
            budget -= 1;
            if let Some(view) = crate::replication::cluster::partition_view(shard, t, p) {
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
                .with_topic_authorized_operations(TOPIC_OPERATIONS_ALL),
        );
        if next_cursor.is_some() {
            break;
        }
    }
    DescribeTopicPartitionsResponse::default().with_topics(topics).with_next_cursor(next_cursor)
}
