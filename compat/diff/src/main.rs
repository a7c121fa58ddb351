//! keel-diff: a seeded differential tester of Keel against Apache Kafka.
//!
//! It draws request sequences from a seed, sends each step to a Kafka broker and to a
//! Keel broker, and compares the answers field by field after normalising what may
//! legitimately differ (`normalize.rs`). Kafka is the oracle: any other difference is a
//! divergence, reported with the shortest prefix of the sequence that still shows it,
//! unless `accepted.txt` lists it with a reason.
//!
//! Why a differential tester next to the client test suites: those check that clients
//! work, which tolerates many wrong answers (clients retry, ignore fields, map several
//! error codes to one exception). Comparing raw answers to Kafka's finds the error codes,
//! offsets and edge cases clients do not look at until one day they do.

mod accepted;
mod admin_steps;
mod batches;
mod client;
mod diff;
mod generate;
mod group_steps;
mod member_steps;
mod normalize;
mod project;
mod project_admin;
mod report;
mod run;
mod steps;
mod txn_steps;
mod versions;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::client::Client;
use crate::generate::Generator;
use crate::report::Report;
use crate::run::{run_sequence, Broker};
use crate::steps::Names;
use crate::versions::Versions;

#[derive(Clone, Copy, ValueEnum)]
enum Profile {
    /// About 100 sequences: a couple of minutes, for every change.
    Short,
    /// 2,000 sequences: for a nightly run.
    Long,
}

#[derive(Parser)]
#[command(about = "Send the same seeded request sequences to Kafka and Keel and diff the answers")]
struct Args {
    /// Kafka broker, HOST:PORT.
    #[arg(long)]
    kafka: String,
    /// Keel broker, HOST:PORT.
    #[arg(long)]
    keel: String,
    #[arg(long)]
    seed: u64,
    #[arg(long, value_enum, default_value = "short")]
    profile: Profile,
    /// Overrides the profile's number of sequences.
    #[arg(long)]
    sequences: Option<usize>,
    /// Sends only this sequence (the earlier ones are drawn, not sent), to replay one
    /// divergence from a report. Use fresh brokers or a seed not run against them.
    #[arg(long)]
    only: Option<usize>,
    /// Draws every sequence from this one scenario (for example `pipelined`), to run
    /// its sequences alone.
    #[arg(long)]
    scenario: Option<String>,
    /// The accepted divergences.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/accepted.txt"))]
    accepted: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(error) => {
            eprintln!("keel-diff: {error}");
            ExitCode::from(2)
        }
    }
}

/// Runs the profile and returns the number of open divergences.
fn run(args: &Args) -> Result<usize, String> {
    let text = std::fs::read_to_string(&args.accepted).map_err(|e| format!("{}: {e}", args.accepted.display()))?;
    let accepted = accepted::parse(&text)?;
    let mut kafka_client = Client::connect(&args.kafka)?;
    let mut keel_client = Client::connect(&args.keel)?;
    let versions = Versions::negotiate(&mut kafka_client, &mut keel_client)?;
    let mut kafka = Broker::new(kafka_client, &versions).map_err(|e| format!("kafka: {e}"))?;
    let mut keel = Broker::new(keel_client, &versions).map_err(|e| format!("keel: {e}"))?;
    kafka.wait_for_coordinator(&versions).map_err(|e| format!("kafka: {e}"))?;
    keel.wait_for_coordinator(&versions).map_err(|e| format!("keel: {e}"))?;

    let sequences = args.sequences.unwrap_or(match args.profile {
        Profile::Short => 100,
        Profile::Long => 2_000,
    });
    println!("diff: seed={} sequences={sequences} kafka={} keel={}", args.seed, args.kafka, args.keel);
    let started = Instant::now();
    let mut generator = Generator::new(StdRng::seed_from_u64(args.seed), &versions, args.scenario.as_deref())?;
    let mut report = Report::new(args.seed, &accepted);
    for number in 1..=sequences {
        let steps = generator.next_sequence();
        if args.only.is_some_and(|only| only != number) {
            continue;
        }
        let names = Names { prefix: format!("diff-{}-{number}-", args.seed) };
        let outcomes = run_sequence(&mut kafka, &mut keel, &steps, &names);
        report.record(number, &steps, &outcomes, &names, &mut |candidate, attempt| {
            let names = Names { prefix: format!("diff-{}-{number}-m{attempt}-", args.seed) };
            run_sequence(&mut kafka, &mut keel, candidate, &names)
        });
    }
    let sent = if args.only.is_some() { 1 } else { sequences };
    report.print_summary(sent, started.elapsed());
    Ok(report.open())
}
