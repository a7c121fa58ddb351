//! Seeded simulations of slow clients: a group of three members, then a fourth, driven
//! through the state machine by client models that answer late, join late, sync late
//! and stall their heartbeats (all below the session and rebalance timeouts), with the
//! initial rebalance delay on or off, for the eager and the cooperative protocols.
//!
//! What must hold for every seed: no member is removed or fenced (every one stays
//! alive), no partition is ever owned by two clients at once, every join phase after
//! the fourth member arrives includes all four, and the group ends stable with each
//! partition owned exactly once. A failing seed replays exactly.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::*;
use crate::errors;
use crate::groups::membership::Reason;

const PARTITIONS: i32 = 12;
const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;
const HEARTBEAT_INTERVAL_MS: i64 = 500;
const STEP_MS: i64 = 10;
/// The shell's timer period.
const TICK_MS: i64 = 50;
const SIMULATED_MS_MAX: i64 = 240_000;

/// xorshift64*: enough randomness for delays, and replayable from its seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: i64) -> i64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1) as u64) as i64
    }
}

/// How slow the clients and the broker's writes are, at most.
#[derive(Clone, Copy)]
struct Slowness {
    /// Between receiving a response and acting on it (a slow JoinGroup → SyncGroup).
    response_ms_max: i64,
    /// A client's heartbeats stop for up to this long, once.
    heartbeat_stall_ms_max: i64,
    /// The fourth member's second JoinGroup (with its id) comes this late.
    late_join_ms_max: i64,
    /// Writing the leader's assignment.
    persist_ms_max: i64,
    initial_delay_ms: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not started yet.
    Off,
    /// Must send JoinGroup.
    Rejoin,
    Joining,
    Syncing,
    Stable,
}

enum Response {
    Join(JoinResult),
    Sync(SyncResult),
}

struct Client {
    name: String,
    id: String,
    generation: i32,
    phase: Phase,
    /// Partitions it processes now.
    owned: BTreeSet<i32>,
    /// Answers it received and will act on at `act_at_ms`.
    inbox: Option<Response>,
    act_at_ms: i64,
    last_heartbeat_ms: i64,
    stall: (i64, i64),
    ids_made: usize,
}

