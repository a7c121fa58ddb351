//! The `keel-bench` command line: flags, subcommands, and what each one runs.

use crate::options::{parse_duration, ClientOptions, KeyMode, LoadSpec};
use crate::resources::{pid_listening_on, ResourceProbe};
use crate::run::{run_catch_up, run_load, LoadResult};
use crate::workloads::{self, Mode};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// Kafka-protocol load generator and side-by-side benchmark harness.
#[derive(Debug, Parser)]
#[command(name = "keel-bench", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Producers only: publish latency and throughput.
    Produce(LoadArgs),
    /// Producers and consumers: publish and end-to-end latency.
    E2e(LoadArgs),
    /// Read existing topics from the beginning and report throughput (catch-up reads).
    Consume(ConsumeArgs),
    /// Transactions: one transactional producer, flat out or at a fixed rate, with
    /// read_committed reads that time and check every committed record.
    Txn(crate::txn::TxnArgs),
    /// Create topics (CreateTopics) and wait for their leaders.
    CreateTopic(CreateTopicArgs),
    /// Run one named workload against one broker.
    Workload(WorkloadArgs),
    /// Start Apache Kafka and Keel one at a time and run every workload against both.
    Suite(crate::suite::SuiteArgs),
    /// Write report.md and SVG plots from a results.json.
    Report(ReportArgs),
    /// List the workloads and what they measure.
    Workloads,
}

/// Topics and load shape shared by `produce` and `e2e`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    pub client: ClientOptions,
    #[command(flatten)]
    pub topics: TopicArgs,
    /// Producer clients.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Consumer clients (e2e only; partitions are split among them with assign()).
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Target records per second over all producers; 0 = max rate.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Measured time, after warm-up (e.g. 60s, 2m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Unmeasured time at the start.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Send exactly this many records instead (the window then ends at the last ack).
    #[arg(long)]
    pub records: Option<u64>,
    /// Record value size in bytes (minimum 8: the send timestamp).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    #[arg(long, value_enum, default_value = "none")]
    pub keys: KeyMode,
    /// Distinct keys for --keys round-robin|random.
    #[arg(long, default_value_t = 10_000)]
    pub key_space: u64,
    /// Start consumers this long after producers (builds a backlog to drain).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub consumer_delay: Duration,
    /// How long consumers may take to catch up after the last send.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct CreateTopicArgs {
    #[command(flatten)]
    pub client: ClientOptions,
    #[command(flatten)]
    pub topics: TopicArgs,
}

#[derive(Debug, Args)]
pub struct TopicArgs {
    /// Topic name, or name prefix when --topics > 1 (topics are PREFIX-0 .. PREFIX-N-1).
    #[arg(long, default_value = "keel-bench")]
    pub topic: String,
    /// Number of topics.
    #[arg(long, default_value_t = 1)]
    pub topics: usize,
    /// Partitions per topic when the generator creates it.
    #[arg(long, default_value_t = 6)]
    pub partitions: u32,
    /// Topic config at creation, `key=value` (repeatable), e.g. retention.bytes=8388608.
    #[arg(long = "config", value_parser = parse_config)]
    pub configs: Vec<(String, String)>,
}

impl TopicArgs {
    pub fn names(&self) -> Vec<String> {
        if self.topics <= 1 {
            vec![self.topic.clone()]
        } else {
            (0..self.topics).map(|index| format!("{}-{index}", self.topic)).collect()
        }
    }
}

fn parse_config(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .ok_or_else(|| format!("expected key=value, got {text:?}"))
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Write the full result as JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
    /// Sample this broker process (CPU, RSS, disk writes, fsyncs) during the window.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Or find the broker process by the port it listens on.
    #[arg(long, conflicts_with = "broker_pid")]
    pub broker_port: Option<u16>,
    /// The broker's data directory (picks the filesystem for fsync counting).
    #[arg(long, default_value = ".")]
    pub data_dir: PathBuf,
}

impl OutputArgs {
    pub(crate) fn probe(&self) -> Option<ResourceProbe> {
        let pid = self.broker_pid.or_else(|| self.broker_port.and_then(pid_listening_on))?;
        Some(ResourceProbe::new(pid, &self.data_dir, &std::env::temp_dir()))
    }

