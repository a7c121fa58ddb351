#!/usr/bin/env bash
# Before/after comparison of several Keel binaries in one run, alternating binaries so
# that noise on a shared machine hits all alike. Each run starts the binary on a fresh
# data directory (compat/keel.sh, --smp 2) and drives it with Apache Kafka's own
# ProducerPerformance (kafka-tools 4.4.0) into a new 6-partition topic; producer
# settings acks=all linger.ms=5 batch.size=65536 max.in.flight.requests.per.connection=5:
#   max    500,000 x 1 KiB records at --throughput -1: records/s, MB/s, p99 ms
#   fixed  300,000 x 1 KiB records at --throughput 20000: p50, p99, p99.9 ms
# Per round and workload every binary runs once, the order rotated by one each round.
#
#   benches/ab.sh NAME=BINARY [NAME=BINARY ...]     AB_ROUNDS=3 AB_PORT=39292 KEEL_SMP=2
#                  (AB_MAX_RECORDS=500000 AB_FIXED_RECORDS=300000)
#
# Prints one line per run (with the producer JVM's and the broker's CPU seconds beside
# the wall time, to show whether the load generator is the bottleneck), then a table of
# each binary's median over rounds [min-max] and its ratio to the first binary's median.
# Writes raw.txt, the producer logs and results.md to benches/results/<UTC>-ab/.
# Any failed run stops the script with a non-zero exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
(($# >= 1)) || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds=${AB_ROUNDS:-3} port=${AB_PORT:-39292} smp=${KEEL_SMP:-2}
max_n=${AB_MAX_RECORDS:-500000} fixed_n=${AB_FIXED_RECORDS:-300000}
names=() bins=()
for a in "$@"; do
  [[ $a == *=* && -x ${a#*=} ]] || { echo "ab.sh: not NAME=EXECUTABLE: $a" >&2; exit 2; }
  names+=("${a%%=*}"); bins+=("${a#*=}")
done
out="$root/benches/results/$(date -u +%Y%m%dT%H%M%SZ)-ab"
work="$root/target-bench/runs/ab"
mkdir -p "$out/logs"
CP="$(compat/kafka/classpath.sh)"
java_=(java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP")
props=(acks=all linger.ms=5 batch.size=65536 max.in.flight.requests.per.connection=5)
tck=$(getconf CLK_TCK)
trap 'compat/keel.sh stop "$work" >/dev/null 2>&1 || true' EXIT
die() { echo "ab.sh: FAIL: $*" >&2; exit 1; }
cpu_s() { awk -v t="$tck" '{ print ($14 + $15) / t }' "/proc/$1/stat"; }

run() { # round workload index
  local r=$1 w=$2 i=$3 name=${names[$3]} n tput topic log pid b0 b1 rc=0
  if [[ $w == max ]]; then n=$max_n tput=-1; else n=$fixed_n tput=20000; fi
  topic="ab-$w-$r-$name" log="$out/logs/$w-$r-$name.log"
  rm -rf "$work"
  KEEL_BIN=${bins[$i]} compat/keel.sh start "$work" "$port" --smp "$smp" >/dev/null || die "$name did not start"
  pid=$(cat "$work/keel.pid")
  "${java_[@]}" -Xmx256m org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
    --create --topic "$topic" --partitions 6 --replication-factor 1 >/dev/null || die "create $topic on $name"
  b0=$(cpu_s "$pid")
  # GNU time: wall, user and system seconds of the producer JVM (all its threads).
  /usr/bin/time -f 'time wall=%e user=%U sys=%S' -o "$log.time" "${java_[@]}" -Xmx1g \
    org.apache.kafka.tools.ProducerPerformance --bootstrap-server "127.0.0.1:$port" --topic "$topic" \
    --num-records "$n" --record-size 1024 --throughput "$tput" --command-property "${props[@]}" \
    >"$log" 2>&1 || rc=$?
  b1=$(cpu_s "$pid")
  kill -0 "$pid" 2>/dev/null || die "$name exited during $w round $r (see $work/keel.log)"
  compat/keel.sh stop "$work"
  ((rc == 0)) || { tail -n 20 "$log" >&2; die "ProducerPerformance exit $rc ($name $w round $r)"; }
  # "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency,
  #  P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
  local s; s=$(grep -E '^[0-9]+ records sent, .* 99\.9th\.' "$log" | tail -n 1) || die "no summary in $log"
  [[ ${s%% *} == "$n" ]] || die "$name $w round $r sent ${s%% *} of $n records"
  awk -v r="$r" -v w="$w" -v b="$name" -v bc="$b1" -v b0="$b0" -v t="$(cat "$log.time")" '{
    gsub(/[(),]/, ""); split(t, T, /[ =]/)
    printf "run round=%s workload=%s binary=%s records_s=%s mb_s=%s p50_ms=%s p99_ms=%s p999_ms=%s", r, w, b, $4, $6, $16, $22, $25
    printf " producer_wall_s=%s producer_cpu_s=%.1f broker_cpu_s=%.1f\n", T[3], T[5] + T[7], bc - b0 }' <<<"$s"
}

{
  for r in $(seq 1 "$rounds"); do
    for w in max fixed; do
      for k in $(seq 0 $((${#names[@]} - 1))); do run "$r" "$w" $(((k + r - 1) % ${#names[@]})); done
    done
  done
} | tee "$out/raw.txt"

# Median [min-max] over rounds per binary and figure, and median / first binary's median.
table=$(awk -v order="${names[*]}" '
  function med(k,  a, n, i, j, t) { n = split(vals[k], a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo[k] = a[1]; hi[k] = a[n]; return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    w = f["workload"]; b = f["binary"]
    if (w == "max") m = "max_records_s max_mb_s max_p99_ms max_producer_wall_s max_producer_cpu_s max_broker_cpu_s"
    else m = "fixed_records_s fixed_p50_ms fixed_p99_ms fixed_p999_ms fixed_producer_wall_s fixed_producer_cpu_s fixed_broker_cpu_s"
    n = split(m, ms, " ")
    for (j = 1; j <= n; j++) { k = ms[j]; sub(/^(max|fixed)_/, "", k);
      vals[b SUBSEP ms[j]] = vals[b SUBSEP ms[j]] " " f[k]; figs[j + (w == "max" ? 0 : 10)] = ms[j] } }
  END { nb = split(order, bs, " ")
    printf "| figure |"; for (i = 1; i <= nb; i++) printf " %s median [min-max] | ratio |", bs[i]; print ""
    printf "|---|"; for (i = 1; i <= nb; i++) printf "---|---|"; print ""
    for (j = 1; j <= 20; j++) if (j in figs) { printf "| %s |", figs[j]; base = med(bs[1] SUBSEP figs[j])
      for (i = 1; i <= nb; i++) { k = bs[i] SUBSEP figs[j]; m = med(k)
        printf " %g [%g-%g] | %.3f |", m, lo[k], hi[k], base ? m / base : 0 }
      print "" } }' "$out/raw.txt")
echo; echo "$table"

{
  echo "# Keel A/B: ${names[*]}"; echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), $rounds rounds, Keel --smp $smp, ProducerPerformance (kafka-tools 4.4.0), one broker at a time on a fresh data directory in $work."
  echo; echo "Binaries (the first is the baseline of the ratios):"; echo
  for i in "${!names[@]}"; do echo "- ${names[$i]}: \`${bins[$i]}\` md5 $(md5sum <"${bins[$i]}" | cut -d' ' -f1)"; done
  echo; echo "Command: \`AB_ROUNDS=$rounds benches/ab.sh $*\`"; echo
  echo "Producer: \`ProducerPerformance --record-size 1024 --command-property ${props[*]}\`, 6 partitions;"
  echo "max: \`--num-records $max_n --throughput -1\`; fixed: \`--num-records $fixed_n --throughput 20000\`."
  echo "producer_cpu_s is the producer JVM's user+system time (GNU time), broker_cpu_s the broker's during the producer run (/proc/PID/stat)."
  echo; echo "$table"; echo; echo "Runs:"; echo; echo '```'; cat "$out/raw.txt"; echo '```'
} >"$out/results.md"
echo "ab.sh: wrote $out"
