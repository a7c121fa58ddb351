//! A KIP-848 consumer group (ConsumerGroupHeartbeat) as a pure state machine.
//!
//! The coordinator, not a client leader, owns the assignment: every change of a
//! member's subscription, of the members, or of the subscribed topics' partitions
//! bumps the **group epoch**; the server-side assignor then computes a **target
//! assignment** for that epoch. Each member converges to its target on its own
//! heartbeats (Kafka's CurrentAssignmentBuilder): first it is asked to revoke what it
//! must give up (keeping its member epoch), and only once its heartbeat shows those
//! partitions released does it move to the target epoch and receive new partitions —
//! and only partitions no other member still holds. So a partition is never owned by
//! two members, without any group-wide barrier.
//!
//! Time enters as `now_ms`; topic metadata through [`TopicLookup`]; the shell persists
//! the group epoch and answers requests.

mod heartbeat;
mod view;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

pub use super::assignor::Assignment;
use super::membership::{MembershipChange, Reason};
pub use heartbeat::{HeartbeatRequest, HeartbeatResponse, Settings};
pub use view::{DescribedConsumerGroup, DescribedConsumerMember};

/// Heartbeat interval given to a member while it converges, so it picks up released
/// partitions quickly instead of one full interval later.
pub const RECONCILING_HEARTBEAT_INTERVAL_MS: i32 = 250;

/// Topic metadata as the group needs it.
pub trait TopicLookup {
    /// (topic id, partition count)
    fn topic_by_name(&self, name: &str) -> Option<(Uuid, i32)>;
    fn topic_name(&self, id: &Uuid) -> Option<String>;
    /// Every topic's name (internal ones too, as Kafka matches regexes against them).
    fn topic_names(&self) -> Vec<String>;
    /// Changes whenever the topics may have: regexes are matched again then.
    fn version(&self) -> u64;
}

impl TopicLookup for crate::metadata::Metadata {
    fn topic_by_name(&self, name: &str) -> Option<(Uuid, i32)> {
        self.topics.get(name).map(|t| (t.id, t.partitions.len() as i32))
    }
    fn topic_name(&self, id: &Uuid) -> Option<String> {
        crate::metadata::Metadata::topic_name(self, id).map(str::to_string)
    }
    fn topic_names(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }
    fn version(&self) -> u64 {
        self.version
    }
}

/// A subscribed regular expression and the topics it matched at a metadata version
/// (`None`: not matched yet).
struct Resolved {
    regex: regex::Regex,
    version: Option<u64>,
    topics: BTreeSet<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// At the target epoch with its whole target assignment.
    Stable,
    /// Must first revoke `revoking`; keeps its old epoch meanwhile.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    /// The topic names the member subscribed to by name.
    pub subscribed: BTreeSet<String>,
    /// The member's SubscribedTopicRegex (KIP-848: matched by the coordinator against
    /// whole topic names), and the topics it matches now.
    pub regex: Option<String>,
    pub matched: BTreeSet<String>,
    pub server_assignor: Option<String>,
    pub epoch: i32,
    previous_epoch: i32,
    pub state: MemberState,
    pub assigned: Assignment,
    revoking: Assignment,
    session_deadline_ms: i64,
    revocation_deadline_ms: Option<i64>,
}

impl ConsumerMember {
    /// What the member subscribes to: its topic names and its regex's matches.
    pub fn topics(&self) -> BTreeSet<String> {
        self.subscribed.union(&self.matched).cloned().collect()
    }
}

pub struct ConsumerGroup {
    pub id: String,
    /// Bumped by every change the assignment depends on.
    epoch: i32,
    /// Epoch of the current target assignment.
    target_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    target: BTreeMap<String, Assignment>,
    /// Who holds each partition (assigned, or still revoking it).
    owners: HashMap<(Uuid, i32), String>,
    /// Subscribed topic (by name or regex) → members subscribing to it.
    subscriptions: BTreeMap<String, usize>,
    /// The members' regexes, each resolved once for the group.
    regexes: BTreeMap<String, Resolved>,
    /// The subscribed topics' (id, partitions) the target was computed from.
    topics_seen: BTreeMap<String, Option<(Uuid, i32)>>,
    static_members: HashMap<String, String>,
    assignor: String,
    state_name: &'static str,
    state_since_ms: i64,
    /// Members added and removed since the shell last took them.
    changes: Vec<MembershipChange>,
}

