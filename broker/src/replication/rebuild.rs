//! Rebuilding a damaged replica from its leader.
//!
//! A replica whose log failed a CRC check (the scrub after a restart, or a read while
//! serving) leaves its group on its node at once and answers KAFKA_STORAGE_ERROR
//! (`Partition::set_damaged`). Left so, the partition would run on one replica fewer
//! for good, and lose its majority at the next failure. So the node asks the
//! controller to rebuild it, again every [`REPEAT`] while it stays damaged (the
//! controller may change, or be busy with another move of the partition):
//!
//! 1. the controller records the replicas to restore and starts a reassignment to
//!    the other replicas (`controller::rebuild_replica`); the leader removes the
//!    damaged replica from its group (`reassign`), so no quorum counts what it had
//!    acknowledged any more;
//! 2. once that change is committed, the controller starts a second reassignment, back
//!    to the original replicas in their order (`controller::complete_reassignment`);
//! 3. the damaged node sees it is no longer one of the partition's replicas but one of
//!    its targets: it deletes its copy and opens the partition again, empty, keeping
//!    only the group's term and vote ([`Replication::keep_vote_only`]), so it never
//!    votes twice in a term; `Shard::apply_metadata` does this;
//! 4. the leader adds it as a learner, sends it a snapshot of its log and the rest,
//!    and makes it a voter again once it has caught up, as for any new replica.
//!
//! Raft is safe throughout: the replica that lost entries votes and counts toward a
//! commit only after it was taken out and brought back as a new member with an empty
//! log. A partition with two damaged replicas of three cannot commit the first
//! change, and waits (as it would for any majority lost).

use std::rc::Weak;
use std::time::Duration;

use keel_raft::GroupId;

use super::cluster::{ask_controller, ControlRequest};
use super::raft_log::GroupRecord;
use super::shell::{Replica, Replication};
use crate::shard::Shard;

/// How often a node asks again for a replica that is still damaged.
const REPEAT: Duration = Duration::from_secs(3);

/// Asks the controller to rebuild this node's replica of `topic`'s partition `index`
/// (Raft group `group`), then again while the replica open there stays damaged.
pub fn ask(shard: Weak<Shard>, topic: String, index: i32, group: GroupId) {
    glommio::spawn_local(async move {
        loop {
            let Some(s) = shard.upgrade() else { return };
            let node = s.config.node_id;
            ask_controller(&s, ControlRequest::Rebuild { topic: group.topic, partition: group.partition, node }).await;
            drop(s);
            glommio::timer::sleep(REPEAT).await;
            let Some(s) = shard.upgrade() else { return };
            if !s.partition(&topic, index).is_some_and(|p| p.is_damaged()) {
                return;
            }
        }
    })
    .detach();
}

impl Replication {
    /// Replaces a damaged replica's record by one that keeps only its term and vote:
    /// the replica opened next starts with an empty log and no members, and waits for
    /// its leader to add it.
    pub async fn keep_vote_only(&self, r: &Replica) -> Result<(), String> {
        let record = {
            let old = r.record.borrow();
            GroupRecord { term: old.term, vote: old.vote, ..Default::default() }
        };
        self.write_record(r.group, &record).await
    }
}
