//! The steps of a consumer group's member: JoinGroup, SyncGroup, Heartbeat, LeaveGroup
//! and OffsetCommit with a generation and a member id.
//!
//! Each broker hands out its own member ids, so a step names its member by what it
//! sends ([`Member`]: none yet, the id this broker gave, an id no broker gave) and its
//! generation by which one ([`Generation`]), and the numbers are looked up in what that
//! broker answered (`BrokerContext::members`) when the step is sent, as producer ids
//! are.

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::steps::{short, BrokerContext, Names, Topic};

/// Long enough that no member of a sequence times out while it runs.
const SESSION_TIMEOUT_MS: i32 = 30_000;
const REBALANCE_TIMEOUT_MS: i32 = 30_000;
/// The member's one protocol and its bytes.
const PROTOCOL_TYPE: &str = "consumer";
const PROTOCOL_NAME: &str = "range";
const SUBSCRIPTION: &[u8] = b"subscription-bytes";
const ASSIGNMENT: &[u8] = b"assignment-bytes";
/// A member id no broker gave.
const MEMBER_ID_NEVER_GIVEN: &str = "no-such-member";

/// Which member id a step sends.
#[derive(Clone, Copy, Debug)]
pub enum Member {
    /// The empty id of a member that has not joined yet.
    New,
    /// The id this broker gave the member (by JoinGroup, also with MEMBER_ID_REQUIRED).
    Given,
    /// An id no broker gave.
    Unknown,
}

/// Which generation a step sends.
#[derive(Clone, Copy, Debug)]
pub enum Generation {
    /// The one the member's last successful JoinGroup gave.
    Current,
    /// One past it: a generation the coordinator never gave.
    Ahead,
}

#[derive(Clone, Debug)]
pub enum GroupRequest {
    Join {
        group: &'static str,
        member: Member,
        instance: Option<&'static str>,
    },
    Sync {
        group: &'static str,
        member: Member,
        generation: Generation,
        instance: Option<&'static str>,
    },
    Heartbeat {
        group: &'static str,
        member: Member,
        generation: Generation,
        instance: Option<&'static str>,
    },
    Leave {
        group: &'static str,
        member: Member,
        instance: Option<&'static str>,
    },
    /// An offset committed as a member of the group's current generation (or not).
    Commit {
        group: &'static str,
        member: Member,
        generation: Generation,
        topic: Topic,
        partition: i32,
        offset: i64,
    },
}

impl BrokerContext {
    /// The member id and generation `member` and `generation` stand for on this broker.
    fn member(&self, names: &Names, group: &str, member: Member, generation: Generation) -> (String, i32) {
        let (given, current) = self.members.get(&names.group(group)).cloned().unwrap_or_default();
        let id = match member {
            Member::New => String::new(),
            Member::Given => given,
            Member::Unknown => MEMBER_ID_NEVER_GIVEN.to_string(),
        };
        let generation = match generation {
            Generation::Current => current,
            Generation::Ahead => current + 1,
        };
        (id, generation)
    }
}

impl GroupRequest {
    pub fn api_key(&self) -> ApiKey {
        match self {
            GroupRequest::Join { .. } => ApiKey::JoinGroup,
            GroupRequest::Sync { .. } => ApiKey::SyncGroup,
            GroupRequest::Heartbeat { .. } => ApiKey::Heartbeat,
            GroupRequest::Leave { .. } => ApiKey::LeaveGroup,
            GroupRequest::Commit { .. } => ApiKey::OffsetCommit,
        }
    }

