#!/usr/bin/env bash
# Keyed records over many partitions, Keel beside Apache Kafka, with franz-go as the
# client (compat/go/cmd/keyedbench): 100 topics x 10 partitions = 1,000 partitions,
# round-robin keys over 10,000 keys, 20,000 records/s of 1 KiB, 4 producers, acks=all,
# linger 5 ms, open loop; 15 s warm-up + 60 s measured. franz-go packs every ready
# partition bound for a broker into one produce request; librdkafka (keel-bench) sends
# one partition per request, so at 1,000 partitions its own queue is what it measures.
#
#   benches/keyed.sh        RUNS=3 RATE=20000 TOPICS=100 PARTITIONS=10 WARMUP=15s DURATION=60s
#
# Each run starts both brokers in turn (benches/brokers.sh: fresh data directories, one
# at a time, Keel fsyncing before every acknowledgement and Kafka with its default
# durability), alternating which goes first.
# Writes benches/results/keyed-<UTC>/{<broker>-<run>.json,summary.md}.
set -euo pipefail
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=brokers.sh
. benches/brokers.sh
[[ -x target/release/keel ]] || nice -n 10 cargo build --release -p keel-broker --bin keel
(cd compat/go && go build -o .bin/keyedbench ./cmd/keyedbench)
runs=${RUNS:-3} rate=${RATE:-20000} topics=${TOPICS:-100} partitions=${PARTITIONS:-10}
warmup=${WARMUP:-15s} duration=${DURATION:-60s}
out="${OUT:-$root/benches/results/keyed-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
log() { echo "keyed-bench $(date -u +%H:%M:%S): $*" | tee -a "$out/run.log" >&2; }

measure() { # broker run
  local broker=$1 run=$2 dir="$root/target-bench/runs/keyed-$1"
  start_broker "$broker" "$dir" "$out/$broker-$run-start.log" ||
    { log "$broker did not start (see $out/$broker-$run-start.log)"; stop_broker "$broker" "$dir"; return 0; }
  log "$broker, run $run"
  compat/go/.bin/keyedbench -seed "127.0.0.1:$port" -topics "$topics" -partitions "$partitions" -rate "$rate" \
    -producers 4 -size 1024 -keys 10000 -linger 5ms -warmup "$warmup" -duration "$duration" -pid "$pid" \
    -json "$out/$broker-$run.json" 2>&1 | tee -a "$out/run.log" || log "$broker run $run failed"
  stop_broker "$broker" "$dir"
}

for run in $(seq 1 "$runs"); do
  if ((run % 2)); then order="kafka keel"; else order="keel kafka"; fi
  for broker in $order; do measure "$broker" "$run"; done
done

python3 - "$out" "$runs" "$rate" "$((topics * partitions))" <<'PY'
import json, os, statistics, sys
out, runs, rate, parts = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def load(broker, run):
    path = os.path.join(out, f"{broker}-{run}.json")
    return json.load(open(path)) if os.path.exists(path) else None
cols = [("records/s acked", lambda r: r["acked_records_per_s"], "%.0f"),
        ("publish p50 ms", lambda r: r["p50_ms"], "%.1f"), ("p99 ms", lambda r: r["p99_ms"], "%.1f"),
        ("p99.9 ms", lambda r: r["p999_ms"], "%.1f"), ("max ms", lambda r: r["max_ms"], "%.1f"),
        ("broker CPU cores", lambda r: r["broker"]["cpu_cores"], "%.2f"),
        ("peak RSS MB", lambda r: r["broker"]["peak_rss_mb"], "%d"),
        ("disk bytes per payload byte", lambda r: r["broker"]["disk_bytes_per_payload_byte"], "%.2f"),
        ("fsyncs/s", lambda r: r["broker"]["fsyncs_per_s"] or 0, "%.0f")]
lines = [f"# Keyed records over {parts} partitions: {rate:.0f} records/s of 1 KiB, acks=all, franz-go", "",
         "| run | broker | " + " | ".join(c[0] for c in cols) + " | errors |",
         "|---:|---|" + "---:|" * (len(cols) + 1)]
meds = {}
for broker in ("kafka", "keel"):
    rows = [r for r in (load(broker, i) for i in range(1, runs + 1)) if r]
    for i in range(1, runs + 1):
        r = load(broker, i)
        if r:
            lines.append(f"| {i} | {broker} | " + " | ".join(f % g(r) for _, g, f in cols) + f" | {r['errors']} |")
        else:
            lines.append(f"| {i} | {broker} | failed (see run.log) |")
    if rows:
        meds[broker] = [statistics.median(g(r) for r in rows) for _, g, _ in cols]
lines += ["", "Medians over the runs, and Keel / Kafka:", "",
          "| | " + " | ".join(c[0] for c in cols) + " |", "|---|" + "---:|" * len(cols)]
for broker, m in meds.items():
    lines.append(f"| {broker} | " + " | ".join(f % v for (_, _, f), v in zip(cols, m)) + " |")
if len(meds) == 2:
    lines.append("| Keel / Kafka | " + " | ".join(
        ("%.2fx" % (b / a)) if a else "-" for a, b in zip(meds["kafka"], meds["keel"])) + " |")
    keel = meds["keel"]
    lines += ["", f"Goal: Keel sustains >= 99% of the rate with a publish p99 <= 50 ms: "
              f"{keel[0] / rate * 100:.1f}% and {keel[2]:.1f} ms (median of the runs): "
              + ("met." if keel[0] >= 0.99 * rate and keel[2] <= 50 else "not met.")]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
