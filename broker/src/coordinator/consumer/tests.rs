//! KIP-848 scenarios: members join, converge, hand partitions over without ever
//! sharing one, and are fenced or expired.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::*;
use crate::errors;

struct Topics(BTreeMap<String, (Uuid, i32)>);

impl TopicLookup for Topics {
    fn topic_by_name(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0.get(name).copied()
    }
    fn topic_name(&self, id: &Uuid) -> Option<String> {
        self.0.iter().find(|(_, (i, _))| i == id).map(|(n, _)| n.clone())
    }
}

const SETTINGS: Settings = Settings { session_timeout_ms: 45_000, heartbeat_interval_ms: 5000 };

fn topics(partitions: i32) -> Topics {
    Topics(BTreeMap::from([("t".to_string(), (Uuid::from_u128(7), partitions))]))
}

/// A client's view of itself: id, epoch, owned partitions.
#[derive(Clone)]
struct Client {
    id: String,
    epoch: i32,
    owned: BTreeSet<i32>,
}

fn owned_list(c: &Client) -> Vec<(Uuid, Vec<i32>)> {
    if c.owned.is_empty() {
        Vec::new()
    } else {
        vec![(Uuid::from_u128(7), c.owned.iter().copied().collect())]
    }
}

fn join(g: &mut ConsumerGroup, t: &Topics, id: &str, now: i64) -> Client {
    let req = HeartbeatRequest {
        member_id: id.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 60_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Vec::new()),
        ..Default::default()
    };
    let (resp, _) = g.heartbeat(req, t, SETTINGS, now).unwrap();
    let mut c = Client { id: id.into(), epoch: 0, owned: BTreeSet::new() };
    apply(&mut c, &resp);
    c
}

/// A heartbeat as the Java client sends it: it reports its owned partitions, then
/// applies the answer (revoking first, then taking the new ones).
fn beat(g: &mut ConsumerGroup, t: &Topics, c: &mut Client, now: i64) -> HeartbeatResponse {
    let req = HeartbeatRequest {
        member_id: c.id.clone(),
        member_epoch: c.epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned_list(c)),
        ..Default::default()
    };
    let (resp, _) = g.heartbeat(req, t, SETTINGS, now).unwrap();
    apply(c, &resp);
    resp
}

fn apply(c: &mut Client, resp: &HeartbeatResponse) {
    c.epoch = resp.member_epoch;
    if let Some(a) = &resp.assignment {
        c.owned = a.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    }
}

fn assert_exclusive(clients: &[Client], total: usize) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for p in &c.owned {
            assert!(seen.insert(*p), "partition {p} owned twice");
        }
    }
    assert!(seen.len() <= total);
}

#[test]
fn three_members_then_a_fourth_converge_without_sharing_partitions() {
    let t = topics(12);
    let mut g = ConsumerGroup::new("g", 0);
    let mut clients: Vec<Client> = ["a", "b", "c"].iter().map(|id| join(&mut g, &t, id, 0)).collect();
    for now in 1..4 {
        for i in 0..clients.len() {
            beat(&mut g, &t, &mut clients[i], now);
            assert_exclusive(&clients, 12);
        }
    }
    assert_eq!(g.state_name(), "Stable");
    assert!(clients.iter().all(|m| m.owned.len() == 4));
    clients.push(join(&mut g, &t, "d", 10));
    assert!(clients[3].owned.is_empty(), "everything is still owned by others");
    assert_eq!(g.state_name(), "Reconciling");
    let mut rounds = 0;
    while clients.iter().any(|m| m.owned.len() != 3) {
        rounds += 1;
        assert!(rounds < 5, "did not converge");
        for i in 0..clients.len() {
            beat(&mut g, &t, &mut clients[i], 10 + rounds);
            assert_exclusive(&clients, 12);
        }
    }
    for c in clients.iter_mut() {
        beat(&mut g, &t, c, 100);
    }
    assert_eq!(g.state_name(), "Stable");
    let epochs: BTreeSet<i32> = clients.iter().map(|m| m.epoch).collect();
    assert_eq!(epochs.len(), 1, "all at the target epoch");
}

