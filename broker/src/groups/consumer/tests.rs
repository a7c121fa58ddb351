//! KIP-848 scenarios: members join, converge, hand partitions over without ever
//! sharing one, and are fenced or expired.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::*;
use crate::errors;
use crate::groups::membership::Reason;

struct Topics(BTreeMap<String, (Uuid, i32)>);

impl TopicLookup for Topics {
    fn topic_by_name(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0.get(name).copied()
    }
    fn topic_name(&self, id: &Uuid) -> Option<String> {
        self.0.iter().find(|(_, (i, _))| i == id).map(|(n, _)| n.clone())
    }
    fn topic_names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn version(&self) -> u64 {
        // Any change of the topics is a new version.
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.0.hash(&mut h);
        h.finish()
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
fn unknown_assignors_are_refused() {
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

/// A heartbeat whose answer the client applies only later (a slow client): returns the
/// answer to apply.
fn beat_late(g: &mut ConsumerGroup, t: &Topics, c: &Client, now: i64) -> Result<HeartbeatResponse, i16> {
    let req = HeartbeatRequest {
        member_id: c.id.clone(),
        member_epoch: c.epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned_list(c)),
        ..Default::default()
    };
    g.heartbeat(req, t, SETTINGS, now).map(|(resp, _)| resp).map_err(|(code, _)| code)
}

fn three_stable_and_a_fourth(t: &Topics, g: &mut ConsumerGroup) -> Vec<Client> {
    let mut clients: Vec<Client> = ["a", "b", "c"].iter().map(|id| join(g, t, id, 0)).collect();
    for now in 1..4 {
        for c in clients.iter_mut() {
            beat(g, t, c, now);
        }
    }
    clients.push(join(g, t, "d", 10));
    clients
}

#[test]
fn a_partition_moves_only_after_its_owner_revokes_even_when_the_owner_is_slow() {
    let t = topics(12);
    let mut g = ConsumerGroup::new("g", 0);
    let mut clients = three_stable_and_a_fourth(&t, &mut g);
    // a is told to give partitions up, but applies the answer only much later; b, c and
    // d keep heartbeating meanwhile: none of a's partitions may reach d.
    let late = beat_late(&mut g, &t, &clients[0], 20).unwrap();
    for now in 21..40 {
        for i in 1..4 {
            beat(&mut g, &t, &mut clients[i], now);
            assert_exclusive(&clients, 12);
        }
    }
    // a still reports them (its revocation is slow): still withheld.
    beat_late(&mut g, &t, &clients[0], 40).unwrap();
    beat(&mut g, &t, &mut clients[3], 41);
    assert_exclusive(&clients, 12);
    apply(&mut clients[0], &late);
    assert_exclusive(&clients, 12);
    let mut now = 50;
    while clients.iter().any(|m| m.owned.len() != 3) {
        now += 1;
        assert!(now < 60, "did not converge");
        for i in 0..4 {
            beat(&mut g, &t, &mut clients[i], now);
            assert_exclusive(&clients, 12);
        }
    }
}

#[test]
fn a_member_that_never_revokes_is_removed_at_its_rebalance_timeout_and_reported() {
    let t = topics(12);
    let mut g = ConsumerGroup::new("g", 0);
    let mut clients = three_stable_and_a_fourth(&t, &mut g);
    g.take_changes();
    // a is told to revoke but keeps reporting its partitions, heartbeating on time.
    beat_late(&mut g, &t, &clients[0], 20).unwrap();
    let mut now = 20;
    while now + 5000 < 20 + 60_000 {
        now += 5000;
        beat_late(&mut g, &t, &clients[0], now).unwrap();
        for c in clients.iter_mut().skip(1) {
            beat(&mut g, &t, c, now);
        }
        assert!(!g.tick(now));
        assert_exclusive(&clients, 12);
    }
    assert!(g.tick(20 + 60_000));
    let changes: Vec<(String, Reason)> = g.take_changes().into_iter().map(|c| (c.member_id, c.reason)).collect();
    assert_eq!(changes, vec![("a".to_string(), Reason::RevocationTimeout)]);
    assert_eq!(beat_late(&mut g, &t, &clients[0], now + 1).unwrap_err(), errors::UNKNOWN_MEMBER_ID);
}

/// Seeded: members heartbeat in random order, some apply their answers late; no
/// partition ever has two owners, and the group converges.
#[test]
fn slow_members_never_share_a_partition_seeded() {
    for seed in 1..200u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut below = |n: u64| {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        };
        let t = topics(12);
        let mut g = ConsumerGroup::new("g", 0);
        let mut clients = three_stable_and_a_fourth(&t, &mut g);
        let mut late: Vec<Option<HeartbeatResponse>> = vec![None; 4];
        let mut now = 20;
        while clients.iter().any(|m| m.owned.len() != 3) || late.iter().any(Option::is_some) {
            now += 1;
            assert!(now < 2000, "seed {seed}: did not converge");
            let i = below(4) as usize;
            if let Some(resp) = late[i].take() {
                apply(&mut clients[i], &resp);
            } else {
                let resp = beat_late(&mut g, &t, &clients[i], now).unwrap();
                if below(3) == 0 {
                    late[i] = Some(resp);
                } else {
                    apply(&mut clients[i], &resp);
                }
            }
            assert_exclusive(&clients, 12);
        }
    }
}

/// A member joining with `regex` as its subscription.
fn regex_join(regex: &str) -> HeartbeatRequest {
    HeartbeatRequest {
        member_id: "a".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 60_000,
        subscribed_topic_regex: Some(regex.into()),
        owned: Some(Vec::new()),
        ..Default::default()
    }
}

/// Member "a"'s heartbeat at `epoch`, owning `owned` (topic ids as numbers).
fn owning(epoch: i32, owned: &[(u128, &[i32])]) -> HeartbeatRequest {
    HeartbeatRequest {
        member_id: "a".into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned.iter().map(|(t, p)| (Uuid::from_u128(*t), p.to_vec())).collect()),
        ..Default::default()
    }
}

