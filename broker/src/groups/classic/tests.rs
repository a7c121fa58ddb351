//! Rebalance scenarios of the classic state machine, driven by events and fake time.

use bytes::Bytes;

use super::*;
use crate::errors;
use crate::groups::membership::Reason;

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;

fn limits(delay: i32) -> Limits {
    Limits { session_timeout_min_ms: 6000, session_timeout_max_ms: 1_800_000, initial_rebalance_delay_ms: delay }
}

fn req(member_id: &str, new_id: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| Protocol { name: p.to_string(), metadata: Bytes::from(format!("{p}-meta")) })
            .collect(),
        require_known_member_id: true,
        supports_skip_assignment: true,
        new_member_id: new_id.into(),
    }
}

/// Joins a brand-new dynamic member the KIP-394 way (two JoinGroups).
fn join_new(g: &mut ClassicGroup, id: &str, now: i64, out: &mut Vec<Action>) -> JoinOutcome {
    match g.join(req("", id, &["range"]), now, out) {
        JoinOutcome::Done(r) => assert_eq!((r.error, r.member_id.as_str()), (errors::MEMBER_ID_REQUIRED, id)),
        other => panic!("expected MEMBER_ID_REQUIRED, got {other:?}"),
    }
    g.join(req(id, "unused", &["range"]), now, out)
}

fn joins(out: &[Action]) -> Vec<(&str, &JoinResult)> {
    out.iter()
        .filter_map(|a| match a {
            Action::CompleteJoin { member_id, result } => Some((member_id.as_str(), result)),
            _ => None,
        })
        .collect()
}

fn syncs(out: &[Action]) -> Vec<(&str, &SyncResult)> {
    out.iter()
        .filter_map(|a| match a {
            Action::CompleteSync { member_id, result } => Some((member_id.as_str(), result)),
            _ => None,
        })
        .collect()
}

fn sync(member: &str, generation: i32, assignments: &[(&str, &str)]) -> SyncRequest {
    SyncRequest {
        member_id: member.into(),
        generation,
        assignments: assignments.iter().map(|(m, a)| (m.to_string(), Bytes::from(a.to_string()))).collect(),
        ..Default::default()
    }
}

/// The actions other than membership reports.
fn effects(out: &[Action]) -> Vec<&Action> {
    out.iter().filter(|a| !matches!(a, Action::Membership(_))).collect()
}

/// Membership reports as (member, reason).
fn changes(out: &[Action]) -> Vec<(&str, Reason)> {
    out.iter()
        .filter_map(|a| match a {
            Action::Membership(c) => Some((c.member_id.as_str(), c.reason)),
            _ => None,
        })
        .collect()
}

/// A stable group of `ids` at generation `n`, the first id leading.
fn stable_group(ids: &[&str]) -> ClassicGroup {
    let mut g = ClassicGroup::new("g", limits(0), 0);
    for id in ids {
        let mut out = Vec::new();
        join_new(&mut g, id, 0, &mut out);
    }
    // Everyone rejoins until one join phase includes all of them.
    let mut out = Vec::new();
    for id in ids {
        if g.state() == ClassicState::PreparingRebalance || g.members().any(|m| m.id == *id && !m.awaiting_join) {
            g.join(req(id, "unused", &["range"]), 0, &mut out);
        }
    }
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
    let gen = g.generation();
    let leader = g.leader().unwrap().to_string();
    let assignments: Vec<(&str, &str)> = ids.iter().map(|id| (*id, *id)).collect();
    let mut out = Vec::new();
    assert_eq!(
        g.sync_group(sync(&leader, gen, &assignments), 0, &mut out),
        SyncOutcome::Wait { member_id: leader.clone() }
    );
    assert_eq!(effects(&out), vec![&Action::Persist { assignment_of: Some(gen) }]);
    out.clear();
    g.assignment_persisted(gen, errors::NONE, 0, &mut out);
    assert_eq!(g.state(), ClassicState::Stable);
    g
}

