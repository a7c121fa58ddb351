#!/usr/bin/env bash
# A three-node Keel cluster against a three-node Apache Kafka cluster, replication factor
# 3 and acks=all, one system at a time on this machine (each is stopped before the other
# starts), with Kafka's own ProducerPerformance as the client:
#   (a) max rate: MAX_RECORDS x 1 KiB records at --throughput -1, MB/s;
#   (b) fixed rate: RATE records/s for RATE_SECONDS, p50 / p99 / p99.9 latency;
#   (c) idle cost: a topic of 1,000 partitions (RF 3) is created and left to settle,
#       then for IDLE_SECONDS the CPU time of the three broker processes
#       (/proc/<pid>/stat utime+stime) and the loopback bytes (/proc/net/dev, all
#       loopback traffic of the machine; a baseline with no cluster running is taken
#       just before each system starts) and the bytes sent by the brokers' own TCP
#       sockets (ss tcp_info bytes_sent, sockets alive at both ends of the window).
#
#   benches/cluster.sh        SYSTEMS="keel kafka" RATE=20000 MAX_RECORDS=500000 ...
#
# SYSTEMS may also name keel-tls: Keel with mutual TLS on the node-to-node port
# (certificates from compat/security/node-certs.sh); ratios are to the last system.
#
# Keel: compat/cluster.sh start 3 (base port 25092, --smp 1 per node), which pins node i
# to core (i-1) mod cores with --cpuset: 0, 1, 0 on two cores.
# Kafka: compat/kafka/cluster.sh start 3 (base port 26092, -Xmx512m -Xms512m per node).
# Writes benches/results/cluster-<UTC>/{summary.md,summary.tsv,<system>-*.txt}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[[ -x target/release/keel ]] || nice -n 10 cargo build --release -p keel-broker

