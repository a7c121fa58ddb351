#!/usr/bin/env bash
# What metrics recording costs on the max-rate produce figure: Keel alone, started with
# `--metrics on` and `--metrics off` in alternation (on, off, on, off, ...), each run on a
# fresh data directory, measured by keel-bench's max-rate form (1 producer flat out,
# 1 KiB records, acks=all, linger.ms=5, batch.size=64 KiB, 6 partitions, 5 s warm-up +
# 15 s). Prints one line per run and the median of each mode.
#
#   benches/metrics-overhead.sh [RUNS_PER_MODE]     (default 3; KEEL_PORT, KEEL_BENCH)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
port=${KEEL_PORT:-26292}
bench=${KEEL_BENCH:-$root/target-bench/release/keel-bench}
if [[ ! -x $bench ]]; then
  CARGO_TARGET_DIR="$root/target-bench" cargo build --release -p keel-benches >&2
fi
work=$(mktemp -d /tmp/keel-metrics-overhead.XXXXXX)
trap '"$root/compat/keel.sh" stop "$work/keel" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
declare -A results=([on]="" [off]="")
for i in $(seq "$runs"); do
  for mode in on off; do
    rm -rf "$work/keel"
    "$root/compat/keel.sh" start "$work/keel" "$port" --smp 2 --metrics "$mode" >/dev/null
    line=$("$bench" produce --bootstrap "127.0.0.1:$port" --topic "max-rate-$i-$mode" --partitions 6 \
      --rate 0 --warmup 5s --duration 15s --size 1024 --acks all --linger-ms 5 --batch-size 65536 2>/dev/null |
      grep -m1 'MB/s' || true)
    "$root/compat/keel.sh" stop "$work/keel" >/dev/null
    mbps=$(sed -n 's/.*(\([0-9.]*\) MB\/s).*/\1/p' <<<"$line")
    echo "run $i metrics $mode: ${mbps:-?} MB/s   ($line)"
    results[$mode]+="${mbps:-0} "
  done
done
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
on=$(median "${results[on]}") off=$(median "${results[off]}")
echo "median MB/s: metrics on $on, off $off, on/off $(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", (b > 0) ? a / b : 0}')"
