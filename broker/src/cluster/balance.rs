//! Where partition leadership sits: Kafka's preferred leaders on Raft.
//!
//! Kafka calls the first replica of a partition its **preferred leader**, and places
//! replicas so that the preferred leaders are spread over the brokers (Keel's
//! round-robin placement does the same, and a new partition's first replica campaigns
//! first). Failures undo the spread: a killed node's partitions move to the others and
//! stay there when it comes back. Kafka's controller moves them back
//! (`auto.leader.rebalance.enable`, checked every
//! `leader.imbalance.check.interval.seconds`), and `kafka-leader-election.sh` asks for it
//! at once (ElectLeaders).
//!
//! On Raft only a group's leader can hand its leadership over (raft-rs `transfer_leader`:
//! it brings the target up to date, then tells it to campaign at once), so here the
//! balancing runs where the leadership is:
//! - **automatic:** every shard, each `leader_imbalance_check_interval_ms`, looks at the
//!   groups it leads whose preferred replica is another node, and hands each to its
//!   preferred replica when that one is ready ([`ready_to_lead`]), at most
//!   [`TRANSFERS_PER_PASS_MAX`] per pass;
//! - **at creation:** Kafka's first leader of a new partition is its preferred replica.
//!   Here that replica campaigns at once, but its peers may not have started the group
//!   yet and refuse its votes, and then whichever voter's election timer fires first
//!   wins. So every [`FIRST_TERM_CHECK`] a shard also hands over the groups it leads in
//!   their first term (the preferred replica never led them), even with automatic
//!   balancing off;
//! - **asked for** (ElectLeaders, the admin API's leader endpoint): the asking node sends
//!   the group's leader a [`ControlRequest::MoveLeaders`] (or calls its own shard) and
//!   waits until the leadership it learns (`Shard::leaders`) shows the move, asking again
//!   every [`ASK_AGAIN`]; control messages have no replies, so the outcome is read from
//!   the leadership every node learns anyway.
//!
//! **No flapping.** A leader only ever moves a group to its preferred replica, which
//! never moves it away again, so balancing cannot cycle. And it moves a group only to a
//! voter that is in sync, not offline, and has every committed entry: a transfer to a
//! voter behind the leader holds proposals (raft-rs refuses them during a transfer) until
//! the voter caught up or the transfer timed out (one election timeout); a transfer to a
//! voter that is down holds them for that whole timeout. The commit-index test also
//! covers a new leader's first moments, when it counts every voter in sync (see
//! `keel_raft::in_sync`) but no voter it has not heard from has matched its term's first
//! entry.
//!
//! Leaders are balanced over shards as well as nodes: a partition is owned by the same
//! shard on every node, and placement spreads partitions over shards.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_raft::{GroupId, InSync, NodeId};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use uuid::Uuid;

use super::node_requests::HandLeadership;
use super::nodes::{partition_view, ControlRequest};
use crate::shard::partition::group_id;
use crate::shard::Shard;

/// Groups one shard hands over in one automatic pass; the rest wait for the next pass,
/// so a node coming back does not take all its leaderships in one burst.
pub const TRANSFERS_PER_PASS_MAX: usize = 64;
/// How often a waiting move asks the leader again (the request or the transfer may
/// have been lost, or the leader may have changed).
pub const ASK_AGAIN: Duration = Duration::from_millis(300);
/// How often a waiting move looks at the leadership it learned.
const WAIT_STEP: Duration = Duration::from_millis(20);
/// Shortest automatic check interval, whatever the configuration says.
const CHECK_INTERVAL_MIN: Duration = Duration::from_millis(100);
/// How often a shard looks for groups it leads in their first term.
pub const FIRST_TERM_CHECK: Duration = Duration::from_millis(500);

/// One leadership move a node asks of a group's leader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaderMove {
    pub topic: u128,
    pub partition: u32,
    pub to: i32,
}

