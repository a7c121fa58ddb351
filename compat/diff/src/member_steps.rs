//! The steps of a group with several members: classic members (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup) that rebalance, and KIP-848 members (ConsumerGroupHeartbeat)
//! reconciling their assignments, with ConsumerGroupDescribe.
//!
//! Each member is a slot ("m0", "m1") with its own connection, as each consumer is its
//! own process: a classic JoinGroup is answered only once every member of the group
//! has rejoined, so a step may be *deferred* (sent, its answer read by a later
//! `Collect` step) while the other members' steps go out on their connections. Member
//! ids, generations, epochs and assignments are each broker's own and are looked up in
//! what that broker answered the slot (`BrokerContext::slots`) when the step is sent.

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::group_steps::{Generation, Member};
use crate::steps::{short, BrokerContext, Names, Topic};

/// Long enough that no member times out while a sequence runs.
const SESSION_TIMEOUT_MS: i32 = 30_000;
const REBALANCE_TIMEOUT_MS: i32 = 30_000;
const PROTOCOL_TYPE: &str = "consumer";
const PROTOCOL_NAME: &str = "range";
/// A member id no broker gave.
const MEMBER_ID_NEVER_GIVEN: &str = "no-such-member";

/// What one broker told a member slot.
#[derive(Clone, Debug, Default)]
pub struct SlotState {
    pub member_id: String,
    /// The generation of its last successful JoinGroup, or its KIP-848 member epoch.
    pub epoch: i32,
    /// Its last KIP-848 assignment: (topic id, partitions).
    pub assignment: Vec<(Uuid, Vec<i32>)>,
}

/// Which member epoch a ConsumerGroupHeartbeat sends.
#[derive(Clone, Copy, Debug)]
pub enum MemberEpoch {
    /// 0: joining.
    Join,
    /// The epoch the broker last gave the member.
    Current,
    /// One past it: an epoch never given.
    Ahead,
    /// -1: leaving.
    Leave,
}

#[derive(Clone, Debug)]
pub enum MemberRequest {
    /// JoinGroup as `slot`; `defer` sends it and leaves its answer to `Collect`.
    Join {
        group: &'static str,
        slot: &'static str,
        member: Member,
        defer: bool,
    },
    /// SyncGroup as `slot`; a leader gives each slot of `assign` an assignment.
    Sync {
        group: &'static str,
        slot: &'static str,
        generation: Generation,
        assign: Vec<&'static str>,
        defer: bool,
    },
    Heartbeat {
        group: &'static str,
        slot: &'static str,
        generation: Generation,
    },
    /// LeaveGroup of these members in one request (one per request before v3).
    Leave {
        group: &'static str,
        slots: Vec<&'static str>,
    },
    /// Reads the answer to `slot`'s deferred request.
    Collect {
        slot: &'static str,
        api: ApiKey,
    },
    /// A KIP-848 heartbeat. `subscribe`: the topics (on joining); `owned`: whether it
    /// reports the assignment it last got (a member that reconciles at once) or, when
    /// joining, none.
    ConsumerHeartbeat {
        group: &'static str,
        slot: &'static str,
        member: Member,
        epoch: MemberEpoch,
        subscribe: Option<Vec<Topic>>,
        owned: bool,
    },
    ConsumerDescribe {
        groups: Vec<&'static str>,
        include_operations: bool,
    },
}

/// The key of a member slot's state in `BrokerContext::slots`.
pub fn slot_key(names: &Names, group: &str, slot: &str) -> String {
    format!("{}#{slot}", names.group(group))
}

/// A member id a KIP-848 member (v1+) makes up itself, the same for both brokers.
fn client_member_id(names: &Names, slot: &str) -> String {
    let text = format!("{}{slot}", names.prefix);
    // FNV-1a over the name, spread over 128 bits: a stable, UUID-shaped id.
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for byte in text.bytes() {
        hash ^= byte as u128;
        hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013B);
    }
    Uuid::from_u128(hash).to_string()
}

impl BrokerContext {
    fn slot(&self, names: &Names, group: &str, slot: &str) -> SlotState {
        self.slots.get(&slot_key(names, group, slot)).cloned().unwrap_or_default()
    }

    fn slot_member(&self, names: &Names, group: &str, slot: &str, member: Member) -> String {
        match member {
            Member::New => String::new(),
            Member::Given => self.slot(names, group, slot).member_id,
            Member::Unknown => MEMBER_ID_NEVER_GIVEN.to_string(),
        }
    }

    fn slot_generation(&self, names: &Names, group: &str, slot: &str, generation: Generation) -> i32 {
        let current = self.slot(names, group, slot).epoch;
        match generation {
            Generation::Current => current,
            Generation::Ahead => current + 1,
        }
    }
}

