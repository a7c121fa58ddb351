//! A deterministic simulator for `MultiRaft`: N nodes, several groups each, an in-memory
//! network and disk under one seeded RNG. Everything random comes from the seed, including
//! the nodes' election timeouts, so a failing seed replays exactly.
//!
//! Time is counted in steps; a Raft tick is `TICK_STEPS` steps. A run has a chaotic
//! phase (message loss, duplication, delay and reordering, partitions, paused processes,
//! crashes that lose everything not yet fsynced) and then a calm phase (healed network,
//! every node up and running, no loss) in which every group must elect a leader and commit
//! a new proposal within a bound.

pub mod checker;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use keel_raft::{
    Actions, ConfState, Config, Entry, FetchRequest, GroupId, GroupStorage, Message, MultiRaft, NodeId, PersistRequest,
    PersistedGroup, ProposeError, StateRole, BATCH_HEADER_BYTES,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use checker::{log_matching, Checker, Violation};

const TICK_STEPS: u64 = 5;
const GROUPS: u32 = 3;
const CHAOS_STEPS: u64 = 3_000;
/// Ticks the calm phase may take to elect and commit in every group: the longest election
/// timeout is 2 × 10 ticks; allow several elections plus the catch-up of a lagging node.
const LIVENESS_TICKS: u64 = 200;
const CHECK_EVERY_STEPS: u64 = 100;

/// What varies between seeds besides the seed-driven choices.
#[derive(Debug)]
struct Faults {
    loss: f64,
    duplication: f64,
    delay_steps_max: u64,
    crash: f64,
    /// A process stopped (SIGSTOP) keeps its state and its inbound messages wait.
    pause: f64,
    partition: f64,
    heal: f64,
    fsync: f64,
    propose: f64,
    /// A group's in-memory budget: small, so appends often read entries back.
    log_memory_bytes: u64,
}

impl Faults {
    fn draw(rng: &mut StdRng) -> Self {
        Self {
            loss: rng.gen_range(0.0..0.2),
            duplication: rng.gen_range(0.0..0.1),
            delay_steps_max: rng.gen_range(1..15),
            crash: rng.gen_range(0.0..0.004),
            pause: rng.gen_range(0.0..0.004),
            partition: rng.gen_range(0.0..0.004),
            heal: rng.gen_range(0.002..0.01),
            fsync: rng.gen_range(0.2..0.9),
            propose: rng.gen_range(0.05..0.5),
            log_memory_bytes: rng.gen_range(0..2_000),
        }
    }
}

struct Packet {
    from: NodeId,
    to: NodeId,
    group: GroupId,
    message: Message,
}

struct Node {
    id: NodeId,
    /// `None` while crashed.
    raft: Option<MultiRaft>,
    /// What survived every fsync: the only state a crash keeps.
    disk: BTreeMap<GroupId, PersistedGroup>,
    /// Handed over by `collect`, not yet fsynced.
    writes: VecDeque<PersistRequest>,
    /// Released entries to read back from `disk`, not yet answered.
    fetches: Vec<FetchRequest>,
    restart_at: u64,
    /// Stopped until this step: neither ticks, nor fsyncs, nor reads its messages.
    paused_until: u64,
    boots: u64,
}

/// What one run did, to compare two runs of one seed and to report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub committed: usize,
    pub elections: usize,
    pub crashes: u64,
    pub pauses: u64,
    /// Writes that cut a durable log tail (a deposed leader's entries overwritten).
    pub truncations: u64,
    pub delivered: u64,
    pub calm_ticks: u64,
}

pub struct Simulation {
    seed: u64,
    rng: StdRng,
    faults: Faults,
    nodes: Vec<Node>,
    groups: Vec<GroupId>,
    in_flight: BTreeMap<u64, Vec<Packet>>,
    cut: BTreeSet<(NodeId, NodeId)>,
    checker: Checker,
    step: u64,
    payload_counter: u64,
    outcome: Outcome,
}

