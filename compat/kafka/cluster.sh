#!/usr/bin/env bash
# Starts and stops an Apache Kafka KRaft cluster on loopback: n nodes, each a combined
# broker + controller (process.roles=broker,controller), all n in controller.quorum.voters,
# from the Maven Central jars resolved by classpath.sh. The counterpart of
# compat/cluster.sh (Keel) for side-by-side cluster benchmarks.
#
#   compat/kafka/cluster.sh start <n> <dir> <base-port>   format (first time), start, wait
#   compat/kafka/cluster.sh stop <dir>                    stop every node (TERM, then KILL)
#   compat/kafka/cluster.sh pids <dir>                    print the live broker pids
#   compat/kafka/cluster.sh kill|pause|resume <node> <dir>  kill -9, SIGSTOP, SIGCONT one node
#   compat/kafka/cluster.sh restart <node> <dir>          start a killed node again
#
# Node i (1..n) listens for Kafka on base-port + i - 1 and for the controller quorum on
# that + 300, with its config, log and data in <dir>/node-i. All nodes are formatted with
# one cluster id. Replication defaults: default.replication.factor=n (at most 3),
# min.insync.replicas=2, internal topics replicated n ways. `start` returns once a node
# reports all n brokers registered (DescribeCluster); it prints the bootstrap list.
# Environment:
#   KAFKA_HEAP_OPTS        per-node JVM heap (default -Xmx512m -Xms512m)
#   KAFKA_START_TIMEOUT    seconds to wait for all brokers (default 120)
#   KAFKA_STOP_TIMEOUT     seconds between TERM and KILL per node (default 30)
#   KAFKA_EXTRA_PROPS      extra lines appended to every node's server.properties
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx512m -Xms512m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-120}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
TOOL_OPTS=(-Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn)

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "kafka/cluster.sh: $*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The pid in <node-dir>/kafka.pid if it is alive and runs this node's config.
node_pid() {
  local d="$1" pid cmd
  [[ -f "$d/kafka.pid" ]] || return 1
  pid="$(tr -cd '0-9' < "$d/kafka.pid")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *"kafka.Kafka"* && "$cmd" == *"$d/server.properties"* ]] || return 1
  echo "$pid"
}

write_properties() { # node-dir id port voters n
  local d="$1" id="$2" port="$3" voters="$4" n="$5" rf
  rf=$(( n < 3 ? n : 3 ))
  cat > "$d/server.properties" <<EOF
# Written by compat/kafka/cluster.sh: node $id of a $n-node KRaft cluster.
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 300))
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$d/logs
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$(( rf < 2 ? rf : 2 ))
auto.create.topics.enable=true
delete.topic.enable=true
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$(( rf < 2 ? rf : 2 ))
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$(( rf < 2 ? rf : 2 ))
group.initial.rebalance.delay.ms=0
EOF
  if [[ -n "${KAFKA_EXTRA_PROPS:-}" ]]; then printf '%s\n' "$KAFKA_EXTRA_PROPS" >> "$d/server.properties"; fi
}

# Number of unfenced brokers a node reports through the Admin API (DescribeCluster), or nothing.
registered_brokers() { # cp bootstrap
  timeout 30 java "${TOOL_OPTS[@]}" -cp "$1" org.apache.kafka.tools.ClusterTool list-endpoints \
    --bootstrap-server "$2" 2>/dev/null | awk 'NR > 1 && $1 ~ /^[0-9]+$/ && $5 == "unfenced" { n++ } END { print n + 0 }'
}

# Starts the broker of <node-dir> from its server.properties, in the background.
launch_node() { # node-dir classpath
  local d="$1" cp="$2"
  # shellcheck disable=SC2086
  ( cd "$d"; exec setsid java $HEAP_OPTS -XX:+UseG1GC -Djava.awt.headless=true \
      -Dorg.slf4j.simpleLogger.showDateTime=true \
      -Dorg.slf4j.simpleLogger.dateTimeFormat="yyyy-MM-dd HH:mm:ss.SSS" \
      -cp "$cp" kafka.Kafka "$d/server.properties" ) >> "$d/kafka.log" 2>&1 < /dev/null &
  echo $! > "$d/kafka.pid"
}

