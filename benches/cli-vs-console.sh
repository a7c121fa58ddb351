#!/usr/bin/env bash
# The `keel` CLI's produce and consume throughput beside Apache Kafka's console tools
# (kafka-console-producer / -consumer, kafka-tools 4.4.0), on the same topic of the same
# broker in the same run:
#
#   benches/cli-vs-console.sh BOOTSTRAP [RECORDS] [VALUE_BYTES]
#
# Defaults: 200,000 records of 100 bytes, read from one file. Each tool writes RECORDS
# records into a fresh 1-partition topic (acks=all both), then reads them back from the
# start. Wall time includes each tool's start-up (a JVM for Kafka's), which is what an
# operator waits for. Prints one line per run and tool: records/s and MB/s. Single runs
# on a shared machine: compare the tools within one run, not across runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bootstrap=${1:?usage: benches/cli-vs-console.sh BOOTSTRAP [RECORDS] [VALUE_BYTES]}
records=${2:-200000}
value_bytes=${3:-100}
keel=${KEEL_BIN:-$root/target/release/keel}
cp=$("$root/compat/kafka/classpath.sh")
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-cli-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
java_tool() { java -Xmx512m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" "$@"; }

python3 -c "
import sys
pad = 'x' * max(0, $value_bytes - 12)
with open('$work/input', 'w') as f:
    for i in range($records):
        f.write(f'{i:011d}-{pad}\n')
"
topic="cli-bench-$(date +%s)-$RANDOM"
"$keel" topic create "$topic" -p 1 --brokers "$bootstrap" >/dev/null

# time_it NAME COUNT COMMAND...: runs it, prints records/s and MB/s for COUNT records.
time_it() {
  local name=$1 count=$2; shift 2
  local start end
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  python3 -c "
s = $end - $start
print(f'$name: $count records of $value_bytes bytes in {s:.2f} s: {$count / s:,.0f} records/s, {$count * $value_bytes / s / 1e6:.1f} MB/s')"
}

time_it "keel topic produce      " "$records" "$keel" topic produce "$topic" --acks all --brokers "$bootstrap" <"$work/input" 2>/dev/null
time_it "kafka-console-producer  " "$records" java_tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$bootstrap" \
  --topic "$topic" --command-property acks=all <"$work/input"
total=$((2 * records))
# Each consumer's lines are counted (a reader that drops its input would let a tool stop
# early on a closed pipe); a count short of the total fails the run.
count_lines() {
  local lines
  lines=$("$@" | wc -l)
  if [[ $lines -ne $total ]]; then
    echo "cli-vs-console: read $lines records, expected $total" >&2
    exit 1
  fi
}
time_it "keel topic consume      " "$total" count_lines "$keel" topic consume "$topic" -o start -n "$total" -f '%v\n' \
  --brokers "$bootstrap"
time_it "kafka-console-consumer  " "$total" count_lines java_tool org.apache.kafka.tools.consumer.ConsoleConsumer \
  --bootstrap-server "$bootstrap" --topic "$topic" --from-beginning --max-messages "$total" --timeout-ms 60000
"$keel" topic delete "$topic" --brokers "$bootstrap" >/dev/null
