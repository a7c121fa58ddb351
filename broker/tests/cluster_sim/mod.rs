//! A deterministic simulation of a Keel cluster's replication: N nodes in one thread,
//! each running the broker's own Raft shell (`replication::shell`: its driver, the
//! shard journal's pass, partition logs that are the Raft logs, the state store that
//! holds each group's record) on a simulated disk of its own, sending real frames
//! (`replication::frame`, encoded and checked as on the wire) over a simulated network,
//! under a simulated clock. Everything random comes from the seed, so a failing seed
//! replays exactly.
//!
//! A run has a chaotic phase and a calm one. In the chaotic phase the network loses,
//! repeats, delays and reorders frames and is cut into partitions; nodes lose power
//! (each file keeps what was fsynced and, of the rest, sectors at random) and come
//! back, with or without their peers seeing their connections close; disks fill up
//! for a while. Clients propose batches to whichever nodes say they lead, and note the
//! ones they are told are committed. In the calm phase the network heals, every node
//! is up, and every group must elect a leader, commit a new batch and bring every node
//! up to it within a bound.
//!
//! The checks ([`checker`]): one leader per group and term; below its high watermark,
//! every node's log is whole and agrees with every other's; every acknowledged batch
//! is committed where it was acknowledged, on every node at the end.
//!
//! [`Simulation::deleting`] also deletes one group in the chaotic phase, as a deleted
//! topic does, at a step drawn from the seed: every node removes it (one down at that
//! moment, when it boots), and at the end no node's state store may hold its record (a
//! Raft write in flight as the group was removed could write it back).

pub mod checker;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use keel_broker::replication::shell::{RaftSettings, ReplicaHooks, Replication};
use keel_broker::replication::transport::Network;
use keel_protocol::batch::build_batch;
use keel_raft::{GroupId, NodeId};
use keel_storage::disk::{self, SimDisk};
use keel_storage::flush::FlushQueue;
use keel_storage::journal::{Journal, JournalConfig};
use keel_storage::kv::ShardKv;
use keel_storage::log::{self, LogConfig, PartitionLog};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use checker::{show, Acked, Checker, Violation};

const GROUPS: u32 = 3;
const TOPIC: u128 = 7;
/// The clock moves a millisecond a step.
const STEP: Duration = Duration::from_millis(1);
/// Turns every task gets per step: a journal pass, a Raft round and a reply take a few.
const TURNS_PER_STEP: usize = 4;
const TICK: Duration = Duration::from_millis(10);
const ELECTION_TICKS: usize = 10;
const CHAOS_STEPS: u64 = 3_000;
/// Steps the calm phase may take: elect, commit and bring every node up to date.
const CALM_STEPS_MAX: u64 = 4_000;
const CHECK_EVERY_STEPS: u64 = 250;
/// How long a client waits for its batch to be committed.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(3);

type Log = Rc<RefCell<PartitionLog>>;

/// What varies between seeds besides the seed-driven choices.
#[derive(Debug)]
struct Faults {
    loss: f64,
    duplication: f64,
    delay_steps_max: u64,
    crash: f64,
    /// A crash's peers see its connections close (a killed process's do; a machine
    /// that loses power says nothing).
    closes_seen: f64,
    partition: f64,
    heal: f64,
    disk_full: f64,
    propose: f64,
    /// A group's in-memory budget: small, so appends often read entries back.
    log_memory_bytes: u64,
}

impl Faults {
    fn draw(rng: &mut StdRng) -> Self {
        Self {
            loss: rng.gen_range(0.0..0.15),
            duplication: rng.gen_range(0.0..0.05),
            delay_steps_max: rng.gen_range(1..20),
            crash: rng.gen_range(0.0..0.002),
            closes_seen: rng.gen_range(0.0..1.0),
            partition: rng.gen_range(0.0..0.002),
            heal: rng.gen_range(0.001..0.005),
            disk_full: rng.gen_range(0.0..0.0005),
            propose: rng.gen_range(0.02..0.3),
            log_memory_bytes: rng.gen_range(0..8_000),
        }
    }
}