#[test]
fn first_member_needs_an_id_then_completes_at_once_without_delay() {
    let mut g = ClassicGroup::new("g", limits(0), 0);
    let mut out = Vec::new();
    assert_eq!(join_new(&mut g, "m1", 0, &mut out), JoinOutcome::Wait { member_id: "m1".into() });
    let done = joins(&out);
    assert_eq!(done.len(), 1);
    let (id, r) = done[0];
    assert_eq!((id, r.error, r.generation, r.leader.as_str()), ("m1", errors::NONE, 1, "m1"));
    assert_eq!(r.protocol.as_deref(), Some("range"));
    assert_eq!(r.members.len(), 1);
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
}

#[test]
fn a_fourth_member_rebalances_a_stable_group() {
    let mut g = stable_group(&["a", "b", "c"]);
    let gen = g.generation();
    let mut out = Vec::new();
    assert_eq!(join_new(&mut g, "d", 10, &mut out), JoinOutcome::Wait { member_id: "d".into() });
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    // Existing members learn it from their heartbeats, and may still commit.
    assert_eq!(g.heartbeat("b", None, gen, 20), errors::REBALANCE_IN_PROGRESS);
    assert_eq!(g.validate_offset_commit("b", None, gen), Ok(()));
    for id in ["a", "b"] {
        g.join(req(id, "unused", &["range"]), 30, &mut out);
    }
    assert!(joins(&out).is_empty(), "c has not rejoined yet");
    g.join(req("c", "unused", &["range"]), 40, &mut out);
    let done = joins(&out);
    assert_eq!(done.len(), 4);
    for (id, r) in &done {
        assert_eq!(r.generation, gen + 1);
        assert_eq!(r.members.len(), if *id == "a" { 4 } else { 0 }, "only the leader gets the members");
    }
    // Followers park in SyncGroup until the leader's assignment is persisted.
    out.clear();
    assert_eq!(g.sync_group(sync("d", gen + 1, &[]), 50, &mut out), SyncOutcome::Wait { member_id: "d".into() });
    assert_eq!(g.validate_offset_commit("d", None, gen + 1), Err(errors::REBALANCE_IN_PROGRESS));
    g.sync_group(sync("a", gen + 1, &[("a", "A"), ("d", "D")]), 50, &mut out);
    assert_eq!(effects(&out), vec![&Action::Persist { assignment_of: Some(gen + 1) }]);
    out.clear();
    g.assignment_persisted(gen + 1, errors::NONE, 60, &mut out);
    let done = syncs(&out);
    assert_eq!(done.len(), 2);
    assert!(done.iter().any(|(id, r)| *id == "d" && r.assignment == "D"));
    assert_eq!(g.state(), ClassicState::Stable);
    // b and c sync late and get their (empty, unassigned) assignment at once.
    match g.sync_group(sync("b", gen + 1, &[]), 70, &mut out) {
        SyncOutcome::Done(r) => assert_eq!((r.error, r.assignment.len()), (errors::NONE, 0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_silent_member_is_evicted_after_its_session_timeout() {
    let mut g = stable_group(&["a", "b"]);
    let gen = g.generation();
    let mut out = Vec::new();
    for t in (1000..SESSION as i64).step_by(1000) {
        assert_eq!(g.heartbeat("a", None, gen, t), errors::NONE);
        g.tick(t, &mut out);
    }
    assert_eq!(g.state(), ClassicState::Stable);
    g.tick(SESSION as i64 + 1, &mut out);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    assert_eq!(g.member_count(), 1);
    g.join(req("a", "unused", &["range"]), SESSION as i64 + 100, &mut out);
    let done = joins(&out);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].1.generation, gen + 1);
}

#[test]
fn members_missing_at_the_rebalance_timeout_are_dropped() {
    let mut g = stable_group(&["a", "b"]);
    let mut out = Vec::new();
    g.join(req("a", "unused", &["range"]), 100, &mut out);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    for t in [5000, 15_000, 25_000] {
        assert_eq!(g.heartbeat("b", None, g.generation(), t), errors::REBALANCE_IN_PROGRESS);
    }
    g.tick(100 + REBALANCE as i64 - 1, &mut out);
    assert!(joins(&out).is_empty());
    g.tick(100 + REBALANCE as i64, &mut out);
    assert_eq!(joins(&out).len(), 1);
    assert_eq!(g.member_count(), 1);
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
}

#[test]
fn initial_delay_waits_and_extends_for_late_joiners() {
    let mut g = ClassicGroup::new("g", limits(3000), 0);
    let mut out = Vec::new();
    join_new(&mut g, "a", 0, &mut out);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    join_new(&mut g, "b", 1000, &mut out);
    g.tick(2999, &mut out);
    assert!(joins(&out).is_empty());
    g.tick(3000, &mut out);
    assert!(joins(&out).is_empty(), "b arrived during the delay: extended");
    g.tick(6000, &mut out);
    assert_eq!(joins(&out).len(), 2);
}

#[test]
fn static_member_restart_fences_the_old_id_without_rebalancing() {
    let mut g = ClassicGroup::new("g", limits(0), 0);
    let mut out = Vec::new();
    let mut r = req("", "s-1", &["range"]);
    r.instance_id = Some("inst".into());
    assert_eq!(g.join(r.clone(), 0, &mut out), JoinOutcome::Wait { member_id: "s-1".into() });
    let gen = g.generation();
    g.sync_group(sync("s-1", gen, &[("s-1", "X")]), 0, &mut out);
    g.assignment_persisted(gen, errors::NONE, 0, &mut out);
    assert_eq!(g.state(), ClassicState::Stable);
    out.clear();
    r.new_member_id = "s-2".into();
    match g.join(r, 100, &mut out) {
        JoinOutcome::Done(res) => {
            assert_eq!((res.error, res.member_id.as_str(), res.generation), (errors::NONE, "s-2", gen));
            assert!(res.skip_assignment, "the static leader keeps the current assignment");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(g.state(), ClassicState::Stable);
    assert_eq!(g.heartbeat("s-1", Some("inst"), gen, 200), errors::FENCED_INSTANCE_ID);
    assert_eq!(g.heartbeat("s-2", Some("inst"), gen, 200), errors::NONE);
    match g.sync_group(SyncRequest { instance_id: Some("inst".into()), ..sync("s-2", gen, &[]) }, 200, &mut out) {
        SyncOutcome::Done(res) => assert_eq!(res.assignment, Bytes::from("X")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn protocol_is_chosen_by_votes_among_common_protocols() {
    let mut g = ClassicGroup::new("g", limits(3000), 0);
    let mut out = Vec::new();
    let mut a = req("", "a", &["range", "roundrobin"]);
    a.require_known_member_id = false;
    g.join(a, 0, &mut out);
    let mut b = req("", "b", &["roundrobin", "range"]);
    b.require_known_member_id = false;
    g.join(b, 0, &mut out);
    let mut c = req("", "c", &["roundrobin", "range"]);
    c.require_known_member_id = false;
    g.join(c, 0, &mut out);
    let mut bad = req("", "d", &["sticky"]);
    bad.require_known_member_id = false;
    match g.join(bad, 0, &mut out) {
        JoinOutcome::Done(r) => assert_eq!(r.error, errors::INCONSISTENT_GROUP_PROTOCOL),
        other => panic!("{other:?}"),
    }
    g.tick(3000, &mut out);
    g.tick(6000, &mut out);
    assert_eq!(g.protocol(), Some("roundrobin"));
}

#[test]
fn leaving_members_rebalance_and_the_last_one_empties_the_group() {
    let mut g = stable_group(&["a", "b"]);
    let mut out = Vec::new();
    assert_eq!(
        g.leave(&[("b".into(), None), ("zz".into(), None)], 10, &mut out),
        Ok(vec![errors::NONE, errors::UNKNOWN_MEMBER_ID])
    );
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    out.clear();
    assert_eq!(g.leave(&[("a".into(), None)], 20, &mut out), Ok(vec![errors::NONE]));
    assert_eq!(g.state(), ClassicState::Empty);
    assert_eq!(effects(&out), vec![&Action::Persist { assignment_of: None }]);
    assert!(g.can_delete());
    // An empty group takes commits from outside group management only.
    assert_eq!(g.validate_offset_commit("", None, -1), Ok(()));
    assert_eq!(g.validate_offset_commit("a", None, 3), Err(errors::UNKNOWN_MEMBER_ID));
}

#[test]
fn commits_need_a_current_member_and_generation() {
    let g = stable_group(&["a"]);
    let gen = g.generation();
    assert_eq!(g.validate_offset_commit("a", None, gen), Ok(()));
    assert_eq!(g.validate_offset_commit("a", None, gen - 1), Err(errors::ILLEGAL_GENERATION));
    assert_eq!(g.validate_offset_commit("x", None, gen), Err(errors::UNKNOWN_MEMBER_ID));
    assert_eq!(g.validate_offset_commit("", None, -1), Err(errors::UNKNOWN_MEMBER_ID));
}

#[test]
fn a_follower_that_never_syncs_is_removed() {
    let mut g = stable_group(&["a", "b"]);
    let mut out = Vec::new();
    g.join(req("a", "unused", &["range"]), 0, &mut out);
    g.join(req("b", "unused", &["range"]), 0, &mut out);
    let gen = g.generation();
    g.sync_group(sync("a", gen, &[("a", "A")]), 0, &mut out);
    g.assignment_persisted(gen, errors::NONE, 0, &mut out);
    assert_eq!(g.state(), ClassicState::Stable);
    g.heartbeat("b", None, gen, REBALANCE as i64 - 1);
    g.heartbeat("a", None, gen, REBALANCE as i64 - 1);
    g.tick(REBALANCE as i64, &mut out);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    assert!(g.members().all(|m| m.id == "a"));
}

#[test]
fn a_failed_assignment_write_is_reported_to_the_syncing_members() {
    let mut g = stable_group(&["a", "b"]);
    let mut out = Vec::new();
    g.join(req("a", "unused", &["range"]), 0, &mut out);
    g.join(req("b", "unused", &["range"]), 0, &mut out);
    let gen = g.generation();
    out.clear();
    g.sync_group(sync("b", gen, &[]), 0, &mut out);
    g.sync_group(sync("a", gen, &[("a", "A"), ("b", "B")]), 0, &mut out);
    out.clear();
    g.assignment_persisted(gen, errors::COORDINATOR_NOT_AVAILABLE, 0, &mut out);
    let done = syncs(&out);
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|(_, r)| r.error == errors::COORDINATOR_NOT_AVAILABLE && r.assignment.is_empty()));
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
}

#[test]
fn persisted_group_comes_back_stable() {
    let g = stable_group(&["a", "b"]);
    let record = g.to_record();
    let back = ClassicGroup::from_record("g", &record, limits(0), 1000);
    assert_eq!(back.state(), ClassicState::Stable);
    assert_eq!(back.generation(), g.generation());
    assert_eq!(back.leader(), g.leader());
    let (protocol, members) = back.describe();
    assert_eq!(protocol, "range");
    assert_eq!(
        members.iter().map(|m| m.assignment.clone()).collect::<Vec<_>>(),
        vec![Bytes::from("a"), Bytes::from("b")]
    );
    let mut back = back;
    assert_eq!(back.heartbeat("a", None, g.generation(), 2000), errors::NONE);
}

/// Everyone in `ids` rejoins at `now`; returns the members of the join phase that
/// completes (empty if none did).
fn rejoin_all(g: &mut ClassicGroup, ids: &[&str], now: i64, out: &mut Vec<Action>) -> Vec<String> {
    out.clear();
    for id in ids {
        g.join(req(id, "unused", &["range"]), now, out);
    }
    joins(out)
        .iter()
        .find(|(_, r)| !r.members.is_empty())
        .map(|(_, r)| r.members.iter().map(|m| m.member_id.clone()).collect())
        .unwrap_or_default()
}

/// Syncs every member of the current generation (the first one leads) to Stable.
fn sync_all(g: &mut ClassicGroup, ids: &[&str], now: i64) {
    let gen = g.generation();
    let mut out = Vec::new();
    let leader = g.leader().unwrap().to_string();
    let assignments: Vec<(&str, &str)> = ids.iter().map(|id| (*id, *id)).collect();
    g.sync_group(sync(&leader, gen, &assignments), now, &mut out);
    g.assignment_persisted(gen, errors::NONE, now, &mut out);
    for id in ids {
        g.sync_group(sync(id, gen, &[]), now, &mut out);
    }
    assert_eq!(g.state(), ClassicState::Stable);
}

/// The join phases of the reported run were 3, 3, 2, 3 and 3 members. Only a member
/// leaving (its client closing) makes that sequence with live members: m0 leaves as
/// m3 arrives, so one phase has m1 and m2 alone. The leave is reported, and no phase
/// closed without a member that was still in the group.
#[test]
fn the_reported_three_three_two_three_three_sequence_is_a_member_leaving() {
    let mut g = stable_group(&["m0", "m1", "m2"]);
    let mut counts = vec![g.member_count()];
    let mut out = Vec::new();
    // The cooperative follow-up rebalance (revoking members rejoin with new metadata).
    counts.push(rejoin_all(&mut g, &["m0", "m1", "m2"], 10, &mut out).len());
    sync_all(&mut g, &["m0", "m1", "m2"], 10);
    // m0's client closes: LeaveGroup. m3 has only its id so far (pending).
    let mut out = Vec::new();
    assert_eq!(g.leave(&[("m0".into(), None)], 20, &mut out), Ok(vec![errors::NONE]));
    assert_eq!(changes(&out), vec![("m0", Reason::LeaveGroup)]);
    counts.push(rejoin_all(&mut g, &["m1", "m2"], 30, &mut out).len());
    sync_all(&mut g, &["m1", "m2"], 30);
    out.clear();
    join_new(&mut g, "m3", 40, &mut out);
    assert_eq!(changes(&out), vec![("m3", Reason::Joined)]);
    assert!(joins(&out).is_empty(), "m1 and m2 have not rejoined");
    counts.push(rejoin_all(&mut g, &["m1", "m2"], 50, &mut out).len());
    sync_all(&mut g, &["m1", "m2", "m3"], 50);
    counts.push(rejoin_all(&mut g, &["m1", "m2", "m3"], 60, &mut out).len());
    assert_eq!(counts, vec![3, 3, 2, 3, 3]);
    // m0 is told if it comes back with its old id.
    assert_eq!(g.heartbeat("m0", None, g.generation(), 70), errors::UNKNOWN_MEMBER_ID);
}

#[test]
fn a_join_phase_waits_for_a_late_member_until_the_rebalance_timeout() {
    let mut g = stable_group(&["a", "b", "c"]);
    let gen = g.generation();
    let mut out = Vec::new();
    join_new(&mut g, "d", 0, &mut out);
    g.join(req("a", "unused", &["range"]), 100, &mut out);
    g.join(req("b", "unused", &["range"]), 100, &mut out);
    // c keeps heartbeating but is slow to rejoin (a busy CPU): nothing closes the phase.
    for t in (150..REBALANCE as i64).step_by(50) {
        if t % 500 == 0 {
            assert_eq!(g.heartbeat("c", None, gen, t), errors::REBALANCE_IN_PROGRESS);
        }
        g.tick(t, &mut out);
    }
    assert!(joins(&out).is_empty());
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    g.join(req("c", "unused", &["range"]), REBALANCE as i64 - 1, &mut out);
    let done = joins(&out);
    assert_eq!(done.len(), 4);
    assert!(done.iter().all(|(_, r)| r.error == errors::NONE && r.generation == gen + 1));
    assert_eq!(changes(&out), vec![("d", Reason::Joined)]);
}

#[test]
fn a_member_slow_to_sync_keeps_its_place_and_is_told_of_a_new_rebalance() {
    let mut g = stable_group(&["a", "b", "c"]);
    let mut out = Vec::new();
    rejoin_all(&mut g, &["a", "b", "c"], 0, &mut out);
    let gen = g.generation();
    g.sync_group(sync("a", gen, &[("a", "A"), ("b", "B"), ("c", "C")]), 10, &mut out);
    g.assignment_persisted(gen, errors::NONE, 20, &mut out);
    g.sync_group(sync("b", gen, &[]), 20, &mut out);
    // c has its join response but does not sync for a while; it heartbeats.
    assert_eq!(g.state(), ClassicState::Stable, "{:?}", effects(&out));
    for t in (500..20_000).step_by(500) {
        for id in ["a", "b", "c"] {
            assert_eq!(g.heartbeat(id, None, gen, t), errors::NONE);
        }
        g.tick(t, &mut out);
    }
    assert_eq!(g.member_count(), 3);
    match g.sync_group(sync("c", gen, &[]), 20_000, &mut out) {
        SyncOutcome::Done(r) => assert_eq!((r.error, &r.assignment[..]), (errors::NONE, &b"C"[..])),
        other => panic!("{other:?}"),
    }
    // A rebalance starts while b has not synced its next generation: b is told.
    rejoin_all(&mut g, &["a", "b", "c"], 21_000, &mut out);
    let gen = g.generation();
    out.clear();
    assert_eq!(g.sync_group(sync("a", gen, &[]), 21_010, &mut out), SyncOutcome::Wait { member_id: "a".into() });
    join_new(&mut g, "d", 21_020, &mut out);
    let told: Vec<(&str, i16)> = syncs(&out).iter().map(|(id, r)| (*id, r.error)).collect();
    assert_eq!(told, vec![("a", errors::REBALANCE_IN_PROGRESS)]);
    match g.sync_group(sync("b", gen, &[]), 21_030, &mut out) {
        SyncOutcome::Done(r) => assert_eq!(r.error, errors::REBALANCE_IN_PROGRESS),
        other => panic!("{other:?}"),
    }
    assert!(changes(&out).iter().all(|(_, r)| *r == Reason::Joined));
}

#[test]
fn stalled_heartbeats_past_the_session_remove_the_member_and_it_is_told() {
    let mut g = stable_group(&["a", "b"]);
    let gen = g.generation();
    let mut out = Vec::new();
    // b stalls for less than its session: kept.
    for t in (500..=SESSION as i64 - 500).step_by(500) {
        g.heartbeat("a", None, gen, t);
        g.tick(t, &mut out);
    }
    assert_eq!(g.heartbeat("b", None, gen, SESSION as i64 - 500), errors::NONE);
    // Then for longer than its session: removed, reported, told on its next request.
    for t in (SESSION as i64..=2 * SESSION as i64).step_by(500) {
        g.heartbeat("a", None, gen, t);
        g.tick(t, &mut out);
    }
    assert_eq!(changes(&out), vec![("b", Reason::SessionExpired)]);
    assert_eq!(g.heartbeat("b", None, gen, 2 * SESSION as i64), errors::UNKNOWN_MEMBER_ID);
    assert_eq!(g.validate_offset_commit("b", None, gen), Err(errors::UNKNOWN_MEMBER_ID));
    match g.join(req("b", "unused", &["range"]), 2 * SESSION as i64, &mut out) {
        JoinOutcome::Done(r) => assert_eq!(r.error, errors::UNKNOWN_MEMBER_ID),
        other => panic!("{other:?}"),
    }
}

#[test]
fn members_dropped_at_the_timeouts_are_reported_and_told() {
    // Join phase: b never rejoins within the rebalance timeout.
    let mut g = stable_group(&["a", "b"]);
    let gen = g.generation();
    let mut out = Vec::new();
    g.join(req("a", "unused", &["range"]), 0, &mut out);
    for t in (500..REBALANCE as i64).step_by(500) {
        g.heartbeat("b", None, gen, t);
        g.tick(t, &mut out);
    }
    assert!(changes(&out).is_empty());
    g.tick(REBALANCE as i64, &mut out);
    assert_eq!(changes(&out), vec![("b", Reason::RebalanceTimeout)]);
    assert_eq!(g.heartbeat("b", None, gen, REBALANCE as i64 + 1), errors::UNKNOWN_MEMBER_ID);

    // Sync phase: b rejoins but never syncs within the rebalance timeout.
    let mut g = stable_group(&["a", "b"]);
    rejoin_all(&mut g, &["a", "b"], 0, &mut out);
    let gen = g.generation();
    g.sync_group(sync("a", gen, &[("a", "A")]), 0, &mut out);
    g.assignment_persisted(gen, errors::NONE, 0, &mut out);
    out.clear();
    for t in (500..=REBALANCE as i64).step_by(500) {
        g.heartbeat("b", None, gen, t);
        g.heartbeat("a", None, gen, t);
        g.tick(t, &mut out);
    }
    assert_eq!(changes(&out), vec![("b", Reason::SyncTimeout)]);
    match g.sync_group(sync("b", gen, &[]), REBALANCE as i64 + 1, &mut out) {
        SyncOutcome::Done(r) => assert_eq!(r.error, errors::UNKNOWN_MEMBER_ID),
        other => panic!("{other:?}"),
    }
}

/// Kafka holds an empty group's first join phase for the initial delay even when every
/// member has joined, and extends it while members keep arriving.
#[test]
fn the_initial_delay_holds_the_first_join_phase_even_when_all_joined() {
    let mut g = ClassicGroup::new("g", limits(3000), 0);
    let mut out = Vec::new();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        join_new(&mut g, id, i as i64 * 100, &mut out);
    }
    // A member whose JoinGroup timed out on the client sends it again.
    g.join(req("a", "unused", &["range"]), 500, &mut out);
    g.tick(2999, &mut out);
    assert!(joins(&out).is_empty());
    g.tick(3000, &mut out);
    assert!(joins(&out).is_empty(), "members arrived during the delay: extended");
    join_new(&mut g, "d", 4000, &mut out);
    g.tick(6000, &mut out);
    assert!(joins(&out).is_empty(), "d arrived during the extension");
    g.tick(9000, &mut out);
    let done = joins(&out);
    assert_eq!(done.len(), 4);
    assert!(done.iter().all(|(_, r)| r.generation == 1 && r.error == errors::NONE));
}

#[test]
fn a_replaced_static_member_is_reported_fenced() {
    let mut g = ClassicGroup::new("g", limits(0), 0);
    let mut out = Vec::new();
    let mut r = req("", "s-1", &["range"]);
    r.instance_id = Some("instance".into());
    g.join(r.clone(), 0, &mut out);
    out.clear();
    r.new_member_id = "s-2".into();
    g.join(r, 10, &mut out);
    assert_eq!(changes(&out), vec![("s-1", Reason::InstanceReplaced), ("s-2", Reason::Joined)]);
    assert_eq!(g.heartbeat("s-1", Some("instance"), g.generation(), 20), errors::FENCED_INSTANCE_ID);
}
