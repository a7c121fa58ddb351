#!/usr/bin/env bash
# Transactions, Keel beside Apache Kafka, one broker at a time on the same disk, with
# `keel-bench txn` (one librdkafka transactional producer, acks=all, idempotent):
#   txn-100   flat out: TXN_100 transactions of 100 x 1 KiB records (after WARMUP_100)
#   txn-10    flat out: TXN_10 transactions of 10 x 1 KiB records (after WARMUP_10)
#   latency   LAT_WARMUP transactions flat out, then LAT_RATE transactions/s of 10 x 1 KiB
#             records for 5 s + LAT_SECONDS, read_committed consumer: intended send time
#             to receipt, p50 / p99 / p99.9 / max
# Records of a transaction are dealt round-robin over the PARTITIONS partitions of a new
# topic, so every transaction touches all of them (with 10 records or more). Every
# workload starts each broker fresh (Keel --smp 2, Kafka single-node KRaft from
# compat/kafka/kafka.sh), and every run ends with a read_committed read that must see
# each committed record exactly once.
#
#   benches/transactions.sh      TXN_100=1500 TXN_10=2000 LAT_RATE=20 LAT_SECONDS=60
#                                BROKERS="kafka keel" WORKLOADS="txn-100 txn-10 latency"
#
# About 7 minutes on 2 cores. Ports: Keel 43192 (admin 43292), Kafka 43092 (controller
# 43093); KEEL_PORT, KAFKA_PORT. Kafka's heap: KAFKA_HEAP_OPTS (default -Xms4g -Xmx4g).
# Writes benches/results/transactions-<UTC>/: report.md (Keel / Kafka ratios), run.log,
# <workload>-<broker>.json (full result), .txt, .progress, start and log excerpts, and
# <workload>-keel-reactor.txt (Keel's reactor stall and preemption probes at the end).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bench="$root/target-bench/release/keel-bench"
CARGO_TARGET_DIR="$root/target-bench" nice -n 10 cargo build --quiet --release -p keel-benches
export KEEL_BIN="${KEEL_BIN:-$root/target/release/keel}"
[[ -x "$KEEL_BIN" ]] || nice -n 10 cargo build --release -p keel-broker

txn_100=${TXN_100:-1500} warmup_100=${WARMUP_100:-150}
txn_10=${TXN_10:-2000} warmup_10=${WARMUP_10:-200}
lat_rate=${LAT_RATE:-20} lat_seconds=${LAT_SECONDS:-60} lat_warmup=${LAT_WARMUP:-100}
partitions=${PARTITIONS:-6} size=${SIZE:-1024}
brokers=${BROKERS:-"kafka keel"} workloads=${WORKLOADS:-"txn-100 txn-10 latency"}
keel_port=${KEEL_PORT:-43192} kafka_port=${KAFKA_PORT:-43092}
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms4g -Xmx4g}"
out="${OUT:-$root/benches/results/transactions-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
log() { echo "transactions $(date -u +%H:%M:%S): $*" | tee -a "$out/run.log" >&2; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_broker() { # broker dir
  local broker=$1 dir=$2 port
  rm -rf "$dir"; mkdir -p "$dir"
  if [[ $broker == kafka ]]; then
    for port in "$kafka_port" "$((kafka_port + 1))"; do port_free "$port" || { log "port $port is in use"; return 1; }; done
    compat/kafka/kafka.sh start "$dir" "$kafka_port"
  else
    for port in "$keel_port" "$((keel_port + 100))"; do port_free "$port" || { log "port $port is in use"; return 1; }; done
    compat/keel.sh start "$dir" "$keel_port" --smp 2
  fi
}

stop_broker() { # broker dir
  if [[ $1 == kafka ]]; then compat/kafka/kafka.sh stop "$2" >/dev/null 2>&1 || true
  else compat/keel.sh stop "$2" || true; fi
}

workload_args() { # workload
  case $1 in
    txn-100) echo "--records-per-transaction 100 --rate 0 --transactions $txn_100 --warmup-transactions $warmup_100" ;;
    txn-10) echo "--records-per-transaction 10 --rate 0 --transactions $txn_10 --warmup-transactions $warmup_10" ;;
    latency) echo "--records-per-transaction 10 --rate $lat_rate --warmup-transactions $lat_warmup --warmup 5s --duration ${lat_seconds}s --consume" ;;
    *) echo "transactions.sh: unknown workload $1" >&2; return 1 ;;
  esac
}