/// What one run did, to compare two runs of one seed and to report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub proposed: u64,
    pub acked: u64,
    pub committed: usize,
    pub leaderships: usize,
    pub crashes: u64,
    pub crashes_seen_closing: u64,
    pub partitions: u64,
    pub disk_fulls: u64,
    pub frames_delivered: u64,
    pub frames_dropped: u64,
    pub entries_read_back: u64,
    /// Read-backs that found the log without the entries wanted: with no retention
    /// here, each is a voter left waiting (a liveness bug).
    pub read_back_failures: u64,
    pub sectors_lost: u64,
    pub calm_steps: u64,
}

/// Frames on their way, and what cuts them.
struct NetState {
    rng: StdRng,
    now: u64,
    loss: f64,
    duplication: f64,
    delay_steps_max: u64,
    /// (due step, sequence): the frame and its destination.
    in_flight: BTreeMap<(u64, u64), (NodeId, Vec<u8>)>,
    sequence: u64,
    /// Directed links that carry nothing.
    cut: BTreeSet<(NodeId, NodeId)>,
    /// The life of each node that is up: a frame from an older one is not sent.
    live: BTreeMap<NodeId, u64>,
    dropped: u64,
}

type Net = Rc<RefCell<NetState>>;

/// One life of one node's end of the network.
struct Link {
    net: Net,
    life: u64,
}

impl Network for Link {
    fn send(&self, from: NodeId, to: NodeId, _to_shard: u16, frame: Vec<u8>) {
        let mut s = self.net.borrow_mut();
        let s = &mut *s;
        if s.live.get(&from) != Some(&self.life) || s.cut.contains(&(from, to)) || s.rng.gen_bool(s.loss) {
            s.dropped += 1;
            return;
        }
        let copies = if s.rng.gen_bool(s.duplication) { 2 } else { 1 };
        for _ in 0..copies {
            let due = s.now + s.rng.gen_range(1..=s.delay_steps_max);
            s.sequence += 1;
            s.in_flight.insert((due, s.sequence), (to, frame.clone()));
        }
    }
}

/// A node's running shell and storage.
struct Running {
    replication: Rc<Replication>,
    flush: Rc<FlushQueue>,
    logs: BTreeMap<GroupId, Log>,
}

enum State {
    Up(Running),
    /// Opening its storage and groups (a task of its own: opening may wait for a
    /// journal pass, which waits on the clock this loop moves).
    Booting(Rc<RefCell<Option<Result<Running, String>>>>),
    /// Down until this step.
    Down(u64),
}

struct Node {
    id: NodeId,
    disk: SimDisk,
    life: u64,
    state: State,
    /// Set when the node is to lose power: its disk goes dark after some more
    /// operations (anywhere in a journal pass or a segment write), at the latest at
    /// this step.
    dark_by: Option<u64>,
}

pub struct Simulation {
    seed: u64,
    rng: StdRng,
    faults: Faults,
    clock: SimDisk,
    net: Net,
    nodes: Vec<Node>,
    groups: Vec<GroupId>,
    acked: Rc<RefCell<Vec<Acked>>>,
    /// The step at which a group is deleted, and the group ([`Simulation::deleting`]).
    deletion: Option<(u64, GroupId)>,
    deleted: Vec<GroupId>,
    checker: Checker,
    step: u64,
    values: u64,
    outcome: Outcome,
}

/// Where a node's disk is mounted in one of its lives: a directory of its own each
/// life, so a task left from a past life reaches only that life's disk, dark forever
/// (`SimDisk::reborn`).
fn node_dir(id: NodeId, life: u64) -> PathBuf {
    PathBuf::from(format!("/node-{id}-life-{life}"))
}

/// `KEEL_CLUSTER_SIM_TRACE=1` prints what happens: crashes, boots, leaderships, acks.
fn trace(what: impl FnOnce() -> String) {
    thread_local! {
        static ON: bool = std::env::var("KEEL_CLUSTER_SIM_TRACE").is_ok();
    }
    if ON.with(|on| *on) {
        println!("{}", what());
    }
}

