//! DescribeQuorum (KIP-595): the cluster metadata quorum, as `kafka-metadata-quorum`
//! and AdminClient `describeMetadataQuorum` read it. In a cluster the metadata group's
//! leader (the controller) answers with each voter's log end as its Raft progress shows
//! it (other nodes relay the request there); a single node is a quorum of itself.

use std::rc::Rc;

use kafka_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};

use crate::errors;
use crate::replication::shell::METADATA_GROUP;
use crate::security::context::RequestContext;
use crate::shard::dispatch::Serve;
use crate::shard::partition::now_ms;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 2);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: DESCRIBE on the cluster.
pub fn relayed(shard: &Shard, ctx: &RequestContext, _req: &DescribeQuorumRequest) -> bool {
    super::cluster_allowed(shard, ctx, crate::security::acl::operation::DESCRIBE)
}

/// KRaft's metadata topic, the only one DescribeQuorum describes.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// As Kafka's `KafkaRaftClient`: a request that is not exactly one topic with one
/// partition, `__cluster_metadata`/0, is answered UNKNOWN_TOPIC_OR_PARTITION for every
/// partition it names, and with no nodes.
pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    version: i16,
    req: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    // As Kafka: DESCRIBE on the cluster.
    if !super::cluster_authorized(shard, ctx, crate::security::acl::operation::DESCRIBE) {
        return DescribeQuorumResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(crate::util::str_bytes("Cluster authorization failed.")));
    }
    let valid = matches!(req.topics.as_slice(), [t] if t.topic_name.0.as_str() == METADATA_TOPIC
        && matches!(t.partitions.as_slice(), [p] if p.partition_index == 0));
    let listener = ctx.listener_name().to_string();
    let quorum = if valid { shard.call(0, DescribeQuorum { listener }).await } else { None };
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| match (&quorum, valid) {
                    (_, false) => PartitionData::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION),
                    (None, true) => PartitionData::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(errors::NOT_LEADER_OR_FOLLOWER),
                    (Some(q), true) => q.partition.clone().with_partition_index(p.partition_index),
                })
                .collect();
            TopicData::default().with_topic_name(t.topic_name).with_partitions(partitions)
        })
        .collect();
    let mut response = DescribeQuorumResponse::default().with_topics(topics);
    if version >= 2 {
        response.nodes = quorum.map(|q| q.nodes).unwrap_or_default();
    }
    response
}

/// The metadata partition's quorum and its voters' endpoints.
#[derive(Clone)]
pub struct Quorum {
    partition: PartitionData,
    nodes: Vec<Node>,
}

/// On shard 0: the metadata quorum as clients of `listener` are told of it.
pub struct DescribeQuorum {
    listener: String,
}

impl Serve for DescribeQuorum {
    async fn serve(self, shard: Rc<Shard>) -> Option<Quorum> {
        quorum(&shard, &self.listener)
    }
}

/// The quorum as shard 0 of this node knows it; `None` unless this node leads it.
fn quorum(shard: &Shard, listener: &str) -> Option<Quorum> {
    let now = now_ms();
    let (leader, epoch, high_watermark, voters) = match &shard.replication {
        None => (shard.config.node_id, 0, 0, vec![(shard.config.node_id, 0)]),
        Some(r) => {
            let (epoch, ends) = r.quorum(METADATA_GROUP)?;
            let voters = ends.into_iter().map(|(id, end)| (id as i32, end)).collect();
            let hw = r.replica(METADATA_GROUP).map(|m| m.log.borrow().high_watermark()).unwrap_or(0);
            (shard.config.node_id, epoch, hw, voters)
        }
    };
    let leader_end = voters.iter().find(|(id, _)| *id == leader).map(|(_, end)| *end).unwrap_or(0);
    let current_voters = voters
        .iter()
        .map(|(id, end)| {
            let caught_up = if *end >= leader_end { now } else { -1 };
            ReplicaState::default()
                .with_replica_id(BrokerId(*id))
                .with_log_end_offset(*end)
                .with_last_fetch_timestamp(if *id == leader { now } else { caught_up })
                .with_last_caught_up_timestamp(caught_up)
        })
        .collect();
    let partition = PartitionData::default()
        .with_leader_id(BrokerId(leader))
        .with_leader_epoch(epoch)
        .with_high_watermark(high_watermark)
        .with_current_voters(current_voters);
    let brokers = crate::cluster::nodes::brokers(shard, listener);
    let nodes = voters
        .iter()
        .filter_map(|(id, _)| brokers.iter().find(|(b, ..)| b == id))
        .map(|(id, host, port)| {
            Node::default().with_node_id(BrokerId(*id)).with_listeners(vec![Listener::default()
                .with_name(str_bytes(listener))
                .with_host(str_bytes(host))
                .with_port(*port as u16)])
        })
        .collect();
    Some(Quorum { partition, nodes })
}
