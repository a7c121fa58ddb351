//! TxnOffsetCommit: offsets committed inside a transaction. They are written to the
//! group's `__consumer_offsets` partition as a transactional batch of the producer and
//! held pending; the transaction's commit marker makes them the group's committed
//! offsets, an abort marker drops them (`Coordinator::complete_txn_offsets`).

use std::rc::Rc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use crate::coordinator::offset_ops::{CommitPartition, CommitRequest};
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;

/// From version 5 (transaction protocol version 2) the commit itself joins the
/// group's partition to the transaction, without AddOffsetsToTxn.
pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    // As Kafka: WRITE on the transactional id and READ on the group (else every
    // partition is refused), then READ on each topic; only the authorized partitions
    // are committed.
    let whole = if !super::authorized(
        shard,
        ctx,
        acl::operation::WRITE,
        acl::resource::TRANSACTIONAL_ID,
        req.transactional_id.0.as_str(),
    ) {
        Some(crate::errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else if !super::authorized(shard, ctx, acl::operation::READ, acl::resource::GROUP, &group_id) {
        Some(crate::errors::GROUP_AUTHORIZATION_FAILED)
    } else {
        None
    };
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
        generation_or_epoch: if version >= 3 { req.generation_id } else { -1 },
        // A transactional commit of a KIP-848 member is valid at any version.
        api_version: 9,
        partitions,
        producer: Some((req.producer_id.0, req.producer_epoch)),
        join_transaction: (version >= 5).then(|| req.transactional_id.0.to_string()),
    };
    let mut codes =
        super::offset_commit::commit_authorized(shard, ctx, &group_id, whole, topics, request).await.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().expect("a code per partition"))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}
