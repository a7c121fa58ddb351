#!/usr/bin/env bash
# Reactor stalls while a topic holding about 1 GiB is deleted and a topic of 1,000
# partitions is created, with a producer and a consumer running throughout. Keel only:
# each shard runs a timer that should fire every 5 ms and counts how late it fires,
# split into the shard's own stalls (`keel_reactor_stall_max_microseconds`,
# `keel_reactor_stalls_over_10ms_total`) and time its thread waited for a CPU that
# other processes held (`keel_reactor_preemptions_over_10ms_total`).
#
#   benches/reactor-stall.sh          BIG_SECONDS=9 BIG_RATE=130000 (1 KiB records)
#
# Prints the stalls over 10 ms during the delete/create phase and the largest stall
# since start, per shard; writes benches/results/reactor-stall-<UTC>/report.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bench="$root/target-bench/release/keel-bench"
[[ -x "$bench" ]] || CARGO_TARGET_DIR="$root/target-bench" cargo build --release -p keel-benches
cargo build --release -p keel-broker
out="$root/benches/results/reactor-stall-$(date -u +%Y%m%dT%H%M%SZ)"
dir="$root/target-bench/runs/reactor-stall"
port=39192 admin=39292
mkdir -p "$out"; rm -rf "$dir"
compat/keel.sh start "$dir" "$port" --smp 2 >"$out/start.log" 2>&1
trap 'compat/keel.sh stop "$dir" >/dev/null 2>&1 || true' EXIT
cp=$(compat/kafka/classpath.sh)
topics() { java -cp "$cp" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" "$@"; }
metric() { curl -s "http://127.0.0.1:$admin/metrics" | awk -v m="$1" '$1 ~ "^"m"[{]" {print $1, $2}'; }

echo "reactor-stall: writing ${BIG_SECONDS:-9} s at ${BIG_RATE:-130000} records/s of 1 KiB into 'big'"
"$bench" e2e --bootstrap "127.0.0.1:$port" --topic big --partitions 6 --rate "${BIG_RATE:-130000}" --size 1024 \
  --duration "${BIG_SECONDS:-9}s" --warmup 0s --producers 1 --consumers 0 --acks all >"$out/big.log" 2>&1
big_bytes=$(du -sb "$dir"/data/big-* | awk '{s+=$1} END {print s}')
echo "reactor-stall: 'big' holds $big_bytes bytes; starting the live load"
"$bench" e2e --bootstrap "127.0.0.1:$port" --topic live --partitions 12 --rate 5000 --size 1024 \
  --duration 30s --warmup 2s --producers 1 --consumers 1 --acks all >"$out/live.log" 2>&1 &
live=$!
sleep 8
before=$(metric keel_reactor_stalls_over_10ms_total)
preempted_before=$(metric keel_reactor_preemptions_over_10ms_total)
topics --delete --topic big >"$out/delete.log" 2>&1
topics --create --topic wide --partitions 1000 >"$out/create.log" 2>&1
sleep 5
after=$(metric keel_reactor_stalls_over_10ms_total)
preempted_after=$(metric keel_reactor_preemptions_over_10ms_total)
wait "$live" || true
{
  echo "# Reactor stalls: delete a topic of $big_bytes bytes, create 1,000 partitions, under load"
  echo
  echo "stalls over 10 ms before the phase: $before"
  echo "stalls over 10 ms after the phase:  $after"
  echo "largest stall since start (µs): $(metric keel_reactor_stall_max_microseconds)"
  echo "preemptions over 10 ms before / after the phase: $preempted_before / $preempted_after"
  echo "largest lateness for any reason (µs): $(metric keel_reactor_lag_max_microseconds)"
  echo
  echo "live load during the phase: $(grep -E 'publish latency' "$out/live.log" | head -1)"
} | tee "$out/report.md"
