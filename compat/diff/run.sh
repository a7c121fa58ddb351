#!/usr/bin/env bash
# Runs the differential tester against a fresh Apache Kafka and a fresh Keel.
#   compat/diff/run.sh [--long] [--seed N] [--sequences N] [--only N] [--scenario NAME]
# Builds keel-diff and Keel (target/release/keel), starts Kafka (compat/kafka/kafka.sh)
# on port 39092 and Keel (compat/keel.sh) on port 39192, runs the short profile (about 100
# sequences) or the long one (--long, 2,000), stops both and exits with the tester's
# status: 0 no open divergence, 1 open divergences, 2 the run itself failed. Keel is
# started with transaction_version: 2, which Kafka 4.4 finalizes, and both with a group
# initial rebalance delay of 0; Kafka computes KIP-848 assignments in the heartbeat.
# The seed defaults to a random one, printed so that the run can be repeated.
# Environment: DIFF_KAFKA_PORT, DIFF_KEEL_PORT to move the ports; DIFF_KEEP=1 keeps the
# brokers' data directories for a look after the run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

profile=short
seed=$(( (RANDOM << 15 | RANDOM) ))
extra=()
while (($#)); do
  case "$1" in
    --long) profile=long; shift ;;
    --seed) seed=$2; shift 2 ;;
    --sequences) extra+=(--sequences "$2"); shift 2 ;;
    --only) extra+=(--only "$2"); shift 2 ;;
    --scenario) extra+=(--scenario "$2"); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
kafka_port=${DIFF_KAFKA_PORT:-39092}
keel_port=${DIFF_KEEL_PORT:-39192}
echo "run.sh: seed $seed, profile $profile"

# With the crates ./test.sh builds: built with another list, the shared dependencies
# would be compiled again for another feature set.
(cd "$root" && cargo build --release -p keel-protocol -p keel-storage -p keel-raft -p keel-broker -p keel-tuning \
  -p keel-queue-check -p keel-diff)
target="${CARGO_TARGET_DIR:-$root/target}"

work=$(mktemp -d /tmp/keel-diff.XXXXXX)
stop() {
  "$root/compat/kafka/kafka.sh" stop "$work/kafka" >/dev/null 2>&1 || true
  "$root/compat/keel.sh" stop "$work/keel" >/dev/null 2>&1 || true
  if [[ "${DIFF_KEEP:-0}" == 1 ]]; then echo "run.sh: data kept in $work"; else rm -rf "$work"; fi
}
trap stop EXIT

# Kafka 4.4 batches KIP-848 assignments (at most one per
# group.consumer.assignment.interval.ms, computed off the request thread), so whether a
# heartbeat's answer carries the new assignment depends on timing; Keel computes it in
# the heartbeat. Without the batching both answer the same question deterministically.
# The tester writes records with 2023 timestamps, older than the default retention.ms:
# Kafka deletes them at its next global retention check (every 5 minutes, wherever a
# sequence is then), Keel at a partition's first time check, 5 minutes after the
# partition appears (after its sequence is done). Kafka's check is moved past the run
# so that neither deletes in the middle of a sequence (found by the long profile, seed
# 11, sequence 1096).
KAFKA_EXTRA_PROPS=$'group.consumer.min.assignment.interval.ms=0\ngroup.consumer.assignment.interval.ms=0\ngroup.consumer.assignor.offload.enable=false\nlog.retention.check.interval.ms=86400000' \
  "$root/compat/kafka/kafka.sh" start "$work/kafka" "$kafka_port"
# Kafka 4 finalizes transaction.version 2 (KIP-890); Keel defaults to 1, so it is told
# to finalize 2 as well and clients of both brokers get the same transaction protocol.
mkdir -p "$work/keel"
printf 'transaction_version: 2\n' > "$work/keel/keel.yaml"
KEEL_BIN="${KEEL_BIN:-$target/release/keel}" "$root/compat/keel.sh" start "$work/keel" "$keel_port" \
  --config "$work/keel/keel.yaml" --group-initial-rebalance-delay-ms 0

status=0
"$target/release/keel-diff" --kafka "127.0.0.1:$kafka_port" --keel "127.0.0.1:$keel_port" \
  --seed "$seed" --profile "$profile" "${extra[@]}" || status=$?
exit "$status"
