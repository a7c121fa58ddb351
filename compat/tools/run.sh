#!/usr/bin/env bash
# Apache Kafka's own command-line tools (kafka-tools 4.4.0 from Maven Central, the
# classes behind kafka-topics.sh, kafka-configs.sh, kafka-console-producer.sh,
# kafka-console-consumer.sh, kafka-consumer-groups.sh, kafka-get-offsets.sh and
# kafka-log-dirs.sh) against a running broker, each output checked, not only the exit
# status:
#
#   compat/tools/run.sh BOOTSTRAP            run the checks; prints "tools: N passed, M failed"
#   compat/tools/run.sh --golden BOOTSTRAP   against Apache Kafka: rewrite
#                                            kafka-topic-configs.txt (every topic config and
#                                            its default, as `kafka-configs --describe --all`
#                                            prints them for a new topic)
#
# The same script passes against Apache Kafka itself (compat/kafka/kafka.sh), which is
# how its expectations were checked. Topics and groups are named after the run, so a
# broker can be shared. Exits non-zero if any check failed; every tool's output is kept
# in the work directory when one did.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
golden_file="$here/kafka-topic-configs.txt"
TOOL_TIMEOUT=${TOOL_TIMEOUT:-120}

golden=0
[[ ${1:-} == --golden ]] && { golden=1; shift; }
bootstrap=${1:?usage: compat/tools/run.sh [--golden] BOOTSTRAP}
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-tools.XXXXXX")
run="tools-$(date +%s)-$RANDOM"
topic="$run-t" cfg_topic="$run-cfg" fresh_topic="$run-fresh" group="$run-g"
records=100
passed=0 failed=0 started=$SECONDS

cp=$("$root/compat/kafka/classpath.sh") || { echo "tools: FAIL: cannot resolve Kafka's classpath"; echo "tools: 0 passed, 1 failed"; exit 1; }

# tool NAME CLASS ARGS...: stdout in $work/NAME.out, stderr in $work/NAME.err; the exit
# status is the tool's. Stdin is the caller's.
tool() {
  local name=$1 class=$2; shift 2
  timeout "$TOOL_TIMEOUT" java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" "$class" \
    --bootstrap-server "$bootstrap" "$@" >"$work/$name.out" 2>"$work/$name.err"
}
topics() { tool "$1" org.apache.kafka.tools.TopicCommand "${@:2}"; }
configs() { tool "$1" org.apache.kafka.tools.ConfigCommand "${@:2}"; }
groups() { tool "$1" org.apache.kafka.tools.consumer.group.ConsumerGroupCommand "${@:2}"; }

pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() {
  echo "FAIL: $1${2:+ -- $2}"
  failed=$((failed + 1))
}
# The first lines of a tool's stderr, to say why a check failed.
why() { grep -v '^\[' "$work/$1.err" | head -n 3 | tr '\n' ' '; }
# check NAME DESCRIPTION CONDITION...: pass if the tool NAME exited 0 (status in $rc)
# and CONDITION holds.
check() {
  local name=$1 what=$2; shift 2
  if ((rc != 0)); then
    fail "$what" "exit status $rc: $(why "$name")"
  elif "$@"; then
    pass "$what"
  else
    fail "$what" "output: $(head -c 400 "$work/$name.out" | tr '\n' ' ')"
  fi
}
has() { grep -q -- "$2" "$work/$1.out"; }

# name=value of every config in `--describe --all` output, sorted.
config_values() { sed -n 's/^  \([a-z0-9.]*\)=\([^ ]*\) sensitive=.*/\1=\2/p' "$1" | sort; }

if ((golden)); then
  topics golden-create --create --topic "$fresh_topic" --partitions 1 --replication-factor 1 || { why golden-create; exit 1; }
  configs golden --describe --all --entity-type topics --entity-name "$fresh_topic" || { why golden; exit 1; }
  {
    echo "# Every topic config of Apache Kafka $(basename "$(tr ':' '\n' <<<"$cp" | grep -m1 'kafka-clients')" .jar | sed 's/kafka-clients-//')"
    echo "# and its default, from kafka-configs --describe --all on a new topic (compat/tools/run.sh --golden)."
    config_values "$work/golden.out"
  } >"$golden_file"
  topics golden-delete --delete --topic "$fresh_topic"
  echo "tools: wrote $golden_file ($(grep -vc '^#' "$golden_file") configs)"
  rm -rf "$work"
  exit 0
fi

echo "tools: Kafka's tools against $bootstrap; topic $topic, group $group"

