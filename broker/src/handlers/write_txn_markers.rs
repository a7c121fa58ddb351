//! WriteTxnMarkers: a transaction coordinator on another node asks this node, the
//! leader of the partitions named, to end a producer's transaction on them
//! ([`crate::txn::markers`]). Answered per partition once each marker is durable.

use std::rc::Rc;

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::txn::markers::{self, Marker};

pub const VERSIONS: (i16, i16) = (1, 1);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    // As Kafka: CLUSTER_ACTION on the cluster (only brokers write markers), else every
    // partition is refused.
    let refused = !super::cluster_authorized(shard, ctx, crate::security::acl::operation::CLUSTER_ACTION);
    let mut results = Vec::with_capacity(req.markers.len());
    for m in req.markers {
        let marker = Marker {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
        };
        let partitions: Vec<(String, i32)> =
            m.topics.iter().flat_map(|t| t.partition_indexes.iter().map(move |p| (t.name.0.to_string(), *p))).collect();
        let count = partitions.len();
        let mut codes = if refused {
            vec![crate::errors::CLUSTER_AUTHORIZATION_FAILED; count]
        } else {
            markers::write_local(shard, marker, partitions).await
        }
        .into_iter();
        let topics = m
            .topics
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partition_indexes
                    .iter()
                    .map(|p| {
                        WritableTxnMarkerPartitionResult::default()
                            .with_partition_index(*p)
                            .with_error_code(codes.next().expect("a code per partition"))
                    })
                    .collect();
                WritableTxnMarkerTopicResult::default().with_name(t.name).with_partitions(partitions)
            })
            .collect();
        results.push(WritableTxnMarkerResult::default().with_producer_id(m.producer_id).with_topics(topics));
    }
    WriteTxnMarkersResponse::default().with_markers(results)
}
