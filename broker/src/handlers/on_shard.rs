//! The work a Kafka request's handler does on other shards: on the owners of the
//! partitions the request names, or on shard 0 for what only it knows. Each request
//! is declared next to the handler sending it.

use super::{
    alter_replica_log_dirs, delete_records, describe_log_dirs, describe_producers, describe_quorum, fetch,
    list_offsets, offset_for_leader_epoch, produce,
};
use crate::shard::dispatch::mesh_requests;
use crate::shard::partition::ProduceOutcome;

// A handler's work on another shard.
mesh_requests! {
    produce::Append => Vec<ProduceOutcome>,
    fetch::Read => Vec<fetch::Got>,
    // Cancellable: a long-poll fetch's wait on an owner.
    fetch::Wait => (),
    list_offsets::LookupOffsets => Vec<list_offsets::Answer>,
    offset_for_leader_epoch::EpochEnds => Vec<(i16, i32, i64)>,
    describe_producers::ActiveProducers => Vec<describe_producers::Answer>,
    delete_records::DeleteBefore => Vec<delete_records::Answer>,
    alter_replica_log_dirs::StartMoves => Vec<i16>,
    describe_log_dirs::ShardReplicas => describe_log_dirs::Replicas,
    describe_quorum::DescribeQuorum => Option<describe_quorum::Quorum>,
}