systems=${SYSTEMS:-"keel kafka"}
rate=${RATE:-20000} rate_seconds=${RATE_SECONDS:-30}
max_records=${MAX_RECORDS:-500000} partitions=${PARTITIONS:-6}
idle_partitions=${IDLE_PARTITIONS:-1000} idle_seconds=${IDLE_SECONDS:-30}
settle_timeout=${SETTLE_TIMEOUT:-300} settle_extra=${SETTLE_EXTRA:-15}
keel_base=25092 kafka_base=26092
out="${OUT:-$root/benches/results/cluster-$(date -u +%Y%m%dT%H%M%SZ)}"
runs="$root/target-bench/runs/cluster"
mkdir -p "$out" "$runs"
cp="$(compat/kafka/classpath.sh)"
tool=(timeout 600 java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp")
hz=$(getconf CLK_TCK)
log() { echo "cluster-bench $(date -u +%H:%M:%S): $*" | tee -a "$out/run.log" >&2; }

bootstrap_of() { seq -s, "$1" "$(( $1 + 2 ))" | sed 's/\([0-9]*\)/127.0.0.1:\1/g'; }

start_system() { # system dir
  local s=$1 dir=$2
  rm -rf "$dir"; mkdir -p "$dir"
  if [[ $s == keel-tls ]]; then
    compat/security/node-certs.sh "$dir/certs" 3 >/dev/null
    KEEL_RPC_TLS_DIR="$dir/certs" timeout 180 compat/cluster.sh start 3 "$dir" "$keel_base" --smp 1
  elif [[ $s == keel ]]; then
    timeout 180 compat/cluster.sh start 3 "$dir" "$keel_base" --smp 1
  else
    KAFKA_HEAP_OPTS="-Xmx512m -Xms512m" timeout 240 compat/kafka/cluster.sh start 3 "$dir" "$kafka_base"
  fi
}

stop_system() { # system dir
  if [[ $1 == keel* ]]; then timeout 60 compat/cluster.sh stop "$2" || true
  else timeout 120 compat/kafka/cluster.sh stop "$2" || true; fi
}

pids_of() { # system dir
  if [[ $1 == keel* ]]; then cat "$2"/node-*/keel.pid; else compat/kafka/cluster.sh pids "$2"; fi
}

cpu_ticks() { local t=0 p; for p in "$@"; do t=$(( t + $(awk '{ print $14 + $15 }' "/proc/$p/stat") )); done; echo "$t"; }
lo_bytes() { awk -F'[: ]+' '$2 == "lo" { print $3 }' /proc/net/dev; }
# "<local>-<peer> <bytes_sent>" for every established TCP socket owned by the given pids.
socket_bytes() { ss -tinpH state established | python3 -c '
import re, sys
pids = set(sys.argv[1:]); key = None
for line in sys.stdin:
    if not line.startswith((" ", "\t")):
        f = line.split(); key = None
        owners = set(re.findall(r"pid=(\d+)", line))
        if len(f) >= 4 and owners & pids: key = f[2] + "-" + f[3]
    elif key:
        m = re.search(r"bytes_sent:(\d+)", line); print(key, m.group(1) if m else 0); key = None
' "$@"; }

create_topic() { # bootstrap topic partitions
  "${tool[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$1" --create --topic "$2" \
    --partitions "$3" --replication-factor 3 --config min.insync.replicas=2
}

keel_leaders_known() { # logfile: every node knows a leader for every group it knows
  local a c ok=0
  for a in $((keel_base + 100)) $((keel_base + 101)) $((keel_base + 102)); do
    c=$(curl -sf --max-time 3 "http://127.0.0.1:$a/v1/cluster" || true)
    echo "  admin $a: $c" >>"$1"
    [[ $c =~ \"groups_with_leader\":([0-9]+),\"groups_known\":([0-9]+) ]] || ok=1
    [[ ${BASH_REMATCH[1]:-x} == "${BASH_REMATCH[2]:-y}" ]] || ok=1
  done
  return $ok
}

# Waits until the topic lists all its partitions, each with a leader and its ISR equal
# to its replica list (Keel's Metadata lists only the leader as replica and ISR, so for
# Keel this checks leaders only). Writes the leader count per node to the log.
wait_settled() { # bootstrap topic partitions timeout-s logfile
  local deadline=$((SECONDS + $4)) described bad
  while ((SECONDS < deadline)); do
    described=$("${tool[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$1" --describe --topic "$2" 2>&1 || true)
    bad=$(awk -v want="$3" '/Partition:/ { n++; isr = $0; sub(/.*Isr: */, "", isr); sub(/[ \t].*/, "", isr);
            rep = $0; sub(/.*Replicas: */, "", rep); sub(/[ \t].*/, "", rep);
            if ($0 ~ /Leader: (-1|none)/ || split(isr, a, ",") < split(rep, b, ",")) bad++ }
          END { print (n == want ? bad + 0 : "missing " (want - n)) }' <<<"$described")
    echo "$(date -u +%T) partitions not settled: $bad" >>"$5"
    # Keel's DescribeTopicPartitions (what TopicCommand --describe uses) answers with the
    # answering node as the only replica, leader and ISR; wait also until every node's
    # admin API knows a Raft leader for every group (partitions + the metadata group).
    if [[ $bad == 0 && $1 == *":$keel_base"* ]] && ! keel_leaders_known "$5"; then bad="keel raft leaders"; fi
    if [[ $bad == 0 ]]; then
      { echo "leaders per node:"; grep -o 'Leader: [0-9-]*' <<<"$described" | sort | uniq -c
        echo "replica list sizes:"; grep -o 'Replicas: [0-9,]*' <<<"$described" | awk -F'[ ,]' '{ print NF - 1 }' | sort | uniq -c
        echo "first partitions:"; grep 'Partition:' <<<"$described" | head -n 3; } >>"$5"
      return 0
    fi
    sleep 2
  done
  echo "$described" | tail -n 20 >>"$5"
  return 1
}

summary_line() { # file -> "records/s MB/s avg p50 p99 p999"
  grep -E 'records sent,.*99.9th' "$1" | tail -n 1 | sed -E \
    's/.* ([0-9.]+) records\/sec \(([0-9.]+) MB\/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency, ([0-9]+) ms 50th, ([0-9]+) ms 95th, ([0-9]+) ms 99th, ([0-9]+) ms 99.9th.*/\1 \2 \3 \5 \7 \8/'
}

perf() { # bootstrap topic records throughput outfile
  "${tool[@]}" org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$1" --topic "$2" \
    --num-records "$3" --record-size 1024 --throughput "$4" \
    --command-property acks=all linger.ms=5 batch.size=65536 >"$5" 2>&1
}

measure_window() { # prefix seconds pids...
  local prefix=$1 secs=$2; shift 2
  local c0 c1 l0 l1
  socket_bytes "$@" >"$out/$prefix-sockets-0.txt"
  c0=$(cpu_ticks "$@"); l0=$(lo_bytes)
  sleep "$secs"
  c1=$(cpu_ticks "$@"); l1=$(lo_bytes)
  socket_bytes "$@" >"$out/$prefix-sockets-1.txt"
  local sock
  sock=$(awk 'NR == FNR { a[$1] = $2; next } ($1 in a) { s += $2 - a[$1] } END { print s + 0 }' \
    "$out/$prefix-sockets-0.txt" "$out/$prefix-sockets-1.txt")
  echo "$(( c1 - c0 )) $(( l1 - l0 )) $sock"
}

declare -A result
# Other engineers rebuild target/release/keel in place: record which binary this run used.
log "keel binary $(stat -c '%y' target/release/keel | cut -c1-19), md5 $(md5sum <target/release/keel | cut -c1-12); git HEAD $(git rev-parse --short HEAD)"
for s in $systems; do
  dir="$runs/$s"
  base=$([[ $s == keel* ]] && echo $keel_base || echo $kafka_base)
  bs=$(bootstrap_of "$base")
  log "$s: loopback baseline, no cluster, ${idle_seconds}s"
  l0=$(lo_bytes); sleep "$idle_seconds"; l1=$(lo_bytes)
  result[$s.lo_base]=$(( l1 - l0 ))
  log "$s: starting 3 nodes"
  if ! start_system "$s" "$dir" >"$out/$s-start.txt" 2>&1; then
    log "$s: failed to start (see $s-start.txt)"; result[$s.status]="failed to start"
    stop_system "$s" "$dir"; continue
  fi
  mapfile -t pids < <(pids_of "$s" "$dir")
  log "$s: pids ${pids[*]}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  { create_topic "$bs" perf "$partitions" && wait_settled "$bs" perf "$partitions" 60 "$out/$s-settle-perf.txt"; } \
    >"$out/$s-create-perf.txt" 2>&1 || log "$s: topic perf did not settle (see $s-create-perf.txt, $s-settle-perf.txt)"
  log "$s: (a) max rate, $max_records records"
  perf "$bs" perf "$max_records" -1 "$out/$s-max-rate.txt" || log "$s: max-rate run failed (exit $?)"
  read -r r mb avg p50 p99 p999 <<<"$(summary_line "$out/$s-max-rate.txt" || true)" || true
  result[$s.max_mb]=${mb:-n/a}; result[$s.max_rps]=${r:-n/a}; result[$s.max_p99]=${p99:-n/a}
  log "$s: (b) fixed rate $rate records/s for ${rate_seconds}s"
  perf "$bs" perf "$(( rate * rate_seconds ))" "$rate" "$out/$s-fixed-rate.txt" || log "$s: fixed-rate run failed (exit $?)"
  r= mb= avg= p50= p99= p999=
  read -r r mb avg p50 p99 p999 <<<"$(summary_line "$out/$s-fixed-rate.txt" || true)" || true
  result[$s.fix_rps]=${r:-n/a}; result[$s.fix_p50]=${p50:-n/a}; result[$s.fix_p99]=${p99:-n/a}; result[$s.fix_p999]=${p999:-n/a}
  log "$s: (c) creating a topic of $idle_partitions partitions"
  t0=$SECONDS
  if create_topic "$bs" idle "$idle_partitions" >"$out/$s-create-idle.txt" 2>&1 \
      && wait_settled "$bs" idle "$idle_partitions" "$settle_timeout" "$out/$s-settle-idle.txt"; then
    result[$s.settle_s]=$(( SECONDS - t0 ))
    log "$s: settled in ${result[$s.settle_s]}s; waiting ${settle_extra}s more, then ${idle_seconds}s of idle"
  else
    result[$s.settle_s]="not within ${settle_timeout}s"
    log "$s: the $idle_partitions-partition topic did not settle within ${settle_timeout}s; measuring anyway"
  fi
  sleep "$settle_extra"
  alive=1; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || alive=0; done
  if ((alive)); then
    read -r ticks lo sock <<<"$(measure_window "$s-idle" "$idle_seconds" "${pids[@]}")"
    result[$s.idle_cpu]=$(python3 -c "print('%.3f' % ($ticks / $hz / $idle_seconds))")
    result[$s.idle_lo]=$(python3 -c "print('%.0f' % ($lo / $idle_seconds))")
    result[$s.idle_sock]=$(python3 -c "print('%.0f' % ($sock / $idle_seconds))")
  else
    log "$s: a broker process died before the idle window"; result[$s.status]="broker died"
  fi
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || log "$s: broker pid $p is not running at the end"
    [[ -r /proc/$p/status ]] && grep VmRSS "/proc/$p/status" | sed "s/^/$s pid $p /" >>"$out/$s-rss.txt"
  done
  log "$s: stopping"
  stop_system "$s" "$dir" >>"$out/$s-start.txt" 2>&1
  # Keep the node logs small: the tail of each, and any warnings and errors.
  for f in "$dir"/node-*/keel.log "$dir"/node-*/kafka.log; do
    [[ -f $f ]] || continue
    nd=$(dirname "$f")
    { grep -E "WARN|ERROR|panick|FATAL" "$f" | tail -n 30; echo "--- tail"; tail -n 20 "$f"; } | cut -c1-300 \
      >"$out/$s-$(basename "$nd")-log.txt" 2>/dev/null || true
  done
done

python3 - "$out" "$rate" "$rate_seconds" "$max_records" "$partitions" "$idle_partitions" "$idle_seconds" $systems <<PY
import sys
out, rate, rate_s, max_records, parts, idle_parts, idle_s = sys.argv[1:8]
systems = sys.argv[8:]
names = {"keel": "Keel", "keel-tls": "Keel, RPC TLS", "kafka": "Apache Kafka"}
r = {$(for k in "${!result[@]}"; do printf '"%s": "%s", ' "$k" "${result[$k]}"; done)}
rows = [
  ("(a) max rate, MB/s", "max_mb"), ("(a) max rate, records/s", "max_rps"), ("(a) max rate, p99 ms (queue-bound)", "max_p99"),
  ("(b) %s records/s: achieved records/s" % rate, "fix_rps"), ("(b) p50 ms", "fix_p50"),
  ("(b) p99 ms", "fix_p99"), ("(b) p99.9 ms", "fix_p999"),
  ("(c) %s partitions: create + settle, s" % idle_parts, "settle_s"),
  ("(c) idle CPU, cores (3 brokers together)", "idle_cpu"),
  ("(c) idle loopback bytes/s (whole machine)", "idle_lo"),
  ("(c) idle bytes/s sent by broker sockets", "idle_sock"),
  ("loopback bytes/s before start, no cluster", "lo_base"),
]
def ratio(a, b):
    try: return "%.2fx" % (float(a) / float(b))
    except (ValueError, ZeroDivisionError): return ""
get = lambda s, k: r.get(s + "." + k, "n/a")
for s in systems:
    if s + ".lo_base" in r: r[s + ".lo_base"] = "%.0f" % (float(r[s + ".lo_base"]) / float(idle_s))
md = ["# Three-node cluster, RF 3, acks=all: " + " vs ".join(names.get(s, s) for s in systems), "",
      "ProducerPerformance, 1 KiB records, acks=all, linger.ms=5, batch.size=65536, topic of %s partitions RF 3 (min.insync.replicas=2); "
      "(a) %s records at --throughput -1; (b) %s records/s for %s s; (c) idle topic of %s partitions, %s s window." % (parts, max_records, rate, rate_s, idle_parts, idle_s), "",
      "| " + " | ".join([""] + [names.get(s, s) for s in systems]
      + ["%s / %s" % (names.get(s, s), names.get(systems[-1], systems[-1])) for s in systems[:-1]]) + " |",
      "|---|" + "---:|" * (2 * len(systems) - 1)]
tsv = ["figure\t" + "\t".join(systems) + "".join("\t%s/%s" % (s, systems[-1]) for s in systems[:-1])]
for name, k in rows:
    vals = [get(s, k) for s in systems]
    ratios = [ratio(v, vals[-1]) for v in vals[:-1]]
    md.append("| " + " | ".join([name] + vals + ratios) + " |")
    tsv.append("\t".join([name] + vals + ratios))
for s in systems:
    if s + ".status" in r: md.append("\n%s: %s" % (s, r[s + ".status"]))
open(out + "/summary.md", "w").write("\n".join(md) + "\n")
open(out + "/summary.tsv", "w").write("\n".join(tsv) + "\n")
print("\n".join(md))
PY
log "results in $out"
