#!/usr/bin/env bash
# MirrorMaker 2 throughput and consumer cut-over gap, Kafka -> Keel beside Kafka -> Kafka,
# in one run on this machine. A source Apache Kafka 4.4.0 is loaded once with Kafka's
# ProducerPerformance (RECORDS x RECORD_BYTES records, no keys, over two topics of 6
# partitions); then, per round, MirrorMaker 2 4.3.1 in dedicated mode mirrors it into a
# fresh single-node Keel (--smp 2) and into a fresh single-node Kafka 4.4.0, one target
# at a time, the order alternating between rounds. benches/mirror.py measures each
# (method in its docstring and in docs/benchmarks.md). Prints one `mirror ...` line per
# target and round, then the Keel / Kafka ratios.
#
#   benches/mirror.sh       RECORDS=1000000 RECORD_BYTES=1024 ROUNDS=2  (about 9 minutes)
#
# Ports (MIRROR_BASE_PORT, default 52400): the source Kafka on it (controller + 1), the
# target Kafka on it + 10 (controller + 11), Keel on it + 20 (admin API + 120).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
records=${RECORDS:-1000000} rounds=${ROUNDS:-2}
export RECORD_BYTES=${RECORD_BYTES:-1024}
base=${MIRROR_BASE_PORT:-52400}
source_port=$base target_kafka_port=$((base + 10)) keel_port=$((base + 20))
topics=(mirror-a mirror-b)

[[ -x target/release/keel ]] || nice -n 10 cargo build --quiet --release -p keel-broker
KAFKA_CP="$(compat/kafka/classpath.sh)"
export MM2_CLASSPATH="$(compat/kafka/classpath.sh compat/migration)"
python=compat/python/.venv/bin/python
[[ -x $python ]] || { echo "mirror.sh: run compat/python/run.sh once to create $python" >&2; exit 1; }
work="$root/target-bench/runs/mirror"
rm -rf "$work"; mkdir -p "$work"
stop_all() {
  compat/keel.sh stop "$work/keel" >/dev/null 2>&1 || true
  compat/kafka/kafka.sh stop "$work/target-kafka" >/dev/null 2>&1 || true
  compat/kafka/kafka.sh stop "$work/source" >/dev/null 2>&1 || true
}
trap stop_all EXIT

compat/kafka/kafka.sh start "$work/source" "$source_port" >&2
for t in "${topics[@]}"; do
  java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$KAFKA_CP" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "127.0.0.1:$source_port" --create --topic "$t" --partitions 6 --replication-factor 1 >/dev/null
  java -Xmx1g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$KAFKA_CP" org.apache.kafka.tools.ProducerPerformance \
    --topic "$t" --num-records $((records / ${#topics[@]})) --record-size "$RECORD_BYTES" --throughput -1 \
    --producer-props bootstrap.servers="127.0.0.1:$source_port" acks=all linger.ms=5 batch.size=65536 2>&1 |
    tail -n 1 | sed "s/^/load $t: /" >&2
done

measure() { # target round
  local target=$1 bootstrap
  if [[ $target == keel ]]; then
    rm -rf "$work/keel"
    compat/keel.sh start "$work/keel" "$keel_port" --smp 2 --group-initial-rebalance-delay-ms 0 >/dev/null
    bootstrap="127.0.0.1:$keel_port"
  else
    rm -rf "$work/target-kafka"
    compat/kafka/kafka.sh start "$work/target-kafka" "$target_kafka_port" >/dev/null
    bootstrap="127.0.0.1:$target_kafka_port"
  fi
  "$python" benches/mirror.py "127.0.0.1:$source_port" "$bootstrap" "$target-$2" "$work/mm2-$target-$2" "${topics[@]}" |
    sed "s/\$/ round=$2 load=$(cut -d' ' -f1 /proc/loadavg)/"
  if [[ $target == keel ]]; then compat/keel.sh stop "$work/keel"; else compat/kafka/kafka.sh stop "$work/target-kafka" >/dev/null; fi
}

for r in $(seq 1 "$rounds"); do
  if ((r % 2)); then measure keel "$r"; measure kafka "$r"; else measure kafka "$r"; measure keel "$r"; fi
done | tee "$work/results.txt"
results=$(cat "$work/results.txt")
# Same-round ratios, Keel / Kafka.
echo "$results" | awk '
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    split(f["target"], t, "-"); rate[t[1], f["round"]] = f["records_per_s"]; gap[t[1], f["round"]] = f["cutover_gap_s"]; rounds[f["round"]] = 1 }
  END { for (r in rounds) printf "ratio round=%s: records/s keel/kafka %.2f, cut-over gap keel %s s kafka %s s\n",
          r, rate["keel", r] / rate["kafka", r], gap["keel", r], gap["kafka", r] }' | sort