# --- kafka-topics (TopicCommand) ---
topics create --create --topic "$topic" --partitions 3 --replication-factor 1 --config retention.ms=3600000; rc=$?
check create "kafka-topics --create: 3 partitions" has create "Created topic $topic."
topics list --list; rc=$?
check list "kafka-topics --list shows the topic" grep -qx -- "$topic" "$work/list.out"
topics describe --describe --topic "$topic"; rc=$?
described() {
  has describe "PartitionCount: 3" && has describe "retention.ms=3600000" &&
    (($(grep -cE "Partition: [0-2][[:space:]]+Leader: [0-9]+" "$work/describe.out") == 3))
}
check describe "kafka-topics --describe: PartitionCount 3, a leader per partition, retention.ms=3600000" described
topics alter --alter --topic "$topic" --partitions 4; rc=$?
((rc == 0)) && topics describe4 --describe --topic "$topic"
check describe4 "kafka-topics --alter --partitions 4, then --describe shows PartitionCount: 4" has describe4 "PartitionCount: 4"
topics create-bad --create --topic "$run-bad" --partitions 1 --replication-factor 1 --config retention.mss=1; rc=$?
if ((rc != 0)) && grep -q "Unknown topic config name: retention.mss" "$work/create-bad.err"; then
  pass "kafka-topics --create with an unknown config fails: $(grep -om1 'InvalidConfigurationException: Unknown topic config name: [^ ]*' "$work/create-bad.err")"
else
  fail "kafka-topics --create with an unknown config fails with its name" "exit $rc: $(why create-bad)"
fi

# --- kafka-configs (ConfigCommand): topic configs ---
topics create-cfg --create --topic "$cfg_topic" --partitions 1 --replication-factor 1
configs alter-cfg --alter --entity-type topics --entity-name "$cfg_topic" \
  --add-config min.insync.replicas=2,retention.ms=7200000,cleanup.policy=compact; rc=$?
check alter-cfg "kafka-configs --alter topic: min.insync.replicas, retention.ms, cleanup.policy" has alter-cfg "Completed updating config"
configs describe-cfg --describe --entity-type topics --entity-name "$cfg_topic"; rc=$?
dynamic() {
  has describe-cfg "min.insync.replicas=2 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:min.insync.replicas=2" &&
    has describe-cfg "retention.ms=7200000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=7200000" &&
    has describe-cfg "cleanup.policy=compact"
}
check describe-cfg "kafka-configs --describe topic: the three come back as DYNAMIC_TOPIC_CONFIG" dynamic
configs delete-cfg --alter --entity-type topics --entity-name "$cfg_topic" --delete-config retention.ms; rc=$?
((rc == 0)) && configs describe-cfg2 --describe --all --entity-type topics --entity-name "$cfg_topic"
check describe-cfg2 "kafka-configs --delete-config retention.ms: back to its DEFAULT_CONFIG value" \
  has describe-cfg2 "retention.ms=604800000 sensitive=false synonyms={"
configs alter-unknown --alter --entity-type topics --entity-name "$cfg_topic" --add-config retention.mss=5; rc=$?
if ((rc != 0)) && grep -q "InvalidConfigurationException: Unknown topic config name: retention.mss" "$work/alter-unknown.err"; then
  pass "kafka-configs --alter with an unknown key: INVALID_CONFIG naming it ($(grep -om1 'Unknown topic config name: .*' "$work/alter-unknown.err"))"
else
  fail "kafka-configs --alter with an unknown key: INVALID_CONFIG naming it" "exit $rc: $(why alter-unknown)"
fi
# Every topic config Kafka defines, with Kafka's default, on a topic given none.
topics create-fresh --create --topic "$fresh_topic" --partitions 1 --replication-factor 1
configs describe-all --describe --all --entity-type topics --entity-name "$fresh_topic"; rc=$?
defaults_match() {
  local diff
  diff=$(diff <(grep -v '^#' "$golden_file") <(config_values "$work/describe-all.out" | grep -v '^write\.caching='))
  [[ -z $diff ]] || { echo "    differences from Kafka (< Kafka, > this broker):"; sed 's/^/      /' <<<"$diff"; return 1; }
}
check describe-all "kafka-configs --describe --all topic: Kafka's $(grep -vc '^#' "$golden_file") topic configs with Kafka's defaults" defaults_match

# --- kafka-configs (ConfigCommand): broker configs ---
configs broker --describe --all --entity-type brokers --entity-name 1; rc=$?
broker_configs() {
  has broker "^  listeners=" && has broker "^  advertised.listeners=" && has broker "^  log.dirs=" &&
    has broker "^  num.partitions=" && has broker "^  log.retention.ms="
}
check broker "kafka-configs --describe --all broker 1: listeners, advertised.listeners, log.dirs, num.partitions, log.retention.ms" broker_configs
configs broker-alter --alter --entity-type brokers --entity-name 1 --add-config log.cleaner.delete.retention.ms=3600000; rc=$?
((rc == 0)) && configs broker-dyn --describe --entity-type brokers --entity-name 1
check broker-dyn "kafka-configs --alter broker 1 log.cleaner.delete.retention.ms, then --describe shows it" \
  has broker-dyn "log.cleaner.delete.retention.ms=3600000"