    /// The group slot a JoinGroup names, whose answer gives the member id and generation.
    pub fn joins(&self) -> Option<&'static str> {
        match self {
            GroupRequest::Join { group, .. } => Some(group),
            _ => None,
        }
    }

    pub fn summary(&self, names: &Names) -> String {
        let instance = |i: &Option<&str>| i.map(|i| format!(" instance={}", names.group(i))).unwrap_or_default();
        match self {
            GroupRequest::Join { group, member, instance: i } => {
                format!("group={} member={member:?}{}", names.group(group), instance(i))
            }
            GroupRequest::Sync { group, member, generation, instance: i } => format!(
                "group={} member={member:?} generation={generation:?}{} with an assignment for itself",
                names.group(group),
                instance(i)
            ),
            GroupRequest::Heartbeat { group, member, generation, instance: i } => {
                format!("group={} member={member:?} generation={generation:?}{}", names.group(group), instance(i))
            }
            GroupRequest::Leave { group, member, instance: i } => {
                format!("group={} member={member:?}{}", names.group(group), instance(i))
            }
            GroupRequest::Commit { group, member, generation, topic, partition, offset } => format!(
                "group={} member={member:?} generation={generation:?} {}/{partition} offset={offset}",
                names.group(group),
                short(&names.topic(topic))
            ),
        }
    }

    pub fn build(&self, version: i16, names: &Names, context: &BrokerContext) -> RequestKind {
        let group_id = |g: &str| GroupId(StrBytes::from_string(names.group(g)));
        let instance_id = |i: &Option<&str>| i.map(|i| StrBytes::from_string(names.group(i)));
        match self {
            GroupRequest::Join { group, member, instance } => {
                let (id, _) = context.member(names, group, *member, Generation::Current);
                let protocol = JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(PROTOCOL_NAME))
                    .with_metadata(SUBSCRIPTION.into());
                RequestKind::JoinGroup(
                    JoinGroupRequest::default()
                        .with_group_id(group_id(group))
                        .with_session_timeout_ms(SESSION_TIMEOUT_MS)
                        .with_rebalance_timeout_ms(if version >= 1 { REBALANCE_TIMEOUT_MS } else { -1 })
                        .with_member_id(StrBytes::from_string(id))
                        .with_group_instance_id(instance_id(instance))
                        .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
                        .with_protocols(vec![protocol]),
                )
            }
            GroupRequest::Sync { group, member, generation, instance } => {
                let (id, generation) = context.member(names, group, *member, *generation);
                let assignment = SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(id.clone()))
                    .with_assignment(ASSIGNMENT.into());
                let mut request = SyncGroupRequest::default()
                    .with_group_id(group_id(group))
                    .with_generation_id(generation)
                    .with_member_id(StrBytes::from_string(id))
                    .with_group_instance_id(instance_id(instance))
                    .with_assignments(vec![assignment]);
                // The protocol type and name arrived with v5 (KIP-559).
                if version >= 5 {
                    request = request
                        .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
                        .with_protocol_name(Some(StrBytes::from_static_str(PROTOCOL_NAME)));
                }
                RequestKind::SyncGroup(request)
            }
            GroupRequest::Heartbeat { group, member, generation, instance } => {
                let (id, generation) = context.member(names, group, *member, *generation);
                RequestKind::Heartbeat(
                    HeartbeatRequest::default()
                        .with_group_id(group_id(group))
                        .with_generation_id(generation)
                        .with_member_id(StrBytes::from_string(id))
                        .with_group_instance_id(instance_id(instance)),
                )
            }
            GroupRequest::Leave { group, member, instance } => {
                let (id, _) = context.member(names, group, *member, Generation::Current);
                let request = if version >= 3 {
                    // From v3 (KIP-345) a batch of members, each by id or instance id.
                    LeaveGroupRequest::default().with_group_id(group_id(group)).with_members(vec![
                        MemberIdentity::default()
                            .with_member_id(StrBytes::from_string(id))
                            .with_group_instance_id(instance_id(instance)),
                    ])
                } else {
                    LeaveGroupRequest::default()
                        .with_group_id(group_id(group))
                        .with_member_id(StrBytes::from_string(id))
                };
                RequestKind::LeaveGroup(request)
            }
            GroupRequest::Commit { group, member, generation, topic, partition, offset } => {
                let (id, generation) = context.member(names, group, *member, *generation);
                let partition = OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_metadata(Some(StrBytes::from_static_str("m")));
                let mut data = OffsetCommitRequestTopic::default().with_partitions(vec![partition]);
                // OffsetCommit v10 (KIP-848) addresses topics by id.
                if version >= 10 {
                    data = data.with_topic_id(names.topic_id(topic, context));
                } else {
                    data = data.with_name(TopicName(StrBytes::from_string(names.topic(topic))));
                }
                RequestKind::OffsetCommit(
                    OffsetCommitRequest::default()
                        .with_group_id(group_id(group))
                        .with_generation_id_or_member_epoch(generation)
                        .with_member_id(StrBytes::from_string(id))
                        .with_topics(vec![data]),
                )
            }
        }
    }
}
