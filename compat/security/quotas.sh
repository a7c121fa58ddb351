#!/usr/bin/env bash
# Client quotas end to end, Keel and Apache Kafka 4.x in the same run:
#   - compat/java QuotaTest: AlterClientQuotas and DescribeClientQuotas steps with the
#     Java Admin client (valid and invalid alterations, every kind of filter), one check
#     per step, PASS when Keel's outcome is Kafka's; then a producer and a consumer
#     whose client ids have a 512 KiB/s byte-rate quota move 8 MiB on each broker: each
#     must be throttled, and clients without a quota must not be; an Admin client
#     with a controller_mutation_rate creates, deletes and adds partitions past its
#     bucket (each topic's outcome compared, refusals must carry a throttle); and 21
#     connections from 127.0.0.3 under a connection_creation_rate of 2 a second (which
#     are answered compared)
#   - Kafka's kafka-configs tool against Keel: --add-config, --describe, --delete-config
#     of producer_byte_rate and consumer_byte_rate for users, clients and defaults
#
#   compat/security/quotas.sh BASE_PORT [--keep]
#
# Ports: Keel BASE (admin API BASE+100), Kafka BASE+10 (controller BASE+11). Prints
# "quotas: N passed, M failed" last.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

base=${1:-}
[[ "$base" =~ ^[0-9]+$ ]] || { echo "usage: $0 BASE_PORT [--keep]" >&2; exit 2; }
keep=0
[[ "${2:-}" == "--keep" ]] && keep=1
keel=$base kafka=$((base + 10))
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-quotas.XXXXXX")
started=$SECONDS

. "$here/check.sh"

trap stop_keel_and_kafka EXIT

cp=$("$root/compat/kafka/classpath.sh") || { echo "quotas: 0 passed, 1 failed (Kafka classpath)"; exit 1; }
"$root/compat/keel.sh" start "$work/keel" "$keel" --smp 2 >/dev/null \
  || { echo "quotas: 0 passed, 1 failed (Keel did not start)"; exit 1; }
"$root/compat/kafka/kafka.sh" start "$work/kafka" "$kafka" >/dev/null \
  || { echo "quotas: 0 passed, 1 failed (Kafka did not start)"; exit 1; }
echo "quotas: Keel :$keel, Kafka :$kafka"

java_out=$("$root/compat/java/run.sh" "127.0.0.1:$keel" -Dtest=QuotaTest \
  -Dquota.keel="127.0.0.1:$keel" -Dquota.kafka="127.0.0.1:$kafka" -Dquota.out="$work/quotas.tsv" 2>&1)
echo "$java_out" >"$work/java.log"
if [[ -s "$work/quotas.tsv" ]]; then
  same() { [[ "$1" == "$2" ]]; }
  while IFS=$'\t' read -r step a b c; do
    case "$step" in
      step) ;;
      figure) echo "     $a: $b, $c" ;;
      check) check "$a ($c)" same "$b" PASS ;;
      *) check "step '$step': keel $a / kafka $b" same "$a" "$b" ;;
    esac
  done <"$work/quotas.tsv"
  grep -q "^check" "$work/quotas.tsv" || check "QuotaTest throttling ran (see $work/java.log)" false
else
  check "QuotaTest ran (see $work/java.log)" false
fi

configs() {
  timeout 120 java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" org.apache.kafka.tools.ConfigCommand \
    --bootstrap-server "127.0.0.1:$keel" "$@"
}
configs_add() {
  configs --alter --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152 --entity-type users --entity-name tool &&
    configs --alter --add-config producer_byte_rate=4096 --entity-type clients --entity-default &&
    configs --alter --add-config consumer_byte_rate=8192 --entity-type users --entity-name tool --entity-type clients --entity-name app
}
configs_describe() {
  local out
  out=$(configs --describe --entity-type users --entity-name tool) && echo "$out" &&
    grep -q "producer_byte_rate=1048576" <<<"$out" && grep -q "consumer_byte_rate=2097152" <<<"$out" &&
    out=$(configs --describe --entity-type clients --entity-default) && echo "$out" && grep -q "producer_byte_rate=4096" <<<"$out" &&
    out=$(configs --describe --entity-type users --entity-name tool --entity-type clients --entity-name app) && echo "$out" &&
    grep -q "consumer_byte_rate=8192" <<<"$out"
}
configs_delete() {
  local out
  configs --alter --delete-config producer_byte_rate --entity-type users --entity-name tool &&
    out=$(configs --describe --entity-type users --entity-name tool) && echo "$out" &&
    ! grep -q "producer_byte_rate" <<<"$out" && grep -q "consumer_byte_rate=2097152" <<<"$out"
}
check "kafka-configs --alter --add-config quotas (user, default client, user and client) against Keel" configs_add
check "kafka-configs --describe quotas against Keel" configs_describe
check "kafka-configs --alter --delete-config a quota against Keel" configs_delete

echo "quotas: $passed passed, $failed failed ($((SECONDS - started))s)"
((failed == 0))
