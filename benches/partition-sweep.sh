#!/usr/bin/env bash
# fsyncs per second, bytes written and produce latency at 1 to 4,000 partitions, at the
# same record rate with keyed small records (random keys, so every partition gets small
# batches), for Apache Kafka and Keel, one broker at a time on the same disk.
#
#   benches/partition-sweep.sh   RATE=5000 SIZE=200 DURATION=20s WARMUP=5s PARTITIONS="1 10 100 1000 4000"
#                                BROKERS="kafka keel" CLIENT=franz-go|librdkafka KEEL_SMP=2
#
# The client is franz-go (compat/go/cmd/keyedbench: 2 producers, linger 1 ms), which
# packs every ready partition into one produce request; CLIENT=librdkafka uses
# keel-bench (2 producers and 1 consumer), which sends one partition per request, so
# past 100 partitions its own queue sets the latency. Brokers: benches/brokers.sh. The
# franz-go rows also give Keel's flush passes per second on each shard; KEEL_SMP=1 puts
# every partition on one shard, so those compare across partition counts.
# Writes benches/results/partition-sweep-<UTC>/{<broker>-<partitions>.json,report.md}.
set -euo pipefail
# fsyncs are counted from the syscall tracepoints: mount tracefs if it is not (root only).
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=brokers.sh
. benches/brokers.sh
client=${CLIENT:-franz-go}
bench="$root/target-bench/release/keel-bench"
if [[ $client == librdkafka ]]; then
  [[ -x "$bench" ]] || CARGO_TARGET_DIR="$root/target-bench" cargo build --release -p keel-benches
else
  (cd compat/go && go build -o .bin/keyedbench ./cmd/keyedbench)
fi
[[ -x target/release/keel ]] || cargo build --release -p keel-broker
rate=${RATE:-5000} size=${SIZE:-200} duration=${DURATION:-20s} warmup=${WARMUP:-5s}
partitions=${PARTITIONS:-"1 10 100 1000 4000"}
out="$root/benches/results/partition-sweep-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

run() { # broker partitions
  local broker=$1 parts=$2 dir="$root/target-bench/runs/sweep-$1-$2"
  start_broker "$broker" "$dir" "$out/$broker-$parts-start.log" ||
    { echo "partition-sweep: $broker did not start (see $out/$broker-$parts-start.log)"; stop_broker "$broker" "$dir"; return 0; }
  if [[ $client == librdkafka ]]; then
    "$bench" e2e --bootstrap "127.0.0.1:$port" --topic "sweep-$parts" --partitions "$parts" \
      --keys random --key-space 100000 --rate "$rate" --size "$size" --duration "$duration" --warmup "$warmup" \
      --producers 2 --consumers 1 --acks all --linger-ms 1 \
      --broker-port "$port" --data-dir "$dir" --json-out "$out/$broker-$parts.json" 2>"$out/$broker-$parts.progress" || true
  else
    compat/go/.bin/keyedbench -seed "127.0.0.1:$port" -topic "sweep-$parts" -topics 1 -partitions "$parts" \
      -random -keys 100000 -rate "$rate" -size "$size" -duration "$duration" -warmup "$warmup" -producers 2 -linger 1ms \
      -pid "$pid" -metrics "$metrics" -json "$out/$broker-$parts.json" >"$out/$broker-$parts.progress" 2>&1 || true
  fi
  stop_broker "$broker" "$dir"
}

for parts in $partitions; do
  for broker in ${BROKERS:-kafka keel}; do
    echo "partition-sweep: $broker, $parts partitions"
    run "$broker" "$parts"
  done
done

python3 - "$out" "$rate" "$size" "$client" "${KEEL_SMP:-2}" <<'PY'
import json, os, sys
out, rate, size, client, smp = sys.argv[1:6]
rows = []
for f in sorted(os.listdir(out)):
    if not f.endswith(".json"):
        continue
    broker, parts = f[:-5].rsplit("-", 1)
    d = json.load(open(os.path.join(out, f)))
    if "p99_ms" in d:  # keyedbench (franz-go)
        b = d.get("broker") or {}
        passes = b.get("passes_per_s_by_shard") or {}
        per_shard = " / ".join("%.0f" % passes[s] for s in sorted(passes)) if passes else None
        rows.append((int(parts), broker, d["acked_records_per_s"], d["p50_ms"], d["p99_ms"], d["p999_ms"],
                     b.get("fsyncs_per_s"), per_shard, b.get("disk_bytes_per_payload_byte"), b.get("cpu_cores")))
    else:  # keel-bench (librdkafka)
        r = d.get("result", d)
        lat, res = r.get("publish_latency", {}), r.get("resources", {})
        rows.append((int(parts), broker, r.get("publish_rate"), lat.get("p50"), lat.get("p99"), lat.get("p999"),
                     res.get("fsyncs_per_sec"), None, res.get("disk_bytes_per_payload_byte"), res.get("cpu_cores")))
rows.sort()
lines = ["# Partition sweep: %s records/s of %s B, random keys, acks=all, %s, Keel --smp %s" % (rate, size, client, smp), "",
         "| partitions | broker | records/s acked | publish p50 ms | p99 ms | p99.9 ms | fsyncs/s | flush passes/s by shard | disk bytes per payload byte | broker CPU cores |",
         "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
fmt = lambda v: "n/a" if v is None else ("%.1f" % v if isinstance(v, float) else str(v))
for p, b, *vals in rows:
    lines.append("| %d | %s | %s |" % (p, b, " | ".join(fmt(v) for v in vals)))
open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
