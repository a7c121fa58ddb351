//! Scenarios of groups with several members (`member_steps.rs`): a classic group that
//! rebalances as a second member joins and one leaves, and a KIP-848 group of two
//! members that reconcile their assignments.

use kafka_protocol::messages::ApiKey;
use rand::Rng;

use super::Sequence;
use crate::group_steps::{Generation, Member};
use crate::member_steps::{MemberEpoch, MemberRequest};
use crate::steps::{Request, Topic};

const GROUP: &str = "g0";
/// The first JoinGroup version that answers a new member MEMBER_ID_REQUIRED (KIP-394)
/// instead of making the group rebalance on a request that has no id yet.
const JOIN_GROUP_VERSION_MEMBER_ID_REQUIRED: i16 = 4;

fn member(s: &mut Sequence, request: MemberRequest) {
    s.push(Request::Member(request));
}

/// `request`, deferred, then the step that reads its answer, at the same version.
fn deferred_then(s: &mut Sequence, request: MemberRequest, between: impl FnOnce(&mut Sequence)) {
    let api = request.api_key();
    let slot = request.slot().expect("a deferred request is a member's");
    let before = s.steps.len();
    member(s, request);
    between(s);
    if let Some(version) = s.steps.get(before).map(|step| step.version) {
        s.push_at(version, Request::Member(MemberRequest::Collect { slot, api }));
    }
}

fn join(s: &mut Sequence, slot: &'static str, member_id: Member, defer: bool) {
    let request = MemberRequest::Join { group: GROUP, slot, member: member_id, defer };
    s.push_between(JOIN_GROUP_VERSION_MEMBER_ID_REQUIRED, i16::MAX, Request::Member(request));
}

fn sync(s: &mut Sequence, slot: &'static str, assign: Vec<&'static str>) {
    let request = MemberRequest::Sync { group: GROUP, slot, generation: Generation::Current, assign, defer: false };
    member(s, request);
}

fn heartbeat(s: &mut Sequence, slot: &'static str, generation: Generation) {
    member(s, MemberRequest::Heartbeat { group: GROUP, slot, generation });
}

/// A classic group: m0 joins and syncs alone; m1 joins (MEMBER_ID_REQUIRED, then with
/// its id, which makes the group rebalance: m0's heartbeat is answered
/// REBALANCE_IN_PROGRESS and m1's JoinGroup waits until m0 rejoins); the leader syncs
/// with assignments for both, the follower syncs (before the leader one time in two,
/// waiting for it); heartbeats, a stale generation, DescribeGroups; then one member
/// leaves (or both in one LeaveGroup), the other rejoins and syncs alone.
pub(super) fn group_rebalance(s: &mut Sequence) {
    let t0 = Topic::Slot("t0");
    s.create(t0, 2, vec![]);
    s.push(Request::FindCoordinator { group: GROUP });
    join(s, "m0", Member::New, false);
    join(s, "m0", Member::Given, false);
    sync(s, "m0", vec!["m0"]);
    join(s, "m1", Member::New, false);
    let m1_join = MemberRequest::Join { group: GROUP, slot: "m1", member: Member::Given, defer: true };
    let check_first = s.chance(0.5);
    deferred_then(s, m1_join, |s| {
        if check_first {
            heartbeat(s, "m0", Generation::Current);
        }
        join(s, "m0", Member::Given, false);
    });
    if s.chance(0.5) {
        let follower = MemberRequest::Sync {
            group: GROUP,
            slot: "m1",
            generation: Generation::Current,
            assign: vec![],
            defer: true,
        };
        deferred_then(s, follower, |s| sync(s, "m0", vec!["m0", "m1"]));
    } else {
        sync(s, "m0", vec!["m0", "m1"]);
        sync(s, "m1", vec![]);
    }
    heartbeat(s, "m0", Generation::Current);
    let generation = if s.chance(0.3) { Generation::Ahead } else { Generation::Current };
    heartbeat(s, "m1", generation);
    s.push(Request::DescribeGroups { groups: vec![GROUP] });
    let (leaving, staying) = if s.chance(0.5) { ("m1", "m0") } else { ("m0", "m1") };
    if s.chance(0.2) {
        member(s, MemberRequest::Leave { group: GROUP, slots: vec![leaving, staying] });
    } else {
        member(s, MemberRequest::Leave { group: GROUP, slots: vec![leaving] });
        heartbeat(s, staying, Generation::Current);
        join(s, staying, Member::Given, false);
        sync(s, staying, vec![staying]);
    }
    s.push(Request::DescribeGroups { groups: vec![GROUP] });
    s.push(Request::ListGroups);
}

fn consumer_heartbeat(s: &mut Sequence, slot: &'static str, member_id: Member, epoch: MemberEpoch, owned: bool) {
    let subscribe = matches!(epoch, MemberEpoch::Join).then(|| vec![Topic::Slot("t0")]);
    let request = MemberRequest::ConsumerHeartbeat { group: GROUP, slot, member: member_id, epoch, subscribe, owned };
    member(s, request);
}

fn describe(s: &mut Sequence) {
    let include_operations = s.chance(0.5);
    let groups = if s.chance(0.3) { vec![GROUP, "g1"] } else { vec![GROUP] };
    member(s, MemberRequest::ConsumerDescribe { groups, include_operations });
}

/// A KIP-848 group: m0 joins (ConsumerGroupHeartbeat epoch 0, subscribed to t0) and
/// acknowledges its assignment; m1 joins, m0 is asked to give partitions up and does,
/// m1 gets them; ConsumerGroupDescribe (with an unknown group); the members' mistakes
/// (an epoch never given, an id never given); one leaves (epoch -1) and the other gets
/// everything back; ConsumerGroupDescribe again.
pub(super) fn consumer_group(s: &mut Sequence) {
    if s.versions.common(ApiKey::ConsumerGroupHeartbeat).is_none() {
        return;
    }
    let t0 = Topic::Slot("t0");
    let partitions = s.rng.gen_range(2..=3);
    s.create(t0, partitions, vec![]);
    consumer_heartbeat(s, "m0", Member::New, MemberEpoch::Join, false);
    consumer_heartbeat(s, "m0", Member::Given, MemberEpoch::Current, true);
    consumer_heartbeat(s, "m1", Member::New, MemberEpoch::Join, false);
    for _ in 0..2 {
        consumer_heartbeat(s, "m0", Member::Given, MemberEpoch::Current, true);
        consumer_heartbeat(s, "m1", Member::Given, MemberEpoch::Current, true);
    }
    describe(s);
    match s.rng.gen_range(0..3) {
        0 => consumer_heartbeat(s, "m1", Member::Given, MemberEpoch::Ahead, true),
        1 => consumer_heartbeat(s, "m1", Member::Unknown, MemberEpoch::Current, true),
        _ => {}
    }
    let (leaving, staying) = if s.chance(0.5) { ("m1", "m0") } else { ("m0", "m1") };
    consumer_heartbeat(s, leaving, Member::Given, MemberEpoch::Leave, false);
    consumer_heartbeat(s, staying, Member::Given, MemberEpoch::Current, true);
    consumer_heartbeat(s, staying, Member::Given, MemberEpoch::Current, true);
    describe(s);
    s.push(Request::ListGroups);
}
