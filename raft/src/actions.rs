//! What the core asks its shell to do after a round of events: `MultiRaft::collect`'s answer.
//!
//! The shell handles one `Actions` in this order: send `messages` and `heartbeats` (a
//! leader's appends may go out before its own write, Raft thesis §10.2.1), write every
//! `persist` request in one pass and fdatasync once, report each with
//! `MultiRaft::persisted`, then apply `apply`. Messages that may only leave after a write
//! (a follower's acks and votes) are held by the core and appear in a later `Actions`.

use std::collections::BTreeMap;

use raft::eraftpb::{Entry, HardState, Message, MessageType};
use raft::StateRole;

use crate::log_store::{FetchRequest, SnapshotInstall};
use crate::{GroupId, NodeId};

/// A Raft message of one group, on its way to one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub group: GroupId,
    pub message: Message,
}

/// Entries and HardState of one group to write durably, then report with
/// `MultiRaft::persisted(group, ready)`.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistRequest {
    pub group: GroupId,
    /// raft-rs's Ready number; reports are cumulative (raft-rs `on_persist_ready`).
    pub ready: u64,
    /// Entries to append. When the first index is at or below the log end, the log is
    /// first truncated before it: a new leader overwrote an uncommitted tail.
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
    /// False when only the commit index changed and no entry came: raft-rs then allows the
    /// write without an fsync of its own (`Ready::must_sync`).
    pub must_sync: bool,
    /// A leader's snapshot replacing the whole log, written before `entries`: the
    /// shell copies the batches below it from the leader, then writes the group's new
    /// start. Later writes of the group wait for it.
    pub snapshot: Option<SnapshotInstall>,
}

/// Committed entries of one group, in index order, that this node has persisted.
#[derive(Debug, Clone, PartialEq)]
pub struct Apply {
    pub group: GroupId,
    pub entries: Vec<Entry>,
}

/// This node saw a group's leader or its own role change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeadershipChange {
    pub group: GroupId,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub role: StateRole,
}

/// Everything one `collect` asks of the shell.
#[derive(Debug, Default)]
pub struct Actions {
    /// In the order they must be written; one fdatasync may cover all.
    pub persist: Vec<PersistRequest>,
    /// Everything but heartbeats, per destination node, in the order raft-rs emitted them.
    pub messages: BTreeMap<NodeId, Vec<Envelope>>,
    /// `MsgHeartbeat` and `MsgHeartbeatResponse` per destination node, so that the
    /// transport sends one frame per node per heartbeat interval whatever the number of
    /// groups (Redpanda's `heartbeat_manager`). Raft tolerates their reordering against
    /// `messages`: each carries its term and is checked on receipt.
    pub heartbeats: BTreeMap<NodeId, Vec<Envelope>>,
    pub apply: Vec<Apply>,
    pub leadership: Vec<LeadershipChange>,
    /// Released entries to read back from the partition log for appends to slow voters;
    /// each is answered with `MultiRaft::fetched`, in any order.
    pub fetch: Vec<FetchRequest>,
    /// Leaderships confirmed for `MultiRaft::read_index`.
    pub reads: Vec<ReadConfirmed>,
}

/// A quorum answered the heartbeats a leader sent for read round `round` of `group`,
/// in the term it was asked in: the node still led after `read_index` was called, and
/// its commit index then was `commit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadConfirmed {
    pub group: GroupId,
    pub round: u64,
    pub commit: u64,
}

impl Actions {
    pub fn is_empty(&self) -> bool {
        self.persist.is_empty()
            && self.messages.is_empty()
            && self.heartbeats.is_empty()
            && self.apply.is_empty()
            && self.leadership.is_empty()
            && self.fetch.is_empty()
            && self.reads.is_empty()
    }

    /// Queues `message` of `group` for its destination, heartbeats apart.
    pub(crate) fn send(&mut self, group: GroupId, message: Message) {
        let queue = if is_heartbeat(message.get_msg_type()) { &mut self.heartbeats } else { &mut self.messages };
        queue.entry(message.to).or_default().push(Envelope { group, message });
    }
}

/// Whether a message kind rides the coalesced per-node heartbeat frame.
pub fn is_heartbeat(kind: MessageType) -> bool {
    matches!(kind, MessageType::MsgHeartbeat | MessageType::MsgHeartbeatResponse)
}