configs broker-revert --alter --entity-type brokers --entity-name 1 --delete-config log.cleaner.delete.retention.ms

# --- console producer and consumer ---
seq 1 "$records" | sed 's/.*/key-&:value-&/' |
  tool produce org.apache.kafka.tools.ConsoleProducer --topic "$topic" \
    --reader-property parse.key=true --reader-property key.separator=: ; rc=$?
check produce "kafka-console-producer: $records keyed lines" true
tool consume org.apache.kafka.tools.consumer.ConsoleConsumer --topic "$topic" --from-beginning \
  --max-messages "$records" --timeout-ms 30000 --group "$group" \
  --formatter-property print.key=true --formatter-property key.separator=: ; rc=$?
consumed() {
  diff <(seq 1 "$records" | sed 's/.*/key-&:value-&/' | sort) <(sort "$work/consume.out") >/dev/null
}
check consume "kafka-console-consumer --group: the $records records, keys with their values" consumed

# --- kafka-get-offsets (GetOffsetShell) ---
tool offsets org.apache.kafka.tools.GetOffsetShell --topic "$topic"; rc=$?
offsets_sum() { (($(awk -F: '{ s += $3 } END { print s + 0 }' "$work/offsets.out") == records)) && (($(wc -l <"$work/offsets.out") == 4)); }
check offsets "kafka-get-offsets: 4 partitions whose end offsets add up to $records" offsets_sum
tool offsets-early org.apache.kafka.tools.GetOffsetShell --topic "$topic" --time -2; rc=$?
check offsets-early "kafka-get-offsets --time -2: every partition starts at 0" \
  awk -F: 'NF == 3 && $3 != 0 { bad = 1 } END { exit bad || NR != 4 }' "$work/offsets-early.out"

# --- kafka-consumer-groups (ConsumerGroupCommand) ---
groups glist --list; rc=$?
check glist "kafka-consumer-groups --list shows the group" grep -qx -- "$group" "$work/glist.out"
# GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
lag_of() { awk -v t="$topic" '$2 == t { c += $4; l += $6 } END { print c + 0, l + 0 }' "$work/$1.out"; }
groups gdescribe --describe --group "$group"; rc=$?
check gdescribe "kafka-consumer-groups --describe: committed offsets add up to $records, lag 0" \
  test "$(lag_of gdescribe)" == "$records 0"
groups greset --reset-offsets --group "$group" --topic "$topic" --to-earliest --execute; rc=$?
((rc == 0)) && groups gdescribe2 --describe --group "$group"
check gdescribe2 "kafka-consumer-groups --reset-offsets --to-earliest: lag back to $records" \
  test "$(lag_of gdescribe2)" == "0 $records"
groups gdelete --delete --group "$group"; rc=$?
check gdelete "kafka-consumer-groups --delete: deleted" has gdelete "was successful"

# --- kafka-log-dirs (LogDirsCommand) ---
tool logdirs org.apache.kafka.tools.LogDirsCommand --describe --topic-list "$topic"; rc=$?
log_dirs() {
  python3 - "$work/logdirs.out" "$topic" <<'PY'
import json, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("{"))
parts = [p for b in json.loads(line)["brokers"] for d in b["logDirs"] for p in d["partitions"]
         if p["partition"].rsplit("-", 1)[0] == sys.argv[2]]
sys.exit(0 if len(parts) == 4 and sum(p["size"] for p in parts) > 0 else 1)
PY
}
check logdirs "kafka-log-dirs --describe: the topic's 4 partitions, with bytes on disk" log_dirs

# --- kafka-topics --delete ---
topics delete --delete --topic "$topic"; rc=$?
((rc == 0)) && for _ in $(seq 1 20); do topics list2 --list; grep -qx -- "$topic" "$work/list2.out" || break; sleep 0.5; done
check list2 "kafka-topics --delete: gone from --list" bash -c "! grep -qx -- '$topic' '$work/list2.out'"
topics cleanup --delete --topic "$cfg_topic"
topics cleanup2 --delete --topic "$fresh_topic"

echo "tools: $passed passed, $failed failed ($((SECONDS - started)) s)"
if ((failed == 0)); then rm -rf "$work"; else echo "tools: tool outputs in $work" >&2; fi
((failed == 0))
