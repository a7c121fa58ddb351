//! Reassignment on Raft: a partition's leader changes its group's members to the
//! replicas a reassignment names (Kafka's AlterPartitionReassignments).
//!
//! The controller only records the target replicas (`controller::reassign`); every node
//! named by the partition's replicas or by the target keeps a replica of it, a new one
//! starting with no members and waiting for its leader. The leader then moves the
//! group, one membership change at a time (raft-rs takes one at a time), checking every
//! [`CHECK`]:
//! 1. the new replicas join as **learners**: they receive the log (a snapshot, then
//!    appends) but do not vote, so a slow copy never holds commits back;
//! 2. once every learner has caught up (it has every entry committed at the previous
//!    check, Kafka's rule for joining the ISR), one **joint** change (Raft's joint
//!    consensus, `ConfChangeV2`) makes them voters and removes the replicas leaving,
//!    apart from the leader itself; raft-rs leaves the joint configuration by itself;
//! 3. a leader that is leaving first hands its leadership to a replica that stays, and
//!    the new leader removes it;
//! 4. when the members are exactly the target, the leader tells the controller, which
//!    makes them the partition's replicas (`controller::complete_reassignment`); the
//!    nodes left out then remove their replica.
//!
//! Every step is read from the group's applied configuration, so a new leader after a
//! failover goes on from wherever the move stood. A cancelled reassignment moves the
//! target back to the original replicas, and the same steps restore them.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use keel_raft::{ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, GroupId, NodeId};

use super::balance;
use super::nodes::{ask_controller, ControlRequest};
use crate::shard::Shard;

/// How often each shard looks at the reassignments of the groups it leads.
const CHECK: Duration = Duration::from_millis(250);

/// What one check did for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Wait,
    AddLearners(Vec<NodeId>),
    Joint { add: Vec<NodeId>, remove: Vec<NodeId> },
    HandOver,
    Remove(Vec<NodeId>),
    Complete(Vec<NodeId>),
}

/// Starts this shard's reassignment checks (nothing on a single node).
pub fn spawn(shard: &Rc<Shard>) {
    if shard.replication.is_none() {
        return;
    }
    let me = Rc::downgrade(shard);
    glommio::spawn_local(async move {
        // Each group's commit index at the previous check.
        let mut committed_before: BTreeMap<GroupId, u64> = BTreeMap::new();
        loop {
            glommio::timer::sleep(CHECK).await;
            let Some(shard) = me.upgrade() else { return };
            check(&shard, &mut committed_before).await;
        }
    })
    .detach();
}

async fn check(shard: &Rc<Shard>, committed_before: &mut BTreeMap<GroupId, u64>) {
    let Some(replication) = shard.replication.clone() else { return };
    let meta = shard.meta();
    let moving: Vec<(GroupId, Vec<i32>)> = shard
        .partitions
        .borrow()
        .values()
        .filter_map(|p| {
            let target = meta.topics.get(&p.topic)?.target_of(p.index)?.to_vec();
            let group = p.replica.as_ref()?.group;
            replication.leads(group).then_some((group, target))
        })
        .collect();
    committed_before.retain(|g, _| moving.iter().any(|(m, _)| m == g));
    for (group, target) in moving {
        let Some((conf, pending)) = replication.conf(group) else { continue };
        let Some((committed, progress)) = replication.progress(group) else { continue };
        let before = committed_before.insert(group, committed).unwrap_or(u64::MAX);
        let target: Vec<NodeId> = target.iter().filter_map(|n| NodeId::try_from(*n).ok()).collect();
        let caught_up = |node: NodeId| progress.iter().any(|(id, matched)| *id == node && *matched >= before);
        let step = if pending || !conf.voters_outgoing.is_empty() {
            Step::Wait
        } else {
            next_step(replication.node, &target, &conf.voters, &conf.learners, caught_up)
        };
        let proposed = match &step {
            Step::Wait => Ok(()),
            Step::AddLearners(nodes) => {
                replication.propose_conf_change(group, change(nodes, ConfChangeType::AddLearnerNode, &[]))
            }
            Step::Joint { add, remove } => {
                replication.propose_conf_change(group, change(add, ConfChangeType::AddNode, remove))
            }
            Step::Remove(nodes) => replication.propose_conf_change(group, change(&[], ConfChangeType::AddNode, nodes)),
            Step::HandOver => {
                let to = target.iter().find(|t| balance::hand_to(shard, group, **t).is_ok());
                if to.is_none() {
                    tracing::debug!(%group, "no staying replica is ready to lead yet");
                }
                Ok(())
            }
            Step::Complete(members) => {
                let members = members.iter().map(|n| *n as i32).collect();
                let request =
                    ControlRequest::ReassignmentDone { topic: group.topic, partition: group.partition, members };
                ask_controller(shard, request).await;
                Ok(())
            }
        };
        match proposed {
            Ok(()) if step != Step::Wait => tracing::info!(%group, ?step, "reassignment step"),
            Ok(()) => {}
            Err((_, why)) => tracing::debug!(%group, ?step, %why, "reassignment step refused; trying again"),
        }
    }
}