dir=""
trap '[[ -n $dir ]] && { stop_broker keel "$dir"; stop_broker kafka "$dir"; }' EXIT

run() { # workload broker
  local workload=$1 broker=$2 port
  dir="$root/target-bench/runs/txn-$broker-$workload"
  port=$([[ $broker == kafka ]] && echo "$kafka_port" || echo "$keel_port")
  log "$workload on $broker: starting (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  cut -d' ' -f1 /proc/loadavg >"$out/$workload-$broker.load"
  if ! start_broker "$broker" "$dir" >"$out/$workload-$broker-start.log" 2>&1; then
    log "$workload on $broker: broker failed to start (see $workload-$broker-start.log)"
    stop_broker "$broker" "$dir"; return 0
  fi
  # shellcheck disable=SC2046
  if ! timeout 900 "$bench" txn --bootstrap "127.0.0.1:$port" --topic "txn-$workload" --partitions "$partitions" \
      --size "$size" --acks all $(workload_args "$workload") --label "$broker $workload" \
      --transactional-id "keel-bench-$workload" --broker-port "$port" --data-dir "$dir" \
      --json-out "$out/$workload-$broker.json" >"$out/$workload-$broker.txt" 2>"$out/$workload-$broker.progress"; then
    log "$workload on $broker: keel-bench failed: $(tail -n 1 "$out/$workload-$broker.progress")"
  fi
  cat "$out/$workload-$broker.txt" >&2 || true
  # Keel's shards say whether they stalled on their own or waited for a CPU held by others.
  [[ $broker == keel ]] && curl -s --max-time 5 "http://127.0.0.1:$((keel_port + 100))/metrics" |
    grep -E '^keel_reactor_' >"$out/$workload-keel-reactor.txt" || true
  [[ $broker == keel ]] && grep -E ' (WARN|ERROR) ' "$dir/keel.log" | tail -n 20 >"$out/$workload-keel-log-excerpt.txt" || true
  [[ $broker == kafka ]] && grep -E ' (WARN|ERROR) ' "$dir/kafka.log" | tail -n 20 >"$out/$workload-kafka-log-excerpt.txt" || true
  stop_broker "$broker" "$dir"
  rm -rf "$dir"; dir=""
}

log "keel binary $KEEL_BIN $(stat -c '%y' "$KEEL_BIN" | cut -c1-19), md5 $(md5sum <"$KEEL_BIN" | cut -c1-12); git HEAD $(git rev-parse --short HEAD); $(nproc) cores"
log "Kafka $(compat/kafka/kafka.sh version 2>/dev/null || echo '?'), heap $KAFKA_HEAP_OPTS"
index=0
for workload in $workloads; do
  # Which broker goes first alternates between workloads.
  order=$brokers
  (( index % 2 == 1 )) && order=$(echo "$brokers" | tr ' ' '\n' | tac | tr '\n' ' ')
  for broker in $order; do run "$workload" "$broker"; done
  index=$((index + 1))
done

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
res = {}
for f in os.listdir(out):
    if f.endswith(".json"):
        workload, broker = f[:-5].rsplit("-", 1)
        res[(workload, broker)] = json.load(open(os.path.join(out, f)))

def get(d, path):
    for key in path.split("."):
        if d is None:
            return None
        d = d.get(key)
    return d

def fmt(v):
    if v is None:
        return "n/a"
    return "{:,.0f}".format(v) if abs(v) >= 100 else "{:.1f}".format(v) if abs(v) >= 10 else "{:.2f}".format(v)

def load(workload, broker):
    try:
        return float(open(os.path.join(out, "%s-%s.load" % (workload, broker))).read())
    except (OSError, ValueError):
        return None

def reactor(workload):
    # Keel's reactor probes over the broker's life (warm-up included), summed or maxed over shards.
    try:
        text = open(os.path.join(out, "%s-keel-reactor.txt" % workload)).read()
    except OSError:
        return None
    sums = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        name = name.split("{")[0]
        value = float(value)
        sums[name] = max(sums.get(name, 0), value) if "_max_" in name else sums.get(name, 0) + value
    return "%d own stalls over 10 ms (largest %.0f ms), %d preemptions over 10 ms, largest lateness %.0f ms" % (
        sums.get("keel_reactor_stalls_over_10ms_total", 0), sums.get("keel_reactor_stall_max_microseconds", 0) / 1e3,
        sums.get("keel_reactor_preemptions_over_10ms_total", 0), sums.get("keel_reactor_lag_max_microseconds", 0) / 1e3)

