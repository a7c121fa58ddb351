#!/usr/bin/env bash
# Transactions under protocol version 2 (KIP-890 part 2), Keel beside Apache Kafka, one
# broker at a time, each fresh, with Kafka's own ProducerPerformance (Java client 4.4:
# Produce v12, EndTxn v5): RECORDS x 1 KiB records, acks=all, linger.ms=5,
# batch.size=65536, a transaction committed every 100 ms and then every 20 ms
# (`--transaction-duration-ms`), into a new 6-partition topic. Prints each run's summary
# line and the Keel / Kafka ratios of records/s and p99.
#
#   benches/transactions-java.sh        RECORDS=300000 ROUNDS=2 (brokers alternate order)
#
# About 2 minutes. Ports: Keel 44192 (admin 44292), Kafka 44092 (controller 44093).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
records=${RECORDS:-300000} rounds=${ROUNDS:-2}
keel_port=${KEEL_PORT:-44192} kafka_port=${KAFKA_PORT:-44092}
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms4g -Xmx4g}"
cargo build --quiet --release -p keel-broker
CP="$(compat/kafka/classpath.sh)"
work="$root/target-bench/runs/txn-java"
trap 'compat/keel.sh stop "$work/keel" >/dev/null 2>&1 || true; compat/kafka/kafka.sh stop "$work/kafka" >/dev/null 2>&1 || true' EXIT

run() { # broker round
  local broker=$1 port
  rm -rf "${work:?}/$broker"
  if [[ $broker == keel ]]; then port=$keel_port; compat/keel.sh start "$work/keel" "$port" --smp 2 >/dev/null
  else port=$kafka_port; compat/kafka/kafka.sh start "$work/kafka" "$port" >/dev/null; fi
  local topic="txn-java-$broker-$2"
  java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "127.0.0.1:$port" --create --topic "$topic" --partitions 6 --replication-factor 1 >/dev/null
  for every in 100 20; do
    local line
    line=$(java -Xmx1g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP" org.apache.kafka.tools.ProducerPerformance \
      --topic "$topic" --num-records "$records" --record-size 1024 --throughput -1 \
      --transactional-id "$topic-$every" --transaction-duration-ms "$every" \
      --producer-props bootstrap.servers="127.0.0.1:$port" acks=all linger.ms=5 batch.size=65536 2>&1 | tail -n 1)
    echo "$broker round=$2 commit_every_ms=$every $line"
  done
  if [[ $broker == keel ]]; then compat/keel.sh stop "$work/keel"; else compat/kafka/kafka.sh stop "$work/kafka" >/dev/null; fi
}

results=$(for r in $(seq 1 "$rounds"); do
  if ((r % 2)); then run keel "$r"; run kafka "$r"; else run kafka "$r"; run keel "$r"; fi
done | tee /dev/stderr)
# Ratios per round and commit interval: records/s and p99 (Keel / Kafka).
echo "$results" | awk '
  { rate = $7; for (i = 1; i <= NF; i++) if ($(i+1) == "99th,") p99 = $(i-1);
    split($2, r, "="); split($3, c, "="); key = r[2] " " c[2]; v[$1, key] = rate; p[$1, key] = p99; keys[key] = 1 }
  END { for (k in keys) printf "ratio round/commit_every_ms=%s: records/s keel/kafka %.2f, p99 ms keel %s kafka %s\n",
          k, v["keel", k] / v["kafka", k], p["keel", k], p["kafka", k] }' | sort