impl ConsumerGroup {
    pub fn new(id: &str, now_ms: i64) -> ConsumerGroup {
        ConsumerGroup::with_epoch(id, 0, now_ms)
    }

    /// A group known from its persisted epoch, without members (they rejoin).
    pub fn with_epoch(id: &str, epoch: i32, now_ms: i64) -> ConsumerGroup {
        ConsumerGroup {
            id: id.to_string(),
            epoch,
            target_epoch: epoch,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            owners: HashMap::new(),
            subscriptions: BTreeMap::new(),
            regexes: BTreeMap::new(),
            topics_seen: BTreeMap::new(),
            static_members: HashMap::new(),
            assignor: super::assignor::UNIFORM.to_string(),
            state_name: "Empty",
            state_since_ms: now_ms,
            changes: Vec::new(),
        }
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn members(&self) -> impl Iterator<Item = &ConsumerMember> {
        self.members.values()
    }

    pub fn state_name(&self) -> &'static str {
        self.state_name
    }

    pub fn state_since_ms(&self) -> i64 {
        self.state_since_ms
    }

    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.subscriptions.keys().cloned().collect()
    }

    /// Kafka's state: Empty, Assigning (target behind the group epoch), Reconciling
    /// (some member not yet at its target), Stable.
    fn compute_state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.target_epoch < self.epoch {
            "Assigning"
        } else if self.members.values().any(|m| m.state != MemberState::Stable || m.epoch != self.target_epoch) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn refresh_state(&mut self, now_ms: i64) {
        let s = self.compute_state();
        if s != self.state_name {
            self.state_name = s;
            self.state_since_ms = now_ms;
        }
    }

    fn subscribe(&mut self, topics: &BTreeSet<String>) {
        for t in topics {
            *self.subscriptions.entry(t.clone()).or_default() += 1;
        }
    }

    fn unsubscribe(&mut self, topics: &BTreeSet<String>) {
        for t in topics {
            if let Some(n) = self.subscriptions.get_mut(t) {
                *n -= 1;
                if *n == 0 {
                    self.subscriptions.remove(t);
                }
            }
        }
    }

    /// The members added and removed since the last call, for the shell to log and count.
    pub fn take_changes(&mut self) -> Vec<MembershipChange> {
        std::mem::take(&mut self.changes)
    }

    fn report(&mut self, member_id: &str, reason: Reason) {
        let change = MembershipChange {
            member_id: member_id.to_string(),
            reason,
            generation: self.epoch,
            members: self.members.len(),
        };
        self.changes.push(change);
    }

    /// Removes a member and frees what it held; the caller bumps the epoch.
    fn remove_member(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let m = self.members.remove(member_id)?;
        self.unsubscribe(&m.topics());
        for (t, parts) in m.assigned.iter().chain(m.revoking.iter()) {
            for p in parts {
                if self.owners.get(&(*t, *p)).map(String::as_str) == Some(member_id) {
                    self.owners.remove(&(*t, *p));
                }
            }
        }
        self.target.remove(member_id);
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        Some(m)
    }

    /// Members whose session or revocation deadline passed are removed; true if the
    /// group epoch moved (the shell persists it).
    pub fn tick(&mut self, now_ms: i64) -> bool {
        let expired: Vec<(String, Reason)> = self
            .members
            .values()
            .filter_map(|m| {
                if m.session_deadline_ms <= now_ms {
                    Some((m.id.clone(), Reason::SessionExpired))
                } else if m.revocation_deadline_ms.is_some_and(|d| d <= now_ms) {
                    Some((m.id.clone(), Reason::RevocationTimeout))
                } else {
                    None
                }
            })
            .collect();
        for (id, reason) in &expired {
            self.remove_member(id);
            self.report(id, *reason);
        }
        if !expired.is_empty() {
            self.epoch += 1;
            self.refresh_state(now_ms);
        }
        !expired.is_empty()
    }
}

/// `a ∩ b` and `a − b` over assignments.
fn split(a: &Assignment, b: &Assignment) -> (Assignment, Assignment) {
    let (mut both, mut only) = (Assignment::new(), Assignment::new());
    for (t, parts) in a {
        for p in parts {
            let side = if b.get(t).is_some_and(|s| s.contains(p)) { &mut both } else { &mut only };
            side.entry(*t).or_default().insert(*p);
        }
    }
    (both, only)
}

fn intersects(a: &Assignment, b: &Assignment) -> bool {
    a.iter().any(|(t, parts)| b.get(t).is_some_and(|o| !o.is_disjoint(parts)))
}