fn journal_config() -> JournalConfig {
    JournalConfig {
        file_bytes: 64 << 10,
        checkpoint_interval: Duration::from_millis(40),
        spare_files_max: 1,
        live_files_max: 4,
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 16 << 10,
        cache_bytes_max: 4 << 10,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    }
}

impl Simulation {
    /// A simulation on this thread's storage (it calls [`disk::simulate`]).
    pub fn new(seed: u64, node_count: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let faults = Faults::draw(&mut rng);
        let clock = SimDisk::new();
        disk::simulate(Some(clock.clone()));
        let net = Rc::new(RefCell::new(NetState {
            rng: StdRng::seed_from_u64(rng.gen()),
            now: 0,
            loss: faults.loss,
            duplication: faults.duplication,
            delay_steps_max: faults.delay_steps_max,
            in_flight: BTreeMap::new(),
            sequence: 0,
            cut: BTreeSet::new(),
            live: BTreeMap::new(),
            dropped: 0,
        }));
        let nodes = (1..=node_count)
            .map(|id| Node { id, disk: SimDisk::new(), life: 0, state: State::Down(0), dark_by: None })
            .collect();
        let groups = (0..GROUPS).map(|partition| GroupId { topic: TOPIC, partition }).collect();
        Simulation {
            seed,
            rng,
            faults,
            clock,
            net,
            nodes,
            groups,
            acked: Rc::default(),
            deletion: None,
            deleted: Vec::new(),
            checker: Checker::default(),
            step: 0,
            values: 0,
            outcome: Outcome::default(),
        }
    }

