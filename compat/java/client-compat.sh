#!/usr/bin/env bash
# Runs Apache Kafka's org.apache.kafka.tools.ClientCompatibilityTest against a broker.
#   client-compat.sh <bootstrap>        (default $KEEL_BOOTSTRAP, else 127.0.0.1:9092)
#
# What the tool does (no consumer group is involved): describeCluster (expects
# CCT_NUM_CLUSTER_NODES nodes),
# describeConfigs(BROKER), createTopics("newtopic") then describeTopics/listTopics until
# it shows, describeAcls, an idempotent producer sending two records, then a consumer with
# no group.id: partitionsFor, offsetsForTimes, beginningOffsets, endOffsets, assign,
# seekToBeginning and fetch with max.partition.fetch.bytes=512 (the second record is 4 KiB).
#
# Flag choices, checked against Apache Kafka 4.x:
#   --expect-record-too-large-exception false  Since KIP-74 a fetch returns the first batch
#        even when it exceeds max.partition.fetch.bytes, so no exception is expected. With
#        "true" the tool fails against Apache Kafka itself.
#   --describe-acls-supported true  Apache Kafka without an authorizer answers DescribeAcls
#        with SECURITY_DISABLED, which the tool counts as "supported". Use "false" only
#        for a broker that does not advertise DescribeAcls at all (UnsupportedVersion).
# Both can be overridden: CCT_EXPECT_RECORD_TOO_LARGE, CCT_DESCRIBE_ACLS_SUPPORTED.
# CCT_LOG_LEVEL (default warn) sets the client log level; CCT_TIMEOUT (default 180 s);
# CCT_NUM_CLUSTER_NODES (default 1) the brokers describeCluster must list.
#
# The tool always creates a topic named "newtopic"; it is deleted first (if it exists) so
# reruns against the same broker work. The produce/consume topic is fresh on each run.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${1:-${KEEL_BOOTSTRAP:-127.0.0.1:9092}}"
LOG_LEVEL="${CCT_LOG_LEVEL:-warn}"
TIMEOUT="${CCT_TIMEOUT:-180}"
EXPECT_TOO_LARGE="${CCT_EXPECT_RECORD_TOO_LARGE:-false}"
DESCRIBE_ACLS="${CCT_DESCRIBE_ACLS_SUPPORTED:-true}"
# describeCluster must list this many brokers (3 against compat/cluster.sh start 3).
NODES="${CCT_NUM_CLUSTER_NODES:-1}"

fail() {
  echo "client-compat: FAIL: $*"
  echo "client-compat: 0 passed, 1 failed"
  exit 1
}

CP="$("$HERE/../kafka/classpath.sh")" || fail "could not build the Kafka classpath"
JAVA=(java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel="$LOG_LEVEL" -cp "$CP")

host="${BOOTSTRAP%%,*}"
if ! (exec 3<>"/dev/tcp/${host%:*}/${host##*:}") 2>/dev/null; then
  fail "no broker reachable at $BOOTSTRAP"
fi

start=$SECONDS
topic="compat-cct-$(date +%s)-$RANDOM"

# Left over from an earlier run: the tool's createTopics("newtopic") would fail with
# TopicExistsException.
if ! "${JAVA[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
    --delete --if-exists --topic newtopic; then
  echo "client-compat: warning: could not delete topic 'newtopic' (continuing)" >&2
fi

"${JAVA[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
  --create --topic "$topic" --partitions 1 --replication-factor 1 \
  || fail "could not create topic $topic"

args=(
  --bootstrap-server "$BOOTSTRAP"
  --topic "$topic"
  --num-cluster-nodes "$NODES"
  --offsets-for-times-supported true
  --cluster-id-supported true
  --expect-record-too-large-exception "$EXPECT_TOO_LARGE"
  --create-topics-supported true
  --describe-acls-supported "$DESCRIBE_ACLS"
  --describe-configs-supported true
  --idempotent-producer-supported true
)
echo "client-compat: ClientCompatibilityTest ${args[*]}"

log="$(mktemp -t client-compat.XXXXXX)"
trap 'rm -f "$log"' EXIT
rc=0
timeout "$TIMEOUT" "${JAVA[@]}" org.apache.kafka.tools.ClientCompatibilityTest "${args[@]}" >"$log" 2>&1 || rc=$?
cat "$log"
elapsed=$((SECONDS - start))

if [[ $rc -eq 0 ]] && grep -q '^SUCCESS\.' "$log"; then
  echo "client-compat: PASS (Kafka tools $("${JAVA[@]}" kafka.Kafka --version 2>/dev/null | tail -n 1), ${elapsed}s)"
  echo "client-compat: 1 passed, 0 failed"
  exit 0
fi
if [[ $rc -eq 124 ]]; then
  fail "ClientCompatibilityTest timed out after ${TIMEOUT}s"
fi
reason="$(grep -m1 '^FAILED' "$log" || true)"
fail "ClientCompatibilityTest exit code $rc${reason:+: $reason} (${elapsed}s)"
