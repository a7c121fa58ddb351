//! The workloads that expose brokers, each in a quick and a full form.
//!
//! Shapes come from published comparisons (see docs/benchmarks.md): the Kafka vs
//! Redpanda producer test, OpenMessaging Benchmark's fixed-rate runs, and Jack
//! Vanlightly's variations (50 producers, keys over many partitions, retention
//! reached, backlog drain). The quick forms fit the whole two-broker suite in
//! under 15 minutes on a 2-core machine; the full forms run each step longer and
//! larger. Every workload uses fresh topics, so runs never read each other's data.

use crate::options::{ClientOptions, KeyMode, LoadSpec};
use crate::resources::ResourceProbe;
use crate::run::{run_catch_up, run_load, LoadResult};
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Quick,
    Full,
}

impl Mode {
    /// `quick` in quick mode, `full` otherwise.
    fn pick<T>(self, quick: T, full: T) -> T {
        match self {
            Mode::Quick => quick,
            Mode::Full => full,
        }
    }
}

/// What a workload needs to know about where it runs.
#[derive(Clone, Debug)]
pub struct Context {
    /// Label of the broker under test ("kafka", "keel", ...).
    pub broker: String,
    /// Bootstrap address and extra client properties; workloads set acks, linger,
    /// batch size themselves.
    pub client: ClientOptions,
    pub mode: Mode,
    /// Drop the page cache before catch-up reads (needs root).
    pub drop_caches: bool,
}

/// One measured run of a workload (a workload may have several: rungs, variants).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadRun {
    pub workload: String,
    pub variant: String,
    pub broker: String,
    pub notes: Vec<String>,
    pub result: LoadResult,
}