/// The next membership change moving a group with `voters` and `learners`, led by
/// `leader`, to `target` (see the module doc). `caught_up` tells whether a learner has
/// every entry committed at the previous check.
fn next_step(
    leader: NodeId,
    target: &[NodeId],
    voters: &[NodeId],
    learners: &[NodeId],
    caught_up: impl Fn(NodeId) -> bool,
) -> Step {
    let target: BTreeSet<NodeId> = target.iter().copied().collect();
    let voters: BTreeSet<NodeId> = voters.iter().copied().collect();
    let learners: BTreeSet<NodeId> = learners.iter().copied().collect();
    let missing: Vec<NodeId> =
        target.iter().filter(|n| !voters.contains(n) && !learners.contains(n)).copied().collect();
    if !missing.is_empty() {
        return Step::AddLearners(missing);
    }
    let promote: Vec<NodeId> = learners.intersection(&target).copied().collect();
    if !promote.is_empty() {
        if !promote.iter().all(|n| caught_up(*n)) {
            return Step::Wait;
        }
        let remove = voters.iter().filter(|n| !target.contains(n) && **n != leader).copied().collect();
        return Step::Joint { add: promote, remove };
    }
    if !target.contains(&leader) {
        return Step::HandOver;
    }
    let remove: Vec<NodeId> = voters.union(&learners).filter(|n| !target.contains(n)).copied().collect();
    if !remove.is_empty() {
        return Step::Remove(remove);
    }
    Step::Complete(voters.into_iter().collect())
}

/// One membership change: `add` with `kind`, and `remove` removed. raft-rs makes it
/// a simple change when it can, or a joint one it leaves by itself.
fn change(add: &[NodeId], kind: ConfChangeType, remove: &[NodeId]) -> ConfChangeV2 {
    let single = |change_type, node_id| ConfChangeSingle { change_type, node_id, ..Default::default() };
    let mut changes: Vec<ConfChangeSingle> = add.iter().map(|n| single(kind, *n)).collect();
    changes.extend(remove.iter().map(|n| single(ConfChangeType::RemoveNode, *n)));
    ConfChangeV2 { changes: changes.into(), transition: ConfChangeTransition::Auto, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_adds_learners_then_swaps_in_one_joint_change_then_hands_over() {
        let yes = |_| true;
        // {1,2,3} led by 1 moves to {2,3,4}.
        assert_eq!(next_step(1, &[2, 3, 4], &[1, 2, 3], &[], yes), Step::AddLearners(vec![4]));
        assert_eq!(next_step(1, &[2, 3, 4], &[1, 2, 3], &[4], |_| false), Step::Wait);
        assert_eq!(next_step(1, &[2, 3, 4], &[1, 2, 3], &[4], yes), Step::Joint { add: vec![4], remove: vec![] });
        assert_eq!(next_step(1, &[2, 3, 4], &[1, 2, 3, 4], &[], yes), Step::HandOver);
        assert_eq!(next_step(2, &[2, 3, 4], &[1, 2, 3, 4], &[], yes), Step::Remove(vec![1]));
        assert_eq!(next_step(2, &[2, 3, 4], &[2, 3, 4], &[], yes), Step::Complete(vec![2, 3, 4]));
        // A leader that stays removes the leaving voter in the joint change.
        assert_eq!(next_step(2, &[2, 3, 4], &[1, 2, 3], &[4], yes), Step::Joint { add: vec![4], remove: vec![1] });
        // A cancelled move drops the learners it added.
        assert_eq!(next_step(1, &[1, 2, 3], &[1, 2, 3], &[4], yes), Step::Remove(vec![4]));
    }
}