/// Why a leader does not hand a group to a voter now.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    #[error("this node does not lead the group")]
    NotLeader,
    #[error("node {to} is not a voter of the group")]
    NotVoter { to: NodeId },
    #[error("node {to} is offline or not in sync")]
    NotInSync { to: NodeId },
    #[error("node {to} has entries up to {matched}, the commit index is {committed}")]
    Behind { to: NodeId, matched: u64, committed: u64 },
}

/// Whether voter `to` may take a group's leadership from its leader now: it is in sync,
/// not offline, and has every committed entry (`progress`: each voter's matched index).
pub fn ready_to_lead(to: NodeId, in_sync: &InSync, committed: u64, progress: &[(NodeId, u64)]) -> Result<(), Refusal> {
    let matched = progress.iter().find(|(id, _)| *id == to).map(|(_, m)| *m).ok_or(Refusal::NotVoter { to })?;
    if !in_sync.voters.contains(&to) || in_sync.offline.contains(&to) {
        return Err(Refusal::NotInSync { to });
    }
    if matched < committed {
        return Err(Refusal::Behind { to, matched, committed });
    }
    Ok(())
}

/// On the shard that owns `group`: hands its leadership to `to` if this node leads it
/// and `to` is ready.
pub fn hand_to(shard: &Shard, group: GroupId, to: NodeId) -> Result<(), Refusal> {
    let replication = shard.replication.as_ref().ok_or(Refusal::NotLeader)?;
    if to == replication.node {
        return Err(Refusal::NotLeader);
    }
    let in_sync = replication.in_sync(group).ok_or(Refusal::NotLeader)?;
    let (committed, progress) = replication.progress(group).ok_or(Refusal::NotLeader)?;
    ready_to_lead(to, &in_sync, committed, &progress)?;
    replication.transfer_leadership(group, to);
    Ok(())
}

/// Which groups a pass looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every group this shard leads.
    All,
    /// Only those in their first term.
    FirstTerm,
}

/// Starts this shard's balancing: groups in their first term always, all groups every
/// `leader_imbalance_check_interval_ms` unless `auto_leader_rebalance_enable` is off.
/// Nothing on a single node.
pub fn spawn(shard: &Rc<Shard>) {
    if shard.replication.is_none() {
        return;
    }
    let automatic = shard.config.auto_leader_rebalance_enable;
    let interval = Duration::from_millis(shard.config.leader_imbalance_check_interval_ms).max(CHECK_INTERVAL_MIN);
    let me = Rc::downgrade(shard);
    glommio::spawn_local(async move {
        let mut last_full = Instant::now();
        loop {
            glommio::timer::sleep(FIRST_TERM_CHECK.min(interval)).await;
            let Some(shard) = me.upgrade() else { return };
            let full = automatic && last_full.elapsed() >= interval;
            if full {
                last_full = Instant::now();
            }
            let moved = balance_pass(&shard, if full { Scope::All } else { Scope::FirstTerm });
            if moved > 0 {
                tracing::info!(shard = shard.id, moved, "handing leaderships to their preferred replicas");
            }
        }
    })
    .detach();
}

/// One pass: hands groups of `scope` this shard leads to their ready preferred
/// replicas. Returns how many transfers it started.
fn balance_pass(shard: &Shard, scope: Scope) -> usize {
    let Some(replication) = &shard.replication else { return 0 };
    let meta = shard.meta();
    let mut partitions: Vec<_> = shard
        .partitions
        .borrow()
        .values()
        .filter(|p| {
            p.replica
                .as_ref()
                .is_some_and(|r| r.leader() == Some(replication.node) && (scope == Scope::All || r.epoch() == 1))
        })
        .cloned()
        .collect();
    partitions.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    let mut moved = 0;
    for p in partitions {
        if moved >= TRANSFERS_PER_PASS_MAX {
            break;
        }
        let Some(replica) = &p.replica else { continue };
        let topic = meta.topics.get(&p.topic);
        if topic.is_some_and(|t| t.target_of(p.index).is_some()) {
            // A reassignment moves this group (`reassign`).
            continue;
        }
        let preferred = topic.and_then(|t| t.replicas_of(p.index)).and_then(|r| r.first());
        let Some(preferred) = preferred.and_then(|n| NodeId::try_from(*n).ok()) else { continue };
        if preferred == replication.node || !replication.leads(replica.group) {
            continue;
        }
        match hand_to(shard, replica.group, preferred) {
            Ok(()) => moved += 1,
            Err(refusal) => tracing::debug!(group = %replica.group, %refusal, "leadership stays"),
        }
    }
    moved
}

