#!/usr/bin/env bash
# Migration tests: MirrorMaker 2 from Apache Kafka into Keel
# (compat/python/migration_mirror.py) and a Kafka Connect distributed worker on Keel
# (compat/python/migration_connect.py). Starts a fresh single-node Kafka 4.4.0 and a
# fresh single-node Keel in a temporary directory, runs both with Kafka Connect and
# MirrorMaker 2 4.3.1 from Maven Central (pom.xml here), and stops everything on exit.
#
#   compat/migration/run.sh           (MIGRATION_BASE_PORT, default 45092: Kafka on it,
#                                      Keel on it + 100, Keel's admin API on it + 200,
#                                      the Connect worker's REST API on it + 400)
#   compat/migration/run.sh --cluster (Keel a 3-node cluster, one shard each, on it + 100
#                                      .. + 102, admin + 200 .., peers + 300 ..; Keel's
#                                      topics, MirrorMaker 2's and Connect's with
#                                      replication factor 3)
# Then runs docs/migration.md's check commands (compare.py, kafka-consumer-groups) on
# what the tests left. Exits non-zero if pytest or a check failed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base=${MIGRATION_BASE_PORT:-45092}
kafka_port=$base keel_port=$((base + 100))
nodes=1
case "${1:-}" in
  --cluster) nodes=3 ;;
  "") ;;
  *) echo "usage: $0 [--cluster]" >&2; exit 2 ;;
esac

classpath=$("$root/compat/kafka/classpath.sh" "$here")
[[ -x "$root/target/release/keel" ]] || (cd "$root" && cargo build --release -p keel-broker)
dir=$(mktemp -d "${TMPDIR:-/tmp}/keel-migration.XXXXXX")
cleanup() {
  "$root/compat/kafka/kafka.sh" stop "$dir/kafka" >/dev/null 2>&1 || true
  if ((nodes > 1)); then "$root/compat/cluster.sh" stop "$dir/keel" >/dev/null 2>&1 || true
  else "$root/compat/keel.sh" stop "$dir/keel" >/dev/null 2>&1 || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$root/compat/kafka/kafka.sh" start "$dir/kafka" "$kafka_port" >&2
if ((nodes > 1)); then
  "$root/compat/cluster.sh" start "$nodes" "$dir/keel" "$keel_port" >&2
  bootstrap=$(seq -s, "$keel_port" "$((keel_port + nodes - 1))" | sed 's/\([0-9]*\)/127.0.0.1:\1/g')
else
  "$root/compat/keel.sh" start "$dir/keel" "$keel_port" >&2
  bootstrap="127.0.0.1:$keel_port"
fi
KAFKA_SOURCE="127.0.0.1:$kafka_port" MM2_CLASSPATH="$classpath" MIGRATION_KEEL_RF=$nodes \
  MIGRATION_CONNECT_PORT=$((base + 400)) \
  "$root/compat/python/run.sh" "$bootstrap" migration_mirror.py migration_connect.py -s || status=$?
# docs/migration.md's commands, on what the tests left: compare.py (step 2) and Kafka's
# kafka-consumer-groups (step 3) against Keel.
echo "compare.py 127.0.0.1:$kafka_port $bootstrap mm-trades:"
guide=ok
"$root/compat/python/.venv/bin/python" "$here/compare.py" "127.0.0.1:$kafka_port" "$bootstrap" mm-trades || guide=FAILED
echo "kafka-consumer-groups --describe --group mm-group on Keel:"
java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$("$root/compat/kafka/classpath.sh")" \
  org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server "$bootstrap" --describe --group mm-group |
  tee "$dir/groups.txt"
[[ $(grep -c "^mm-group *mm-orders" "$dir/groups.txt") == 4 ]] || { echo "migration: mm-group's offsets not described" >&2; guide=FAILED; }
echo "migration: guide commands $guide"
[[ $guide == ok ]] || status=${status:-1}
exit "${status:-0}"