    pub(crate) fn write(&self, value: &impl serde::Serialize) -> Result<(), String> {
        let Some(path) = &self.json_out else {
            return Ok(());
        };
        let text = serde_json::to_string_pretty(value).map_err(|error| error.to_string())?;
        std::fs::write(path, text).map_err(|error| format!("cannot write {}: {error}", path.display()))
    }
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub client: ClientOptions,
    #[command(flatten)]
    pub topics: TopicArgs,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Stop after this many records (default: when nothing arrives for --idle-timeout).
    #[arg(long, default_value_t = u64::MAX)]
    pub records: u64,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct WorkloadArgs {
    /// Workload name (see `keel-bench workloads`).
    pub name: String,
    #[command(flatten)]
    pub client: ClientOptions,
    /// The full form (longer, larger) instead of the quick one.
    #[arg(long)]
    pub full: bool,
    /// Drop the page cache before catch-up reads (needs root).
    #[arg(long)]
    pub drop_caches: bool,
    /// Label for progress lines and results.
    #[arg(long, default_value = "broker")]
    pub broker: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// results.json written by `suite`; report.md and plots go next to it.
    pub results: PathBuf,
}

fn load_spec(args: &LoadArgs, consumers: usize) -> LoadSpec {
    LoadSpec {
        topics: args.topics.names(),
        partitions: args.topics.partitions,
        topic_configs: args.topics.configs.clone(),
        producers: args.producers.max(1),
        consumers,
        rate: args.rate.max(0.0),
        warmup: args.warmup,
        duration: if args.records.is_some() && args.duration == Duration::from_secs(30) {
            // A count-limited run is bounded by its count, with a generous cap.
            Duration::from_secs(3600)
        } else {
            args.duration
        },
        records: args.records,
        size: args.size,
        keys: args.keys,
        key_space: args.key_space,
        consumer_delay: args.consumer_delay,
        drain_timeout: args.drain_timeout,
        client: args.client.clone(),
    }
}

/// Print the summary of a run to stdout.
pub fn print_result(result: &LoadResult) {
    let p = &result.publish_latency;
    println!(
        "{}: {:.0} records/s ({:.2} MB/s) acked in {:.1}s window, {} errors",
        result.label, result.publish_rate, result.publish_mb_per_sec, result.measured_secs, result.errors
    );
    if p.count > 0 {
        println!(
            "  publish latency ms: mean {:.2} p50 {:.2} p75 {:.2} p95 {:.2} p99 {:.2} p99.9 {:.2} p99.99 {:.2} max {:.2}",
            p.mean, p.p50, p.p75, p.p95, p.p99, p.p999, p.p9999, p.max
        );
    }
    if let Some(e) = &result.end_to_end_latency {
        println!(
            "  end-to-end latency ms: mean {:.2} p50 {:.2} p75 {:.2} p95 {:.2} p99 {:.2} p99.9 {:.2} p99.99 {:.2} max {:.2}",
            e.mean, e.p50, e.p75, e.p95, e.p99, e.p999, e.p9999, e.max
        );
    }
    if result.consumed > 0 {
        println!(
            "  consumed {} records, {:.0} records/s ({:.2} MB/s)",
            result.consumed, result.consume_rate, result.consume_mb_per_sec
        );
    }
    if let Some(r) = &result.resources {
        let fsyncs = r.fsyncs_per_sec.map_or_else(|| r.fsync_method.clone(), |f| format!("{f:.1}/s"));
        println!(
            "  broker: {:.2} cores, peak RSS {:.0} MB, disk {:.2} bytes per payload byte, fsyncs {fsyncs}",
            r.cpu_cores,
            r.peak_rss_mb,
            r.disk_bytes_per_payload_byte.unwrap_or(f64::NAN)
        );
    }
    if let Some(error) = &result.first_error {
        println!("  first error: {error}");
    }
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Produce(args) => {
            let spec = load_spec(&args, 0);
            let mut probe = args.output.probe();
            let result = run_load(&spec, "produce", probe.as_mut())?;
            print_result(&result);
            args.output.write(&result)
        }
        Command::E2e(args) => {
            let spec = load_spec(&args, args.consumers.max(1));
            let mut probe = args.output.probe();
            let result = run_load(&spec, "e2e", probe.as_mut())?;
            print_result(&result);
            args.output.write(&result)
        }
        Command::Consume(args) => {
            let spec = LoadSpec {
                topics: args.topics.names(),
                consumers: args.consumers.max(1),
                drain_timeout: args.idle_timeout,
                client: args.client.clone(),
                ..LoadSpec::default()
            };
            let mut probe = args.output.probe();
            let result = run_catch_up(&spec, args.records, "consume", probe.as_mut())?;
            print_result(&result);
            args.output.write(&result)
        }
        Command::Txn(args) => {
            let result = crate::txn::run_txn(&args)?;
            crate::txn::print_txn_result(&result);
            args.output.write(&result)
        }
        Command::CreateTopic(args) => {
            let (client, topics) = (&args.client, &args.topics);
            crate::admin::create_topics(client, &topics.names(), topics.partitions, &topics.configs)?;
            println!("topics {:?} ready with {} partitions each", topics.names(), topics.partitions);
            Ok(())
        }
        Command::Workload(args) => {
            let mode = if args.full { Mode::Full } else { Mode::Quick };
            let mut probe = args.output.probe();
            let context = workloads::Context {
                broker: args.broker.clone(),
                client: args.client.clone(),
                mode,
                drop_caches: args.drop_caches,
            };
            // Each run prints its own summary as it finishes.
            let runs = workloads::run_named(&args.name, &context, probe.as_mut())?;
            args.output.write(&runs)
        }
        Command::Suite(args) => crate::suite::run_suite(&args),
        Command::Report(args) => crate::report::write_report(&args.results),
        Command::Workloads => {
            for workload in workloads::ALL {
                println!("{:<24} {}", workload.name, workload.about);
            }
            Ok(())
        }
    }
}
