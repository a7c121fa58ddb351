//! The work a Kafka request's handler does on other shards: on the owners of the
//! partitions the request names, or on shard 0 for what only it knows. Each request
//! is declared next to the handler sending it.

use super::{
    alter_replica_log_dirs, delete_records, describe_log_dirs, describe_producers, describe_quorum, fetch,
    list_offsets, offset_for_leader_epoch, produce,
};
use crate::shard::dispatch::mesh_service;
use crate::shard::partition::ProduceOutcome;

mesh_service! {
    /// A handler's work on another shard.
    Handler: HandlerRequest => HandlerReply {
        Append(produce::Append) -> Vec<ProduceOutcome>,
        Read(fetch::Read) -> Vec<fetch::Got>,
        /// Cancellable: a long-poll fetch's wait on an owner.
        Wait(fetch::Wait) -> (),
        LookupOffsets(list_offsets::LookupOffsets) -> Vec<list_offsets::Answer>,
        EpochEnds(offset_for_leader_epoch::EpochEnds) -> Vec<(i16, i32, i64)>,
        ActiveProducers(describe_producers::ActiveProducers) -> Vec<describe_producers::Answer>,
        DeleteBefore(delete_records::DeleteBefore) -> Vec<delete_records::Answer>,
        StartMoves(alter_replica_log_dirs::StartMoves) -> Vec<i16>,
        ShardReplicas(describe_log_dirs::ShardReplicas) -> describe_log_dirs::Replicas,
        DescribeQuorum(describe_quorum::DescribeQuorum) -> Option<describe_quorum::Quorum>,
    }
}