type WorkloadFn = fn(&Context, Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String>;

pub struct Workload {
    pub name: &'static str,
    pub about: &'static str,
    pub run: WorkloadFn,
}

pub const ALL: &[Workload] = &[
    Workload {
        name: "max-rate",
        about: "1 producer flat out: 1 KiB, acks=all, linger.ms=5, batch.size=64 KiB, 6 partitions",
        run: max_rate,
    },
    Workload {
        name: "ladder",
        about: "fixed-rate steps until the broker delivers < 99% of target; publish and e2e latency per rung",
        run: ladder,
    },
    Workload { name: "producers-4-vs-50", about: "the same byte rate from 4 producers and from 50 producers", run: producers_4_vs_50 },
    Workload {
        name: "keyed-partitions",
        about: "keyed records (round-robin keys) over 400 (full: 1,000) partitions: many small batches",
        run: keyed_partitions,
    },
    Workload {
        name: "retention",
        about:
            "the same load without deletion, then with retention.bytes small enough that segments are deleted all through the measurement",
        run: retention,
    },
    Workload {
        name: "backlog-drain",
        about: "consumers start late and drain a backlog while producers keep a constant rate",
        run: backlog_drain,
    },
    Workload { name: "catch-up", about: "write a backlog, drop the page cache, read it all from disk with one consumer", run: catch_up },
];

/// Run the workload called `name`.
pub fn run_named(name: &str, context: &Context, probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let workload = ALL.iter().find(|workload| workload.name == name).ok_or_else(|| {
        let names: Vec<&str> = ALL.iter().map(|workload| workload.name).collect();
        format!("unknown workload {name:?}; known: {}", names.join(", "))
    })?;
    (workload.run)(context, probe)
}

/// The client settings every workload starts from: 1 KiB records, acks=all.
fn base_spec(context: &Context, topic: &str) -> LoadSpec {
    LoadSpec {
        topics: vec![topic.to_string()],
        client: ClientOptions { acks: "all".into(), linger_ms: 5, batch_size: 65536, ..context.client.clone() },
        ..LoadSpec::default()
    }
}

fn measure(
    context: &Context,
    workload: &str,
    variant: &str,
    spec: &LoadSpec,
    probe: Option<&mut ResourceProbe>,
) -> Result<WorkloadRun, String> {
    let label = format!("{} {workload} {variant}", context.broker);
    let result = run_load(spec, label.trim(), probe)?;
    crate::cli::print_result(&result);
    Ok(WorkloadRun {
        workload: workload.into(),
        variant: variant.into(),
        broker: context.broker.clone(),
        notes: Vec::new(),
        result,
    })
}

fn max_rate(context: &Context, probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let mode = context.mode;
    let spec = LoadSpec {
        partitions: 6,
        producers: 1,
        consumers: 0,
        rate: 0.0,
        warmup: mode.pick(Duration::from_secs(5), Duration::from_secs(30)),
        duration: mode.pick(Duration::from_secs(15), Duration::from_secs(120)),
        ..base_spec(context, "max-rate")
    };
    Ok(vec![measure(context, "max-rate", "1 producer", &spec, probe)?])
}

/// Target rates of the ladder, records per second (1 KiB each).
pub fn ladder_rates(mode: Mode) -> Vec<f64> {
    let rates: &[u32] = match mode {
        Mode::Quick => &[5_000, 10_000, 20_000, 40_000, 70_000, 100_000, 140_000, 180_000, 230_000, 300_000],
        Mode::Full => &[
            5_000, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000, 90_000, 100_000, 120_000, 140_000,
            160_000, 180_000, 200_000, 230_000, 260_000, 300_000, 350_000, 400_000,
        ],
    };
    rates.iter().map(|&rate| f64::from(rate)).collect()
}

/// Tries per rung: a rung that misses its target is run once more before the
/// ladder stops, so one stall caused by another process on a shared machine does
/// not end the ladder.
const LADDER_TRIES: usize = 2;

fn ladder(context: &Context, mut probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let mode = context.mode;
    let mut runs = Vec::new();
    for rate in ladder_rates(mode) {
        let variant = format!("{} msg/s", rate as u64);
        let mut met = false;
        for attempt in 1..=LADDER_TRIES {
            let topic = format!("ladder-{}-{attempt}", rate as u64);
            let mut spec = LoadSpec {
                partitions: 12,
                producers: mode.pick(2, 4),
                consumers: mode.pick(2, 4),
                rate,
                warmup: mode.pick(Duration::from_secs(2), Duration::from_secs(10)),
                duration: mode.pick(Duration::from_secs(6), Duration::from_secs(30)),
                drain_timeout: Duration::from_secs(10),
                ..base_spec(context, &topic)
            };
            // OpenMessaging Benchmark's Kafka workload: linger.ms=1, batch.size=128 KiB.
            spec.client.linger_ms = 1;
            spec.client.batch_size = 131072;
            let mut run = measure(context, "ladder", &variant, &spec, probe.as_deref_mut())?;
            met = run.result.met_target() && run.result.errors == 0;
            if !met {
                let last = attempt == LADDER_TRIES;
                run.notes.push(format!(
                    "missed target: {:.0} of {:.0} records/s ({} errors); {}",
                    run.result.publish_rate,
                    rate,
                    run.result.errors,
                    if last { "ladder stops here" } else { "rung run again" }
                ));
                if !last {
                    // Keep the miss in the results under its own name.
                    run.variant = format!("{variant} (missed, retried)");
                }
            }
            runs.push(run);
            if met {
                break;
            }
        }
        if !met {
            break;
        }
    }
    Ok(runs)
}

fn producers_4_vs_50(context: &Context, mut probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let mode = context.mode;
    let mut runs = Vec::new();
    for producers in [4usize, 50] {
        let spec = LoadSpec {
            partitions: mode.pick(24, 96),
            producers,
            consumers: 2,
            rate: mode.pick(20_000.0, 50_000.0),
            warmup: mode.pick(Duration::from_secs(3), Duration::from_secs(10)),
            duration: mode.pick(Duration::from_secs(12), Duration::from_secs(60)),
            drain_timeout: Duration::from_secs(10),
            ..base_spec(context, &format!("producers-{producers}"))
        };
        runs.push(measure(
            context,
            "producers-4-vs-50",
            &format!("{producers} producers"),
            &spec,
            probe.as_deref_mut(),
        )?);
    }
    Ok(runs)
}

fn keyed_partitions(context: &Context, probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let mode = context.mode;
    let topic_count = mode.pick(40, 100);
    let spec = LoadSpec {
        topics: (0..topic_count).map(|index| format!("keyed-{index}")).collect(),
        partitions: 10,
        producers: 4,
        consumers: 2,
        rate: mode.pick(10_000.0, 20_000.0),
        keys: KeyMode::RoundRobin,
        key_space: 10_000,
        warmup: mode.pick(Duration::from_secs(5), Duration::from_secs(15)),
        duration: mode.pick(Duration::from_secs(12), Duration::from_secs(60)),
        drain_timeout: Duration::from_secs(10),
        ..base_spec(context, "keyed")
    };
    let variant = format!("{} partitions", topic_count * 10);
    Ok(vec![measure(context, "keyed-partitions", &variant, &spec, probe)?])
}

/// Log start and end offsets summed over the partitions of `topics`.
fn offsets(client: &ClientOptions, topics: &[String]) -> Result<(i64, i64, usize), String> {
    let partitions = crate::admin::topic_partitions(client, topics)?;
    let consumer: BaseConsumer = client.consumer_config().create().map_err(|error| error.to_string())?;
    let (mut low_sum, mut high_sum, mut advanced) = (0, 0, 0);
    for (topic, partition) in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, *partition, Duration::from_secs(10))
            .map_err(|error| format!("ListOffsets {topic}/{partition}: {error}"))?;
        low_sum += low;
        high_sum += high;
        advanced += usize::from(low > 0);
    }
    Ok((low_sum, high_sum, advanced))
}

