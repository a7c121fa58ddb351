//! Deterministic simulation of `MultiRaft` clusters under faults; see `sim/mod.rs`.
//!
//! `KEEL_RAFT_SIM_SEEDS=n` runs seeds 0..n (default 200); `KEEL_RAFT_SIM_SEED=s` replays
//! only seed `s`. A failure names its seed.

mod sim;

use std::panic::{catch_unwind, AssertUnwindSafe};

use sim::{Outcome, Simulation};

const DEFAULT_SEEDS: u64 = 200;

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("KEEL_RAFT_SIM_SEED").ok().and_then(|value| value.parse().ok()) {
        return vec![seed];
    }
    let count = std::env::var("KEEL_RAFT_SIM_SEEDS").ok().and_then(|value| value.parse().ok());
    (0..count.unwrap_or(DEFAULT_SEEDS)).collect()
}

fn run_one(seed: u64, nodes: u64) -> Outcome {
    let result = catch_unwind(AssertUnwindSafe(|| Simulation::new(seed, nodes).run()));
    match result {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(violation)) => {
            panic!("{violation}\nseed {seed} with {nodes} nodes; replay with KEEL_RAFT_SIM_SEED={seed}")
        }
        Err(_) => {
            panic!("panicked (see above) at seed {seed} with {nodes} nodes; replay with KEEL_RAFT_SIM_SEED={seed}")
        }
    }
}

fn run_seeds(nodes: u64) {
    let mut total = Outcome::default();
    let seeds = seeds();
    for &seed in &seeds {
        let outcome = run_one(seed, nodes);
        total.committed += outcome.committed;
        total.elections += outcome.elections;
        total.crashes += outcome.crashes;
        total.pauses += outcome.pauses;
        total.truncations += outcome.truncations;
        total.delivered += outcome.delivered;
        total.calm_ticks = total.calm_ticks.max(outcome.calm_ticks);
    }
    println!(
        "{nodes} nodes, {} seeds: {} entries committed, {} (group, term) leaders, {} crashes, {} pauses, {} durable tails truncated, {} messages \
         delivered, slowest calm-phase recovery {} ticks",
        seeds.len(),
        total.committed,
        total.elections,
        total.crashes,
        total.pauses,
        total.truncations,
        total.delivered,
        total.calm_ticks
    );
    assert!(total.committed > 0, "the simulation committed nothing");
}

#[test]
fn three_nodes_keep_raft_safety_and_recover() {
    run_seeds(3);
}

#[test]
fn five_nodes_keep_raft_safety_and_recover() {
    run_seeds(5);
}

#[test]
fn a_seed_replays_exactly() {
    let first = run_one(7, 3);
    let second = run_one(7, 3);
    assert_eq!(first, second);
}
