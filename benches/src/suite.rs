//! The side-by-side harness: both brokers, every workload, one broker at a time.
//!
//! For each workload the harness starts one broker on a fresh data directory
//! (same disk for both), runs the workload (warm-up included), stops the broker,
//! deletes its data, then does the same with the other broker. Which broker goes
//! first alternates from one workload to the next, so neither always runs on a
//! cooler machine. A broker that fails to start is recorded ("failed to start")
//! and the harness moves on; results.json is rewritten after every step, so an
//! interrupted suite still leaves its results.
//!
//! Brokers are started through scripts with one interface:
//! `SCRIPT start <data-dir> <port>` (returns when the broker is ready) and
//! `SCRIPT stop <data-dir>`: compat/kafka/kafka.sh and compat/keel.sh.

use crate::resources::{pid_listening_on, ResourceProbe};
use crate::workloads::{self, Context, Mode, WorkloadRun};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Broker-level settings the workloads need from Apache Kafka: retention must start
/// and be checked often enough to run inside a quick measurement, and deleted
/// segments removed promptly (defaults: first check after 30 s, then every 5
/// minutes; deletion 60 seconds after).
pub const KAFKA_EXTRA_PROPS: &str =
    "log.initial.task.delay.ms=1000\nlog.retention.check.interval.ms=5000\nlog.segment.delete.delay.ms=1000";

#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Longer, larger workloads (default: quick, about 15 minutes for both brokers).
    #[arg(long)]
    pub full: bool,
    /// Comma-separated workloads to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Comma-separated brokers to run: kafka, keel.
    #[arg(long, value_delimiter = ',', default_value = "kafka,keel")]
    pub brokers: Vec<String>,
    /// Where broker data directories are created (one fresh directory per run).
    #[arg(long, default_value = "target-bench/runs")]
    pub data_root: PathBuf,
    /// Results directory (default: benches/results/<UTC date-time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value = "compat/kafka/kafka.sh")]
    pub kafka_script: PathBuf,
    #[arg(long, default_value = "compat/keel.sh")]
    pub keel_script: PathBuf,
    #[arg(long, default_value_t = 39092)]
    pub kafka_port: u16,
    #[arg(long, default_value_t = 39192)]
    pub keel_port: u16,
    /// JVM heap for Apache Kafka: 4 GiB fixed, leaving most of 24 GiB to the page cache.
    #[arg(long, default_value = "-Xms4g -Xmx4g")]
    pub kafka_heap: String,
    /// Seconds a broker may take to start.
    #[arg(long, default_value_t = 180)]
    pub start_timeout: u64,
    /// Keep the page cache before catch-up reads (default: drop it, needs root).
    #[arg(long)]
    pub keep_page_cache: bool,
    /// Keep broker data directories after each run.
    #[arg(long)]
    pub keep_data: bool,
}

/// One attempt to run one workload on one broker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attempt {
    pub workload: String,
    pub broker: String,
    /// "ok", "failed to start", "workload failed", "not run".
    pub status: String,
    pub message: String,
    pub seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Meta {
    pub started_utc: String,
    pub finished_utc: String,
    pub total_seconds: f64,
    pub mode: String,
    pub machine: crate::report::Machine,
    pub kafka_version: String,
    pub kafka_heap: String,
    pub kafka_extra_props: String,
    /// server.properties as Kafka ran it (first run of the suite).
    pub kafka_config: String,
    pub keel_version: String,
    pub librdkafka_version: String,
    pub keel_bench_version: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SuiteResults {
    pub meta: Meta,
    pub attempts: Vec<Attempt>,
    pub runs: Vec<WorkloadRun>,
}

struct Broker {
    name: String,
    script: PathBuf,
    port: u16,
    env: Vec<(String, String)>,
    failed_starts: u32,
}

/// UTC date-time of a UNIX time, `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_string(unix_secs: u64) -> String {
    let (days, rest) = (unix_secs / 86_400, unix_secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest / 60 % 60, rest % 60)
}

fn now_utc() -> String {
    utc_string(crate::unix_nanos() / 1_000_000_000)
}

/// Run `script args...` with a time limit; returns (success, combined output).
fn run_script(script: &Path, args: &[&str], env: &[(String, String)], timeout: Duration, log: &Path) -> (bool, String) {
    let log_file = match std::fs::File::create(log) {
        Ok(file) => file,
        Err(error) => return (false, format!("cannot create {}: {error}", log.display())),
    };
    let stderr = log_file.try_clone().map(Stdio::from).unwrap_or_else(|_| Stdio::null());
    let spawned = Command::new("bash")
        .arg(script)
        .args(args)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(stderr)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return (false, format!("cannot run {}: {error}", script.display())),
    };
    let deadline = Instant::now() + timeout;
    let success = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    let output = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = output.lines().rev().take(15).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    (success, tail.join("\n"))
}

fn script_output(script: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("bash").arg(script).args(args).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout).trim().lines().last()?.trim().to_string();
    (output.status.success() && !text.is_empty()).then_some(text)
}