    /// Deletes one group in the chaotic phase. The step and the group come from a
    /// generator of their own, so the rest of the seed's run is drawn as without.
    pub fn deleting(mut self) -> Self {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0xde1e7e);
        let at = rng.gen_range(CHAOS_STEPS / 10..CHAOS_STEPS * 9 / 10);
        self.deletion = Some((at, self.groups[rng.gen_range(0..self.groups.len())]));
        self
    }

    pub async fn run(mut self) -> Result<Outcome, Violation> {
        let result = self.phases().await;
        for i in 0..self.nodes.len() {
            self.crash(i, false);
            self.nodes[i].disk.cut_power();
        }
        self.clock.discard();
        for node in &self.nodes {
            self.outcome.sectors_lost += node.disk.stats().sectors_lost;
            node.disk.discard();
        }
        disk::simulate(None);
        result?;
        if self.outcome.read_back_failures > 0 {
            let n = self.outcome.read_back_failures;
            return Err(Violation(format!("{n} read-backs of released Raft entries failed")));
        }
        Ok(self.outcome)
    }

    async fn phases(&mut self) -> Result<(), Violation> {
        while self.step < CHAOS_STEPS {
            self.chaos();
            self.advance().await?;
        }
        self.heal();
        let calm_from = self.step;
        let mut finals: BTreeMap<GroupId, i64> = BTreeMap::new();
        loop {
            if self.step - calm_from > CALM_STEPS_MAX {
                return Err(Violation(format!(
                    "no progress in {CALM_STEPS_MAX} calm steps: final batches committed {finals:?}, nodes {}",
                    self.describe()
                )));
            }
            self.restart_due();
            if self.step.is_multiple_of(50) {
                self.propose_finals(&finals);
            }
            self.advance().await?;
            let acked = self.acked.borrow().clone();
            for a in acked.iter().filter(|a| a.value.starts_with(b"final")) {
                finals.entry(a.group).or_insert(a.offset);
            }
            if finals.len() == self.groups.len() - self.deleted.len() && self.everyone_reached(&finals) {
                break;
            }
        }
        self.outcome.calm_steps = self.step - calm_from;
        if !self.deleted.is_empty() {
            // Removals a boot started late in the calm phase finish first.
            for _ in 0..50 {
                self.advance().await?;
            }
            self.check_deleted()?;
        }
        self.check().await?;
        let acked: Vec<Acked> =
            self.acked.borrow().iter().filter(|a| !self.deleted.contains(&a.group)).cloned().collect();
        self.checker.acknowledged(&acked)?;
        self.outcome.acked = acked.len() as u64;
        self.outcome.committed = self.checker.committed_batches();
        self.outcome.leaderships = self.checker.leaderships();
        self.outcome.frames_dropped = self.net.borrow().dropped;
        Ok(())
    }

    /// One step: the clock moves, frames that are due arrive, every task runs, and
    /// what the nodes say is checked.
    async fn advance(&mut self) -> Result<(), Violation> {
        self.step += 1;
        self.net.borrow_mut().now = self.step;
        self.clock.advance(STEP);
        for node in &self.nodes {
            node.disk.advance(STEP);
        }
        self.deliver();
        for _ in 0..TURNS_PER_STEP {
            futures_lite::future::yield_now().await;
        }
        self.go_dark();
        self.finish_boots()?;
        self.check_leaders()?;
        if self.step.is_multiple_of(CHECK_EVERY_STEPS) {
            trace(|| self.describe());
            self.check().await?;
        }
        Ok(())
    }

    fn deliver(&mut self) {
        let due: Vec<(NodeId, Vec<u8>)> = {
            let mut s = self.net.borrow_mut();
            let after = (s.now + 1, 0);
            let later = s.in_flight.split_off(&after);
            std::mem::replace(&mut s.in_flight, later).into_values().collect()
        };
        for (to, frame) in due {
            let Some(State::Up(running)) = self.nodes.get(to as usize - 1).map(|n| &n.state) else { continue };
            let transport = running.replication.transport().clone();
            if transport.deliver(&frame).is_ok() {
                self.outcome.frames_delivered += 1;
            }
        }
    }

    fn chaos(&mut self) {
        let f = &self.faults;
        let (crash, partition, heal, disk_full, propose) = (f.crash, f.partition, f.heal, f.disk_full, f.propose);
        self.restart_due();
        // Now and then every node at once (a site's power), otherwise one at a time.
        let everyone = self.rng.gen_bool(crash / 8.0);
        for i in 0..self.nodes.len() {
            let node = &mut self.nodes[i];
            if matches!(node.state, State::Up(_)) && node.dark_by.is_none() && (everyone || self.rng.gen_bool(crash)) {
                node.disk.power_off_after(self.rng.gen_range(1..60));
                node.dark_by = Some(self.step + self.rng.gen_range(1..50));
            }
        }
        if self.rng.gen_bool(partition) {
            self.partition();
        }
        if self.rng.gen_bool(heal) {
            self.net.borrow_mut().cut.clear();
        }
        if self.rng.gen_bool(disk_full) {
            let node = self.nodes.choose(&mut self.rng).expect("a node");
            let room = self.rng.gen_range(0..32 << 10);
            let lasting = self.rng.gen_range(1..600);
            node.disk.fill(room, Duration::from_millis(lasting));
            trace(|| format!("{:>5} node {} disk full for {lasting} ms", self.step, node.id));
            self.outcome.disk_fulls += 1;
        }
        if self.rng.gen_bool(propose) {
            let group = *self.groups.choose(&mut self.rng).expect("a group");
            if !self.deleted.contains(&group) {
                self.propose(group, "v");
            }
        }
        if let Some((at, group)) = self.deletion {
            if at == self.step {
                trace(|| format!("{:>5} group {group} deleted", self.step));
                self.deleted.push(group);
                for node in &mut self.nodes {
                    if let State::Up(running) = &mut node.state {
                        remove_deleted(running, &self.deleted);
                    }
                }
            }
        }
    }

    /// No node's state store holds a deleted group's record.
    fn check_deleted(&self) -> Result<(), Violation> {
        for node in &self.nodes {
            let State::Up(r) = &node.state else { continue };
            if let Some(group) = self.deleted.iter().find(|g| r.replication.has_record(**g)) {
                return Err(Violation(format!("node {}: the record of deleted group {group} is back", node.id)));
            }
        }
        Ok(())
    }

    /// Cuts the network: one node alone, one way or both, or two halves.
    fn partition(&mut self) {
        let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        let mut net = self.net.borrow_mut();
        let alone = *ids.choose(&mut self.rng).expect("a node");
        let one_way = self.rng.gen_ratio(1, 4);
        for &other in ids.iter().filter(|o| **o != alone) {
            net.cut.insert((alone, other));
            if !one_way {
                net.cut.insert((other, alone));
            }
        }
        self.outcome.partitions += 1;
    }

    /// The calm phase: the network heals, a node about to lose power loses it now,
    /// and every node that is down comes back.
    fn heal(&mut self) {
        let mut net = self.net.borrow_mut();
        net.cut.clear();
        net.loss = 0.0;
        net.duplication = 0.0;
        drop(net);
        for node in &mut self.nodes {
            node.dark_by = node.dark_by.map(|_| 0);
        }
        self.go_dark();
        for node in &mut self.nodes {
            if let State::Down(at) = &mut node.state {
                *at = (*at).min(self.step);
            }
        }
    }

    /// Nodes whose disks went dark, or whose time to is up, are down from now on.
    fn go_dark(&mut self) {
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            let Some(by) = node.dark_by else { continue };
            if node.disk.powered() && by > self.step {
                continue;
            }
            let seen = self.rng.gen_bool(self.faults.closes_seen);
            trace(|| format!("{:>5} node {} loses power", self.step, self.nodes[i].id));
            self.crash(i, seen);
            self.outcome.crashes += 1;
            self.nodes[i].state = State::Down(self.step + self.rng.gen_range(20..800));
        }
    }

    /// The node loses power: its disk keeps what was fsynced and some of the rest, and
    /// its tasks stop where they are (its I/O never completes).
    fn crash(&mut self, i: usize, seen_closing: bool) {
        self.nodes[i].dark_by = None;
        let State::Up(running) = std::mem::replace(&mut self.nodes[i].state, State::Down(u64::MAX)) else {
            return;
        };
        let id = self.nodes[i].id;
        self.nodes[i].disk.cut_power();
        running.replication.stop();
        running.flush.stop();
        self.outcome.entries_read_back += running.replication.entries_read_back.get();
        self.outcome.read_back_failures += running.replication.read_back_failures.get();
        self.net.borrow_mut().live.remove(&id);
        if seen_closing {
            self.outcome.crashes_seen_closing += 1;
            for node in &self.nodes {
                if let State::Up(other) = &node.state {
                    other.replication.transport().connection_closed(id);
                }
            }
        }
    }

    fn restart_due(&mut self) {
        for i in 0..self.nodes.len() {
            if matches!(self.nodes[i].state, State::Down(at) if at <= self.step) {
                self.boot(i);
            }
        }
    }

    /// Powers the node's disk back on and opens everything as a broker's shard does.
    fn boot(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.disk = node.disk.reborn(&mut self.rng);
        node.life += 1;
        let (id, life) = (node.id, node.life);
        disk::mount(&node_dir(id, life), node.disk.clone());
        let peers: Vec<NodeId> = (1..=self.nodes.len() as u64).collect();
        // A deleted group's files stay on the disk (a broker removes them), but no
        // boot opens them: its log, no longer checkpointed, is not to be trusted.
        let groups: Vec<GroupId> = self.groups.iter().filter(|g| !self.deleted.contains(g)).copied().collect();
        let link: Rc<dyn Network> = Rc::new(Link { net: self.net.clone(), life });
        let seed = self.seed ^ id.rotate_left(40) ^ life.rotate_left(20);
        let settings = RaftSettings {
            tick: TICK,
            election_ticks: ELECTION_TICKS,
            heartbeat_ticks: 2,
            log_memory_bytes: self.faults.log_memory_bytes,
            replica_lag: TICK * 100,
        };
        let slot = Rc::new(RefCell::new(None));
        let done = slot.clone();
        let net = self.net.clone();
        glommio::spawn_local(async move {
            let opened = open(id, &peers, &groups, link, seed, settings, &net, life).await;
            *done.borrow_mut() = Some(opened);
        })
        .detach();
        self.nodes[i].state = State::Booting(slot);
    }

    fn finish_boots(&mut self) -> Result<(), Violation> {
        for node in &mut self.nodes {
            let State::Booting(slot) = &node.state else { continue };
            let Some(opened) = slot.borrow_mut().take() else { continue };
            let mut running = opened.map_err(|e| Violation(format!("node {} cannot start: {e}", node.id)))?;
            trace(|| {
                let hws: Vec<_> =
                    running.logs.values().map(|l| (l.borrow().high_watermark(), l.borrow().log_end_offset())).collect();
                format!("{:>5} node {} up, (high watermark, log end) {hws:?}", self.step, node.id)
            });
            remove_deleted(&mut running, &self.deleted);
            node.state = State::Up(running);
        }
        Ok(())
    }

    /// Proposes one batch to a node that says it leads `group` (any of them, if two
    /// do), and notes it once that node says it is committed.
    fn propose(&mut self, group: GroupId, name: &str) {
        let leaders: Vec<Rc<Replication>> = self
            .nodes
            .iter()
            .filter_map(|n| match &n.state {
                State::Up(r) if r.replication.leads(group) => Some(r.replication.clone()),
                _ => None,
            })
            .collect();
        let Some(replication) = leaders.choose(&mut self.rng).cloned() else { return };
        self.values += 1;
        let pad = if self.rng.gen_ratio(1, 10) { self.rng.gen_range(1_000..6_000) } else { self.rng.gen_range(0..200) };
        let mut value = format!("{name}-{}.", self.values).into_bytes();
        value.resize(value.len() + pad, b'.');
        let batch = build_batch(0, self.step as i64, &[(None, Some(&value))]);
        let Ok((header, term)) = replication.propose(group, &batch, None) else { return };
        self.outcome.proposed += 1;
        let acked = self.acked.clone();
        glommio::spawn_local(async move {
            let last = header.last_offset();
            let node = replication.node;
            trace(|| {
                format!("      node {node} term {term} proposed {} at {} in {group}", show(&value), header.base_offset)
            });
            if replication.wait_committed(group, term, last, COMMIT_TIMEOUT).await.is_ok() {
                trace(|| format!("      node {node} acked {} at {} in {group}", show(&value), header.base_offset));
                acked.borrow_mut().push(Acked { group, offset: header.base_offset, value });
            }
        })
        .detach();
    }

    /// In the calm phase: a final batch for each group that has none committed yet.
    fn propose_finals(&mut self, finals: &BTreeMap<GroupId, i64>) {
        for group in self.groups.clone() {
            if !finals.contains_key(&group) && !self.deleted.contains(&group) {
                self.propose(group, "final");
            }
        }
    }

    /// Every node is up, and its high watermark in each group passes that group's
    /// final batch.
    fn everyone_reached(&self, finals: &BTreeMap<GroupId, i64>) -> bool {
        self.nodes.iter().all(|n| match &n.state {
            State::Up(r) => finals.iter().all(|(g, offset)| r.logs[g].borrow().high_watermark() > *offset),
            _ => false,
        })
    }

    fn check_leaders(&mut self) -> Result<(), Violation> {
        for node in &self.nodes {
            let State::Up(r) = &node.state else { continue };
            for (group, leader, epoch, _) in r.replication.views() {
                if leader == Some(node.id) && self.checker.leader(group, epoch, node.id)? {
                    trace(|| format!("{:>5} node {} leads {group} in term {epoch}", self.step, node.id));
                }
            }
        }
        Ok(())
    }

    /// Reads every running node's logs below their high watermarks (but a node's
    /// about to lose power: the read could be what cuts it, and would never return).
    async fn check(&mut self) -> Result<(), Violation> {
        for node in self.nodes.iter().filter(|n| n.dark_by.is_none()) {
            let State::Up(r) = &node.state else { continue };
            for (group, l) in &r.logs {
                let (start, hw) = {
                    let l = l.borrow();
                    (l.log_start_offset, l.high_watermark())
                };
                let batches = read_below(l, start, hw).await.map_err(|e| {
                    Violation(format!("node {} group {group}: reading below the high watermark {hw}: {e}", node.id))
                })?;
                self.checker.below_high_watermark(node.id, *group, start, hw, &batches)?;
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| match &n.state {
                State::Up(r) => {
                    let logs: Vec<_> = r
                        .logs
                        .values()
                        .map(|l| {
                            let l = l.borrow();
                            (l.high_watermark(), l.durable_offset(), l.log_end_offset(), l.flush_error.clone())
                        })
                        .collect();
                    let led: Vec<_> =
                        self.groups.iter().filter(|g| r.replication.leads(**g)).map(|g| g.partition).collect();
                    format!("{}: up, (high watermark, durable, end, error) {logs:?}, leads {led:?}", n.id)
                }
                State::Booting(_) => format!("{}: booting", n.id),
                State::Down(at) => format!("{}: down until {at}", n.id),
            })
            .collect();
        format!("step {}, {}, faults {:?}", self.step, nodes.join("; "), self.faults)
    }
}