#[test]
fn a_member_that_stops_heartbeating_expires_and_its_partitions_move() {
    let t = topics(4);
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = join(&mut g, &t, "a", 0);
    let mut b = join(&mut g, &t, "b", 0);
    for now in 1..3 {
        beat(&mut g, &t, &mut a, now);
        beat(&mut g, &t, &mut b, now);
    }
    assert_eq!((a.owned.len(), b.owned.len()), (2, 2));
    beat(&mut g, &t, &mut a, 40_000);
    assert!(!g.tick(45_001), "b's last heartbeat was at 2: its session ends at 45002");
    assert!(g.tick(45_002));
    assert_eq!(g.member_count(), 1);
    let resp = beat(&mut g, &t, &mut a, 45_002);
    assert_eq!(a.owned.len(), 4);
    assert!(resp.member_epoch > 0);
}

#[test]
fn epochs_are_checked() {
    let t = topics(2);
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = join(&mut g, &t, "a", 0);
    beat(&mut g, &t, &mut a, 1);
    let ahead = HeartbeatRequest {
        member_id: "a".into(),
        member_epoch: a.epoch + 1,
        rebalance_timeout_ms: -1,
        ..Default::default()
    };
    assert_eq!(g.heartbeat(ahead, &t, SETTINGS, 2).unwrap_err().0, errors::FENCED_MEMBER_EPOCH);
    let unknown =
        HeartbeatRequest { member_id: "x".into(), member_epoch: 3, rebalance_timeout_ms: -1, ..Default::default() };
    assert_eq!(g.heartbeat(unknown, &t, SETTINGS, 2).unwrap_err().0, errors::UNKNOWN_MEMBER_ID);
    assert_eq!(g.validate_offset_commit("a", a.epoch, 9), Ok(()));
    assert_eq!(g.validate_offset_commit("a", a.epoch - 1, 9), Err(errors::STALE_MEMBER_EPOCH));
    assert_eq!(g.validate_offset_commit("a", a.epoch, 8), Err(errors::UNSUPPORTED_VERSION));
    assert_eq!(g.validate_offset_commit("", -1, 9), Err(errors::UNKNOWN_MEMBER_ID));
    let leave = HeartbeatRequest { member_id: "a".into(), member_epoch: -1, ..Default::default() };
    let (resp, moved) = g.heartbeat(leave, &t, SETTINGS, 3).unwrap();
    assert_eq!((resp.member_epoch, moved), (-1, true));
    assert_eq!(g.state_name(), "Empty");
    assert_eq!(g.validate_offset_commit("", -1, 9), Ok(()));
}

#[test]
fn new_partitions_bump_the_epoch_and_are_assigned() {
    let mut t = topics(2);
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = join(&mut g, &t, "a", 0);
    let before = g.epoch();
    t.0.get_mut("t").unwrap().1 = 3;
    beat(&mut g, &t, &mut a, 1);
    assert!(g.epoch() > before);
    assert_eq!(a.owned, BTreeSet::from([0, 1, 2]));
}

#[test]
fn unknown_assignor_and_regex_are_refused() {
    let t = topics(1);
    let mut g = ConsumerGroup::new("g", 0);
    let req = HeartbeatRequest {
        member_id: "a".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 1000,
        subscribed_topic_names: Some(vec!["t".into()]),
        server_assignor: Some("sticky".into()),
        ..Default::default()
    };
    assert_eq!(g.heartbeat(req.clone(), &t, SETTINGS, 0).unwrap_err().0, errors::UNSUPPORTED_ASSIGNOR);
    let req = HeartbeatRequest { server_assignor: Some("range".into()), ..req };
    let (resp, _) = g.heartbeat(req, &t, SETTINGS, 0).unwrap();
    assert_eq!(resp.assignment.unwrap().len(), 1);
    assert_eq!(g.describe().assignor, "range");
}
