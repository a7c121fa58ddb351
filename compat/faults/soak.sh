#!/usr/bin/env bash
# The long mixed run: one 3-node Keel cluster on loopback, one idempotent acks=all
# ledger producer, and back-to-back fault rounds each drawn (seeded) from leader
# `kill -9`, leader SIGSTOP/SIGCONT, `kill -9` of every node at once and a leader
# restarted with its wall clock up to 10 minutes off (libfaketime). At the end every
# partition is read back and checked (nothing acknowledged lost, duplicated or
# reordered), and every round must see an acknowledgement within 10 s of its end.
# Prints each round, a summary per fault class and the ledger's verdict.
#
#   compat/faults/soak.sh [--minutes 30] [--rate 500] [--seed S] [--keep]
#
# Rounds start until MINUTES have passed (the ledger's -duration); a round takes 6-12 s
# (settle, fault, 3 s down, restart, 2 s settle). Network partitions and packet loss
# need the namespace cluster and run in compat/faults/partition.sh. Ports
# SOAK_PORT..+2 (default 28092; admin +100, node-to-node +200). Exit status: the ledger's (0 clean,
# 1 a violation, 2 could not finish, 77 skipped without libfaketime).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
minutes=30
rate=500
seed=$(date +%s)
keep=()
while (($#)); do
  case "$1" in
    --minutes) minutes=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --keep) keep=(--keep); shift ;;
    *) echo "usage: $0 [--minutes 30] [--rate 500] [--seed S] [--keep]" >&2; exit 2 ;;
  esac
done
((minutes > 0)) || { echo "soak.sh: --minutes must be at least 1" >&2; exit 2; }
# run.sh's time limit grows with --kills (45 s each): give it one per 5 s of the run.
rounds=$((minutes * 60 / 5))
echo "soak.sh: mixed rounds for $minutes min, seed $seed, $rate records/s" >&2
LEDGER_BASE_PORT=${SOAK_PORT:-28092} exec "$here/../ledger/run.sh" --skew --kills "$rounds" --rate "$rate" ${keep[@]+"${keep[@]}"} \
  -- -fault mixed -mixed-skew -seed "$seed" -duration "${minutes}m"