impl MemberRequest {
    pub fn api_key(&self) -> ApiKey {
        match self {
            MemberRequest::Join { .. } => ApiKey::JoinGroup,
            MemberRequest::Sync { .. } => ApiKey::SyncGroup,
            MemberRequest::Heartbeat { .. } => ApiKey::Heartbeat,
            MemberRequest::Leave { .. } => ApiKey::LeaveGroup,
            MemberRequest::Collect { api, .. } => *api,
            MemberRequest::ConsumerHeartbeat { .. } => ApiKey::ConsumerGroupHeartbeat,
            MemberRequest::ConsumerDescribe { .. } => ApiKey::ConsumerGroupDescribe,
        }
    }

    /// The member slot whose connection carries the step (ConsumerGroupDescribe goes
    /// on the sequence's own).
    pub fn slot(&self) -> Option<&'static str> {
        match self {
            MemberRequest::Join { slot, .. }
            | MemberRequest::Sync { slot, .. }
            | MemberRequest::Heartbeat { slot, .. }
            | MemberRequest::Collect { slot, .. }
            | MemberRequest::ConsumerHeartbeat { slot, .. } => Some(slot),
            MemberRequest::Leave { slots, .. } => slots.first().copied(),
            MemberRequest::ConsumerDescribe { .. } => None,
        }
    }

    /// The group a request names, whose answer tells the slot its state.
    pub fn group(&self) -> Option<&'static str> {
        match self {
            MemberRequest::Join { group, .. }
            | MemberRequest::Sync { group, .. }
            | MemberRequest::Heartbeat { group, .. }
            | MemberRequest::Leave { group, .. }
            | MemberRequest::ConsumerHeartbeat { group, .. } => Some(group),
            _ => None,
        }
    }

    pub fn deferred(&self) -> bool {
        matches!(self, MemberRequest::Join { defer: true, .. } | MemberRequest::Sync { defer: true, .. })
    }

    pub fn summary(&self, names: &Names) -> String {
        let deferred = if self.deferred() { " (answer read later)" } else { "" };
        match self {
            MemberRequest::Join { group, slot, member, .. } => {
                format!("group={} as {slot} member={member:?}{deferred}", names.group(group))
            }
            MemberRequest::Sync { group, slot, generation, assign, .. } => format!(
                "group={} as {slot} generation={generation:?} assignments for {assign:?}{deferred}",
                names.group(group)
            ),
            MemberRequest::Heartbeat { group, slot, generation } => {
                format!("group={} as {slot} generation={generation:?}", names.group(group))
            }
            MemberRequest::Leave { group, slots } => format!("group={} members {slots:?}", names.group(group)),
            MemberRequest::Collect { slot, api } => format!("the answer to {slot}'s deferred {api:?}"),
            MemberRequest::ConsumerHeartbeat { group, slot, member, epoch, subscribe, owned } => {
                let subscribe = subscribe
                    .as_ref()
                    .map(|topics| topics.iter().map(|t| short(&names.topic(t))).collect::<Vec<_>>().join(","));
                format!(
                    "group={} as {slot} member={member:?} epoch={epoch:?} subscribe={} owned={}",
                    names.group(group),
                    subscribe.map(|s| format!("[{s}]")).unwrap_or("null".into()),
                    if *owned { "last assignment" } else { "null" }
                )
            }
            MemberRequest::ConsumerDescribe { groups, include_operations } => {
                let groups: Vec<String> = groups.iter().map(|g| names.group(g)).collect();
                format!("[{}] include_authorized_operations={include_operations}", groups.join(", "))
            }
        }
    }

    /// The request as sent; `None` for `Collect`, which sends nothing.
    pub fn build(&self, version: i16, names: &Names, context: &BrokerContext) -> Option<RequestKind> {
        let group_id = |g: &str| GroupId(StrBytes::from_string(names.group(g)));
        let request = match self {
            MemberRequest::Join { group, slot, member, .. } => {
                let id = context.slot_member(names, group, slot, *member);
                let protocol = JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(PROTOCOL_NAME))
                    .with_metadata(format!("subscription of {slot}").into_bytes().into());
                RequestKind::JoinGroup(
                    JoinGroupRequest::default()
                        .with_group_id(group_id(group))
                        .with_session_timeout_ms(SESSION_TIMEOUT_MS)
                        .with_rebalance_timeout_ms(if version >= 1 { REBALANCE_TIMEOUT_MS } else { -1 })
                        .with_member_id(StrBytes::from_string(id))
                        .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
                        .with_protocols(vec![protocol]),
                )
            }
            MemberRequest::Sync { group, slot, generation, assign, .. } => {
                let id = context.slot_member(names, group, slot, Member::Given);
                let assignments = assign
                    .iter()
                    .map(|to| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(StrBytes::from_string(context.slot_member(names, group, to, Member::Given)))
                            .with_assignment(format!("assignment of {to}").into_bytes().into())
                    })
                    .collect();
                let mut request = SyncGroupRequest::default()
                    .with_group_id(group_id(group))
                    .with_generation_id(context.slot_generation(names, group, slot, *generation))
                    .with_member_id(StrBytes::from_string(id))
                    .with_assignments(assignments);
                if version >= 5 {
                    request = request
                        .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
                        .with_protocol_name(Some(StrBytes::from_static_str(PROTOCOL_NAME)));
                }
                RequestKind::SyncGroup(request)
            }
            MemberRequest::Heartbeat { group, slot, generation } => RequestKind::Heartbeat(
                HeartbeatRequest::default()
                    .with_group_id(group_id(group))
                    .with_generation_id(context.slot_generation(names, group, slot, *generation))
                    .with_member_id(StrBytes::from_string(context.slot_member(names, group, slot, Member::Given))),
            ),
            MemberRequest::Leave { group, slots } => {
                let id = |slot: &str| StrBytes::from_string(context.slot_member(names, group, slot, Member::Given));
                let request = if version >= 3 {
                    LeaveGroupRequest::default().with_group_id(group_id(group)).with_members(
                        slots.iter().map(|slot| MemberIdentity::default().with_member_id(id(slot))).collect(),
                    )
                } else {
                    LeaveGroupRequest::default().with_group_id(group_id(group)).with_member_id(id(slots[0]))
                };
                RequestKind::LeaveGroup(request)
            }
            MemberRequest::Collect { .. } => return None,
            MemberRequest::ConsumerHeartbeat { group, slot, member, epoch, subscribe, owned } => {
                let state = context.slot(names, group, slot);
                let member_id = match member {
                    // From v1 a member makes up its id before joining (KIP-1082).
                    Member::New if version >= 1 => client_member_id(names, slot),
                    other => context.slot_member(names, group, slot, *other),
                };
                let member_epoch = match epoch {
                    MemberEpoch::Join => 0,
                    MemberEpoch::Current => state.epoch,
                    MemberEpoch::Ahead => state.epoch + 1,
                    MemberEpoch::Leave => -1,
                };
                let joining = matches!(epoch, MemberEpoch::Join);
                let owned = if joining {
                    Some(vec![])
                } else if *owned {
                    Some(
                        state
                            .assignment
                            .iter()
                            .map(|(id, ps)| TopicPartitions::default().with_topic_id(*id).with_partitions(ps.clone()))
                            .collect(),
                    )
                } else {
                    None
                };
                RequestKind::ConsumerGroupHeartbeat(
                    ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(group_id(group))
                        .with_member_id(StrBytes::from_string(member_id))
                        .with_member_epoch(member_epoch)
                        .with_rebalance_timeout_ms(if joining { REBALANCE_TIMEOUT_MS } else { -1 })
                        .with_subscribed_topic_names(subscribe.as_ref().map(|topics| {
                            topics.iter().map(|t| TopicName(StrBytes::from_string(names.topic(t)))).collect()
                        }))
                        .with_topic_partitions(owned),
                )
            }
            MemberRequest::ConsumerDescribe { groups, include_operations } => RequestKind::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default()
                    .with_group_ids(groups.iter().map(|g| group_id(g)).collect())
                    .with_include_authorized_operations(*include_operations),
            ),
        };
        Some(request)
    }
}

/// What an answer tells a member slot: its id, its generation or epoch, its assignment.
pub fn learn(state: &mut SlotState, response: &ResponseKind) {
    match response {
        ResponseKind::JoinGroup(r) => {
            if !r.member_id.is_empty() {
                state.member_id = r.member_id.to_string();
            }
            if r.error_code == 0 {
                state.epoch = r.generation_id;
            }
        }
        ResponseKind::ConsumerGroupHeartbeat(r) if r.error_code == 0 => {
            if let Some(id) = r.member_id.as_ref().filter(|id| !id.is_empty()) {
                state.member_id = id.to_string();
            }
            state.epoch = r.member_epoch;
            if let Some(assignment) = &r.assignment {
                state.assignment =
                    assignment.topic_partitions.iter().map(|t| (t.topic_id, t.partitions.clone())).collect();
            }
        }
        _ => {}
    }
}
