#!/usr/bin/env bash
# Checks keel-bench against Apache Kafka's own tools, on Apache Kafka:
#   1. max-rate producer (1 KiB, acks=all, linger.ms=5, batch.size=64 KiB, 6 partitions):
#      org.apache.kafka.tools.ProducerPerformance --throughput -1 vs `keel-bench produce --rate 0`;
#   2. the same producer at a fixed 20,000 records/s, below both clients' limits, so the
#      two measure the same load and their latencies can be compared;
#   3. end-to-end latency (1 partition, acks=all, 1 KiB, linger.ms=0):
#      org.apache.kafka.tools.EndToEndLatency vs `keel-bench e2e` at a low fixed rate,
#      so records travel one at a time as in EndToEndLatency's send-then-poll loop.
# Tools alternate which goes first; each round uses fresh topics; both exclude a warm-up.
#
#   benches/validate.sh [--rounds N] [--out DIR]
#
# Writes validation.md, validation.json and the raw outputs to
# benches/results/validation-<UTC date-time>/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target-bench}"
ROUNDS=3
PORT=39092
OUT="benches/results/validation-$(date -u +%Y%m%dT%H%M%SZ)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done

# Workload sizes: max rate sends MAX_RECORDS after MAX_WARMUP_RECORDS (about 2 s);
# fixed rate sends FIXED_RATE records/s for FIXED_SECONDS after a 2 s warm-up;
# end-to-end sends E2E_RECORDS at E2E_RATE records/s.
MAX_RECORDS=1000000
MAX_WARMUP_RECORDS=200000
FIXED_RATE=20000
FIXED_SECONDS=20
E2E_RECORDS=5000
E2E_RATE=200

mkdir -p "$OUT"
BOOT="127.0.0.1:$PORT"
DATA="$CARGO_TARGET_DIR/runs/validate-kafka"
BENCH="$CARGO_TARGET_DIR/release/keel-bench"
KAFKA="$ROOT/compat/kafka/kafka.sh"
JAVA_OPTS=(-Xmx1g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn)
PRODUCER_PROPS=(acks=all linger.ms=5 batch.size=65536 enable.idempotence=false)

cargo build --quiet -p keel-benches --release
CP="$("$ROOT/compat/kafka/classpath.sh")"

cleanup() { bash "$KAFKA" stop "$DATA" >/dev/null 2>&1 || true; rm -rf "$DATA"; }
trap cleanup EXIT
rm -rf "$DATA"
KAFKA_HEAP_OPTS="-Xms4g -Xmx4g" bash "$KAFKA" start "$DATA" "$PORT" | tee "$OUT/kafka-start.log"
VERSION="$(bash "$KAFKA" version)"

# Warm the broker (JIT, page cache) before anything is measured.
"$BENCH" e2e --bootstrap "$BOOT" --topic validate-warm-up --partitions 6 --warmup 0s --duration 15s \
  --rate 0 --consumers 1 > "$OUT/warm-up.txt" 2>&1

# Client CPU of a whole tool run (user, system, wall seconds) goes to NAME.cpu.
TIMEFORMAT='%U %S %R'

producer_performance() { # name topic throughput records warmup-records
  { time java "${JAVA_OPTS[@]}" -cp "$CP" org.apache.kafka.tools.ProducerPerformance \
      --bootstrap-server "$BOOT" --topic "$2" --num-records "$4" --warmup-records "$5" \
      --record-size 1024 --throughput "$3" --command-property "${PRODUCER_PROPS[@]}" \
      > "$OUT/$1.txt" 2>&1 ; } 2> "$OUT/$1.cpu"
  tail -n 1 "$OUT/$1.txt"
}

keel_bench() { # name subcommand args...
  local name="$1"; shift
  { time "$BENCH" "$@" --json-out "$OUT/$name.json" > "$OUT/$name.txt" 2>&1 ; } 2> "$OUT/$name.cpu"
  grep -E "records/s|latency ms" "$OUT/$name.txt" || tail -n 5 "$OUT/$name.txt"
}

for round in $(seq 1 "$ROUNDS"); do
  order=(java rust); (( round % 2 == 0 )) && order=(rust java)
  for tool in "${order[@]}"; do
    max_topic="validate-max-$tool-$round"
    fixed_topic="validate-fixed-$tool-$round"
    "$BENCH" create-topic --bootstrap "$BOOT" --topic "$max_topic" --partitions 6 >/dev/null
    "$BENCH" create-topic --bootstrap "$BOOT" --topic "$fixed_topic" --partitions 6 >/dev/null
    if [[ $tool == java ]]; then
      producer_performance "pp-max-$round" "$max_topic" -1 \
        $((MAX_RECORDS + MAX_WARMUP_RECORDS)) "$MAX_WARMUP_RECORDS"
      producer_performance "pp-fixed-$round" "$fixed_topic" "$FIXED_RATE" \
        $((FIXED_RATE * (FIXED_SECONDS + 2))) $((FIXED_RATE * 2))
    else
      keel_bench "kb-max-$round" produce --bootstrap "$BOOT" --topic "$max_topic" --partitions 6 \
        --records $((MAX_RECORDS + MAX_WARMUP_RECORDS)) --warmup 2s --rate 0 --size 1024 \
        --acks all --linger-ms 5 --batch-size 65536
      keel_bench "kb-fixed-$round" produce --bootstrap "$BOOT" --topic "$fixed_topic" --partitions 6 \
        --rate "$FIXED_RATE" --warmup 2s --duration "${FIXED_SECONDS}s" --size 1024 \
        --acks all --linger-ms 5 --batch-size 65536
    fi
  done
done

for round in $(seq 1 "$ROUNDS"); do
  order=(java rust); (( round % 2 == 0 )) && order=(rust java)
  for tool in "${order[@]}"; do
    topic="validate-e2e-$tool-$round"
    "$BENCH" create-topic --bootstrap "$BOOT" --topic "$topic" --partitions 1 >/dev/null
    if [[ $tool == java ]]; then
      java "${JAVA_OPTS[@]}" -cp "$CP" org.apache.kafka.tools.EndToEndLatency \
        "$BOOT" "$topic" "$E2E_RECORDS" all 1024 > "$OUT/e2e-java-$round.txt" 2>&1
      grep -E "Avg latency|Percentiles" "$OUT/e2e-java-$round.txt" || tail -n 5 "$OUT/e2e-java-$round.txt"
    else
      # The first 2 s (connections, first fetch) are warm-up; then E2E_RECORDS are measured.
      keel_bench "kb-e2e-$round" e2e --bootstrap "$BOOT" --topic "$topic" --partitions 1 --warmup 2s \
        --duration "$((E2E_RECORDS / E2E_RATE))s" --rate "$E2E_RATE" --size 1024 --acks all \
        --linger-ms 0 --consumers 1
    fi
  done
done

python3 "$ROOT/benches/validation_report.py" "$OUT" "$ROUNDS" "$VERSION" \
  "$MAX_RECORDS" "$FIXED_RATE" "$FIXED_SECONDS" "$E2E_RECORDS" "$E2E_RATE"
echo "validate.sh: wrote $OUT/validation.md"
