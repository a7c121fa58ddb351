#!/usr/bin/env bash
# Seek, then consume: per-seek time on Keel beside a fresh Apache Kafka, in the same run.
# The workload is librdkafka's test 0059-bsearch: 1,000 records on one partition with
# CreateTime an hour old; each step seeks to the middle of what is left and consumes one
# record (fetch.wait.max.ms=1, fetch.error.backoff.ms=1, queued.min.messages=1).
#
#   benches/seek-bsearch.sh        SEEKS=50 ROUNDS=2 (brokers alternate order)
#
# Per broker and round it prints the median, p99 and max time of a seek plus one record,
# and how many seeks took over 500 ms, for:
#   librdkafka-0059    0059's consumer settings, fetch.queue.backoff.ms left at 1 s
#   librdkafka-nobackoff  the same with fetch.queue.backoff.ms=1
#   java               the Java consumer 4.4 (fetch.max.wait.ms=1, max.poll.records=1)
# and, when RDKAFKA_TESTS names a built librdkafka tests/ directory (test-runner), the
# consume times of its own 0059 run:
#   librdkafka-c-0059  `TESTS=0059 ./test-runner` (C++ API, seek with a 5 s timeout)
#
# About 2 minutes. Ports: Keel 45192 (admin 45292), Kafka 45092 (controller 45093).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seeks=${SEEKS:-50} rounds=${ROUNDS:-2}
keel_port=${KEEL_PORT:-45192} kafka_port=${KAFKA_PORT:-45092}
cargo build --quiet --release -p keel-broker
work="$root/target-bench/runs/seek-bsearch"
trap 'compat/keel.sh stop "$work/keel" >/dev/null 2>&1 || true; compat/kafka/kafka.sh stop "$work/kafka" >/dev/null 2>&1 || true' EXIT

# The consume durations test-runner prints for one 0059 run, as a summary line.
c_0059() { # bootstrap
  local conf="$work/rdkafka-test.conf" out="$work/rdkafka-0059.out"
  printf 'bootstrap.servers=%s\ntest.timeout.multiplier=5\n' "$1" >"$conf"
  (cd "$RDKAFKA_TESTS" && LD_LIBRARY_PATH="$RDKAFKA_TESTS/../src:$RDKAFKA_TESTS/../src-cpp" \
    RDKAFKA_TEST_CONF="$conf" TESTS=0059 timeout 120 ./test-runner -p1 >"$out" 2>&1) || true
  sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -oE 'consume: duration [0-9.]+' | awk '{print $3}' | sort -n | awk '
    { v[NR] = $1; if ($1 > 500) slow++ }
    END { if (NR == 0) { print "no run"; exit }
          p = int(NR * 99 / 100) + 1; if (p > NR) p = NR
          printf "median %.1f ms, p99 %.1f ms, max %.1f ms over %d seeks, %d over 500 ms\n",
            (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[p], v[NR], NR, slow + 0 }'
}

run() { # broker round
  local broker=$1 port
  rm -rf "${work:?}/$broker"
  if [[ $broker == keel ]]; then port=$keel_port; compat/keel.sh start "$work/keel" "$port" --smp 2 >/dev/null
  else port=$kafka_port; compat/kafka/kafka.sh start "$work/kafka" "$port" >/dev/null; fi
  local boot="127.0.0.1:$port" py java
  py=$(KEEL_SEEKS=$seeks compat/python/run.sh "$boot" test_j_seek_bsearch.py -s -q -p no:cacheprovider 2>&1 || true)
  echo "$broker round=$2 librdkafka-0059: $(grep -oE '0059 bsearch: .*' <<<"$py" | sed 's/^0059 bsearch: //')"
  echo "$broker round=$2 librdkafka-nobackoff: $(grep -oE 'seek loop: .*' <<<"$py" | sed 's/^seek loop: //')"
  java=$(compat/java/run.sh "$boot" -Dtest=SeekBsearchTest -Dseeks="$seeks" 2>&1 || true)
  echo "$broker round=$2 java: $(grep -oE 'seek then consume: .*' <<<"$java" | sed 's/^seek then consume: //')"
  if [[ -n ${RDKAFKA_TESTS:-} ]]; then echo "$broker round=$2 librdkafka-c-0059: $(c_0059 "$boot")"; fi
  if [[ $broker == keel ]]; then compat/keel.sh stop "$work/keel"; else compat/kafka/kafka.sh stop "$work/kafka" >/dev/null; fi
}

mkdir -p "$work"
for r in $(seq 1 "$rounds"); do
  if ((r % 2)); then run keel "$r"; run kafka "$r"; else run kafka "$r"; run keel "$r"; fi
done