def check(d):
    c = d and d.get("check")
    if not c:
        return "n/a"
    ok = not (c["missing"] or c["duplicates"] or c["from_aborted"] or c["out_of_order"])
    return "{} ({:,}/{:,})".format("ok" if ok else "FAILED", c["read_records"], c["expected_records"]) + ("" if ok else
        " missing {missing} dup {duplicates} aborted {from_aborted} reordered {out_of_order}".format(**c))

rows = {
    "txn-100": ("Flat out, 100 x 1 KiB per transaction", [
        ("transactions/s", "transactions_per_sec"), ("MB/s", "mb_per_sec"),
        ("transaction p50 ms", "transaction_latency.p50"), ("transaction p99 ms", "transaction_latency.p99"),
        ("commit call p50 ms", "commit_latency.p50"), ("broker CPU cores", "resources.cpu_cores"),
        ("measured transactions", "transactions"), ("seconds", "measured_secs")]),
    "txn-10": ("Flat out, 10 x 1 KiB per transaction", [
        ("transactions/s", "transactions_per_sec"), ("MB/s", "mb_per_sec"),
        ("transaction p50 ms", "transaction_latency.p50"), ("transaction p99 ms", "transaction_latency.p99"),
        ("commit call p50 ms", "commit_latency.p50"), ("broker CPU cores", "resources.cpu_cores"),
        ("measured transactions", "transactions"), ("seconds", "measured_secs")]),
    "latency": ("Fixed rate, 10 x 1 KiB per transaction, read_committed end-to-end", [
        ("transactions/s (target {target})", "transactions_per_sec"),
        ("end-to-end p50 ms", "end_to_end_latency.p50"), ("end-to-end p99 ms", "end_to_end_latency.p99"),
        ("end-to-end p99.9 ms", "end_to_end_latency.p999"), ("end-to-end max ms", "end_to_end_latency.max"),
        ("transaction p50 ms", "transaction_latency.p50"), ("transaction p99 ms", "transaction_latency.p99"),
        ("broker CPU cores", "resources.cpu_cores")]),
}
lines = ["# Transactions: Keel vs Apache Kafka", ""]
for workload, (title, figures) in rows.items():
    keel, kafka = res.get((workload, "keel")), res.get((workload, "kafka"))
    if keel is None and kafka is None:
        continue
    lines += ["## %s (`%s`)" % (title, workload), "", "| figure | Keel | Kafka | Keel / Kafka |", "|---|---:|---:|---:|"]
    for name, path in figures:
        a, b = get(keel, path), get(kafka, path)
        ratio = "%.2fx" % (a / b) if a is not None and b else ""
        target = get(keel or kafka, "target_rate")
        lines.append("| %s | %s | %s | %s |" % (name.format(target=fmt(target)), fmt(a), fmt(b), ratio))
    for name, path in (("first transaction (cold) ms", "first_transaction_ms"), ("init_transactions s", "init_transactions_secs")):
        lines.append("| %s | %s | %s | |" % (name, fmt(get(keel, path)), fmt(get(kafka, path))))
    lines.append("| load average at start (1 min) | %s | %s | |" % (fmt(load(workload, "keel")), fmt(load(workload, "kafka"))))
    lines.append("| read_committed check | %s | %s | |" % (check(keel), check(kafka)))
    lines.append("| errors / aborted | %s / %s | %s / %s | |" % (
        get(keel, "errors"), get(keel, "aborted_total"), get(kafka, "errors"), get(kafka, "aborted_total")))
    if reactor(workload):
        lines.append("")
        lines.append("Keel's shards: %s." % reactor(workload))
    for label, d in (("Keel", keel), ("Kafka", kafka)):
        if d and d.get("first_error"):
            lines.append("")
            lines.append("%s first error: `%s`" % (label, d["first_error"]))
    lines.append("")
open(os.path.join(out, "report.md"), "w").write("\n".join(lines))
print("\n".join(lines))
PY
log "results in $out"
