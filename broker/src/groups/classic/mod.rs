//! A classic-protocol group (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as a pure
//! state machine: every event takes the current time as `now_ms` and pushes the
//! [`Action`]s the I/O shell must carry out (answer a parked JoinGroup or SyncGroup,
//! persist the group). Nothing here sleeps, sends or writes, so every rebalance path is
//! unit-tested without sockets or clocks.
//!
//! It follows Kafka's classic group coordinator rule for rule, because clients depend on
//! the exact error codes: states Empty → PreparingRebalance → CompletingRebalance →
//! Stable (and Dead), required member ids (KIP-394), static membership (KIP-345) with
//! fencing of a replaced instance, the initial rebalance delay, rebalance and session
//! timeouts, the pending-sync timeout, and protocol selection by member votes.
//! Incremental cooperative rebalancing needs nothing extra from the coordinator: the
//! clients run it over ordinary generations.
//!
//! `join`, `sync_group` and the timers live in [`rebalance`]; views, offset-commit checks
//! and persistence in [`view`].

mod rebalance;
mod view;

#[cfg(test)]
mod simulation_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use indexmap::IndexMap;

use super::membership::{MembershipChange, Reason};

pub use view::DescribedMember;

/// How long a new member's parked JoinGroup may wait before it is dropped (Kafka's
/// `group.classic.new.member.join.timeout.ms`).
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassicState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl ClassicState {
    pub fn name(self) -> &'static str {
        match self {
            ClassicState::Empty => "Empty",
            ClassicState::PreparingRebalance => "PreparingRebalance",
            ClassicState::CompletingRebalance => "CompletingRebalance",
            ClassicState::Stable => "Stable",
            ClassicState::Dead => "Dead",
        }
    }
}

/// Broker settings a group obeys.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub session_timeout_min_ms: i32,
    pub session_timeout_max_ms: i32,
    pub initial_rebalance_delay_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, Default)]
pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    /// JoinGroup v4+: a new dynamic member first receives its id with MEMBER_ID_REQUIRED.
    pub require_known_member_id: bool,
    /// JoinGroup v9+: a static leader rejoining a stable group may skip the assignment.
    pub supports_skip_assignment: bool,
    /// The id given to a new member, made by the caller (which owns randomness).
    pub new_member_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    pub members: Vec<JoinMember>,
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(code: i16, member_id: &str) -> JoinResult {
        JoinResult { error: code, generation: -1, member_id: member_id.to_string(), ..Default::default() }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum JoinOutcome {
    Done(JoinResult),
    /// The response is parked: an [`Action::CompleteJoin`] for this member answers it.
    Wait {
        member_id: String,
    },
}

#[derive(Debug, Clone, Default)]
pub struct SyncRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(code: i16) -> SyncResult {
        SyncResult { error: code, ..Default::default() }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    Done(SyncResult),
    Wait { member_id: String },
}

/// What the shell must do after an event, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    CompleteJoin {
        member_id: String,
        result: JoinResult,
    },
    CompleteSync {
        member_id: String,
        result: SyncResult,
    },
    /// Write the group's metadata record. With `assignment_of`, report the outcome with
    /// [`ClassicGroup::assignment_persisted`] for that generation.
    Persist {
        assignment_of: Option<i32>,
    },
    /// A member entered or left the group: log and count it.
    Membership(MembershipChange),
}

#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    awaiting_join: bool,
    awaiting_sync: bool,
    /// Joined but not yet through a completed join phase: its parked join can expire.
    is_new: bool,
    heartbeat_deadline_ms: i64,
}

impl Member {
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|p| p.name == protocol).map(|p| p.metadata.clone()).unwrap_or_default()
    }

    /// Members parked in a rebalance need no heartbeat; the rebalance timeout covers them.
    fn session_expired(&self, now_ms: i64) -> bool {
        self.heartbeat_deadline_ms <= now_ms && (self.is_new || !(self.awaiting_join || self.awaiting_sync))
    }
}

pub struct ClassicGroup {
    pub id: String,
    state: ClassicState,
    state_since_ms: i64,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    /// Insertion order, so the fallback leader is the oldest member.
    members: IndexMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, with the time they expire.
    pending_members: HashMap<String, i64>,
    /// group.instance.id → member id.
    static_members: HashMap<String, String>,
    limits: Limits,
    /// PreparingRebalance: when the join phase completes even with members missing.
    join_deadline_ms: Option<i64>,
    /// Time left to extend the initial delay of an empty group's first rebalance.
    initial_delay_remaining_ms: Option<i64>,
    new_member_added: bool,
    /// Members of this generation that have not sent SyncGroup, and until when.
    pending_sync: BTreeSet<String>,
    sync_deadline_ms: Option<i64>,
    assignment_persisting: bool,
}