/// `keel --version` of the binary compat/keel.sh starts (KEEL_BIN or target/release/keel).
fn keel_version() -> String {
    let binary = std::env::var("KEEL_BIN").unwrap_or_else(|_| "target/release/keel".into());
    match Command::new(&binary).arg("--version").stderr(Stdio::null()).output() {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout).trim().to_string(),
        _ => format!("unknown ({binary} not built)"),
    }
}

impl SuiteArgs {
    fn brokers(&self) -> Vec<Broker> {
        let mut brokers = Vec::new();
        for name in &self.brokers {
            let (script, port, env) = match name.as_str() {
                "kafka" => (
                    self.kafka_script.clone(),
                    self.kafka_port,
                    vec![
                        ("KAFKA_HEAP_OPTS".to_string(), self.kafka_heap.clone()),
                        ("KAFKA_EXTRA_PROPS".to_string(), KAFKA_EXTRA_PROPS.to_string()),
                        ("KAFKA_START_TIMEOUT".to_string(), self.start_timeout.to_string()),
                    ],
                ),
                "keel" => (self.keel_script.clone(), self.keel_port, Vec::new()),
                other => {
                    eprintln!("keel-bench: unknown broker {other:?} ignored (kafka, keel)");
                    continue;
                }
            };
            brokers.push(Broker { name: name.clone(), script, port, env, failed_starts: 0 });
        }
        brokers
    }
}

/// Run the whole suite and write results.json, report.md and the plots.
pub fn run_suite(args: &SuiteArgs) -> Result<(), String> {
    let started = Instant::now();
    let mode = if args.full { Mode::Full } else { Mode::Quick };
    let stamp = now_utc().replace([':', '-'], "");
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("benches/results").join(&stamp));
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|error| format!("cannot create {}: {error}", logs.display()))?;
    std::fs::create_dir_all(&args.data_root)
        .map_err(|error| format!("cannot create {}: {error}", args.data_root.display()))?;
    let data_root = args.data_root.canonicalize().map_err(|error| error.to_string())?;

    let workload_names: Vec<&str> = workloads::ALL
        .iter()
        .map(|workload| workload.name)
        .filter(|name| args.only.is_empty() || args.only.iter().any(|only| only == name))
        .collect();
    if workload_names.is_empty() {
        return Err(format!("--only {:?} matches no workload", args.only));
    }
    let mut brokers = args.brokers();
    let mut results = SuiteResults { meta: meta(args, mode, &data_root, &brokers), ..SuiteResults::default() };
    let results_path = out.join("results.json");
    eprintln!(
        "keel-bench suite: {} mode, workloads {workload_names:?}, results in {}",
        results.meta.mode,
        out.display()
    );

    for (index, workload) in workload_names.iter().enumerate() {
        let order: Vec<usize> =
            if index % 2 == 0 { (0..brokers.len()).collect() } else { (0..brokers.len()).rev().collect() };
        for broker_index in order {
            let broker = &mut brokers[broker_index];
            let attempt_start = Instant::now();
            let (status, message, runs) =
                run_on_broker(args, mode, broker, workload, &data_root, &logs, &mut results.meta);
            eprintln!("keel-bench suite: {workload} on {}: {status} {message}", broker.name);
            results.runs.extend(runs);
            results.attempts.push(Attempt {
                workload: workload.to_string(),
                broker: broker.name.clone(),
                status,
                message,
                seconds: attempt_start.elapsed().as_secs_f64(),
            });
            results.meta.total_seconds = started.elapsed().as_secs_f64();
            write_json(&results_path, &results)?;
        }
    }
    results.meta.finished_utc = now_utc();
    results.meta.total_seconds = started.elapsed().as_secs_f64();
    write_json(&results_path, &results)?;
    crate::report::write_report(&results_path)?;
    eprintln!(
        "keel-bench suite: done in {:.0}s; report at {}",
        results.meta.total_seconds,
        out.join("report.md").display()
    );
    Ok(())
}

fn write_json(path: &Path, results: &SuiteResults) -> Result<(), String> {
    let text = serde_json::to_string_pretty(results).map_err(|error| error.to_string())?;
    std::fs::write(path, text).map_err(|error| format!("cannot write {}: {error}", path.display()))
}

fn meta(args: &SuiteArgs, mode: Mode, data_root: &Path, brokers: &[Broker]) -> Meta {
    let has = |name: &str| brokers.iter().any(|broker| broker.name == name);
    Meta {
        started_utc: now_utc(),
        mode: if mode == Mode::Full { "full" } else { "quick" }.into(),
        machine: crate::report::Machine::probe(data_root),
        kafka_version: if has("kafka") && args.kafka_script.exists() {
            script_output(&args.kafka_script, &["version"]).unwrap_or_else(|| "unknown".into())
        } else {
            "not run".into()
        },
        kafka_heap: args.kafka_heap.clone(),
        kafka_extra_props: KAFKA_EXTRA_PROPS.replace('\n', "; "),
        keel_version: if has("keel") { keel_version() } else { "not run".into() },
        librdkafka_version: rdkafka::util::get_rdkafka_version().1,
        keel_bench_version: env!("CARGO_PKG_VERSION").into(),
        ..Meta::default()
    }
}

