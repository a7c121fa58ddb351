//! OffsetCommit: checked against the group and written durably to the group's
//! `__consumer_offsets` partition on its coordinator shard before it is acknowledged.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use crate::cluster::routing;
use crate::coordinator::offset_ops::{CommitPartition, CommitRequest};
use crate::coordinator::requests::CommitOffsets;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (2, 9);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    // As Kafka: READ on the group (else every partition is refused), then READ on each
    // topic; only the authorized partitions are committed.
    let whole = (!super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group_id))
        .then_some(crate::errors::GROUP_AUTHORIZATION_FAILED);
    let topics = req.topics.iter().map(|t| {
        (
            t.name.0.as_str(),
            t.partitions.iter().map(|p| CommitPartition {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_deref().map(str::to_string),
            }),
        )
    });
    let request = |partitions| CommitRequest {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_deref().map(str::to_string),
        generation_or_epoch: req.generation_id_or_member_epoch,
        api_version: version,
        partitions,
        producer: None,
        join_transaction: None,
    };
    let mut codes = commit_authorized(shard, ctx, &group_id, whole, topics, request).await.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().expect("a code per partition"))
                })
                .collect();
            OffsetCommitResponseTopic::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// The commit path OffsetCommit and TxnOffsetCommit share: each partition is refused
/// with `whole` if set, else with TOPIC_AUTHORIZATION_FAILED without READ on its
/// topic; the rest are committed together on the group's coordinator shard, as the
/// request `request` makes of them. One error code per partition, in request order.
pub(super) async fn commit_authorized<'a, P>(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    group_id: &str,
    whole: Option<i16>,
    topics: impl Iterator<Item = (&'a str, P)>,
    request: impl FnOnce(Vec<CommitPartition>) -> CommitRequest,
) -> Vec<i16>
where
    P: Iterator<Item = CommitPartition>,
{
    let mut refusals: Vec<Option<i16>> = Vec::new();
    let mut partitions = Vec::new();
    for (topic, topic_partitions) in topics {
        let code = whole.or_else(|| {
            (!super::authorized(shard, ctx, acl::operation::READ, acl::resource::TOPIC, topic))
                .then_some(crate::errors::TOPIC_AUTHORIZATION_FAILED)
        });
        for p in topic_partitions {
            refusals.push(code);
            if code.is_none() {
                partitions.push(p);
            }
        }
    }
    let count = partitions.len();
    let codes = if count == 0 && refusals.iter().any(Option::is_some) {
        Vec::new()
    } else {
        let commit = request(partitions);
        routing::on_coordinator(shard, group_id, |partition| CommitOffsets { partition, commit })
            .await
            .unwrap_or_else(|code| vec![code; count])
    };
    let mut committed = codes.into_iter();
    refusals.into_iter().map(|r| r.unwrap_or_else(|| committed.next().expect("a code per commit"))).collect()
}
