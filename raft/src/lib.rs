//! Keel's consensus core: one Raft group per Kafka partition on tikv's `raft` crate (0.7),
//! the partition log being the Raft log, one entry per Kafka v2 record batch.
//!
//! What it does: [`MultiRaft`] holds every group of one shard and is driven by events —
//! [`MultiRaft::step`] (a peer's message), [`MultiRaft::propose`] (a produce batch, leader
//! only), [`MultiRaft::tick`] (the shard's one timer), [`MultiRaft::persisted`] (after the
//! shell's fdatasync) — and answers with [`Actions`] from [`MultiRaft::collect`]: entries
//! and HardState to write, messages per destination node (heartbeats apart, to be coalesced
//! into one frame per node), committed entries to apply, leadership changes. The
//! [`OffsetTranslator`] maps Raft indexes to Kafka offsets, Raft's own entries taking none.
//!
//! Where it runs: one `MultiRaft` per shard, on that shard's executor; it is `!Send`.
//! The glommio shell around it (`keel-broker`'s `replication::shell`) owns the disk, the
//! network and the timer.
//!
//! What it must never do: I/O, spawn tasks or threads, read a clock, or block. Time enters
//! as ticks and randomness from a seed, so a deterministic simulation
//! (`tests/simulation.rs`) replays any failure from its seed. A follower never forwards a
//! proposal; it names the leader instead.

mod actions;
mod error;
pub mod in_sync;
mod log_store;
mod multi_raft;
mod offset_translator;
mod quiesce;

use std::fmt;

pub use actions::{is_heartbeat, Actions, Apply, Envelope, LeadershipChange, PersistRequest, ReadConfirmed};
pub use error::{FetchError, GroupError, ProposeError, StepError};
pub use in_sync::InSync;
pub use log_store::{FetchRequest, GroupStorage, LogBase, PersistedGroup, SnapshotInstall};
pub use multi_raft::{Config, MultiRaft, Proposed};
pub use offset_translator::{batch_offset_count, BatchError, OffsetTranslator, BATCH_HEADER_BYTES};
pub use quiesce::PING_GROUP;
/// raft-rs types that appear in this crate's API.
pub use raft::eraftpb::{
    ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, HardState,
    Message, MessageType,
};
pub use raft::StateRole;

/// A node's Raft peer id in every group it belongs to (its broker node id; 0 is invalid).
pub type NodeId = u64;

/// One Raft group: a Kafka partition, named by its topic id and partition index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId {
    pub topic: u128,
    pub partition: u32,
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}-{}", self.topic, self.partition)
    }
}
