//! OffsetFetch: one group (v1-7) or many (v8+, each forwarded to its own coordinator
//! shard concurrently); explicit partitions or, with null topics, every committed one.
//! Offsets are read from memory, which holds exactly what is durable in the log.

use std::rc::Rc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};

use crate::cluster::routing;
use crate::coordinator::offset_ops::{FetchRequest, FetchedOffset};
use crate::coordinator::requests::FetchOffsets;
use crate::errors;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (1, 9);

async fn fetch_group(shard: &Rc<Shard>, req: FetchRequest) -> Result<Vec<FetchedOffset>, i16> {
    let group_id = req.group_id.clone();
    routing::on_coordinator(shard, &group_id, |partition| FetchOffsets { partition, fetch: req }).await.and_then(|r| r)
}

/// Requested partitions answered with a group-level error.
fn failed(topics: &Option<Vec<(String, Vec<i32>)>>, code: i16) -> Vec<FetchedOffset> {
    let topics = topics.as_deref().unwrap_or_default();
    topics
        .iter()
        .flat_map(|(t, parts)| {
            parts.iter().map(move |p| FetchedOffset {
                topic: t.clone(),
                partition: *p,
                offset: -1,
                leader_epoch: -1,
                metadata: Some(String::new()),
                error: code,
            })
        })
        .collect()
}

/// As Kafka: DESCRIBE on the group first, then on each topic; a topic the principal
/// may not describe is left out of "every committed offset" and answered
/// TOPIC_AUTHORIZATION_FAILED when named.
async fn fetch_authorized(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    req: FetchRequest,
) -> Result<Vec<FetchedOffset>, i16> {
    if !super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::GROUP, &req.group_id) {
        return Err(errors::GROUP_AUTHORIZATION_FAILED);
    }
    let every = req.topics.is_none();
    let mut describable = std::collections::HashMap::<String, bool>::new();
    let mut allowed = |topic: &str| {
        *describable.entry(topic.to_string()).or_insert_with(|| {
            if every {
                super::allowed(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, topic)
            } else {
                super::authorized(shard, ctx, acl::operation::DESCRIBE, acl::resource::TOPIC, topic)
            }
        })
    };
    let offsets = fetch_group(shard, req).await?;
    Ok(offsets
        .into_iter()
        .filter_map(|o| match allowed(&o.topic) {
            true => Some(o),
            false if every => None,
            false => Some(FetchedOffset {
                offset: -1,
                leader_epoch: -1,
                metadata: Some(String::new()),
                error: errors::TOPIC_AUTHORIZATION_FAILED,
                ..o
            }),
        })
        .collect())
}

/// Groups fetched offsets by topic, keeping first-seen topic order.
fn by_topic(offsets: Vec<FetchedOffset>) -> Vec<(String, Vec<FetchedOffset>)> {
    let mut out: Vec<(String, Vec<FetchedOffset>)> = Vec::new();
    for o in offsets {
        match out.iter_mut().find(|(t, _)| *t == o.topic) {
            Some((_, list)) => list.push(o),
            None => out.push((o.topic.clone(), vec![o])),
        }
    }
    out
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    if version < 8 {
        let topics = req
            .topics
            .map(|ts| ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect::<Vec<_>>());
        let fetch = FetchRequest {
            group_id: req.group_id.0.to_string(),
            member_id: None,
            member_epoch: -1,
            topics: topics.clone(),
            require_stable: version >= 7 && req.require_stable,
        };
        let (error, offsets) = match fetch_authorized(shard, ctx, fetch).await {
            Ok(o) => (errors::NONE, o),
            Err(code) => (code, failed(&topics, code)),
        };
        let topics = by_topic(offsets)
            .into_iter()
            .map(|(t, parts)| {
                let partitions = parts
                    .into_iter()
                    .map(|o| {
                        let mut p = OffsetFetchResponsePartition::default()
                            .with_partition_index(o.partition)
                            .with_committed_offset(o.offset)
                            .with_metadata(o.metadata.as_deref().map(str_bytes))
                            .with_error_code(o.error);
                        if version >= 5 {
                            p.committed_leader_epoch = o.leader_epoch;
                        }
                        p
                    })
                    .collect();
                OffsetFetchResponseTopic::default().with_name(TopicName(str_bytes(&t))).with_partitions(partitions)
            })
            .collect();
        let mut resp = OffsetFetchResponse::default().with_topics(topics);
        if version >= 2 {
            resp.error_code = error;
        }
        return resp;
    }
    let require_stable = req.require_stable;
    let calls = req.groups.into_iter().map(|g| {
        let topics =
            g.topics.map(|ts| ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect::<Vec<_>>());
        let fetch = FetchRequest {
            group_id: g.group_id.0.to_string(),
            member_id: if version >= 9 { g.member_id.as_deref().map(str::to_string) } else { None },
            member_epoch: if version >= 9 { g.member_epoch } else { -1 },
            topics,
            require_stable,
        };
        async move {
            let group_id = fetch.group_id.clone();
            (group_id, fetch_authorized(shard, ctx, fetch).await)
        }
    });
    let results = keel_storage::join::join_all(calls.collect()).await;
    let groups = results
        .into_iter()
        .map(|(group_id, result)| {
            let group = OffsetFetchResponseGroup::default().with_group_id(GroupId(str_bytes(&group_id)));
            match result {
                Err(code) => group.with_error_code(code),
                Ok(offsets) => group.with_topics(
                    by_topic(offsets)
                        .into_iter()
                        .map(|(t, parts)| {
                            let partitions = parts
                                .into_iter()
                                .map(|o| {
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(o.partition)
                                        .with_committed_offset(o.offset)
                                        .with_committed_leader_epoch(o.leader_epoch)
                                        .with_metadata(o.metadata.as_deref().map(str_bytes))
                                        .with_error_code(o.error)
                                })
                                .collect();
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(str_bytes(&t)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                ),
            }
        })
        .collect();
    OffsetFetchResponse::default().with_groups(groups)
}
