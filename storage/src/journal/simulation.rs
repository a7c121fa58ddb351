//! Deterministic simulation of the journal on a simulated disk.
//!
//! The journal's own code lays out every pass ([`Tail`]: from the next block boundary,
//! a `Pass` record naming where the records before it end when they end inside a
//! block, then the records, zero-padded to whole blocks), frames the records
//! ([`Record::encode`]) and, after a crash, decodes the files and groups what it
//! finds by log ([`replay::decode`], [`replay::group`]). Here they run against a disk
//! that keeps, per file, what is durable and the writes since the last flush, and
//! that loses power at random: each 512-byte sector of an unflushed write reaches
//! the disk or not, on its own, and a sector past the last durable record may hold
//! garbage instead (a torn write into space no pass had made durable). No pass writes
//! a sector that holds durable records, so nothing rests on a device writing a block
//! whole or not at all.
//! Writes can also stop short, as on a full disk. Files roll over, are retired at
//! checkpoints and recycled with their old contents (records of an earlier sequence
//! number), as the journal does.
//!
//! After every power loss the checks are:
//! - every acknowledged record (its pass flushed) is decoded at its position, equal;
//! - nothing else is decoded but a prefix of the pass in flight at the loss;
//! - the last checkpoint decoded is the last one acknowledged (or the one in flight),
//!   and each log's recovery holds exactly the records after its mark, from its last
//!   `Create` on, with its mark.
//!
//! Everything is drawn from the seed, and nothing reads a clock, so a failing seed
//! replays alone: `KEEL_JOURNAL_SIM_SEED=<n> cargo test -p keel-storage --lib
//! journal::simulation`. `KEEL_JOURNAL_SIM_SEEDS=<n>` runs more seeds (300 by default in
//! a release build, 20 in a debug one).
//! The rest of storage (segment files, the state store) is tested on real files by
//! the seeded tests in `storage/tests/`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::record::{Mark, Position, Record};
use super::replay::{decode, group};
use super::Tail;

const SECTOR: usize = 512;
const FILE_BYTES: u64 = 48 << 10;
const KEYS: u8 = 6;
const SPARES_MAX: usize = 2;
const STEPS: usize = 400;

/// A file as the device holds it: what is durable, and the writes since the last flush.
#[derive(Clone, Default)]
struct SimFile {
    durable: Vec<u8>,
    pending: Vec<(usize, Vec<u8>)>,
}

fn put(into: &mut Vec<u8>, at: usize, data: &[u8]) {
    if into.len() < at + data.len() {
        into.resize(at + data.len(), 0);
    }
    into[at..at + data.len()].copy_from_slice(data);
}

#[derive(Default, Debug)]
struct Stats {
    passes: u64,
    acknowledged: u64,
    power_losses: u64,
    short_writes: u64,
    sectors_lost: u64,
    sectors_garbage: u64,
    checkpoints: u64,
    recycled: u64,
    records_checked: u64,
    in_flight_survived: u64,
}

impl SimFile {
    fn flush(&mut self) {
        for (at, data) in std::mem::take(&mut self.pending) {
            put(&mut self.durable, at, &data);
        }
    }

    /// Power loss: each sector of an unflushed write is on the disk or not; one past
    /// `durable_end` (no durable record in it) may hold garbage instead.
    fn lose_power(&mut self, durable_end: usize, rng: &mut StdRng, stats: &mut Stats) {
        for (at, data) in std::mem::take(&mut self.pending) {
            for (i, sector) in data.chunks(SECTOR).enumerate() {
                let pos = at + i * SECTOR;
                match rng.gen_range(0..8) {
                    0..=3 => put(&mut self.durable, pos, sector),
                    4 if pos >= durable_end => {
                        let mut garbage = vec![0u8; sector.len()];
                        rng.fill(&mut garbage[..]);
                        put(&mut self.durable, pos, &garbage);
                        stats.sectors_garbage += 1;
                    }
                    _ => stats.sectors_lost += 1,
                }
            }
        }
    }
}

/// Whether two records frame the same bytes (a decoded `Data` record holds its batches
/// as one run of bytes, however many the writer gave).
fn same(a: &Record, b: &Record) -> bool {
    match (a, b) {
        (Record::Data { key: k1, batches: b1 }, Record::Data { key: k2, batches: b2 }) => {
            k1 == k2 && b1.iter().flat_map(|b| b.iter()).eq(b2.iter().flat_map(|b| b.iter()))
        }
        _ => a == b,
    }
}

