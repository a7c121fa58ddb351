#!/usr/bin/env bash
# Side-by-side benchmarks of Keel and Apache Kafka on this machine.
#
#   benches/run.sh [--quick|--full] [--only WORKLOAD[,WORKLOAD...]] [--data-root DIR]
#                  [--brokers kafka,keel] [--out DIR] [other `keel-bench suite` flags]
#
# Builds keel-bench (release), then for every workload starts one broker at a time
# on a fresh data directory (Apache Kafka through compat/kafka/kafka.sh on port
# 39092, Keel through compat/keel.sh on port 39192), runs the workload with
# warm-up, stops the broker, and alternates which broker goes first. Writes
# results.json, report.md and SVG plots to benches/results/<UTC date-time>/.
# Quick mode (the default) takes about 15 minutes for both brokers.
# `keel-bench workloads` lists the workloads; docs/benchmarks.md explains them.
set -euo pipefail
# fsyncs are counted from the syscall tracepoints: mount tracefs if it is not (root only).
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-bench}"

args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) shift ;;
    --full) args+=(--full); shift ;;
    --only|--data-root|--brokers|--out)
      [[ $# -ge 2 ]] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
      args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done

echo "run.sh: building keel-bench (release, target dir $CARGO_TARGET_DIR)" >&2
cargo build --quiet -p keel-benches --release
exec "$CARGO_TARGET_DIR/release/keel-bench" suite "${args[@]}"
