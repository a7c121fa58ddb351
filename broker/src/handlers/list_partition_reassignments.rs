//! ListPartitionReassignments (v0, KIP-455): the reassignments under way, from the
//! metadata every node holds. As in Kafka, `replicas` is every replica of the
//! partition while it moves (the current ones and those being added),
//! `adding_replicas` the target's new ones and `removing_replicas` those leaving.

use std::rc::Rc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse};

use crate::errors;
use crate::metadata::TopicMeta;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 0);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    // As Kafka: DESCRIBE on the cluster.
    if !super::cluster_authorized(shard, ctx, crate::security::acl::operation::DESCRIBE) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(crate::util::str_bytes("Cluster authorization failed.")));
    }
    let meta = shard.meta();
    let asked: Vec<(String, Option<Vec<i32>>)> = match req.topics {
        Some(topics) => topics.into_iter().map(|t| (t.name.0.to_string(), Some(t.partition_indexes))).collect(),
        None => meta.topics.keys().map(|name| (name.clone(), None)).collect(),
    };
    let mut topics = Vec::new();
    for (name, partitions) in asked {
        let Some(topic) = meta.topics.get(&name) else { continue };
        let ongoing: Vec<OngoingPartitionReassignment> = topic
            .reassigning
            .keys()
            .filter(|p| partitions.as_ref().is_none_or(|asked| asked.contains(p)))
            .filter_map(|p| ongoing(topic, *p))
            .collect();
        if !ongoing.is_empty() {
            topics
                .push(OngoingTopicReassignment::default().with_name(str_bytes(&name).into()).with_partitions(ongoing));
        }
    }
    ListPartitionReassignmentsResponse::default().with_error_code(errors::NONE).with_topics(topics)
}

fn ongoing(topic: &TopicMeta, partition: i32) -> Option<OngoingPartitionReassignment> {
    let current = topic.replicas_of(partition)?;
    let target = topic.target_of(partition)?;
    let ids = |nodes: Vec<i32>| nodes.into_iter().map(BrokerId).collect::<Vec<_>>();
    let adding = target.iter().filter(|n| !current.contains(n)).copied().collect();
    let removing = current.iter().filter(|n| !target.contains(n)).copied().collect();
    Some(
        OngoingPartitionReassignment::default()
            .with_partition_index(partition)
            .with_replicas(ids(topic.all_replicas_of(partition)?))
            .with_adding_replicas(ids(adding))
            .with_removing_replicas(ids(removing)),
    )
}