/// The journal's files, the writer's place, and what the simulation knows.
struct Sim {
    rng: StdRng,
    files: BTreeMap<u64, SimFile>,
    spares: Vec<SimFile>,
    seq: u64,
    tail: Tail,
    /// End of the last durable record in the current file.
    durable_end: usize,
    /// Every record of a flushed pass, still in a live file.
    acked: Vec<(Position, Record)>,
    /// The records of the pass in flight (written, not flushed).
    in_flight: Vec<(Position, Record)>,
    keys: BTreeSet<Bytes>,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut sim = Sim {
            rng: StdRng::seed_from_u64(seed),
            files: BTreeMap::new(),
            spares: Vec::new(),
            seq: 0,
            tail: Tail::default(),
            durable_end: 0,
            acked: Vec::new(),
            in_flight: Vec::new(),
            keys: BTreeSet::new(),
            stats: Stats::default(),
        };
        sim.start_file();
        sim
    }

    /// A new current file: a spare with its old contents, or a zero-filled one.
    fn start_file(&mut self) {
        self.seq = self.files.keys().last().copied().unwrap_or(0).max(self.seq) + 1;
        let file = match self.spares.pop() {
            Some(spare) => {
                self.stats.recycled += 1;
                spare
            }
            None => SimFile { durable: vec![0; FILE_BYTES as usize], pending: Vec::new() },
        };
        self.files.insert(self.seq, file);
        self.tail = Tail::default();
        self.durable_end = 0;
    }

    /// Files before `replay_from` stop being live: kept as spares or removed.
    fn retire_before(&mut self, replay_from: u64) {
        let retired: Vec<u64> = self.files.range(..replay_from).map(|(s, _)| *s).collect();
        for seq in retired {
            let file = self.files.remove(&seq).expect("listed");
            if self.spares.len() < SPARES_MAX {
                self.spares.push(file);
            }
        }
        self.acked.retain(|(p, _)| p.seq >= replay_from);
    }

    fn random_record(&mut self) -> Record {
        let key = Bytes::from(vec![b'k', self.rng.gen_range(0..KEYS)]);
        self.keys.insert(key.clone());
        match self.rng.gen_range(0..20) {
            0 => Record::Create { key },
            1 => Record::Truncate { key, offset: self.rng.gen_range(0..1000) },
            _ => {
                let batches = (0..self.rng.gen_range(1..3))
                    .map(|_| {
                        let mut batch = vec![0u8; self.rng.gen_range(1..1500)];
                        self.rng.fill(&mut batch[..]);
                        Bytes::from(batch)
                    })
                    .collect();
                Record::Data { key, batches }
            }
        }
    }

    /// Writes one pass; returns false if power was lost before its flush.
    fn pass(&mut self, records: Vec<Record>) -> bool {
        let total: usize = records.iter().map(Record::encoded_len).sum();
        if self.tail.end() > 0 && self.tail.lay_out(total, SECTOR).end_in_file() > FILE_BYTES {
            self.start_file();
        }
        let pass = self.tail.lay_out(total, SECTOR);
        let mut buf = vec![0u8; pass.len];
        pass.fill(&mut buf, &records, self.seq);
        let mut offset = pass.records_at();
        let positioned: Vec<(Position, Record)> = records
            .into_iter()
            .map(|r| {
                let p = Position { seq: self.seq, offset };
                offset += r.encoded_len() as u64;
                (p, r)
            })
            .collect();
        self.stats.passes += 1;
        let mut written = buf.clone();
        let short = self.rng.gen_range(0..40) == 0;
        if short {
            // A full disk: the write stops after some sectors and the pass fails.
            written.truncate(self.rng.gen_range(0..=pass.len / SECTOR) * SECTOR);
            self.stats.short_writes += 1;
        }
        let file = self.files.get_mut(&self.seq).expect("current file");
        file.pending.push((pass.position as usize, written));
        if short || self.rng.gen_range(0..12) == 0 {
            self.in_flight = positioned;
            return false;
        }
        file.flush();
        self.stats.acknowledged += 1;
        self.durable_end = pass.end_in_file() as usize;
        self.tail = pass.next_tail();
        self.acked.extend(positioned);
        true
    }

    /// A checkpoint: a new file, a `Checkpoint` record whose marks put every log's
    /// replay at the new file's start, then the files before it retired.
    fn checkpoint(&mut self) -> bool {
        self.start_file();
        let replay_from = self.seq;
        let mark = Mark {
            position: Position { seq: replay_from, offset: 0 },
            segment_base: 0,
            segment_size: 0,
            next_offset: 0,
            high_watermark: 0,
            tail: None,
        };
        let marks = self.keys.iter().map(|k| (k.clone(), mark)).collect();
        if !self.pass(vec![Record::Checkpoint { replay_from, marks }]) {
            return false;
        }
        self.stats.checkpoints += 1;
        self.retire_before(replay_from);
        true
    }

    /// Power loss, then recovery as `Journal::open` does it, checked.
    fn lose_power_and_recover(&mut self) -> Result<(), String> {
        self.stats.power_losses += 1;
        let durable_end = self.durable_end;
        let current = self.seq;
        for (seq, file) in self.files.iter_mut() {
            let end = if *seq == current { durable_end } else { usize::MAX };
            file.lose_power(end, &mut self.rng, &mut self.stats);
        }
        let listed: Vec<(u64, Bytes)> =
            self.files.iter().map(|(s, f)| (*s, Bytes::copy_from_slice(&f.durable))).collect();
        let decoded = decode(&listed);

        // Acknowledged records, then at most a prefix of the pass in flight.
        let in_flight = std::mem::take(&mut self.in_flight);
        let acked: BTreeMap<Position, &Record> = self.acked.iter().map(|(p, r)| (*p, r)).collect();
        let mut found: BTreeMap<Position, &Record> = BTreeMap::new();
        let mut survived = 0;
        for (p, r) in &decoded {
            match acked.get(p) {
                Some(a) if same(a, r) => {}
                Some(a) => {
                    return Err(format!(
                        "record at {p:?} decoded differently from what was acknowledged: {} bytes, not {}",
                        r.encoded_len(),
                        a.encoded_len()
                    ))
                }
                None => {
                    if !in_flight.get(survived).is_some_and(|(ip, ir)| ip == p && same(ir, r)) {
                        return Err(format!("record at {p:?} decoded that was never written there: {r:?}"));
                    }
                    survived += 1;
                }
            }
            found.insert(*p, r);
        }
        for (p, _) in &self.acked {
            if !found.contains_key(p) {
                return Err(format!("acknowledged record at {p:?} lost ({} decoded)", decoded.len()));
            }
        }
        self.stats.records_checked += decoded.len() as u64;
        self.stats.in_flight_survived += survived as u64;
        // What survived of the pass in flight is in the journal now: it is replayed.
        self.acked.extend(in_flight.into_iter().take(survived));

        // The grouping every log's recovery is built from.
        let expected_checkpoint = self.acked.iter().rev().find_map(|(_, r)| match r {
            Record::Checkpoint { replay_from, marks } => Some((*replay_from, marks.clone())),
            _ => None,
        });
        let (replay_from, marks) = expected_checkpoint.unwrap_or((0, Vec::new()));
        let grouped = group(decoded);
        if grouped.replay_from != replay_from {
            return Err(format!("replay from file {} instead of {replay_from}", grouped.replay_from));
        }
        let marks: BTreeMap<Bytes, Mark> = marks.into_iter().collect();
        let mut expected: BTreeMap<Bytes, (bool, Vec<Record>)> = BTreeMap::new();
        for (p, r) in &self.acked {
            let Some(key) = r.key() else { continue };
            if p.seq < replay_from || marks.get(key).is_some_and(|m| *p < m.position) {
                continue;
            }
            let log = expected.entry(key.clone()).or_default();
            match r {
                Record::Create { .. } => *log = (true, Vec::new()),
                r => log.1.push(r.clone()),
            }
        }
        for key in &self.keys {
            let got = grouped.logs.get(key);
            let (created, records) = expected.remove(key).unwrap_or_default();
            let got_records = got.map(|l| l.records.clone()).unwrap_or_default();
            let equal = got_records.len() == records.len() && got_records.iter().zip(&records).all(|(a, b)| same(a, b));
            if got.is_some_and(|l| l.created) != created || !equal {
                return Err(format!(
                    "log {key:?}: recovered {} records (created {}), expected {} (created {created})",
                    got_records.len(),
                    got.is_some_and(|l| l.created),
                    records.len()
                ));
            }
            if got.and_then(|l| l.mark) != marks.get(key).copied() {
                return Err(format!("log {key:?}: recovered with the wrong mark"));
            }
        }

        // Open as the journal does: files before the checkpoint retired, a new file.
        self.retire_before(replay_from);
        self.start_file();
        Ok(())
    }

    fn run(&mut self) -> Result<(), String> {
        for _ in 0..STEPS {
            let ok = match self.rng.gen_range(0..100) {
                0..=84 => {
                    let records = (0..self.rng.gen_range(1..5)).map(|_| self.random_record()).collect();
                    self.pass(records)
                }
                85..=93 => self.checkpoint(),
                _ => false,
            };
            if !ok {
                self.lose_power_and_recover()?;
            }
        }
        self.lose_power_and_recover()
    }
}

#[test]
fn every_acknowledged_record_survives_power_loss_on_a_simulated_disk() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("KEEL_JOURNAL_SIM_SEED") {
        Some(seed) => vec![seed],
        // About 200 seeds a second in a release build, a few in a debug one.
        None => (0..env("KEEL_JOURNAL_SIM_SEEDS").unwrap_or(if cfg!(debug_assertions) { 20 } else { 300 })).collect(),
    };
    let started = std::time::Instant::now();
    let mut total = Stats::default();
    for &seed in &seeds {
        let mut sim = Sim::new(seed);
        sim.stats = std::mem::take(&mut total);
        if let Err(e) = sim.run() {
            panic!("seed {seed}: {e} (replay: KEEL_JOURNAL_SIM_SEED={seed})");
        }
        total = sim.stats;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "journal simulation: {} seeds in {secs:.2} s ({:.0} seeds/s): {total:?}",
        seeds.len(),
        seeds.len() as f64 / secs
    );
    assert!(total.power_losses > seeds.len() as u64 && total.recycled > 0 && total.in_flight_survived > 0);
}
