//! DescribeCluster: the brokers and the controller (this node, on a single node).

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::metadata::OPERATIONS_NOT_REQUESTED;
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 2);

/// As Kafka: the cluster's authorized operations only for a principal that may
/// DESCRIBE the cluster, else none.
pub fn cluster_operations(shard: &Shard, ctx: &RequestContext) -> i32 {
    if super::cluster_authorized(shard, ctx, acl::operation::DESCRIBE) {
        super::operations(shard, ctx, acl::resource::CLUSTER, acl::CLUSTER_NAME)
    } else {
        0
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let brokers = crate::cluster::nodes::brokers(shard, ctx.listener_name());
    let mut r = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&shard.meta().cluster_id))
        .with_controller_id(BrokerId(crate::cluster::nodes::controller_id(shard)))
        .with_brokers(
            brokers
                .into_iter()
                .map(|(id, host, port)| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(id))
                        .with_host(str_bytes(&host))
                        .with_port(port)
                })
                .collect(),
        )
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            cluster_operations(shard, ctx)
        } else {
            OPERATIONS_NOT_REQUESTED
        });
    if version >= 1 {
        r.endpoint_type = 1;
    }
    r
}