cmd_start() {
  [[ $# -eq 3 ]] || usage
  local n="$1" dir base cp voters="" cluster_id i d port pid
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "bad node count: $n"
  dir="$(mkdir -p "$2" && cd "$2" && pwd)"; base="$3"
  [[ "$base" =~ ^[0-9]+$ ]] || die "bad base port: $base"
  cp="$("$HERE/classpath.sh")"
  command -v java >/dev/null || die "java not found"
  for i in $(seq 1 "$n"); do voters+="${voters:+,}$i@127.0.0.1:$((base + i - 1 + 300))"; done
  echo "$n $base" > "$dir/cluster.conf"

  if [[ -s "$dir/cluster.id" ]]; then
    cluster_id="$(cat "$dir/cluster.id")"
  else
    cluster_id="$(java "${TOOL_OPTS[@]}" -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    [[ -n "$cluster_id" ]] || die "StorageTool random-uuid failed"
    echo "$cluster_id" > "$dir/cluster.id"
  fi

  for i in $(seq 1 "$n"); do
    d="$dir/node-$i"; port=$((base + i - 1)); mkdir -p "$d/logs"
    if pid="$(node_pid "$d")"; then echo "kafka/cluster.sh: node $i already running (pid $pid)"; continue; fi
    for p in "$port" "$((port + 300))"; do port_open "$p" && die "port 127.0.0.1:$p is already in use"; done
    write_properties "$d" "$i" "$port" "$voters" "$n"
    if [[ ! -f "$d/logs/meta.properties" ]]; then
      java "${TOOL_OPTS[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$cluster_id" \
        -c "$d/server.properties" --ignore-formatted > "$d/format.log" 2>&1 \
        || { cat "$d/format.log" >&2; die "StorageTool format failed for node $i"; }
    fi
    launch_node "$d" "$cp"
  done

  local bootstrap deadline=$((SECONDS + START_TIMEOUT)) got=0
  bootstrap="$(seq -s, "$base" "$((base + n - 1))" | sed 's/\([0-9]*\)/127.0.0.1:\1/g')"
  while (( SECONDS < deadline )); do
    for i in $(seq 1 "$n"); do
      node_pid "$dir/node-$i" >/dev/null || { tail -n 40 "$dir/node-$i/kafka.log" >&2; die "node $i exited during startup"; }
    done
    if port_open "$base"; then
      got="$(registered_brokers "$cp" "$bootstrap")"
      if [[ "$got" == "$n" ]]; then
        echo "kafka/cluster.sh: $n nodes ready; bootstrap $bootstrap"
        return 0
      fi
    fi
    sleep 1
  done
  for i in $(seq 1 "$n"); do echo "--- node $i" >&2; tail -n 20 "$dir/node-$i/kafka.log" >&2; done
  echo "kafka/cluster.sh: only $got of $n brokers registered after ${START_TIMEOUT}s; stopping" >&2
  cmd_stop "$dir" || true
  exit 1
}

cmd_stop() {
  [[ $# -eq 1 ]] || usage
  [[ -d "$1" ]] || { echo "kafka/cluster.sh: $1 does not exist; nothing to stop"; return 0; }
  local dir d pid pids=() deadline
  dir="$(cd "$1" && pwd)"
  for d in "$dir"/node-*; do
    if pid="$(node_pid "$d")"; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
    rm -f "$d/kafka.pid"
  done
  deadline=$((SECONDS + STOP_TIMEOUT))
  for pid in ${pids[@]+"${pids[@]}"}; do
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "kafka/cluster.sh: pid $pid still alive after ${STOP_TIMEOUT}s, sending KILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for pid in ${pids[@]+"${pids[@]}"}; do
    local k=$((SECONDS + 15))
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < k )); do sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && die "could not stop pid $pid"
  done
  echo "kafka/cluster.sh: stopped ${#pids[@]} node(s)"
}

cmd_pids() {
  [[ $# -eq 1 ]] || usage
  local dir d
  dir="$(cd "$1" && pwd)"
  for d in "$dir"/node-*; do node_pid "$d" || true; done
}

# kill -9 of one node (a crash), SIGSTOP/SIGCONT (a stall), and its restart, which
# returns once its Kafka port accepts connections: the faults of compat/ledger.
cmd_signal() { # KILL|STOP|CONT node dir
  [[ $# -eq 3 ]] || usage
  local d pid
  d="$(cd "$3" && pwd)/node-$2"
  pid="$(node_pid "$d")" || die "node $2 is not running"
  kill "-$1" "$pid"
  if [[ "$1" == KILL ]]; then
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$d/kafka.pid"
  fi
}

cmd_restart() { # node dir
  [[ $# -eq 2 ]] || usage
  local dir d n base port deadline
  dir="$(cd "$2" && pwd)"; d="$dir/node-$1"
  read -r n base < "$dir/cluster.conf"
  [[ -f "$d/server.properties" ]] || die "node $1 of $n was never started"
  node_pid "$d" >/dev/null && die "node $1 is running"
  port=$((base + $1 - 1))
  launch_node "$d" "$("$HERE/classpath.sh")"
  deadline=$((SECONDS + START_TIMEOUT))
  until port_open "$port"; do
    node_pid "$d" >/dev/null || { tail -n 40 "$d/kafka.log" >&2; die "node $1 exited during startup"; }
    (( SECONDS < deadline )) || die "node $1 did not listen on $port within ${START_TIMEOUT}s"
    sleep 0.2
  done
}

[[ $# -ge 1 ]] || usage
action="$1"; shift
case "$action" in
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  pids) cmd_pids "$@" ;;
  kill) cmd_signal KILL "$@" ;;
  pause) cmd_signal STOP "$@" ;;
  resume) cmd_signal CONT "$@" ;;
  restart) cmd_restart "$@" ;;
  *) usage ;;
esac
