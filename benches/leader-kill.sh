#!/usr/bin/env bash
# Failover under kill -9, Keel beside Apache Kafka: the leader-kill ledger
# (compat/ledger/run.sh) against a 3-node Keel cluster and against a 3-node Apache
# Kafka 4.4.0 cluster (KRaft, each node broker and controller, min.insync.replicas=2),
# one system at a time, in the order SYSTEMS gives. Each run: an idempotent acks=all
# franz-go producer at RATE records/s on a topic of 3 partitions, RF 3; the leader of
# partition 0 is killed KILLS times (down 3 s, restarted, 2 s to settle); every
# acknowledged id is read back. Per system it reports, over the kills:
#   gap_ms       the longest time without an acknowledgement on a partition the dead
#                node led, from the last acknowledgement before the kill;
#   failover_ms  kill to the first acknowledgement written in a later leader epoch;
#   elected_ms   kill to the survivors agreeing on new leaders in Metadata;
# and the lost / duplicated / reordered counts, which must be 0.
#
#   benches/leader-kill.sh          SYSTEMS="keel kafka" KILLS=10 RATE=1000
#
# LEDGER_FLAGS passes flags to the ledger, e.g. LEDGER_FLAGS="-metadata-min-age 5s" for
# franz-go's default metadata back-off (the ledger's own default is 250 ms).
#
# Writes benches/results/leader-kill-<UTC>/{summary.md,<system>.log}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
systems=${SYSTEMS:-"keel kafka"} kills=${KILLS:-10} rate=${RATE:-1000}
read -ra ledger_flags <<<"${LEDGER_FLAGS:-}"
out="${OUT:-$root/benches/results/leader-kill-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
base=${LEDGER_BASE_PORT:-27092}

# The n-th value of key=<number> in a line.
value() { grep -oE "$2=[0-9]+" <<<"$1" | sed -n "${3:-1}p" | cut -d= -f2; }

row() { # system log
  local k f
  k=$(grep -E '^ledger: kills=' "$2" | tail -n 1)
  f=$(grep -E '^ledger: failover_ms ' "$2" | tail -n 1)
  echo "| $1 | $(value "$k" kills) | $(value "$k" acked)" \
    "| $(value "$k" lost) / $(value "$k" duplicates) / $(value "$k" reordered)" \
    "| $(value "$k" median) / $(value "$k" max)" \
    "| $(value "$f" median 1) / $(value "$f" max 1) | $(value "$f" median 2) / $(value "$f" max 2) |"
}

{
  echo "# Leader-kill failover, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "$(nproc) CPUs, $(uname -r), load at start: $(cut -d' ' -f1-3 /proc/loadavg); keel $(git -C "$root" rev-parse --short HEAD)"
  echo "$kills kills per system, $rate records/s, 3 partitions RF 3, acks=all, idempotent franz-go producer${LEDGER_FLAGS:+, ledger flags: $LEDGER_FLAGS}"
  echo
  echo "| system | kills | acknowledged | lost / duplicated / reordered | gap ms median / max | failover ms median / max | elected ms median / max |"
  echo "|---|---:|---:|---|---|---|---|"
} >"$out/summary.md"

status=0
for s in $systems; do
  flag=()
  [[ $s == kafka ]] && flag=(--kafka)
  echo "leader-kill: $s, $kills kills" >&2
  if LEDGER_BASE_PORT=$base "$root/compat/ledger/run.sh" ${flag[@]+"${flag[@]}"} --kills "$kills" --rate "$rate" \
    -- ${ledger_flags[@]+"${ledger_flags[@]}"} >"$out/$s.log" 2>&1; then
    row "$s" "$out/$s.log" >>"$out/summary.md"
  else
    echo "| $s | run failed, see $s.log | | | | | |" >>"$out/summary.md"
    status=1
  fi
done
cat "$out/summary.md"
exit "$status"
