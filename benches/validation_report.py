#!/usr/bin/env python3
"""Compare keel-bench with Kafka's ProducerPerformance and EndToEndLatency.

Reads the raw outputs benches/validate.sh left in OUT and writes OUT/validation.md
and OUT/validation.json. Standard library only.

usage: validation_report.py OUT ROUNDS KAFKA_VERSION MAX_RECORDS FIXED_RATE FIXED_SECONDS
                            E2E_RECORDS E2E_RATE
"""
import json
import re
import statistics
import sys
from pathlib import Path

# ProducerPerformance's last line; with --warmup-records it is the steady-state line.
PP_LINE = re.compile(
    r"(?P<records>\d+) (?:steady state )?records sent, (?P<rate>[\d.]+) records/sec \((?P<mib>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)
E2E_AVG = re.compile(r"Avg latency: (?P<avg>[\d.]+) ms")
E2E_PCT = re.compile(r"Percentiles: 50th = (?P<p50>\d+), 99th = (?P<p99>\d+), 99.9th = (?P<p999>\d+)")
THRESHOLD = 10.0


def producer_performance(path):
    if not path.exists():
        return None
    match = None
    for line in path.read_text().splitlines():
        match = PP_LINE.search(line) or match
    if not match:
        return None
    return {key: float(value) for key, value in match.groupdict().items()}


def end_to_end_latency(path):
    if not path.exists():
        return None
    text = path.read_text()
    avg, pct = E2E_AVG.search(text), E2E_PCT.search(text)
    if not avg or not pct:
        return None
    result = {"avg": float(avg.group("avg"))}
    result.update({key: float(value) for key, value in pct.groupdict().items()})
    return result


def keel_bench(path, field):
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    latency = data.get(field) or {}
    if not latency.get("count"):
        return None
    return {
        "rate": data["publish_rate"],
        "mib": data["publish_rate"] * data["spec"]["size"] / 1048576.0,
        "avg": latency["mean"],
        "p50": latency["p50"],
        "p95": latency["p95"],
        "p99": latency["p99"],
        "p999": latency["p999"],
        "max": latency["max"],
        "generator_cpu": data.get("generator_cpu_cores"),
    }


def client_cores(path):
    """CPU cores a tool used over its whole run, from its NAME.cpu (user sys wall)."""
    try:
        user, system, wall = (float(x) for x in path.read_text().split()[-3:])
    except (OSError, ValueError):
        return None
    return (user + system) / wall if wall > 0 else None


def median(rows, key):
    values = [row[key] for row in rows if row and row.get(key) is not None]
    return statistics.median(values) if values else None


def difference(ours, theirs):
    if ours is None or theirs is None or theirs == 0:
        return None
    return (ours - theirs) / theirs * 100.0


def fmt(value):
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"


def table(title, header, rows, theirs_rows, ours_rows, summary):
    lines = [title, "", f"| metric | {header} | keel-bench | difference | within {THRESHOLD:.0f}% |",
             "|---|---:|---:|---:|:-:|"]
    for name, key in rows:
        theirs, ours = median(theirs_rows, key), median(ours_rows, key)
        diff = difference(ours, theirs)
        summary[key] = {"theirs": theirs, "keel_bench": ours, "difference_percent": diff}
        within = "-" if diff is None else ("yes" if abs(diff) <= THRESHOLD else "no")
        lines.append(f"| {name} | {fmt(theirs)} | {fmt(ours)} | {'-' if diff is None else f'{diff:+.1f}%'} | {within} |")
    return lines


def per_round(label, theirs, ours, key="rate"):
    parts = []
    for index, (t, o) in enumerate(zip(theirs, ours)):
        parts.append(f"round {index + 1}: {fmt(t and t[key])} vs {fmt(o and o[key])}")
    return f"{label} per round (Kafka tool vs keel-bench): " + "; ".join(parts)


def main():
    out, rounds, version, max_records, fixed_rate, fixed_seconds, e2e_records, e2e_rate = sys.argv[1:9]
    out, rounds = Path(out), int(rounds)
    r = range(1, rounds + 1)
    pp_max = [producer_performance(out / f"pp-max-{i}.txt") for i in r]
    kb_max = [keel_bench(out / f"kb-max-{i}.json", "publish_latency") for i in r]
    for name, rows in (("pp-max", pp_max), ("kb-max", kb_max)):
        for i, row in zip(r, rows):
            if row is not None:
                row["client_cores"] = client_cores(out / f"{name}-{i}.cpu")
    pp_fixed = [producer_performance(out / f"pp-fixed-{i}.txt") for i in r]
    kb_fixed = [keel_bench(out / f"kb-fixed-{i}.json", "publish_latency") for i in r]
    e2e_java = [end_to_end_latency(out / f"e2e-java-{i}.txt") for i in r]
    e2e_rust = [keel_bench(out / f"kb-e2e-{i}.json", "end_to_end_latency") for i in r]

    producer_rows = [("records/s", "rate"), ("MiB/s", "mib"), ("latency avg ms", "avg"), ("latency p50 ms", "p50"),
                     ("latency p95 ms", "p95"), ("latency p99 ms", "p99"), ("latency p99.9 ms", "p999"),
                     ("latency max ms", "max")]
    summary = {"max_rate": {}, "fixed_rate": {}, "end_to_end": {}}
    lines = [
        f"# keel-bench vs Apache Kafka's own tools (Kafka {version})",
        "",
        f"Medians of {rounds} rounds against one Apache Kafka broker on this machine; the tools",
        "alternate which goes first, each run uses a fresh topic, and both exclude a warm-up",
        "(ProducerPerformance `--warmup-records`, keel-bench `--warmup`).",
        "",
    ]
    lines += table(
        f"## Max-rate producer: {max_records} measured records of 1 KiB, acks=all, linger.ms=5, "
        "batch.size=65536, 6 partitions",
        "ProducerPerformance", producer_rows, pp_max, kb_max, summary["max_rate"])
    lines += ["", per_round("records/s", pp_max, kb_max),
              f"Client CPU over the whole run (median cores, JVM start included for ProducerPerformance): "
              f"ProducerPerformance {fmt(median(pp_max, 'client_cores'))}, "
              f"keel-bench {fmt(median(kb_max, 'client_cores'))}.", ""]
    lines += table(
        f"## Fixed rate: {fixed_rate} records/s for {fixed_seconds} s, same producer settings",
        "ProducerPerformance", producer_rows, pp_fixed, kb_fixed, summary["fixed_rate"])
    lines += ["", per_round("p99 ms", pp_fixed, kb_fixed, "p99"), ""]
    lines += table(
        f"## End-to-end latency: {e2e_records} records of 1 KiB, acks=all, 1 partition",
        "EndToEndLatency", [("avg ms", "avg"), ("p50 ms", "p50"), ("p99 ms", "p99"), ("p99.9 ms", "p999")],
        e2e_java, e2e_rust, summary["end_to_end"])
    lines += [
        "",
        f"EndToEndLatency sends one record, waits for its acknowledgement, polls until it arrives, "
        f"then sends the next; keel-bench e2e sends open-loop at {e2e_rate} records/s with "
        "linger.ms=0, slow enough that records do not overlap. EndToEndLatency prints its "
        "percentiles in whole milliseconds (truncated), so only its average is precise.",
        "",
        per_round("avg ms", e2e_java, e2e_rust, "avg"),
    ]
    (out / "validation.md").write_text("\n".join(lines) + "\n")
    (out / "validation.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