impl ClassicGroup {
    pub fn new(id: &str, limits: Limits, now_ms: i64) -> ClassicGroup {
        ClassicGroup {
            id: id.to_string(),
            state: ClassicState::Empty,
            state_since_ms: now_ms,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: IndexMap::new(),
            pending_members: HashMap::new(),
            static_members: HashMap::new(),
            limits,
            join_deadline_ms: None,
            initial_delay_remaining_ms: None,
            new_member_added: false,
            pending_sync: BTreeSet::new(),
            sync_deadline_ms: None,
            assignment_persisting: false,
        }
    }

    pub fn state(&self) -> ClassicState {
        self.state
    }

    pub fn state_since_ms(&self) -> i64 {
        self.state_since_ms
    }

    pub fn generation(&self) -> i32 {
        self.generation
    }

    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }

    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }

    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Kafka's allowed transitions; anything else is a bug in this machine.
    fn transition(&mut self, to: ClassicState, now_ms: i64) {
        use ClassicState::*;
        let valid = match to {
            Dead => true,
            Empty => self.state == PreparingRebalance,
            PreparingRebalance => matches!(self.state, Stable | CompletingRebalance | Empty),
            CompletingRebalance => self.state == PreparingRebalance,
            Stable => self.state == CompletingRebalance,
        };
        assert!(valid, "group {}: invalid transition {:?} -> {:?}", self.id, self.state, to);
        self.state = to;
        self.state_since_ms = now_ms;
    }

    /// Kafka's member check: a static member must present its current member id.
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
        use crate::errors;
        match instance_id {
            Some(instance) => match self.static_members.get(instance) {
                None => Err(errors::UNKNOWN_MEMBER_ID),
                Some(current) if current != member_id => Err(errors::FENCED_INSTANCE_ID),
                Some(_) => Ok(()),
            },
            None if !self.members.contains_key(member_id) => Err(errors::UNKNOWN_MEMBER_ID),
            None => Ok(()),
        }
    }

    /// The longest rebalance timeout of the members: how long a join phase may last.
    fn rebalance_timeout_ms(&self) -> i64 {
        self.members.values().map(|m| m.rebalance_timeout_ms as i64).max().unwrap_or(0)
    }

    fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join)
    }

    /// Can a member with these protocols join: the type must match and one protocol
    /// must be supported by every member (any non-empty offer while Empty).
    fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == ClassicState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|p| self.members.values().all(|m| m.protocols.iter().any(|q| q.name == p.name)))
    }

    /// Each member votes for its most preferred protocol that all members support; the
    /// most votes win, ties going to the earliest candidate.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| self.members.values().all(|m| m.protocols.iter().any(|q| q.name == *name)))
            .collect();
        let mut votes = vec![0usize; candidates.len()];
        for m in self.members.values() {
            if let Some(i) = m.protocols.iter().find_map(|p| candidates.iter().position(|c| *c == p.name)) {
                votes[i] += 1;
            }
        }
        let best = votes.iter().enumerate().max_by_key(|(i, v)| (**v, std::cmp::Reverse(*i)))?.0;
        candidates.get(best).map(|s| s.to_string())
    }

    fn current_members(&self) -> Vec<JoinMember> {
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| JoinMember {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                metadata: m.metadata(&protocol),
            })
            .collect()
    }

    fn join_result(&self, member_id: &str, with_members: bool) -> JoinResult {
        JoinResult {
            error: crate::errors::NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if with_members { self.current_members() } else { Vec::new() },
            skip_assignment: false,
        }
    }

    /// Reports a member entering or leaving, after the change.
    fn report(&self, member_id: &str, reason: Reason, out: &mut Vec<Action>) {
        out.push(Action::Membership(MembershipChange {
            member_id: member_id.to_string(),
            reason,
            generation: self.generation,
            members: self.members.len(),
        }));
    }

    /// Removes a member without rebalancing; re-elects the leader if it was the leader.
    fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let m = self.members.shift_remove(member_id)?;
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.pending_sync.remove(member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(m)
    }
}
