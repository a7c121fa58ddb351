#!/usr/bin/env bash
# Kafka's own reassignment tool against a running 3-node cluster: creates a topic of
# 3 partitions with 2 replicas each, writes records with acks=all, then has
# `kafka-reassign-partitions` (ReassignPartitionsCommand, from Maven Central) move every
# partition to a new pair of replicas (the node it lacked comes in as the preferred
# replica, its second replica leaves), waits until `--verify` reports every move
# complete, and checks that the new replicas are the ones asked for and that a consumer
# reads back every record. Then `kafka-metadata-quorum describe --status` and
# `--replication` (MetadataQuorumCommand) must describe the controller quorum: a
# leader among the three voters, each voter caught up.
#
# Usage: compat/reassign.sh BOOTSTRAP [RECORDS]
# Prints "reassign: N passed, M failed" last; exits non-zero on a failure.
set -uo pipefail

bootstrap=${1:?usage: compat/reassign.sh BOOTSTRAP [RECORDS]}
records=${2:-30000}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cp=$("$here/kafka/classpath.sh") || { echo "reassign: cannot resolve Kafka's classpath"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
topic="reassign-tool-$$"
passed=0 failed=0

check() {
  local what=$1; shift
  if "$@"; then
    echo "PASS: $what"; passed=$((passed + 1))
  else
    echo "FAIL: $what"; failed=$((failed + 1))
  fi
}

tool() {
  local class=$1; shift
  timeout 120 java -cp "$cp" "$class" "$@"
}

# Replicas of each partition as `TopicCommand --describe` prints them: "p a,b" lines.
replicas() {
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --describe --topic "$topic" 2>/dev/null |
    awk '/Partition:/ { for (i = 1; i <= NF; i++) { if ($i == "Partition:") p = $(i + 1); if ($i == "Replicas:") r = $(i + 1) } print p, r }' |
    sort -n
}

tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create --topic "$topic" \
  --partitions 3 --replication-factor 2 >"$work/create.log" 2>&1
check "create a topic with 3 partitions, 2 replicas each" grep -q "Created topic" "$work/create.log"

tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$records" --record-size 100 \
  --throughput -1 --producer-props bootstrap.servers="$bootstrap" acks=all >"$work/produce.log" 2>&1
check "write $records records with acks=all" grep -q "^$records records sent" "$work/produce.log"

replicas >"$work/before.txt"
# Each partition: the node it lacks comes in first, its second replica leaves.
{
  echo '{"version":1,"partitions":['
  sep=""
  while read -r partition pair; do
    first=${pair%,*} second=${pair#*,}
    missing=$(printf '%s\n' 1 2 3 | grep -vx -e "$first" -e "$second" | head -n 1)
    echo "$missing,$first" >>"$work/wanted.txt"
    printf '%s{"topic":"%s","partition":%s,"replicas":[%s,%s]}\n' "$sep" "$topic" "$partition" "$missing" "$first"
    sep=","
  done <"$work/before.txt"
  echo ']}'
} >"$work/move.json"
echo "reassign: before $(tr '\n' ' ' <"$work/before.txt"), moving to $(tr '\n' ' ' <"$work/wanted.txt")"

tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --bootstrap-server "$bootstrap" \
  --reassignment-json-file "$work/move.json" --execute >"$work/execute.log" 2>&1
check "kafka-reassign-partitions --execute starts the moves" grep -q "Successfully started partition reassignment" "$work/execute.log"

started=$(date +%s%N)
done_moving=false
for _ in $(seq 1 60); do
  tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --bootstrap-server "$bootstrap" \
    --reassignment-json-file "$work/move.json" --verify >"$work/verify.log" 2>&1
  if [[ $(grep -c "is completed" "$work/verify.log") -eq 3 ]]; then
    done_moving=true
    break
  fi
  sleep 1
done
took_ms=$(( ($(date +%s%N) - started) / 1000000 ))
check "kafka-reassign-partitions --verify reports every move completed" $done_moving
$done_moving || cat "$work/verify.log"
echo "figure: reassignment of 3 partitions (${records} x 100 B) verified complete after ${took_ms} ms"

replicas | awk '{ print $2 }' >"$work/after.txt"
check "the partitions' replicas are the ones asked for" diff -u "$work/wanted.txt" "$work/after.txt"

tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bootstrap" --topic "$topic" \
  --from-beginning --max-messages "$records" --timeout-ms 30000 >"$work/consumed.txt" 2>"$work/consume.log"
consumed=$(wc -l <"$work/consumed.txt")
check "a consumer reads back all $records records (read $consumed)" test "$consumed" -eq "$records"

quorum() { tool org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$bootstrap" describe "$@" 2>/dev/null; }
quorum --status >"$work/status.txt"
leader=$(sed -nE 's/^LeaderId: +([0-9]+)$/\1/p' "$work/status.txt")
voters=$(grep -E '^CurrentVoters:' "$work/status.txt" | grep -oE '"id": [0-9]+' | grep -oE '[0-9]+' | sort -n | tr '\n' ' ')
check "kafka-metadata-quorum --status: leader $leader among voters $voters" \
  test "$voters" = "1 2 3 " -a -n "$leader" -a "${leader:-0}" -ge 1 -a "${leader:-0}" -le 3
quorum --replication >"$work/replication.txt"
check "kafka-metadata-quorum --replication: one leader and two followers" \
  test "$(awk '$NF == "Leader" { l++ } $NF == "Follower" { f++ } END { print l + 0, f + 0 }' "$work/replication.txt")" = "1 2"

echo "reassign: $passed passed, $failed failed"
((failed == 0))
