#!/usr/bin/env bash
# Produce/consume throughput with Apache Kafka's own perf tools.
#   perf.sh <bootstrap> [records]       (bootstrap default $KEEL_BOOTSTRAP, else 127.0.0.1:9092;
#                                        records default 1000000)
#
# 1. Creates a fresh 6-partition topic (TopicCommand: CreateTopics).
# 2. ProducerPerformance: <records> x 1024-byte records, acks=all, linger.ms=5,
#    batch.size=65536, --throughput -1 (idempotent producer, the 4.x default).
# 3. ConsumerPerformance reads them all back. It subscribe()s with a consumer group
#    (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetFetch, OffsetCommit,
#    LeaveGroup with the classic protocol); PERF_GROUP_PROTOCOL (default classic) picks
#    group.protocol ("consumer" uses ConsumerGroupHeartbeat instead).
# 4. Prints "perf: produce MB/s=X records/s=Y p99_ms=Z; consume MB/s=W" and exits
#    non-zero if the producer failed or the consumer did not read every record.
# 5. Deletes the topic (set PERF_KEEP_TOPIC=1 to keep it).
# Environment: PERF_RECORD_SIZE (1024), PERF_PARTITIONS (6), PERF_CONSUMER_TIMEOUT_MS
# (30000: longest gap between records before the consumer gives up), PERF_HEAP (-Xmx1g).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${1:-${KEEL_BOOTSTRAP:-127.0.0.1:9092}}"
RECORDS="${2:-1000000}"
RECORD_SIZE="${PERF_RECORD_SIZE:-1024}"
PARTITIONS="${PERF_PARTITIONS:-6}"
GROUP_PROTOCOL="${PERF_GROUP_PROTOCOL:-classic}"
CONSUMER_TIMEOUT_MS="${PERF_CONSUMER_TIMEOUT_MS:-30000}"
HEAP="${PERF_HEAP:--Xmx1g}"

die() {
  echo "perf: FAIL: $*"
  exit 1
}

[[ "$RECORDS" =~ ^[0-9]+$ && "$RECORDS" -gt 0 ]] || die "records must be a positive integer: $RECORDS"

CP="$("$HERE/../kafka/classpath.sh")" || die "could not build the Kafka classpath"
# shellcheck disable=SC2206
JAVA=(java $HEAP -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP")
TOOL=(java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP")

host="${BOOTSTRAP%%,*}"
if ! (exec 3<>"/dev/tcp/${host%:*}/${host##*:}") 2>/dev/null; then
  die "no broker reachable at $BOOTSTRAP"
fi

topic="compat-perf-$(date +%s)-$RANDOM"
group="compat-perf-group-$(date +%s)-$RANDOM"
work="$(mktemp -d -t keel-perf.XXXXXX)"
cleanup() {
  if [[ "${PERF_KEEP_TOPIC:-0}" != 1 ]]; then
    "${TOOL[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
      --delete --if-exists --topic "$topic" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"${TOOL[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
  --create --topic "$topic" --partitions "$PARTITIONS" --replication-factor 1 \
  || die "could not create topic $topic"

# 4.2+ spells producer properties --command-property (KIP-1147); older releases --producer-props.
help_text="$("${TOOL[@]}" org.apache.kafka.tools.ProducerPerformance --help 2>&1 || true)"
if grep -q -- '--command-property' <<<"$help_text"; then
  prop_flag=--command-property
else
  prop_flag=--producer-props
fi

echo "perf: producing $RECORDS x ${RECORD_SIZE} B to $topic ($PARTITIONS partitions) at $BOOTSTRAP"
prc=0
"${JAVA[@]}" org.apache.kafka.tools.ProducerPerformance \
  --bootstrap-server "$BOOTSTRAP" --topic "$topic" \
  --num-records "$RECORDS" --record-size "$RECORD_SIZE" --throughput -1 \
  "$prop_flag" acks=all linger.ms=5 batch.size=65536 \
  2>&1 | tee "$work/produce.log" || prc=$?
[[ $prc -eq 0 ]] || die "ProducerPerformance exit code $prc"

# Final line: "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency,
#              P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
final="$(grep -E '^[0-9]+ records sent, .* 99\.9th\.' "$work/produce.log" | tail -n 1 || true)"
[[ -n "$final" ]] || die "no summary line from ProducerPerformance"
sent="$(sed -E 's/^([0-9]+) records sent.*/\1/' <<<"$final")"
p_rps="$(sed -E 's/^[0-9]+ records sent, ([0-9.]+) records\/sec.*/\1/' <<<"$final")"
p_mbs="$(sed -E 's/.*\(([0-9.]+) MB\/sec\).*/\1/' <<<"$final")"
p_p99="$(sed -E 's/.*, ([0-9.]+) ms 99th,.*/\1/' <<<"$final")"
[[ "$sent" == "$RECORDS" ]] || die "producer sent $sent of $RECORDS records"

echo "perf: consuming $RECORDS records from $topic with group $group (group.protocol=$GROUP_PROTOCOL)"
crc=0
"${JAVA[@]}" org.apache.kafka.tools.ConsumerPerformance \
  --bootstrap-server "$BOOTSTRAP" --topic "$topic" --group "$group" \
  --num-records "$RECORDS" --timeout "$CONSUMER_TIMEOUT_MS" \
  --command-property "group.protocol=$GROUP_PROTOCOL" \
  2>&1 | tee "$work/consume.log" || crc=$?
[[ $crc -eq 0 ]] || die "ConsumerPerformance exit code $crc"

# CSV: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
#      rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
cline="$(grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2} [^,]*, [^,]*, [0-9.]+, [0-9.]+, [0-9]+,' "$work/consume.log" | tail -n 1 || true)"
[[ -n "$cline" ]] || die "no summary line from ConsumerPerformance"
IFS=',' read -r _ _ c_mb c_mbs c_n c_nps c_rebal c_fetch_ms c_fetch_mbs c_fetch_nps <<<"$cline"
trim() { local v="$1"; v="${v#"${v%%[![:space:]]*}"}"; echo "${v%"${v##*[![:space:]]}"}"; }
c_mbs="$(trim "$c_mbs")"; c_n="$(trim "$c_n")"; c_nps="$(trim "$c_nps")"
c_rebal="$(trim "$c_rebal")"; c_fetch_mbs="$(trim "$c_fetch_mbs")"

echo "perf: produce MB/s=$p_mbs records/s=$p_rps p99_ms=$p_p99; consume MB/s=$c_mbs"
echo "perf: detail consume records=$c_n records/s=$c_nps rebalance_ms=$c_rebal fetch_MB/s=$c_fetch_mbs"
if (( c_n < RECORDS )); then
  die "consumer read $c_n of $RECORDS records"
fi
exit 0
