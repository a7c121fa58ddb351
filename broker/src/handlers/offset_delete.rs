//! OffsetDelete: removes a group's committed offsets for partitions its active members
//! do not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC otherwise), with tombstones.
//!
//! As Kafka's `KafkaApis` does, partitions of unknown topics and partitions a topic
//! does not have are answered UNKNOWN_TOPIC_OR_PARTITION here and never reach the
//! coordinator; a group-level error (GROUP_ID_NOT_FOUND, ...) answers the whole
//! request with no partitions.

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::cluster::routing;
use crate::coordinator::requests::DeleteOffsets;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 0);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let group_id = req.group_id.0.to_string();
    // As Kafka: DELETE on the group, then READ on each topic.
    if !super::authorized(shard, ctx, acl::operation::DELETE, acl::resource::GROUP, &group_id) {
        return OffsetDeleteResponse::default().with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    let readable: std::collections::HashSet<String> = req
        .topics
        .iter()
        .filter(|t| super::authorized(shard, ctx, acl::operation::READ, acl::resource::TOPIC, t.name.0.as_str()))
        .map(|t| t.name.0.to_string())
        .collect();
    let exists = {
        let meta = shard.meta();
        move |topic: &str, partition: i32| {
            meta.topics.get(topic).is_some_and(|t| partition >= 0 && (partition as usize) < t.partitions.len())
        }
    };
    let partitions: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), p.partition_index)))
        .filter(|(topic, partition)| readable.contains(topic) && exists(topic, *partition))
        .collect();
    let gid = group_id.clone();
    let result =
        routing::on_coordinator(shard, &group_id, |partition| DeleteOffsets { partition, group_id: gid, partitions })
            .await
            .and_then(|r| r);
    let codes = match result {
        Err(code) => return OffsetDeleteResponse::default().with_error_code(code),
        Ok(codes) => codes,
    };
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = if !readable.contains(t.name.0.as_str()) {
                        errors::TOPIC_AUTHORIZATION_FAILED
                    } else if exists(t.name.0.as_str(), p.partition_index) {
                        codes.next().expect("a code per existing partition")
                    } else {
                        errors::UNKNOWN_TOPIC_OR_PARTITION
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