fn retention(context: &Context, mut probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let mode = context.mode;
    let retention_bytes: u64 = 8 << 20;
    let mut runs = Vec::new();
    // The same load twice: first with nothing deleted (the baseline), then with
    // retention small enough that segments are deleted all through the measurement.
    for (variant, limit, topic) in
        [(RETENTION_BASELINE, -1i64, "retention-baseline"), (RETENTION_DELETING, retention_bytes as i64, "retention")]
    {
        let spec = LoadSpec {
            partitions: 6,
            topic_configs: vec![
                ("retention.bytes".into(), limit.to_string()),
                ("segment.bytes".into(), (1u64 << 20).to_string()),
            ],
            producers: 2,
            consumers: 1,
            rate: mode.pick(20_000.0, 40_000.0),
            warmup: mode.pick(Duration::from_secs(5), Duration::from_secs(15)),
            duration: mode.pick(Duration::from_secs(15), Duration::from_secs(120)),
            drain_timeout: Duration::from_secs(10),
            ..base_spec(context, topic)
        };
        let mut run = measure(context, "retention", variant, &spec, probe.as_deref_mut())?;
        match offsets(&spec.client, &spec.topics) {
            Ok((deleted, end, advanced)) => run.notes.push(format!(
                "{variant}: retention deleted {deleted} of {end} records; log start offset advanced on {advanced} of {} partitions",
                spec.partitions
            )),
            Err(error) => run.notes.push(format!("could not read log start offsets: {error}")),
        }
        runs.push(run);
    }
    Ok(runs)
}

/// Variants of the retention workload, for the report's goal line.
pub const RETENTION_BASELINE: &str = "baseline: nothing deleted";
pub const RETENTION_DELETING: &str = "deleting: 8 MiB per partition, 1 MiB segments";

fn backlog_drain(context: &Context, probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let mode = context.mode;
    let spec = LoadSpec {
        partitions: 6,
        producers: 2,
        consumers: 2,
        rate: mode.pick(10_000.0, 20_000.0),
        warmup: Duration::from_secs(2),
        duration: mode.pick(Duration::from_secs(30), Duration::from_secs(180)),
        consumer_delay: mode.pick(Duration::from_secs(10), Duration::from_secs(60)),
        drain_timeout: Duration::from_secs(30),
        ..base_spec(context, "backlog")
    };
    let mut run = measure(context, "backlog-drain", "consumers start late", &spec, probe)?;
    let backlog = spec.rate * spec.consumer_delay.as_secs_f64();
    let peak = run.result.timeline.iter().map(|point| point.consumed_per_sec).fold(0.0, f64::max);
    run.notes.push(match run.result.caught_up_secs {
        Some(secs) => {
            format!("backlog of ~{backlog:.0} records drained in {secs:.1}s under load; peak consumer rate {peak:.0} records/s")
        }
        None => {
            format!("backlog of ~{backlog:.0} records NOT drained before the end; peak consumer rate {peak:.0} records/s")
        }
    });
    Ok(vec![run])
}

fn drop_page_cache() -> Result<(), String> {
    // SAFETY: sync() has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(|error| format!("cannot drop the page cache: {error}"))
}

fn catch_up(context: &Context, probe: Option<&mut ResourceProbe>) -> Result<Vec<WorkloadRun>, String> {
    let mode = context.mode;
    let records: u64 = mode.pick(400_000, 4_000_000);
    let spec = LoadSpec {
        partitions: 6,
        producers: 1,
        consumers: 0,
        rate: 0.0,
        records: Some(records),
        warmup: Duration::ZERO,
        duration: Duration::from_secs(3600),
        drain_timeout: Duration::from_secs(10),
        ..base_spec(context, "catch-up")
    };
    let write = measure(context, "catch-up", "write backlog", &spec, None)?;
    let mut notes = Vec::new();
    if context.drop_caches {
        match drop_page_cache() {
            Ok(()) => notes.push("page cache dropped before reading".to_string()),
            Err(error) => notes.push(error),
        }
    } else {
        notes.push("page cache kept (run with --drop-caches to read from disk)".into());
    }
    let read_spec = LoadSpec { consumers: 1, ..spec };
    let label = format!("{} catch-up read", context.broker);
    let result = run_catch_up(&read_spec, write.result.acked, &label, probe)?;
    crate::cli::print_result(&result);
    if result.consumed < write.result.acked {
        notes.push(format!("read {} of {} records written", result.consumed, write.result.acked));
    }
    let read = WorkloadRun {
        workload: "catch-up".into(),
        variant: "read from the beginning".into(),
        broker: context.broker.clone(),
        notes,
        result,
    };
    Ok(vec![write, read])
}