/// What became of one asked-for move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// The target leads the partition now.
    Done,
    /// It already did.
    AlreadyLeads,
}

/// Why an asked-for move did not happen.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MoveError {
    #[error("no such partition")]
    Unknown,
    #[error("the partition is not replicated: its one replica leads it")]
    NotReplicated,
    #[error("node {to} is not a replica of the partition")]
    NotAReplica { to: i32 },
    #[error("the partition has no leader now")]
    NoLeader,
    #[error("replica {to} is offline or not in sync")]
    NotInSync { to: i32 },
    #[error("replica {to} did not take the leadership in time")]
    TimedOut { to: i32 },
}

/// A move to carry out: the partition and the replica to lead it.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub topic: String,
    pub partition: i32,
    /// `None`: the preferred replica.
    pub to: Option<i32>,
}

/// Moves each partition's leadership to the replica wanted, from any node: asks each
/// partition's leader, then waits (at most `wait`) until every move shows in the
/// leadership this node learns. Answers in `wanted`'s order.
pub async fn move_leaders(shard: &Rc<Shard>, wanted: Vec<Wanted>, wait: Duration) -> Vec<Result<Moved, MoveError>> {
    let deadline = Instant::now() + wait;
    let mut answers: Vec<Option<Result<Moved, MoveError>>> = Vec::with_capacity(wanted.len());
    let mut pending: Vec<(usize, GroupId, i32)> = Vec::new();
    for w in &wanted {
        match check(shard, w) {
            Ok(Some((group, to))) => {
                pending.push((answers.len(), group, to));
                answers.push(None);
            }
            Ok(None) => answers.push(Some(Ok(Moved::AlreadyLeads))),
            Err(e) => answers.push(Some(Err(e))),
        }
    }
    let mut asked: Option<Instant> = None;
    while !pending.is_empty() {
        pending.retain(|(slot, group, to)| {
            let leads = shard.leaders.borrow().get(group).is_some_and(|k| k.leader == *to);
            if leads {
                answers[*slot] = Some(Ok(Moved::Done));
            }
            !leads
        });
        if pending.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for (slot, _, to) in pending.drain(..) {
                answers[slot] = Some(Err(MoveError::TimedOut { to }));
            }
            break;
        }
        if asked.is_none_or(|at| at.elapsed() >= ASK_AGAIN) {
            asked = Some(Instant::now());
            ask_leaders(shard, &pending).await;
        }
        glommio::timer::sleep(WAIT_STEP).await;
    }
    answers.into_iter().map(|a| a.expect("every move answered")).collect()
}

/// Checks one wanted move against what this node knows: `None` when the target leads
/// already, else the group and the target to wait for.
fn check(shard: &Shard, w: &Wanted) -> Result<Option<(GroupId, i32)>, MoveError> {
    let meta = shard.meta();
    let topic = meta.topics.get(&w.topic).ok_or(MoveError::Unknown)?;
    if w.partition < 0 || w.partition as usize >= topic.partitions.len() {
        return Err(MoveError::Unknown);
    }
    let Some(view) = partition_view(shard, topic, w.partition) else {
        return match w.to {
            None => Ok(None),
            Some(to) if to == shard.config.node_id => Ok(None),
            Some(to) => Err(MoveError::NotAReplica { to }),
        };
    };
    let to = w.to.or_else(|| view.replicas.first().map(|b| b.0)).ok_or(MoveError::NotReplicated)?;
    if !view.replicas.iter().any(|b| b.0 == to) {
        return Err(MoveError::NotAReplica { to });
    }
    if view.leader == to {
        return Ok(None);
    }
    if view.leader < 0 {
        return Err(MoveError::NoLeader);
    }
    if !view.in_sync.iter().any(|b| b.0 == to) || view.offline.iter().any(|b| b.0 == to) {
        return Err(MoveError::NotInSync { to });
    }
    Ok(Some((group_id(topic.id, w.partition), to)))
}