/// Removes the deleted groups a node still runs or holds a record of, as a broker
/// does for a deleted topic's partitions: the group stops at once, its record goes
/// in a task of its own (it waits for a journal pass, which waits on the clock).
fn remove_deleted(running: &mut Running, deleted: &[GroupId]) {
    for &group in deleted {
        let held = running.logs.remove(&group).is_some() || running.replication.has_record(group);
        if held {
            let replication = running.replication.clone();
            running.replication.stop_group(group);
            glommio::spawn_local(async move { replication.remove_group(group).await }).detach();
        }
    }
}

/// Opens a node's journal, state store and logs, and starts its shell and groups.
#[allow(clippy::too_many_arguments)]
async fn open(
    id: NodeId,
    peers: &[NodeId],
    groups: &[GroupId],
    link: Rc<dyn Network>,
    seed: u64,
    settings: RaftSettings,
    net: &Net,
    life: u64,
) -> Result<Running, String> {
    let root = node_dir(id, life);
    let journal = Journal::open(&root.join(".journal"), journal_config()).await.map_err(|e| e.to_string())?;
    let flush = FlushQueue::with_journal(None, journal.clone());
    glommio::spawn_local(flush.clone().run()).detach();
    let kv = ShardKv::open(&root.join(".kv"), flush.clone()).await.map_err(|e| e.to_string())?;
    let mut logs = BTreeMap::new();
    for group in groups {
        let p = group.partition;
        let keys = kv.keys(&format!("partition/{p}/"));
        let key = Bytes::from(format!("group-{p}"));
        let (l, _) = PartitionLog::open_journaled(
            &root.join(format!("group-{p}")),
            log_config(),
            Some(keys),
            &journal,
            key,
            |_| {},
        )
        .await
        .map_err(|e| e.to_string())?;
        let l = Rc::new(RefCell::new(l));
        flush.register(&l);
        logs.insert(*group, l);
    }
    journal.finish_recovery();
    net.borrow_mut().live.insert(id, life);
    let replication = Replication::start_simulated(id, peers, link, seed, settings, kv, flush.clone());
    for (group, l) in &logs {
        let (_, damaged) = replication.add_group(*group, l.clone(), peers.to_vec(), ReplicaHooks::default()).await?;
        if let Some(why) = damaged {
            return Err(format!("group {group} found damaged at its restart: {why}"));
        }
    }
    Ok(Running { replication, flush, logs })
}

/// The (offset, value) of each batch from `start` to `hw`, each checked against its CRC.
async fn read_below(l: &Log, start: i64, hw: i64) -> Result<Vec<(i64, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut offset = start;
    while offset < hw {
        let r = log::read(l, offset, 1 << 20, hw).await.map_err(|e| e.to_string())?;
        if r.batches.is_empty() {
            break;
        }
        for b in r.batches {
            let h = keel_protocol::batch::validate(&b).map_err(|e| format!("a batch at {offset} fails: {e}"))?;
            let body = keel_storage::batch_filter::decompressed_body(&h, &b)?;
            let records = keel_storage::batch_filter::parse_records(&h, &body)?;
            let value = records.first().and_then(|r| r.value).unwrap_or_default();
            out.push((h.base_offset, value.to_vec()));
            offset = h.last_offset() + 1;
        }
    }
    Ok(out)
}