impl Simulation {
    pub fn new(seed: u64, node_count: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let faults = Faults::draw(&mut rng);
        let groups: Vec<GroupId> = (0..GROUPS).map(|partition| GroupId { topic: 0xfeed, partition }).collect();
        let voters: Vec<NodeId> = (1..=node_count).collect();
        let nodes = voters
            .iter()
            .map(|&id| {
                let disk = groups
                    .iter()
                    .map(|&group| {
                        let conf_state = ConfState { voters: voters.clone(), ..Default::default() };
                        (group, PersistedGroup { conf_state, ..Default::default() })
                    })
                    .collect();
                Node {
                    id,
                    raft: None,
                    disk,
                    writes: VecDeque::new(),
                    fetches: Vec::new(),
                    restart_at: 0,
                    paused_until: 0,
                    boots: 0,
                }
            })
            .collect();
        let mut simulation = Self {
            seed,
            rng,
            faults,
            nodes,
            groups,
            in_flight: BTreeMap::new(),
            cut: BTreeSet::new(),
            checker: Checker::default(),
            step: 0,
            payload_counter: 0,
            outcome: Outcome::default(),
        };
        for index in 0..simulation.nodes.len() {
            simulation.boot(index);
        }
        simulation
    }

    pub fn run(mut self) -> Result<Outcome, Violation> {
        while self.step < CHAOS_STEPS {
            self.chaos();
            self.round(true)?;
            if self.step.is_multiple_of(CHECK_EVERY_STEPS) {
                self.check_logs()?;
            }
            self.step += 1;
        }
        self.calm()?;
        self.check_logs()?;
        self.outcome.committed = self.checker.committed_count();
        self.outcome.elections = self.checker.elections();
        Ok(self.outcome)
    }

    /// Heal everything, then require a leader and a new commit in every group.
    fn calm(&mut self) -> Result<(), Violation> {
        self.cut.clear();
        for index in 0..self.nodes.len() {
            self.nodes[index].paused_until = 0;
            if self.nodes[index].raft.is_none() {
                self.boot(index);
            }
        }
        let calm_start = self.step;
        let deadline = self.step + LIVENESS_TICKS * TICK_STEPS;
        let all: Vec<NodeId> = self.nodes.iter().map(|node| node.id).collect();
        // Per group, the marker proposals made so far: (index, term).
        let mut markers: BTreeMap<GroupId, Vec<(u64, u64)>> = BTreeMap::new();
        loop {
            let pending: Vec<GroupId> = self
                .groups
                .iter()
                .copied()
                .filter(|group| {
                    let done = markers.get(group).is_some_and(|made| {
                        made.iter().any(|&(index, _)| self.checker.applied_everywhere(*group, index, &all))
                    });
                    !done
                })
                .collect();
            if pending.is_empty() {
                self.outcome.calm_ticks = (self.step - calm_start) / TICK_STEPS;
                return Ok(());
            }
            if self.step >= deadline {
                let nodes: Vec<String> = self
                    .nodes
                    .iter()
                    .filter_map(|node| {
                        let raft = node.raft.as_ref()?;
                        let states: Vec<String> = pending
                            .iter()
                            .filter_map(|&group| {
                                let (role, term, leader) = raft.role(group)?;
                                let storage = raft.storage(group)?;
                                Some(format!(
                                    "{role:?} term {term} leader {leader:?} commit {:?} memory from {} last {}",
                                    raft.commit_index(group),
                                    storage.memory_first_index(),
                                    storage.translator().last_index()
                                ))
                            })
                            .collect();
                        Some(format!("node {}: {}", node.id, states.join("; ")))
                    })
                    .collect();
                return Err(format!(
                    "liveness: after {LIVENESS_TICKS} calm ticks groups {pending:?} have no new commit applied on \
                     every node (markers {markers:?}); {}",
                    nodes.join(" | ")
                ));
            }
            for group in pending {
                let made = markers.entry(group).or_default();
                let terms: Vec<u64> = made.iter().map(|&(_, term)| term).collect();
                if let Some(marker) = self.propose_on_leader(group, &terms) {
                    markers.entry(group).or_default().push(marker);
                }
            }
            self.round(false)?;
            self.step += 1;
        }
    }