/// Asks the current leader of each pending group to hand it over: this node's owner
/// shard directly, other nodes with one control message each.
async fn ask_leaders(shard: &Rc<Shard>, pending: &[(usize, GroupId, i32)]) {
    let me = shard.config.node_id;
    let mut by_leader: std::collections::BTreeMap<i32, Vec<LeaderMove>> = Default::default();
    for (_, group, to) in pending {
        let Some(leader) = shard.leaders.borrow().get(group).map(|k| k.leader).filter(|l| *l >= 0) else { continue };
        by_leader.entry(leader).or_default().push(LeaderMove {
            topic: group.topic,
            partition: group.partition,
            to: *to,
        });
    }
    for (leader, moves) in by_leader {
        if leader == me {
            serve_moves(shard, moves).await;
            continue;
        }
        let payload = Bytes::from(serde_json::to_vec(&ControlRequest::MoveLeaders { moves }).expect("serializes"));
        if let Some(replication) = &shard.replication {
            replication.transport().send_control(leader as u64, 0, payload);
        }
    }
}

/// On a node asked to move leaderships (any shard): each move goes to the shard that
/// owns the partition, which hands the group over if it leads it and the target is ready.
pub async fn serve_moves(shard: &Rc<Shard>, moves: Vec<LeaderMove>) {
    let meta = shard.meta();
    for m in moves {
        let Some(name) = meta.topic_name(&Uuid::from_u128(m.topic)) else { continue };
        let (Ok(partition), Ok(to)) = (i32::try_from(m.partition), NodeId::try_from(m.to)) else { continue };
        let Some(owner) = meta.owner(name, partition) else { continue };
        let group = GroupId { topic: m.topic, partition: m.partition };
        let handed = shard.call(owner, HandLeadership { group, to }).await;
        if let Err(refusal) = handed {
            tracing::debug!(%group, to, %refusal, "an asked-for leadership move is refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_sync(voters: &[NodeId], offline: &[NodeId]) -> InSync {
        InSync { voters: voters.to_vec(), offline: offline.to_vec() }
    }

    #[test]
    fn only_an_in_sync_voter_with_every_committed_entry_may_lead() {
        let progress = [(1, 10), (2, 10), (3, 7)];
        let all = in_sync(&[1, 2, 3], &[]);
        assert_eq!(ready_to_lead(2, &all, 10, &progress), Ok(()));
        assert_eq!(ready_to_lead(3, &all, 10, &progress), Err(Refusal::Behind { to: 3, matched: 7, committed: 10 }));
        assert_eq!(ready_to_lead(4, &all, 10, &progress), Err(Refusal::NotVoter { to: 4 }));
        assert_eq!(ready_to_lead(2, &in_sync(&[1, 3], &[]), 10, &progress), Err(Refusal::NotInSync { to: 2 }));
        assert_eq!(ready_to_lead(2, &in_sync(&[1, 2, 3], &[2]), 10, &progress), Err(Refusal::NotInSync { to: 2 }));
    }

    #[test]
    fn a_voter_a_new_leader_has_not_heard_from_is_behind() {
        // A new leader counts every voter in sync, but it appended an entry of its
        // own term that a silent voter has not matched.
        let progress = [(1, 5), (2, 5), (3, 0)];
        let refused = ready_to_lead(3, &in_sync(&[1, 2, 3], &[]), 5, &progress);
        assert!(matches!(refused, Err(Refusal::Behind { to: 3, .. })), "{refused:?}");
    }
}