/// A member's regex is matched against whole topic names (as RE2J's `matches()`), the
/// internal ones too; a topic created later that it matches is assigned at the next
/// heartbeat, with a new group epoch; a topic that no longer exists leaves it.
#[test]
fn a_regex_subscription_follows_the_topics_it_matches() {
    let topic = |id: u128, n: i32| (Uuid::from_u128(id), n);
    let mut t = Topics(BTreeMap::from([
        ("orders".to_string(), topic(1, 2)),
        ("orders-v2".to_string(), topic(2, 1)),
        ("xorders".to_string(), topic(3, 1)),
        ("__consumer_offsets".to_string(), topic(4, 1)),
    ]));
    let mut g = ConsumerGroup::new("g", 0);
    let (resp, _) = g.heartbeat(regex_join("orders.*|__consumer_offsets"), &t, SETTINGS, 0).unwrap();
    let assigned = |resp: &HeartbeatResponse| -> BTreeMap<u128, usize> {
        resp.assignment.as_ref().unwrap().iter().map(|(id, p)| (id.as_u128(), p.len())).collect()
    };
    // orders (2 partitions), orders-v2 and __consumer_offsets; not xorders.
    assert_eq!(assigned(&resp), BTreeMap::from([(1, 2), (2, 1), (4, 1)]));
    let epoch = g.epoch();
    let described = g.describe();
    assert_eq!(described.members[0].subscribed_topic_regex.as_deref(), Some("orders.*|__consumer_offsets"));
    assert!(described.members[0].subscribed_topic_names.is_empty());

    // A new matching topic, and one gone.
    t.0.insert("orders-eu".to_string(), topic(5, 3));
    t.0.remove("orders-v2");
    let req = owning(resp.member_epoch, &[(1, &[0, 1]), (2, &[0]), (4, &[0])]);
    let (resp, moved) = g.heartbeat(req, &t, SETTINGS, 1).unwrap();
    assert!(moved && g.epoch() > epoch, "the group epoch moves with the regex's matches");
    // The gone topic's partition is revoked first, then the new topic's are assigned.
    assert_eq!(assigned(&resp), BTreeMap::from([(1, 2), (4, 1)]));
    let (resp, _) = g.heartbeat(owning(resp.member_epoch, &[(1, &[0, 1]), (4, &[0])]), &t, SETTINGS, 1).unwrap();
    assert_eq!(assigned(&resp), BTreeMap::from([(1, 2), (4, 1), (5, 3)]));

    // Back to names only: an empty regex clears it.
    let req = HeartbeatRequest {
        subscribed_topic_names: Some(vec!["xorders".into()]),
        subscribed_topic_regex: Some(String::new()),
        ..owning(resp.member_epoch, &[(1, &[0, 1]), (4, &[0]), (5, &[0, 1, 2])])
    };
    let (resp, _) = g.heartbeat(req, &t, SETTINGS, 2).unwrap();
    assert_eq!(resp.assignment.as_ref().map(Vec::len), Some(0), "everything revoked first");
    assert_eq!(g.subscribed_topics(), BTreeSet::from(["xorders".to_string()]));
}

#[test]
fn an_invalid_regex_is_refused_with_kafkas_error() {
    let t = topics(1);
    let mut g = ConsumerGroup::new("g", 0);
    let (code, message) = g.heartbeat(regex_join("orders("), &t, SETTINGS, 0).unwrap_err();
    assert_eq!(code, errors::INVALID_REGULAR_EXPRESSION);
    assert!(message.starts_with("SubscribedTopicRegex `orders(` is not a valid regular expression"), "{message}");
    assert_eq!(g.member_count(), 0);
}
