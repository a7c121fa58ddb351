//! OffsetCommit: checked against the group and written durably to the group's
//! `__consumer_offsets` partition on its coordinator shard before it is acknowledged.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use crate::coordinator::offset_ops::{self, CommitPartition, CommitRequest};
use crate::coordinator::routing;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (2, 9);

pub async fn handle(
    shard: &Rc<Shard>,
    _ctx: &RequestContext,
    version: i16,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    let partitions: Vec<CommitPartition> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| CommitPartition {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_deref().map(str::to_string),
            })
        })
        .collect();
    let count = partitions.len();
    let commit = CommitRequest {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_deref().map(str::to_string),
        generation_or_epoch: req.generation_id_or_member_epoch,
        api_version: version,
        partitions,
        producer: None,
        join_transaction: None,
    };
    let codes = routing::on_coordinator(shard, &group_id, move |s, p| offset_ops::commit(s, p, commit))
        .await
        .unwrap_or_else(|code| vec![code; count]);
    let mut codes = codes.into_iter();
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
