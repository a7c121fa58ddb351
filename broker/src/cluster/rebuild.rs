//! Rebuilding a damaged replica from its leader.
//!
//! A replica whose log failed a CRC check (the Raft restore or the scrub after a
//! restart, a read while serving, or the replica, leading, reading entries back for a
//! slow follower, `take_out_when_damaged`), or lost records a checkpoint had made durable (a
//! segment cut short, `PartitionLog::damaged_at_open`), leaves its group on its node
//! at once, or never starts it, and answers KAFKA_STORAGE_ERROR
//! (`Partition::set_damaged`). Left so, the partition would run on one replica fewer
//! for good, and lose its majority at the next failure. So the node asks the
//! controller to rebuild it, again every [`REPEAT`] while it stays damaged (the
//! controller may be unknown yet, change, or be busy with another move of the
//! partition):
//!
//! 1. the controller records the replicas to restore and starts a reassignment to
//!    the other replicas (`controller::rebuild_replica`); the leader removes the
//!    damaged replica from its group (`reassign`), so no quorum counts what it had
//!    acknowledged any more;
//! 2. once that change is committed, the controller starts a second reassignment, back
//!    to the original replicas in their order (`controller::complete_reassignment`);
//! 3. the damaged node sees it is no longer one of the partition's replicas, and the
//!    rebuild recorded: it deletes its copy and opens the partition again, empty,
//!    keeping only the group's term and vote, so it never votes twice in a term
//!    ([`Replication::reset_for_rebuild`], from `Shard::apply_metadata`). The reset is
//!    marked with the rebuild's id in the group's record, durably: a node restarted
//!    at any point of the rebuild resets a copy from before it (opened or not) and
//!    never the new one;
//! 4. the leader adds it as a learner, sends it a snapshot of its log and the rest,
//!    and makes it a voter again once it has caught up, as for any new replica.
//!
//! Raft is safe throughout: the replica that lost entries votes and counts toward a
//! commit only after it was taken out and brought back as a new member with an empty
//! log. A partition with two damaged replicas of three cannot commit the first
//! change, and waits (as it would for any majority lost).

use std::rc::{Rc, Weak};
use std::time::Duration;

use keel_raft::GroupId;

use super::nodes::{ask_controller, ControlRequest};
use crate::replication::shell::Replication;
use crate::shard::Shard;

/// How soon a node asks again for a replica that is still damaged: the first asks, at
/// start-up, may go out before the node knows the controller (every node gets them,
/// and only the controller acts on them), then every second. An ask for a partition
/// already moving is ignored, so repeats cost one small message each. (Every 3 s, 7
/// of 37 rebuilds in a 30-minute run took 4.6–5.0 s: the first two asks unheard.)
const FIRST_REPEAT: Duration = Duration::from_millis(500);
const REPEAT: Duration = Duration::from_secs(1);

/// Asks the controller to rebuild this node's replica of `topic`'s partition `index`
/// (Raft group `group`), then again while the replica open there stays damaged.
pub fn ask(shard: Weak<Shard>, topic: String, index: i32, group: GroupId) {
    glommio::spawn_local(async move {
        let mut wait = FIRST_REPEAT;
        loop {
            let Some(s) = shard.upgrade() else { return };
            let node = s.config.node_id;
            ask_controller(&s, ControlRequest::Rebuild { topic: group.topic, partition: group.partition, node }).await;
            drop(s);
            glommio::timer::sleep(wait).await;
            wait = REPEAT;
            let Some(s) = shard.upgrade() else { return };
            if !s.partition(&topic, index).is_some_and(|p| p.is_damaged()) {
                return;
            }
        }
    })
    .detach();
}

/// Has the shard take out a replica whose log the shell finds damaged while it runs
/// (reading entries back for a slow voter), as a client read that meets one does.
pub fn take_out_when_damaged(shard: &Rc<Shard>, replication: &Replication) {
    let shard = Rc::downgrade(shard);
    replication.on_damaged(Box::new(move |group, why| {
        let Some(shard) = shard.upgrade() else { return };
        let damaged =
            shard.partitions.borrow().values().find(|p| p.replica.as_ref().is_some_and(|r| r.group == group)).cloned();
        if let Some(p) = damaged {
            p.set_damaged(&shard, why);
        }
    }));
}
