//! AlterPartitionReassignments (v0-1, KIP-455): what `kafka-reassign-partitions.sh
//! --execute` and `Admin.alterPartitionReassignments` send.
//!
//! Each partition's target replicas are recorded by the controller (other nodes relay
//! the request there) and the answer comes once recorded, as Kafka's does; the move
//! itself runs on the partition's leader (`cluster::reassign`) and shows in
//! ListPartitionReassignments until it completes. A null replica list cancels the
//! move under way, restoring the replicas the partition had.

use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse};

use crate::cluster::controller::Reassignment;
use crate::cluster::requests::Reassign;
use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 1);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER on the cluster.
pub fn relayed(shard: &Shard, ctx: &RequestContext, _req: &AlterPartitionReassignmentsRequest) -> bool {
    super::cluster_allowed(shard, ctx, crate::security::acl::operation::ALTER)
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    // As Kafka: ALTER on the cluster.
    if !super::cluster_authorized(shard, ctx, crate::security::acl::operation::ALTER) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(crate::util::str_bytes("Cluster authorization failed.")));
    }
    let wanted: Vec<Reassignment> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Reassignment {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                replicas: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    let results = if req.allow_replication_factor_change {
        shard.call(0, Reassign { wanted }).await
    } else {
        // v1 clients may forbid a change of the replication factor.
        let meta = shard.meta();
        let (keep, refused): (Vec<_>, Vec<_>) = wanted.into_iter().enumerate().partition(|(_, w)| {
            let current = meta.topics.get(&w.topic).and_then(|t| t.replicas_of(w.partition)).map(<[i32]>::len);
            match (&w.replicas, current) {
                (Some(target), Some(current)) => target.len() == current,
                _ => true,
            }
        });
        let (slots, keep): (Vec<usize>, Vec<Reassignment>) = keep.into_iter().unzip();
        let done = shard.call(0, Reassign { wanted: keep }).await;
        let mut results: Vec<Result<(), (i16, String)>> = Vec::new();
        results.resize_with(slots.len() + refused.len(), || Ok(()));
        for (slot, r) in slots.into_iter().zip(done) {
            results[slot] = r;
        }
        for (slot, _) in refused {
            let why = "The replication factor is changed from its current value, which this request does not allow.";
            results[slot] = Err((errors::INVALID_REPLICATION_FACTOR, why.to_string()));
        }
        results
    };
    let mut results = results.into_iter();
    let responses = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let (code, message) = match results.next().unwrap_or(Ok(())) {
                        Ok(()) => (errors::NONE, None),
                        Err((code, message)) => (code, Some(str_bytes(&message))),
                    };
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_error_message(message)
                })
                .collect();
            ReassignableTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(req.allow_replication_factor_change)
        .with_error_code(errors::NONE)
        .with_responses(responses)
}