fn encode(parts: &BTreeSet<i32>) -> Bytes {
    Bytes::from(parts.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
}

fn decode(b: &[u8]) -> BTreeSet<i32> {
    std::str::from_utf8(b).unwrap().split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

struct Sim {
    group: ClassicGroup,
    clients: Vec<Client>,
    cooperative: bool,
    rng: Rng,
    slow: Slowness,
    now: i64,
    /// (generation, when) of assignment writes in flight.
    persisting: Vec<(i32, i64)>,
    /// (generation, members) of every completed join phase.
    join_phases: Vec<(i32, usize)>,
    changes: Vec<(String, Reason)>,
    log: Vec<String>,
}

impl Sim {
    fn new(seed: u64, cooperative: bool, slow: Slowness) -> Sim {
        let limits = Limits {
            session_timeout_min_ms: 6000,
            session_timeout_max_ms: 1_800_000,
            initial_rebalance_delay_ms: slow.initial_delay_ms,
        };
        let clients = (0..4)
            .map(|i| Client {
                name: format!("m{i}"),
                id: String::new(),
                generation: -1,
                phase: Phase::Off,
                owned: BTreeSet::new(),
                inbox: None,
                act_at_ms: 0,
                last_heartbeat_ms: 0,
                stall: (0, 0),
                ids_made: 0,
            })
            .collect();
        Sim {
            group: ClassicGroup::new("g", limits, 0),
            clients,
            cooperative,
            rng: Rng::new(seed),
            slow,
            now: 0,
            persisting: Vec::new(),
            join_phases: Vec::new(),
            changes: Vec::new(),
            log: Vec::new(),
        }
    }

    fn protocols(&self, c: usize) -> Vec<Protocol> {
        let (name, metadata) = if self.cooperative {
            // The cooperative protocol's metadata carries the partitions the member owns.
            ("cooperative-sticky", encode(&self.clients[c].owned))
        } else {
            ("range", Bytes::new())
        };
        vec![Protocol { name: name.into(), metadata }]
    }

    fn start(&mut self, c: usize) {
        let stall_at = self.now + self.rng.below(20_000);
        let stall_for = self.rng.below(self.slow.heartbeat_stall_ms_max);
        let client = &mut self.clients[c];
        client.phase = Phase::Rejoin;
        client.act_at_ms = self.now;
        client.stall = (stall_at, stall_at + stall_for);
    }

    fn response_delay(&mut self) -> i64 {
        self.rng.below(self.slow.response_ms_max)
    }

    /// The leader's assignment: partitions dealt round-robin over the sorted members;
    /// with the cooperative protocol a partition another member still owns is withheld
    /// until that member has revoked it.
    fn assign(&self, members: &[JoinMember]) -> Vec<(String, Bytes)> {
        let mut ids: Vec<&str> = members.iter().map(|m| m.member_id.as_str()).collect();
        ids.sort();
        let owner_now: BTreeMap<i32, &str> = members
            .iter()
            .flat_map(|m| decode(&m.metadata).into_iter().map(move |p| (p, m.member_id.as_str())))
            .collect();
        let mut out: BTreeMap<&str, BTreeSet<i32>> = ids.iter().map(|id| (*id, BTreeSet::new())).collect();
        for p in 0..PARTITIONS {
            let target = ids[p as usize % ids.len()];
            let withheld = self.cooperative && owner_now.get(&p).is_some_and(|o| *o != target);
            if !withheld {
                out.get_mut(target).unwrap().insert(p);
            }
        }
        out.into_iter().map(|(id, parts)| (id.to_string(), encode(&parts))).collect()
    }

    fn join_request(&mut self, c: usize, new_id: String) -> JoinRequest {
        JoinRequest {
            member_id: self.clients[c].id.clone(),
            client_id: self.clients[c].name.clone(),
            session_timeout_ms: SESSION_MS,
            rebalance_timeout_ms: REBALANCE_MS,
            protocol_type: "consumer".into(),
            protocols: self.protocols(c),
            require_known_member_id: true,
            supports_skip_assignment: true,
            new_member_id: new_id,
            ..Default::default()
        }
    }

    /// The client gives up its partitions: all of them (eager, or lost), or none
    /// (cooperative, which keeps consuming while it rejoins).
    fn rejoin(&mut self, c: usize, lost: bool, delay: i64) {
        let cooperative = self.cooperative;
        let client = &mut self.clients[c];
        if lost || !cooperative {
            client.owned.clear();
        }
        client.phase = Phase::Rejoin;
        client.act_at_ms = self.now + delay;
    }

    fn send_join(&mut self, c: usize) {
        let new_id = format!("{}-{}", self.clients[c].name, self.clients[c].ids_made);
        self.clients[c].ids_made += 1;
        let req = self.join_request(c, new_id);
        let mut out = Vec::new();
        let outcome = self.group.join(req, self.now, &mut out);
        self.clients[c].phase = Phase::Joining;
        if let JoinOutcome::Done(r) = outcome {
            self.clients[c].inbox = Some(Response::Join(r));
            self.clients[c].act_at_ms = self.now;
        }
        self.apply(out);
    }

    fn on_join(&mut self, c: usize, r: JoinResult) {
        match r.error {
            errors::NONE => {
                let client = &mut self.clients[c];
                client.generation = r.generation;
                let assignments = if r.leader == client.id { self.assign(&r.members) } else { Vec::new() };
                let client = &self.clients[c];
                let req = SyncRequest {
                    member_id: client.id.clone(),
                    generation: client.generation,
                    assignments,
                    ..Default::default()
                };
                let mut out = Vec::new();
                let outcome = self.group.sync_group(req, self.now, &mut out);
                self.clients[c].phase = Phase::Syncing;
                if let SyncOutcome::Done(r) = outcome {
                    self.clients[c].inbox = Some(Response::Sync(r));
                    self.clients[c].act_at_ms = self.now;
                }
                self.apply(out);
            }
            errors::MEMBER_ID_REQUIRED => {
                self.clients[c].id = r.member_id;
                let late = if c == 3 { self.rng.below(self.slow.late_join_ms_max) } else { 0 };
                self.rejoin(c, false, late);
            }
            errors::UNKNOWN_MEMBER_ID => {
                self.clients[c].id.clear();
                self.rejoin(c, true, 0);
            }
            errors::REBALANCE_IN_PROGRESS => self.rejoin(c, false, 0),
            code => panic!("{}: unexpected JoinGroup error {code}", self.clients[c].name),
        }
    }

    fn on_sync(&mut self, c: usize, r: SyncResult) {
        match r.error {
            errors::NONE => {
                let assigned = decode(&r.assignment);
                let revoked = self.clients[c].owned.difference(&assigned).count() > 0;
                let client = &mut self.clients[c];
                client.last_heartbeat_ms = self.now;
                client.phase = Phase::Stable;
                if self.cooperative {
                    // Revoke what was taken away first, then rejoin to let it move.
                    client.owned.retain(|p| assigned.contains(p));
                    client.owned.extend(assigned);
                    if revoked {
                        self.rejoin(c, false, 0);
                    }
                } else {
                    client.owned = assigned;
                }
            }
            errors::REBALANCE_IN_PROGRESS => self.rejoin(c, false, 0),
            errors::ILLEGAL_GENERATION => self.rejoin(c, true, 0),
            errors::UNKNOWN_MEMBER_ID => {
                self.clients[c].id.clear();
                self.rejoin(c, true, 0);
            }
            code => panic!("{}: unexpected SyncGroup error {code}", self.clients[c].name),
        }
    }

    fn heartbeat(&mut self, c: usize) {
        let client = &self.clients[c];
        let code = self.group.heartbeat(&client.id, None, client.generation, self.now);
        self.clients[c].last_heartbeat_ms = self.now;
        match code {
            errors::NONE => {}
            errors::REBALANCE_IN_PROGRESS => {
                let delay = self.response_delay();
                self.rejoin(c, false, delay);
            }
            errors::ILLEGAL_GENERATION => self.rejoin(c, true, 0),
            errors::UNKNOWN_MEMBER_ID => {
                self.clients[c].id.clear();
                self.rejoin(c, true, 0);
            }
            code => panic!("{}: unexpected Heartbeat error {code}", self.clients[c].name),
        }
    }

    /// Carries out the machine's actions as the shell does, with slow writes.
    fn apply(&mut self, out: Vec<Action>) {
        for action in out {
            match action {
                Action::CompleteJoin { member_id, result } => {
                    if result.error == errors::NONE && result.leader == member_id {
                        self.join_phases.push((result.generation, self.group.member_count()));
                    }
                    let delay = self.response_delay();
                    self.deliver(&member_id, Phase::Joining, Response::Join(result), delay);
                }
                Action::CompleteSync { member_id, result } => {
                    let delay = self.response_delay();
                    self.deliver(&member_id, Phase::Syncing, Response::Sync(result), delay);
                }
                Action::Persist { assignment_of: Some(generation) } => {
                    let at = self.now + self.rng.below(self.slow.persist_ms_max);
                    self.persisting.push((generation, at));
                }
                Action::Persist { assignment_of: None } => {}
                Action::Membership(change) => self.changes.push((change.member_id, change.reason)),
            }
        }
    }

    fn deliver(&mut self, member_id: &str, waiting: Phase, response: Response, delay: i64) {
        let c = self.clients.iter().position(|c| c.id == member_id && c.phase == waiting);
        let c = c.unwrap_or_else(|| panic!("an answer for {member_id}, which is not waiting for it: {:?}", self.log));
        self.clients[c].inbox = Some(response);
        self.clients[c].act_at_ms = self.now + delay;
    }

    fn step(&mut self) {
        if self.now % TICK_MS == 0 {
            let mut out = Vec::new();
            self.group.tick(self.now, &mut out);
            self.apply(out);
        }
        let written: Vec<i32> = self.persisting.iter().filter(|(_, at)| *at <= self.now).map(|(g, _)| *g).collect();
        self.persisting.retain(|(_, at)| *at > self.now);
        for generation in written {
            let mut out = Vec::new();
            self.group.assignment_persisted(generation, errors::NONE, self.now, &mut out);
            self.apply(out);
        }
        for c in 0..self.clients.len() {
            if self.clients[c].phase == Phase::Off || self.clients[c].act_at_ms > self.now {
                continue;
            }
            if let Some(response) = self.clients[c].inbox.take() {
                match response {
                    Response::Join(r) => self.on_join(c, r),
                    Response::Sync(r) => self.on_sync(c, r),
                }
                continue;
            }
            let (stall_from, stall_to) = self.clients[c].stall;
            let stalled = (stall_from..stall_to).contains(&self.now);
            match self.clients[c].phase {
                Phase::Rejoin => self.send_join(c),
                Phase::Stable if !stalled && self.now - self.clients[c].last_heartbeat_ms >= HEARTBEAT_INTERVAL_MS => {
                    self.heartbeat(c)
                }
                _ => {}
            }
        }
        self.check_exclusive();
        self.now += STEP_MS;
    }

    fn check_exclusive(&self) {
        let mut seen = BTreeMap::new();
        for c in &self.clients {
            for p in &c.owned {
                if let Some(other) = seen.insert(*p, &c.name) {
                    panic!("at {} ms partition {p} is owned by {other} and {}: {:?}", self.now, c.name, self.summary());
                }
            }
        }
    }

    /// Every started client stable in the group's generation, the partitions owned once.
    fn settled(&self, members: usize) -> bool {
        let on: Vec<&Client> = self.clients.iter().filter(|c| c.phase != Phase::Off).collect();
        let owned: usize = on.iter().map(|c| c.owned.len()).sum();
        self.group.state() == ClassicState::Stable
            && on.len() == members
            && on.iter().all(|c| c.phase == Phase::Stable && c.generation == self.group.generation())
            && on.iter().all(|c| c.owned.len() == PARTITIONS as usize / members)
            && owned == PARTITIONS as usize
    }

    fn run_until_settled(&mut self, members: usize) {
        while !self.settled(members) {
            assert!(self.now < SIMULATED_MS_MAX, "never settled with {members} members: {:?}", self.summary());
            self.step();
        }
    }

    fn summary(&self) -> String {
        let clients: Vec<String> = self
            .clients
            .iter()
            .map(|c| format!("{}({}) {:?} gen {} owns {:?}", c.name, c.id, c.phase, c.generation, c.owned))
            .collect();
        format!(
            "state {:?} gen {}; {}; join phases {:?}; changes {:?}",
            self.group.state(),
            self.group.generation(),
            clients.join("; "),
            self.join_phases,
            self.changes
        )
    }
}

/// Three members settle, a fourth joins; returns the member counts of the join phases
/// completed after the fourth arrived.
fn three_then_four(seed: u64, cooperative: bool, slow: Slowness) -> Vec<usize> {
    let mut sim = Sim::new(seed, cooperative, slow);
    for c in 0..3 {
        sim.start(c);
        let stagger = sim.rng.below(300);
        for _ in 0..stagger / STEP_MS {
            sim.step();
        }
    }
    sim.run_until_settled(3);
    let before = sim.join_phases.len();
    sim.start(3);
    sim.run_until_settled(4);
    let removed: Vec<_> = sim.changes.iter().filter(|(_, r)| *r != Reason::Joined).collect();
    assert!(removed.is_empty(), "seed {seed}: members dropped: {removed:?}; {}", sim.summary());
    let after: Vec<usize> = sim.join_phases[before..].iter().map(|(_, n)| *n).collect();
    // The fourth member's first join phase may close before it arrives only if its
    // join is still pending; every phase it was part of had all four.
    assert!(after.last() == Some(&4), "seed {seed}: {}", sim.summary());
    let first_with_four = after.iter().position(|n| *n == 4).unwrap();
    assert!(after[first_with_four..].iter().all(|n| *n == 4), "seed {seed}: {after:?}: {}", sim.summary());
    after
}

const SLOW: Slowness = Slowness {
    response_ms_max: 3000,
    heartbeat_stall_ms_max: 6000,
    late_join_ms_max: 5000,
    persist_ms_max: 500,
    initial_delay_ms: 0,
};

#[test]
fn slow_eager_members_are_never_dropped_before_their_timeouts() {
    for seed in 0..200 {
        three_then_four(seed, false, SLOW);
        three_then_four(seed, false, Slowness { initial_delay_ms: 3000, ..SLOW });
    }
}

#[test]
fn slow_cooperative_members_are_never_dropped_and_never_share_a_partition() {
    for seed in 0..200 {
        three_then_four(seed, true, SLOW);
        three_then_four(seed, true, Slowness { initial_delay_ms: 3000, ..SLOW });
    }
}