    /// Proposes a marker on `group`'s leader unless one was made in its term already.
    fn propose_on_leader(&mut self, group: GroupId, terms_done: &[u64]) -> Option<(u64, u64)> {
        let leader = self.nodes.iter().position(|node| {
            node.raft.as_ref().and_then(|raft| raft.leader_term(group)).is_some_and(|term| !terms_done.contains(&term))
        })?;
        let batch = self.batch(group);
        self.nodes[leader].raft.as_mut()?.propose(group, batch).ok().map(|proposed| (proposed.index, proposed.term))
    }

    /// Random faults of the chaotic phase.
    fn chaos(&mut self) {
        if self.rng.gen_bool(self.faults.crash) {
            let index = self.rng.gen_range(0..self.nodes.len());
            if self.nodes[index].raft.is_some() {
                self.crash(index);
            }
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index].raft.is_none() && self.step >= self.nodes[index].restart_at {
                self.boot(index);
            }
        }
        // A connection reset while both ends live: the node that saw it takes the
        // other for down (`MultiRaft::peer_lost`) though it is not.
        if self.rng.gen_bool(self.faults.crash) {
            let (index, other) = (self.rng.gen_range(0..self.nodes.len()), self.rng.gen_range(0..self.nodes.len()));
            let lost = self.nodes[other].id;
            if index != other {
                if let Some(raft) = self.nodes[index].raft.as_mut() {
                    raft.peer_lost(lost);
                }
            }
        }
        if self.rng.gen_bool(self.faults.pause) {
            let index = self.rng.gen_range(0..self.nodes.len());
            self.nodes[index].paused_until = self.step + self.rng.gen_range(10..200);
            self.outcome.pauses += 1;
        }
        if self.rng.gen_bool(self.faults.partition) {
            self.partition();
        }
        if !self.cut.is_empty() && self.rng.gen_bool(self.faults.heal) {
            self.cut.clear();
        }
    }

    /// Splits the nodes in two random sides, or cuts one link one way.
    fn partition(&mut self) {
        let ids: Vec<NodeId> = self.nodes.iter().map(|node| node.id).collect();
        if self.rng.gen_bool(0.3) {
            let from = ids[self.rng.gen_range(0..ids.len())];
            let to = ids[self.rng.gen_range(0..ids.len())];
            self.cut.insert((from, to));
            return;
        }
        let side: Vec<bool> = ids.iter().map(|_| self.rng.gen_bool(0.5)).collect();
        for (i, &a) in ids.iter().enumerate() {
            for (j, &b) in ids.iter().enumerate() {
                if side[i] != side[j] {
                    self.cut.insert((a, b));
                }
            }
        }
    }

    fn crash(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        let id = node.id;
        node.raft = None;
        node.writes.clear();
        node.fetches.clear();
        node.restart_at = self.step + self.rng.gen_range(20..300);
        self.outcome.crashes += 1;
        // Its connections close: the nodes it still reached see them end, as a broker's
        // transport does when a peer is killed.
        for other in &mut self.nodes {
            if !self.cut.contains(&(id, other.id)) {
                if let Some(raft) = other.raft.as_mut() {
                    raft.peer_lost(id);
                }
            }
        }
    }

    /// Starts node `index` from its disk alone.
    fn boot(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        node.boots += 1;
        let seed = self.seed.wrapping_mul(1_000_003) ^ (node.id << 32) ^ node.boots;
        let mut config = Config::new(node.id, seed);
        config.log_memory_bytes_max = self.faults.log_memory_bytes;
        let mut raft = MultiRaft::new(config);
        for (&group, persisted) in &node.disk {
            raft.create_group(group, GroupStorage::restore(persisted.clone()), 0)
                .unwrap_or_else(|error| panic!("node {} cannot restore group {group}: {error}", node.id));
        }
        node.raft = Some(raft);
        self.checker.rebooted(node.id);
    }

    /// One step: deliver due packets, then every live node ticks, fsyncs, proposes and
    /// carries out its actions.
    fn round(&mut self, chaotic: bool) -> Result<(), Violation> {
        let due = self.in_flight.remove(&self.step).unwrap_or_default();
        for packet in due {
            self.deliver(packet)?;
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index].raft.is_none() || self.step < self.nodes[index].paused_until {
                continue;
            }
            if (self.step + index as u64).is_multiple_of(TICK_STEPS) {
                if let Some(raft) = self.nodes[index].raft.as_mut() {
                    raft.tick();
                }
                self.observe_roles(index)?;
            }
            if self.rng.gen_bool(self.faults.fsync) {
                self.fsync(index);
            }
            if self.rng.gen_bool(self.faults.fsync) {
                self.read_back(index)?;
            }
            if chaotic && self.rng.gen_bool(self.faults.propose) {
                let group = self.groups[self.rng.gen_range(0..self.groups.len())];
                let batch = self.batch(group);
                if let Some(raft) = self.nodes[index].raft.as_mut() {
                    match raft.propose(group, batch) {
                        Ok(_) | Err(ProposeError::NotLeader { .. }) | Err(ProposeError::Dropped { .. }) => {}
                        Err(other) => return Err(format!("unexpected proposal error: {other}")),
                    }
                }
            }
            let Some(raft) = self.nodes[index].raft.as_mut() else { continue };
            let actions = raft.collect();
            self.carry_out(index, actions, chaotic)?;
        }
        Ok(())
    }

    fn deliver(&mut self, packet: Packet) -> Result<(), Violation> {
        if self.cut.contains(&(packet.from, packet.to)) {
            return Ok(());
        }
        let index = (packet.to - 1) as usize;
        let paused_until = self.nodes[index].paused_until;
        if self.step < paused_until {
            self.in_flight.entry(paused_until).or_default().push(packet);
            return Ok(());
        }
        let Some(raft) = self.nodes[index].raft.as_mut() else { return Ok(()) };
        // A restarted peer may answer a message from a term raft-rs no longer tracks; the
        // core refuses what it cannot use with a typed error, which the transport drops.
        let _ = raft.step(packet.group, packet.message);
        self.outcome.delivered += 1;
        self.observe_roles(index)
    }

    /// Election Safety after every event that can elect.
    fn observe_roles(&mut self, index: usize) -> Result<(), Violation> {
        let Some(raft) = self.nodes[index].raft.as_ref() else { return Ok(()) };
        for &group in &self.groups {
            let Some((role, term, _)) = raft.role(group) else { continue };
            self.checker.term_seen(group, term);
            if role == StateRole::Leader {
                self.checker.leader_elected(group, term, self.nodes[index].id)?;
            }
        }
        Ok(())
    }

    /// Makes a prefix of node `index`'s pending writes durable and reports them.
    fn fsync(&mut self, index: usize) {
        let count = self.rng.gen_range(0..=self.nodes[index].writes.len());
        let node = &mut self.nodes[index];
        let mut truncations = 0;
        for _ in 0..count {
            let Some(write) = node.writes.pop_front() else { break };
            let disk = node.disk.entry(write.group).or_default();
            if let Some(first) = write.entries.first() {
                if disk.entries.len() as u64 >= first.index {
                    truncations += 1;
                }
                disk.entries.truncate(first.index as usize - 1);
                disk.entries.extend(write.entries.iter().cloned());
            }
            if let Some(hard_state) = &write.hard_state {
                disk.hard_state = hard_state.clone();
            }
            if let Some(raft) = node.raft.as_mut() {
                raft.persisted(write.group, write.ready).unwrap_or_else(|error| panic!("{error}"));
            }
        }
        self.outcome.truncations += truncations;
    }

    /// Answers node `index`'s reads of released entries from its disk, in random order.
    fn read_back(&mut self, index: usize) -> Result<(), Violation> {
        let node = &mut self.nodes[index];
        let mut requests = std::mem::take(&mut node.fetches);
        requests.reverse();
        let Some(raft) = node.raft.as_mut() else { return Ok(()) };
        for request in requests {
            let log = node.disk.get(&request.group).map_or(&[][..], |disk| &disk.entries[..]);
            let mut bytes = 0;
            let entries: Vec<Entry> = log
                .iter()
                .skip(request.low as usize - 1)
                .take_while(|entry| entry.index < request.high)
                .take_while(|entry| {
                    let first = bytes == 0;
                    bytes += entry.data.len() as u64;
                    first || bytes <= request.bytes_max
                })
                .cloned()
                .collect();
            raft.fetched(request.group, request.low, entries)
                .map_err(|error| format!("node {} read back entries its core refused: {error}", node.id))?;
        }
        Ok(())
    }

    /// Node `index`'s log of `group`: released entries from its disk, then memory.
    fn full_log(&self, index: usize, group: GroupId) -> Option<Vec<Entry>> {
        let node = &self.nodes[index];
        let storage = node.raft.as_ref()?.storage(group)?;
        let released = storage.memory_first_index() as usize - 1;
        let disk = node.disk.get(&group).map_or(&[][..], |disk| &disk.entries[..]);
        Some(disk[..released].iter().chain(storage.in_memory()).cloned().collect())
    }

    fn carry_out(&mut self, index: usize, actions: Actions, chaotic: bool) -> Result<(), Violation> {
        let id = self.nodes[index].id;
        for change in &actions.leadership {
            if change.role == StateRole::Leader {
                self.checker.leader_elected(change.group, change.term, id)?;
                if let Some(log) = self.full_log(index, change.group) {
                    self.checker.leader_log(change.group, change.term, id, &log)?;
                }
            }
        }
        self.nodes[index].writes.extend(actions.persist);
        self.nodes[index].fetches.extend(actions.fetch);
        for (_, envelopes) in actions.messages.into_iter().chain(actions.heartbeats) {
            for envelope in envelopes {
                self.send(id, envelope.group, envelope.message, chaotic);
            }
        }
        for apply in actions.apply {
            let Some(raft) = self.nodes[index].raft.as_mut() else { break };
            for entry in &apply.entries {
                let offsets = raft
                    .storage(apply.group)
                    .and_then(|storage| storage.translator().offsets_of(entry.index))
                    .ok_or_else(|| format!("node {id} applies {} it has no offsets for", entry.index))?;
                self.checker.applied(id, apply.group, entry, offsets)?;
            }
            if let Some(last) = apply.entries.last() {
                raft.applied(apply.group, last.index).unwrap_or_else(|error| panic!("{error}"));
                // Followers are never told what every voter has here: they only release.
                raft.compact(apply.group, 0).unwrap_or_else(|error| panic!("{error}"));
            }
        }
        Ok(())
    }

    fn send(&mut self, from: NodeId, group: GroupId, message: Message, chaotic: bool) {
        let copies = if chaotic && self.rng.gen_bool(self.faults.loss) {
            0
        } else if chaotic && self.rng.gen_bool(self.faults.duplication) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.step + self.rng.gen_range(1..=self.faults.delay_steps_max);
            let packet = Packet { from, to: message.to, group, message: message.clone() };
            self.in_flight.entry(at).or_default().push(packet);
        }
    }

    /// Log Matching between every pair of live nodes, durability on every disk.
    fn check_logs(&self) -> Result<(), Violation> {
        for &group in &self.groups {
            let logs: Vec<(NodeId, Vec<Entry>)> = (0..self.nodes.len())
                .filter_map(|index| Some((self.nodes[index].id, self.full_log(index, group)?)))
                .collect();
            for (i, a) in logs.iter().enumerate() {
                for b in &logs[i + 1..] {
                    log_matching(group, (a.0, &a.1), (b.0, &b.1))?;
                }
            }
            let disks: Vec<&[Entry]> =
                self.nodes.iter().map(|node| node.disk.get(&group).map_or(&[][..], |d| &d.entries[..])).collect();
            self.checker.durable(group, &disks)?;
        }
        Ok(())
    }

    /// A minimal Kafka v2 batch: a header with magic 2 and a random span, then a unique
    /// payload so that two different proposals never have equal bytes.
    fn batch(&mut self, group: GroupId) -> Bytes {
        self.payload_counter += 1;
        let span: i32 = self.rng.gen_range(1..=5);
        let mut bytes = vec![0u8; BATCH_HEADER_BYTES];
        bytes[16] = 2;
        bytes[23..27].copy_from_slice(&(span - 1).to_be_bytes());
        bytes[57..61].copy_from_slice(&span.to_be_bytes());
        bytes.extend_from_slice(&group.partition.to_be_bytes());
        bytes.extend_from_slice(&self.payload_counter.to_be_bytes());
        Bytes::from(bytes)
    }
}
