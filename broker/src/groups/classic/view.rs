//! What the rest of the broker reads from a classic group: its description, its
//! offset-commit check, its subscribed topics, and its persisted form.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::ClassicGroup;

use super::ClassicState;

use super::Limits;

use super::Member;

use super::Protocol;
use crate::errors;
use crate::groups::consumer_protocol;
use crate::groups::records::{GroupMemberValue, GroupValue};

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone, Default)]
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

impl ClassicGroup {
    /// Only a stable group shows its protocol and member metadata, as Kafka; each
    /// member's assignment is shown in every state (Kafka's `describeNoMetadata` keeps
    /// it): the last one given until a rebalance hands out the next.
    pub fn describe(&self) -> (String, Vec<DescribedMember>) {
        let stable = self.state == ClassicState::Stable;
        let protocol = if stable { self.protocol.clone().unwrap_or_default() } else { String::new() };
        let members = self
            .members
            .values()
            .map(|m| DescribedMember {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable { m.metadata(&protocol) } else { Bytes::new() },
                assignment: m.assignment.clone(),
            })
            .collect();
        (protocol, members)
    }

    /// Kafka's rules for OffsetCommit from a classic group: members must be current
    /// (and of this generation); commits without a member are accepted only while the
    /// group is empty; none while the assignment is being distributed.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), i16> {
        if self.state == ClassicState::Dead {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        if generation < 0 && self.state == ClassicState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation != self.generation {
                return Err(errors::ILLEGAL_GENERATION);
            }
        } else if self.state != ClassicState::Empty {
            return Err(errors::UNKNOWN_MEMBER_ID);
        }
        if self.state == ClassicState::CompletingRebalance {
            return Err(errors::REBALANCE_IN_PROGRESS);
        }
        Ok(())
    }

    /// Topics the members subscribe to (consumer protocol groups only); OffsetDelete
    /// refuses to delete their offsets while the group is active.
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some(crate::groups::CONSUMER_PROTOCOL_TYPE) {
            return None;
        }
        let protocol = self.protocol.clone()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(consumer_protocol::subscription_topics(&m.metadata(&protocol))?);
        }
        Some(topics)
    }

    pub fn can_delete(&self) -> bool {
        matches!(self.state, ClassicState::Empty | ClassicState::Dead)
    }

    pub fn mark_dead(&mut self, now_ms: i64) {
        self.transition(ClassicState::Dead, now_ms);
    }

    /// The group as its metadata record stores it.
    pub fn to_record(&self) -> GroupValue {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_timestamp_ms: self.state_since_ms,
            members: self
                .members
                .values()
                .map(|m| GroupMemberValue {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Rebuilds a group from its last metadata record: Stable with its members (who
    /// get a fresh session to heartbeat in), or Empty.
    pub fn from_record(id: &str, value: &GroupValue, limits: Limits, now_ms: i64) -> ClassicGroup {
        let mut g = ClassicGroup::new(id, limits, value.state_timestamp_ms);
        g.generation = value.generation;
        g.protocol_type = (!value.protocol_type.is_empty()).then(|| value.protocol_type.clone());
        g.protocol = value.protocol.clone();
        let protocol = value.protocol.clone().unwrap_or_default();
        for mv in &value.members {
            let member = Member {
                id: mv.member_id.clone(),
                instance_id: mv.instance_id.clone(),
                client_id: mv.client_id.clone(),
                client_host: mv.client_host.clone(),
                session_timeout_ms: mv.session_timeout_ms,
                rebalance_timeout_ms: mv.rebalance_timeout_ms,
                protocol_type: value.protocol_type.clone(),
                protocols: vec![Protocol { name: protocol.clone(), metadata: mv.subscription.clone() }],
                assignment: mv.assignment.clone(),
                awaiting_join: false,
                awaiting_sync: false,
                is_new: false,
                heartbeat_deadline_ms: now_ms + mv.session_timeout_ms as i64,
            };
            if let Some(instance) = &mv.instance_id {
                g.static_members.insert(instance.clone(), mv.member_id.clone());
            }
            g.members.insert(mv.member_id.clone(), member);
        }
        if !g.members.is_empty() && value.protocol.is_some() {
            g.leader =
                value.leader.clone().filter(|l| g.members.contains_key(l)).or_else(|| g.members.keys().next().cloned());
            g.state = ClassicState::Stable;
        } else {
            g.members.clear();
            g.static_members.clear();
        }
        g
    }
}
