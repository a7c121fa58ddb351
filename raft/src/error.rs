//! Expected failures of the core, with the group they concern.

use thiserror::Error;

use crate::offset_translator::BatchError;
use crate::{GroupId, NodeId};

/// A proposal that did not enter the log.
#[derive(Debug, Error)]
pub enum ProposeError {
    #[error("group {group} is not on this shard")]
    UnknownGroup { group: GroupId },
    /// Followers never forward proposals: the client retries on `leader`.
    #[error("not the leader of group {group} in term {term} (known leader: {leader:?})")]
    NotLeader { group: GroupId, term: u64, leader: Option<NodeId> },
    #[error("group {group} is transferring its leadership to node {transferee}")]
    TransferringLeadership { group: GroupId, transferee: NodeId },
    #[error("proposal to group {group} is not a Kafka v2 batch: {source}")]
    InvalidBatch { group: GroupId, source: BatchError },
    /// raft-rs dropped it (uncommitted bytes over their limit, or a leadership change).
    #[error("group {group} dropped the proposal")]
    Dropped { group: GroupId },
    #[error("group {group} refused the proposal: {source}")]
    Raft { group: GroupId, source: raft::Error },
}

/// A message from a peer that the core refused.
#[derive(Debug, Error)]
pub enum StepError {
    #[error("message could not be decoded: {0}")]
    Decode(#[from] protobuf::ProtobufError),
    #[error("group {group} is not on this shard")]
    UnknownGroup { group: GroupId },
    #[error("message for node {to} reached node {node}")]
    WrongDestination { to: NodeId, node: NodeId },
    #[error("message of kind {kind:?} for group {group} is not accepted from the network")]
    Refused { group: GroupId, kind: raft::eraftpb::MessageType },
    #[error("stale {kind:?} for group {group} dropped")]
    Stale { group: GroupId, kind: raft::eraftpb::MessageType },
    #[error("group {group} rejected the message: {source}")]
    Raft { group: GroupId, source: raft::Error },
}

/// A group could not be created or found.
#[derive(Debug, Error)]
pub enum GroupError {
    #[error("group {group} already exists on this shard")]
    Exists { group: GroupId },
    #[error("group {group} is not on this shard")]
    Unknown { group: GroupId },
    #[error("group {group} could not start: {source}")]
    Raft { group: GroupId, source: raft::Error },
}

/// Entries read back for a fetch that the core refused.
#[derive(Debug, Error)]
pub enum FetchError {
    #[error("group {group} is not on this shard")]
    Unknown { group: GroupId },
    #[error("group {group}: {reason}")]
    Mismatch { group: GroupId, reason: String },
}
