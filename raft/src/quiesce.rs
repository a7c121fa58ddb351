//! Quiescing idle groups, and the node liveness that makes it safe.
//!
//! Why: a Raft leader heartbeats every group it leads, so a node with 1,000 idle
//! partitions sends 1,000 heartbeats and receives 1,000 answers per peer per interval
//! even when coalesced into one frame, where Kafka's idle followers send a long-poll
//! fetch or two per second. The idle cost must not grow with the partition count.
//!
//! How (CockroachDB's quiescence): a leader whose group has nothing in flight — every
//! entry committed, applied and durable, every voter holding the whole log and alive —
//! sends its followers one last heartbeat marked [`QUIESCE`] and stops ticking the
//! group. A follower that receives it from its leader stops ticking too, so it never
//! campaigns against a leader that merely went quiet. Any other message of the group,
//! a proposal, a campaign or a leadership transfer wakes the group again; heartbeat
//! answers do not (each quiesce heartbeat is answered).
//!
//! What replaces the silenced heartbeats is one liveness ping per peer node per
//! heartbeat interval, whatever the number of groups. A peer not heard from (ping or
//! any message) for an election timeout is taken for down: every quiet group it is a
//! voter of wakes up. A follower whose leader is that peer also forgets its leader and
//! moves its election clock close to the end, so it campaigns within a few ticks rather
//! than a full timeout after detection (and its vote is not held back by the leader
//! lease of a leader it knows is gone). A leader stops counting that peer as recently
//! active, so its next check-quorum pass steps it down if it lost its majority.
//!
//! A peer whose connection closed (the transport saw it end: `kill -9` closes every
//! socket of the process) is taken for down at once, the same way, instead of an
//! election timeout later. A false alarm (a live peer's connection reset) costs at most
//! a failed pre-vote: the peer is alive again at its next message, and followers that
//! did not see the close are still in its lease and refuse their votes.
//!
//! Safety does not depend on any of this: a quiet follower that misses the quiesce
//! heartbeat campaigns as usual, and one woken by mistake only costs an election.

use std::collections::BTreeMap;

use raft::eraftpb::{Message, MessageType};
use raft::{RawNode, StateRole};

use crate::log_store::GroupStorage;
use crate::{GroupId, NodeId};

/// The `context` of a leader's last heartbeat before it stops ticking a group.
pub const QUIESCE: &[u8] = b"keel-quiesce";

/// The group of liveness pings: no real group, so the core never steps one into raft-rs.
pub const PING_GROUP: GroupId = GroupId { topic: 0, partition: u32::MAX };

/// Whether `message` is a leader's quiesce heartbeat.
pub fn is_quiesce(message: &Message) -> bool {
    message.get_msg_type() == MessageType::MsgHeartbeat && &message.context[..] == QUIESCE
}

/// Whether `message` may leave a quiet group quiet: quiesce heartbeats, and answers to
/// heartbeats (which every quiesce heartbeat gets).
pub fn keeps_quiet(message: &Message) -> bool {
    is_quiesce(message) || message.get_msg_type() == MessageType::MsgHeartbeatResponse
}

/// A ping telling `to` that `from` is alive.
pub fn ping(from: NodeId, to: NodeId) -> Message {
    let mut message = Message::default();
    message.set_msg_type(MessageType::MsgHeartbeat);
    message.from = from;
    message.to = to;
    message
}

/// On a leader: whether the group has nothing in flight and every voter has its whole
/// log and is alive, so it can stop ticking.
pub fn can_quiesce(node: &RawNode<GroupStorage>, alive: impl Fn(NodeId) -> bool) -> bool {
    let raft = &node.raft;
    let log = &raft.raft_log;
    let last = log.last_index();
    raft.state == StateRole::Leader
        && raft.lead_transferee.is_none()
        && !node.has_ready()
        && log.committed == last
        && log.applied == last
        && log.persisted == last
        && raft.pending_read_count() == 0
        && raft.prs().iter().all(|(id, p)| *id == raft.id || (p.matched == last && alive(*id)))
}

/// The quiesce heartbeats a leader sends before it stops ticking the group.
pub fn quiesce_messages(node: &RawNode<GroupStorage>) -> Vec<Message> {
    let raft = &node.raft;
    raft.prs()
        .iter()
        .filter(|(id, _)| **id != raft.id)
        .map(|(id, _)| {
            let mut message = Message::default();
            message.set_msg_type(MessageType::MsgHeartbeat);
            message.from = raft.id;
            message.to = *id;
            message.term = raft.term;
            message.commit = raft.raft_log.committed;
            message.context = QUIESCE.to_vec().into();
            message
        })
        .collect()
}

/// When this node last heard from each peer node, in ticks.
#[derive(Debug, Default)]
pub struct Liveness {
    peers: BTreeMap<NodeId, Peer>,
}

#[derive(Debug, Clone, Copy)]
struct Peer {
    heard: u64,
    alive: bool,
}

impl Liveness {
    /// Starts tracking `node` (a voter of some group here), alive as of `now`.
    pub fn track(&mut self, node: NodeId, now: u64) {
        self.peers.entry(node).or_insert(Peer { heard: now, alive: true });
    }

    /// Heard from `node` at tick `now`.
    pub fn heard(&mut self, node: NodeId, now: u64) {
        if let Some(peer) = self.peers.get_mut(&node) {
            *peer = Peer { heard: now, alive: true };
        }
    }

    /// `node` is known to be gone (its connection closed): taken for down now. Returns
    /// whether it was alive until now.
    pub fn lost(&mut self, node: NodeId) -> bool {
        match self.peers.get_mut(&node) {
            Some(peer) if peer.alive => {
                peer.alive = false;
                true
            }
            _ => false,
        }
    }

    pub fn alive(&self, node: NodeId) -> bool {
        self.peers.get(&node).is_none_or(|peer| peer.alive)
    }

    /// The peers not heard from for more than `timeout` ticks as of `now`, newly taken
    /// for down.
    pub fn expire(&mut self, now: u64, timeout: u64) -> Vec<NodeId> {
        let mut down = Vec::new();
        for (id, peer) in &mut self.peers {
            if peer.alive && now.saturating_sub(peer.heard) > timeout {
                peer.alive = false;
                down.push(*id);
            }
        }
        down
    }

    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.peers.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_peer_is_taken_for_down_once() {
        let mut liveness = Liveness::default();
        liveness.track(2, 0);
        liveness.track(3, 0);
        liveness.heard(2, 8);
        assert!(liveness.expire(10, 10).is_empty());
        assert_eq!(liveness.expire(11, 10), vec![3]);
        assert!(!liveness.alive(3));
        assert!(liveness.expire(12, 10).is_empty(), "reported once");
        liveness.heard(3, 13);
        assert!(liveness.alive(3));
        assert_eq!(liveness.expire(19, 10), vec![2]);
    }
}