/// Start `broker`, run `workload`, stop it. Returns (status, message, runs).
fn run_on_broker(
    args: &SuiteArgs,
    mode: Mode,
    broker: &mut Broker,
    workload: &str,
    data_root: &Path,
    logs: &Path,
    meta: &mut Meta,
) -> (String, String, Vec<WorkloadRun>) {
    if !broker.script.exists() {
        return (
            "not run".into(),
            format!("{} does not exist (broker not ready)", broker.script.display()),
            Vec::new(),
        );
    }
    if broker.failed_starts >= 2 {
        return ("not run".into(), "failed to start twice before; skipped".into(), Vec::new());
    }
    let data_dir = data_root.join(format!("{}-{workload}", broker.name));
    let _ = std::fs::remove_dir_all(&data_dir);
    let data_arg = data_dir.display().to_string();
    let port = broker.port.to_string();
    let start_log = logs.join(format!("{}-{workload}-start.log", broker.name));
    let (started, output) = run_script(
        &broker.script,
        &["start", &data_arg, &port],
        &broker.env,
        Duration::from_secs(args.start_timeout + 30),
        &start_log,
    );
    if !started {
        broker.failed_starts += 1;
        stop_broker(broker, &data_dir, logs, workload);
        return ("failed to start".into(), output, Vec::new());
    }
    broker.failed_starts = 0;
    if broker.name == "kafka" && meta.kafka_config.is_empty() {
        meta.kafka_config = std::fs::read_to_string(data_dir.join("server.properties")).unwrap_or_default();
    }
    let client =
        crate::options::ClientOptions { bootstrap: format!("127.0.0.1:{}", broker.port), ..Default::default() };
    if let Err(error) = crate::admin::wait_for_broker(&client, Duration::from_secs(30)) {
        stop_broker(broker, &data_dir, logs, workload);
        return ("failed to start".into(), error, Vec::new());
    }
    warm_up_broker(&client, &broker.name, mode);
    let mut probe = pid_listening_on(broker.port).map(|pid| ResourceProbe::new(pid, &data_dir, logs));
    let context = Context { broker: broker.name.clone(), client, mode, drop_caches: !args.keep_page_cache };
    let outcome = workloads::run_named(workload, &context, probe.as_mut());
    stop_broker(broker, &data_dir, logs, workload);
    if !args.keep_data {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    settle_disk();
    match outcome {
        Ok(runs) => ("ok".into(), String::new(), runs),
        Err(error) => ("workload failed".into(), error, Vec::new()),
    }
}

/// Lets the disk settle after a broker stopped and its data was deleted. Keel
/// acknowledges after an fdatasync, so the previous broker's leftover disk work would
/// be charged to it: for 10-15 s after a Kafka run, Keel's publish p99 at 1,000
/// partitions was 90-290 ms instead of 20-30 ms; after a 20 s pause it was 20 ms.
pub fn settle_disk() {
    // SAFETY: sync() has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_secs(15));
}

/// Put load on a freshly started broker before any workload measures it (JIT
/// compilation, page cache, first segment files), on a topic no workload reads.
fn warm_up_broker(client: &crate::options::ClientOptions, broker: &str, mode: Mode) {
    let spec = crate::options::LoadSpec {
        topics: vec!["broker-warm-up".into()],
        partitions: 6,
        producers: 1,
        consumers: 1,
        rate: 0.0,
        warmup: Duration::ZERO,
        duration: if mode == Mode::Full { Duration::from_secs(30) } else { Duration::from_secs(5) },
        drain_timeout: Duration::from_secs(5),
        client: client.clone(),
        ..crate::options::LoadSpec::default()
    };
    if let Err(error) = crate::run::run_load(&spec, &format!("{broker} broker warm-up"), None) {
        eprintln!("keel-bench suite: {broker} warm-up failed: {error}");
    }
}

/// Stop the broker through its script; if it still listens, end the process we started.
fn stop_broker(broker: &Broker, data_dir: &Path, logs: &Path, workload: &str) {
    let pid = pid_listening_on(broker.port);
    let log = logs.join(format!("{}-{workload}-stop.log", broker.name));
    let data_arg = data_dir.display().to_string();
    let (stopped, output) =
        run_script(&broker.script, &["stop", &data_arg], &broker.env, Duration::from_secs(90), &log);
    if !stopped {
        eprintln!("keel-bench suite: {} stop failed: {output}", broker.name);
    }
    let Some(pid) = pid else { return };
    let deadline = Instant::now() + Duration::from_secs(20);
    while pid_listening_on(broker.port) == Some(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    // Only a process whose command line names this run's data directory is ours to end.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if pid_listening_on(broker.port) == Some(pid) && String::from_utf8_lossy(&cmdline).contains(&data_arg) {
        eprintln!("keel-bench suite: {} (pid {pid}) still running after stop; killing it", broker.name);
        // SAFETY: kill only signals a broker process this suite started for this data directory.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_strings() {
        assert_eq!(utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_string(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_string(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
