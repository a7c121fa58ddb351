#!/usr/bin/env bash
# fsyncs per second and produce latency at 1, 100 and 1,000 partitions, at the same
# record rate with keyed small records (random keys, so every partition gets small
# batches), for Apache Kafka and Keel, one broker at a time on the same disk.
#
#   benches/partition-sweep.sh            RATE=5000 SIZE=200 DURATION=20s PARTITIONS="1 100 1000" BROKERS="kafka keel"
#
# Writes benches/results/partition-sweep-<UTC>/{<broker>-<partitions>.json,report.md}.
set -euo pipefail
# fsyncs are counted from the syscall tracepoints: mount tracefs if it is not (root only).
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bench="$root/target-bench/release/keel-bench"
[[ -x "$bench" ]] || CARGO_TARGET_DIR="$root/target-bench" cargo build --release -p keel-benches
[[ -x target/release/keel ]] || cargo build --release -p keel-broker
rate=${RATE:-5000} size=${SIZE:-200} duration=${DURATION:-20s}
partitions=${PARTITIONS:-"1 100 1000"}
out="$root/benches/results/partition-sweep-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

run() { # broker partitions
  local broker=$1 parts=$2 dir="$root/target-bench/runs/sweep-$1-$2" port
  rm -rf "$dir"; mkdir -p "$dir"
  if [[ $broker == kafka ]]; then
    port=39092; compat/kafka/kafka.sh start "$dir" "$port" >"$out/$broker-$parts-start.log" 2>&1
  else
    port=39192; compat/keel.sh start "$dir" "$port" --smp 2 >"$out/$broker-$parts-start.log" 2>&1
  fi
  "$bench" e2e --bootstrap "127.0.0.1:$port" --topic "sweep-$parts" --partitions "$parts" \
    --keys random --key-space 100000 --rate "$rate" --size "$size" --duration "$duration" --warmup 5s \
    --producers 2 --consumers 1 --acks all --linger-ms 1 \
    --broker-port "$port" --data-dir "$dir" --json-out "$out/$broker-$parts.json" 2>"$out/$broker-$parts.progress" || true
  if [[ $broker == kafka ]]; then compat/kafka/kafka.sh stop "$dir" >/dev/null 2>&1; else compat/keel.sh stop "$dir"; fi
  rm -rf "$dir"
}

for parts in $partitions; do
  for broker in ${BROKERS:-kafka keel}; do
    echo "partition-sweep: $broker, $parts partitions"
    run "$broker" "$parts"
  done
done

python3 - "$out" "$rate" "$size" <<'PY'
import json, os, sys
out, rate, size = sys.argv[1], sys.argv[2], sys.argv[3]
rows = []
for f in sorted(os.listdir(out)):
    if not f.endswith(".json"):
        continue
    broker, parts = f[:-5].rsplit("-", 1)
    d = json.load(open(os.path.join(out, f)))
    r = d.get("result", d)
    lat, res = r.get("publish_latency", {}), r.get("resources", {})
    rows.append((int(parts), broker, r.get("publish_rate"), lat.get("p50"), lat.get("p99"), lat.get("p999"), res.get("fsyncs_per_sec"), res.get("disk_bytes_per_payload_byte"), res.get("cpu_cores")))
rows.sort()
lines = ["# Partition sweep: %s records/s of %s B, random keys, acks=all" % (rate, size), "",
         "| partitions | broker | records/s acked | publish p50 ms | p99 ms | p99.9 ms | fsyncs/s | disk bytes per payload byte | broker CPU cores |",
         "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
fmt = lambda v: "n/a" if v is None else ("%.1f" % v if isinstance(v, float) else str(v))
for p, b, *vals in rows:
    lines.append("| %d | %s | %s |" % (p, b, " | ".join(fmt(v) for v in vals)))
open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
