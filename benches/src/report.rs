//! report.md and plots from a results.json: per workload, Kafka and Keel side by
//! side with the Keel / Kafka ratio, the ladder rung by rung, and the goals.

use crate::run::LoadResult;
use crate::stats::Percentiles;
use crate::suite::SuiteResults;
use crate::svg::{self, broker_color, Series};
use crate::workloads::{WorkloadRun, RETENTION_BASELINE, RETENTION_DELETING};
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::path::Path;
use std::process::Command;

/// The machine a suite ran on.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    /// `df` of the data root: device, filesystem, size, available.
    pub disk: String,
    /// `lsblk -d`: block devices, size, rotational, model.
    pub block_devices: String,
}

fn command_text(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Machine {
    pub fn probe(data_root: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|line| line.strip_prefix("MemTotal:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let root = data_root.display().to_string();
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find_map(|line| line.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
                .unwrap_or_default(),
            memory_gib: mem_kib / 1024.0 / 1024.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
            disk: command_text("df", &["-h", "--output=source,fstype,size,avail", &root])
                .lines()
                .last()
                .unwrap_or("")
                .to_string(),
            block_devices: command_text("lsblk", &["-d", "-n", "-o", "NAME,SIZE,ROTA,MODEL"]).replace('\n', "; "),
        }
    }
}

fn num(value: f64) -> String {
    if !value.is_finite() {
        "-".into()
    } else if value.abs() >= 100.0 {
        crate::stats::thousands(value)
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn ratio(keel: Option<f64>, kafka: Option<f64>) -> String {
    match (keel, kafka) {
        (Some(keel), Some(kafka)) if kafka > 0.0 && keel.is_finite() => {
            format!("{:.2}x", keel / kafka)
        }
        _ => "-".into(),
    }
}

type Metric = (&'static str, fn(&LoadResult) -> Option<f64>);

fn latency(p: &Percentiles, pick: fn(&Percentiles) -> f64) -> Option<f64> {
    (p.count > 0).then(|| pick(p))
}

/// The rows of every per-workload table.
const METRICS: &[Metric] = &[
    ("published records/s", |r| (r.acked > 0).then_some(r.publish_rate)),
    ("published MB/s", |r| (r.acked > 0).then_some(r.publish_mb_per_sec)),
    ("publish p50 ms", |r| latency(&r.publish_latency, |p| p.p50)),
    ("publish p99 ms", |r| latency(&r.publish_latency, |p| p.p99)),
    ("publish p99.9 ms", |r| latency(&r.publish_latency, |p| p.p999)),
    ("publish max ms", |r| latency(&r.publish_latency, |p| p.max)),
    ("end-to-end p50 ms", |r| r.end_to_end_latency.as_ref().and_then(|p| latency(p, |p| p.p50))),
    ("end-to-end p99 ms", |r| r.end_to_end_latency.as_ref().and_then(|p| latency(p, |p| p.p99))),
    ("end-to-end p99.9 ms", |r| r.end_to_end_latency.as_ref().and_then(|p| latency(p, |p| p.p999))),
    ("end-to-end max ms", |r| r.end_to_end_latency.as_ref().and_then(|p| latency(p, |p| p.max))),
    ("consumed MB/s", |r| (r.consumed > 0).then_some(r.consume_mb_per_sec)),
    ("backlog drained after s", |r| r.caught_up_secs),
    ("broker CPU cores", |r| r.resources.as_ref().map(|x| x.cpu_cores)),
    ("broker peak RSS MB", |r| r.resources.as_ref().map(|x| x.peak_rss_mb)),
    ("disk bytes written per payload byte", |r| r.resources.as_ref().and_then(|x| x.disk_bytes_per_payload_byte)),
    ("fsyncs per second", |r| r.resources.as_ref().and_then(|x| x.fsyncs_per_sec)),
    ("load generator CPU cores", |r| r.generator_cpu_cores),
    ("new partitions writable after s (not measured)", |r| r.prime_secs),
    ("errors", |r| Some(r.errors as f64)),
];

fn find<'a>(runs: &'a [WorkloadRun], workload: &str, variant: &str, broker: &str) -> Option<&'a WorkloadRun> {
    runs.iter().find(|run| run.workload == workload && run.variant == variant && run.broker == broker)
}

fn status_of(results: &SuiteResults, workload: &str, broker: &str) -> String {
    match results.attempts.iter().find(|a| a.workload == workload && a.broker == broker) {
        Some(a) if a.status == "ok" => "ok".into(),
        Some(a) => {
            let first_line = a.message.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            let short: String = first_line.chars().take(120).collect();
            format!("{}: {}", a.status, short.replace('|', "/"))
        }
        None => "not run".into(),
    }
}

fn side_by_side(out: &mut String, results: &SuiteResults, workload: &str, variant: &str) {
    let kafka = find(&results.runs, workload, variant, "kafka");
    let keel = find(&results.runs, workload, variant, "keel");
    let _ = writeln!(out, "\n**{variant}**\n\n| metric | Apache Kafka | Keel | Keel / Kafka |\n|---|---:|---:|---:|");
    let cell = |run: Option<&WorkloadRun>, value: Option<f64>| match (run, value) {
        (Some(_), Some(v)) => num(v),
        (Some(_), None) => "-".into(),
        (None, _) => "not run".into(),
    };
    for (name, metric) in METRICS {
        let kv = kafka.and_then(|r| metric(&r.result));
        let ev = keel.and_then(|r| metric(&r.result));
        if kv.is_none() && ev.is_none() {
            continue;
        }
        let _ = writeln!(out, "| {name} | {} | {} | {} |", cell(kafka, kv), cell(keel, ev), ratio(ev, kv));
    }
    out.push('\n');
    for (broker, run) in [("kafka", kafka), ("keel", keel)] {
        let Some(run) = run else {
            let _ = writeln!(out, "- {broker}: {}", status_of(results, workload, broker));
            continue;
        };
        for note in &run.notes {
            let _ = writeln!(out, "- {broker}: {note}");
        }
        if let Some(error) = &run.result.first_error {
            let _ = writeln!(out, "- {broker}: first error: {error}");
        }
    }
}

fn ladder_table(out: &mut String, results: &SuiteResults, broker: &str) {
    let rungs: Vec<&WorkloadRun> =
        results.runs.iter().filter(|r| r.workload == "ladder" && r.broker == broker).collect();
    if rungs.is_empty() {
        let _ = writeln!(out, "\n{broker}: {}\n", status_of(results, "ladder", broker));
        return;
    }
    let _ = writeln!(out, "\n**{broker}**\n\n| target msg/s | achieved msg/s | met | publish p50 / p99 / p99.9 / max ms | end-to-end p50 / p99 / p99.9 / max ms | CPU cores |\n|---:|---:|:-:|---|---|---:|");
    for rung in rungs {
        let r = &rung.result;
        let p = &r.publish_latency;
        let e = r.end_to_end_latency.clone().unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} / {} / {} / {} | {} / {} / {} / {} | {} |",
            if rung.variant.contains("retried") {
                format!("{} (run again)", num(r.target_rate))
            } else {
                num(r.target_rate)
            },
            num(r.publish_rate),
            if r.met_target() && r.errors == 0 { "yes" } else { "no" },
            num(p.p50),
            num(p.p99),
            num(p.p999),
            num(p.max),
            num(e.p50),
            num(e.p99),
            num(e.p999),
            num(e.max),
            r.resources.as_ref().map_or("-".into(), |x| num(x.cpu_cores))
        );
    }
}

fn goals(out: &mut String, results: &SuiteResults) {
    let _ = writeln!(out, "\n## Goals (reported, not asserted)\n\n| goal | measured | met |\n|---|---|:-:|");
    let rate = |broker| find(&results.runs, "max-rate", "1 producer", broker).map(|r| r.result.publish_rate);
    let line = match (rate("keel"), rate("kafka")) {
        (Some(keel), Some(kafka)) if kafka > 0.0 => {
            format!("{:.2}x | {}", keel / kafka, if keel / kafka >= 1.5 { "yes" } else { "no" })
        }
        _ => "not measured (a broker did not run) | -".into(),
    };
    let _ = writeln!(out, "| max-rate throughput >= 1.5x Kafka | {line} |");
    // p99 publish at every fixed rate both brokers sustained.
    let mut ratios: Vec<(String, f64)> = Vec::new();
    for rung in results.runs.iter().filter(|r| r.workload == "ladder" && r.broker == "keel" && r.result.met_target()) {
        let kafka = find(&results.runs, "ladder", &rung.variant, "kafka").filter(|k| k.result.met_target());
        if let Some(kafka) = kafka.filter(|k| k.result.publish_latency.p99 > 0.0) {
            let ratio = rung.result.publish_latency.p99 / kafka.result.publish_latency.p99;
            ratios.push((rung.variant.replace(" msg/s", ""), ratio));
        }
    }
    let line = if ratios.is_empty() {
        "not measured (no rung sustained by both) | -".to_string()
    } else {
        let met = ratios.iter().filter(|(_, ratio)| *ratio <= 0.2).count();
        let each: Vec<String> = ratios.iter().map(|(rate, ratio)| format!("{rate}: {ratio:.2}")).collect();
        format!(
            "Keel/Kafka p99 per rung sustained by both (records/s: ratio): {}; <= 0.2 on {met} of {} | {}",
            each.join(", "),
            ratios.len(),
            if met == ratios.len() { "yes" } else { "no" }
        )
    };
    let _ = writeln!(out, "| p99 publish <= 1/5 of Kafka's at fixed rates | {line} |");
    // Retention: p99 while deleting against the same load with nothing deleted.
    let step = |broker| {
        let p99 = |variant| find(&results.runs, "retention", variant, broker).map(|r| r.result.publish_latency.p99);
        match (p99(RETENTION_BASELINE), p99(RETENTION_DELETING)) {
            (Some(before), Some(during)) if before > 0.0 => Some((before, during)),
            _ => None,
        }
    };
    let line = match (step("keel"), step("kafka")) {
        (Some((kb, kd)), kafka) => format!(
            "Keel p99 {} ms before, {} ms while deleting ({:+.0}%); Kafka {} | {}",
            num(kb),
            num(kd),
            (kd / kb - 1.0) * 100.0,
            kafka.map_or("not measured".into(), |(b, d)| format!(
                "{} ms before, {} ms while deleting ({:+.0}%)",
                num(b),
                num(d),
                (d / b - 1.0) * 100.0
            )),
            if kd <= kb * 1.1 { "yes" } else { "no" }
        ),
        (None, _) => "not measured | -".into(),
    };
    let _ = writeln!(out, "| no latency step when retention deletes (p99 within 10% of before) | {line} |");
    many_partitions_and_producers(out, results);
    backlog_and_resources(out, results);
}

/// Keyed many-partition and 50-producer loads: throughput >= Kafka's, p99 <= Kafka's.
fn many_partitions_and_producers(out: &mut String, results: &SuiteResults) {
    for workload in ["keyed-partitions", "producers-4-vs-50"] {
        for keel in results.runs.iter().filter(|r| r.workload == workload && r.broker == "keel") {
            if workload == "producers-4-vs-50" && !keel.variant.starts_with("50") {
                continue;
            }
            let Some(kafka) = find(&results.runs, workload, &keel.variant, "kafka") else {
                continue;
            };
            let (k, f) = (&keel.result, &kafka.result);
            // At a fixed rate, delivering the target is as much throughput as there is.
            let throughput = k.met_target() || k.publish_rate >= f.publish_rate * 0.99;
            let met = throughput && k.publish_latency.p99 <= f.publish_latency.p99;
            let _ = writeln!(
                out,
                "| {workload} {}: throughput >= Kafka's and p99 <= Kafka's | records/s {} vs {} (target {}), p99 {} vs {} ms | {} |",
                keel.variant,
                num(k.publish_rate),
                num(f.publish_rate),
                num(k.target_rate),
                num(k.publish_latency.p99),
                num(f.publish_latency.p99),
                if met { "yes" } else { "no" }
            );
        }
    }
}

/// The backlog drains while producers hold their rate; RSS and CPU per 100k records/s
/// against Kafka on the fixed-rate runs both sustained.
fn backlog_and_resources(out: &mut String, results: &SuiteResults) {
    for broker in ["keel", "kafka"] {
        if let Some(run) = results.runs.iter().find(|r| r.workload == "backlog-drain" && r.broker == broker) {
            let r = &run.result;
            let line = match r.caught_up_secs {
                Some(secs) => {
                    format!(
                        "{broker}: drained after {} s at {} of {} records/s",
                        num(secs),
                        num(r.publish_rate),
                        num(r.target_rate)
                    )
                }
                None => format!("{broker}: not drained at {} of {} records/s", num(r.publish_rate), num(r.target_rate)),
            };
            let met = r.caught_up_secs.is_some() && r.met_target();
            let _ = writeln!(
                out,
                "| backlog drains while producers hold their rate | {line} | {} |",
                if met { "yes" } else { "no" }
            );
        }
    }
    let mut rss: Vec<(String, f64)> = Vec::new();
    let mut cpu: Vec<(String, f64)> = Vec::new();
    for keel in
        results.runs.iter().filter(|r| r.broker == "keel" && r.result.target_rate > 0.0 && r.result.met_target())
    {
        let Some(kafka) = find(&results.runs, &keel.workload, &keel.variant, "kafka").filter(|k| k.result.met_target())
        else {
            continue;
        };
        let (Some(k), Some(f)) = (&keel.result.resources, &kafka.result.resources) else {
            continue;
        };
        let label = format!("{} {}", keel.workload, keel.variant);
        if f.peak_rss_mb > 0.0 {
            rss.push((label.clone(), k.peak_rss_mb / f.peak_rss_mb));
        }
        let per_100k = |cores: f64, rate: f64| cores / (rate / 100_000.0);
        if f.cpu_cores > 0.0 && keel.result.publish_rate > 0.0 && kafka.result.publish_rate > 0.0 {
            cpu.push((
                label,
                per_100k(k.cpu_cores, keel.result.publish_rate) / per_100k(f.cpu_cores, kafka.result.publish_rate),
            ));
        }
    }
    for (goal, ratios, limit) in [
        ("broker RSS <= 1/5 of Kafka's at the same rate", rss, 0.2),
        ("broker CPU per 100k records/s below Kafka's", cpu, 1.0),
    ] {
        if ratios.is_empty() {
            let _ = writeln!(out, "| {goal} | not measured (no fixed-rate run sustained by both) | - |");
            continue;
        }
        let worst = ratios.iter().map(|(_, r)| *r).fold(0.0, f64::max);
        let met = ratios.iter().filter(|(_, r)| *r <= limit).count();
        let _ = writeln!(
            out,
            "| {goal} | Keel/Kafka on {} fixed-rate runs both sustained: at most {worst:.2}; within the goal on {met} | {} |",
            ratios.len(),
            if met == ratios.len() { "yes" } else { "no" }
        );
    }
}

/// A bar label short enough for the plot's label column.
fn short_label(workload: &str, variant: &str) -> String {
    match workload {
        "producers-4-vs-50" | "keyed-partitions" => variant.to_string(),
        "catch-up" if variant.starts_with("write") => "catch-up write".into(),
        "catch-up" => "catch-up read".into(),
        "retention" if variant == RETENTION_BASELINE => "retention baseline".into(),
        "retention" => "retention deleting".into(),
        _ => workload.to_string(),
    }
}

/// A percentile drawn on the ladder plots: name, how to read it, line dash.
type PercentileLine = (&'static str, fn(&Percentiles) -> f64, &'static str);

fn plots(dir: &Path, results: &SuiteResults) -> Result<Vec<String>, String> {
    let mut written = Vec::new();
    let brokers = ["kafka", "keel"];
    let styles: [PercentileLine; 3] = [("p50", |p| p.p50, ""), ("p99", |p| p.p99, "6 3"), ("p99.9", |p| p.p999, "2 3")];
    for (file, title, pick) in [
        (
            "ladder-publish-latency.svg",
            "Publish latency per rung (ms, log scale)",
            (|r: &LoadResult| Some(r.publish_latency.clone())) as fn(&LoadResult) -> Option<Percentiles>,
        ),
        ("ladder-end-to-end-latency.svg", "End-to-end latency per rung (ms, log scale)", |r: &LoadResult| {
            r.end_to_end_latency.clone()
        }),
    ] {
        let mut series = Vec::new();
        for broker in brokers {
            let rungs: Vec<&WorkloadRun> = results
                .runs
                .iter()
                .filter(|r| r.workload == "ladder" && r.broker == broker && !r.variant.contains("retried"))
                .collect();
            for (name, percentile, dash) in styles {
                let points = rungs
                    .iter()
                    .filter_map(|r| pick(&r.result).map(|p| (r.result.target_rate, percentile(&p))))
                    .collect::<Vec<_>>();
                if !points.is_empty() {
                    series.push(Series {
                        name: format!("{broker} {name}"),
                        color: broker_color(broker).into(),
                        dash: dash.into(),
                        points,
                    });
                }
            }
        }
        std::fs::write(dir.join(file), svg::line_chart(title, "target rate (records/s, 1 KiB)", "ms", &series, true))
            .map_err(|e| e.to_string())?;
        written.push(file.to_string());
    }
    // Throughput per workload: published MB/s, or consumed MB/s for the catch-up read.
    let mut groups = Vec::new();
    let mut keys = Vec::new();
    for run in &results.runs {
        if run.workload == "ladder" {
            continue;
        }
        let key = (run.workload.clone(), run.variant.clone());
        if !keys.contains(&key) {
            groups.push(short_label(&run.workload, &run.variant));
            keys.push(key);
        }
    }
    let series: Vec<(String, String, Vec<Option<f64>>)> = brokers
        .iter()
        .map(|broker| {
            let values = keys
                .iter()
                .map(|(workload, variant)| {
                    find(&results.runs, workload, variant, broker).map(|r| {
                        if r.result.acked > 0 {
                            r.result.publish_mb_per_sec
                        } else {
                            r.result.consume_mb_per_sec
                        }
                    })
                })
                .collect();
            (broker.to_string(), broker_color(broker).to_string(), values)
        })
        .collect();
    std::fs::write(
        dir.join("throughput.svg"),
        svg::bar_chart("Throughput per workload (MB/s)", "MB/s", &groups, &series),
    )
    .map_err(|e| e.to_string())?;
    written.push("throughput.svg".into());
    Ok(written)
}

/// Read `results_path` and write report.md and the SVG plots next to it.
pub fn write_report(results_path: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(results_path).map_err(|e| format!("cannot read {}: {e}", results_path.display()))?;
    let results: SuiteResults = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a suite results file: {e}", results_path.display()))?;
    let dir = results_path.parent().unwrap_or(Path::new("."));
    let plots = plots(dir, &results)?;
    let m = &results.meta;
    let mut out = String::new();
    let _ = writeln!(out, "# Keel vs Apache Kafka: benchmark report\n");
    let _ = writeln!(
        out,
        "- Started {} UTC, finished {} UTC, {} mode, {:.1} minutes in total",
        m.started_utc,
        m.finished_utc,
        m.mode,
        m.total_seconds / 60.0
    );
    let _ = writeln!(
        out,
        "- Machine: {} CPUs ({}), {:.1} GiB memory, Linux {}",
        m.machine.cpus, m.machine.cpu_model, m.machine.memory_gib, m.machine.kernel
    );
    let _ = writeln!(out, "- Disk (data root): {}; block devices: {}", m.machine.disk, m.machine.block_devices);
    let _ = writeln!(
        out,
        "- Apache Kafka {} (heap `{}`, extra `{}`); Keel {}; load generator keel-bench {} on librdkafka {}",
        m.kafka_version, m.kafka_heap, m.kafka_extra_props, m.keel_version, m.keel_bench_version, m.librdkafka_version
    );
    let _ = writeln!(
        out,
        "- Load generator and broker share the machine: compare the columns, not these numbers with other machines.\n"
    );
    let _ = writeln!(out, "## Runs\n\n| workload | Apache Kafka | Keel |\n|---|---|---|");
    let mut workloads: Vec<&str> = Vec::new();
    for attempt in &results.attempts {
        if !workloads.contains(&attempt.workload.as_str()) {
            workloads.push(&attempt.workload);
        }
    }
    for workload in &workloads {
        let _ = writeln!(
            out,
            "| {workload} | {} | {} |",
            status_of(&results, workload, "kafka"),
            status_of(&results, workload, "keel")
        );
    }
    goals(&mut out, &results);
    for workload in &workloads {
        let _ = writeln!(out, "\n## {workload}");
        if let Some(about) = crate::workloads::ALL.iter().find(|w| w.name == *workload) {
            let _ = writeln!(out, "\n{}.", about.about);
        }
        if *workload == "ladder" {
            for broker in ["kafka", "keel"] {
                ladder_table(&mut out, &results, broker);
            }
            let _ = writeln!(
                out,
                "\n![publish latency per rung](ladder-publish-latency.svg)\n![end-to-end latency per rung](ladder-end-to-end-latency.svg)"
            );
            continue;
        }
        let mut variants: Vec<&str> = Vec::new();
        for run in results.runs.iter().filter(|r| r.workload == *workload) {
            if !variants.contains(&run.variant.as_str()) {
                variants.push(&run.variant);
            }
        }
        if variants.is_empty() {
            let _ = writeln!(
                out,
                "\nNo run completed: Kafka {}; Keel {}.",
                status_of(&results, workload, "kafka"),
                status_of(&results, workload, "keel")
            );
        }
        for variant in variants {
            side_by_side(&mut out, &results, workload, variant);
        }
    }
    let _ = writeln!(out, "\n## Plots\n");
    for plot in &plots {
        let _ = writeln!(out, "![{plot}]({plot})");
    }
    let fsync_methods: Vec<String> = results
        .runs
        .iter()
        .filter_map(|r| r.result.resources.as_ref().map(|x| x.fsync_method.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let _ = writeln!(out, "\n## How resources were measured\n\nCPU: utime+stime of the broker process over the window. Peak RSS: VmHWM. Disk: write_bytes of /proc/PID/io over payload bytes acknowledged. fsyncs: {}.", if fsync_methods.is_empty() { "n/a".to_string() } else { fsync_methods.join("; ") });
    if !m.kafka_config.is_empty() {
        let _ = writeln!(out, "\n## Apache Kafka server.properties\n\n```properties\n{}```", m.kafka_config);
    }
    let report = dir.join("report.md");
    std::fs::write(&report, out).map_err(|e| format!("cannot write {}: {e}", report.display()))
}
