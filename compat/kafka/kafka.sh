#!/usr/bin/env bash
# Runs Apache Kafka (single-node KRaft, combined broker + controller) from the
# Maven Central jars resolved by classpath.sh. Used as the behaviour oracle for
# the compatibility tests and as a baseline for benchmarks.
#
#   kafka.sh start <data-dir> <port>   format (first time) and start; waits until ready
#   kafka.sh stop  <data-dir>          stop (TERM, then KILL after a timeout) and wait
#   kafka.sh status <data-dir>         exit 0 if running (prints the pid)
#   kafka.sh version                   print the Kafka version used
#
# The controller listens on <port>+1. Everything binds to 127.0.0.1.
# Environment:
#   KAFKA_START_TIMEOUT  seconds to wait for readiness (default 90)
#   KAFKA_STOP_TIMEOUT   seconds between TERM and KILL (default 30)
#   KAFKA_HEAP_OPTS      JVM heap options (default -Xmx1g -Xms256m)
#   KAFKA_EXTRA_PROPS    extra lines appended to server.properties
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1g -Xms256m}"
# Quiet command-line tools (slf4j-simple logs INFO to stderr by default).
TOOL_OPTS=(-Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn)

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "kafka.sh: $*" >&2
  exit 1
}

classpath() {
  "$HERE/classpath.sh"
}

abs_dir() {
  mkdir -p "$1"
  (cd "$1" && pwd)
}

# Prints the pid recorded in <data-dir>/kafka.pid if that process is alive and
# is the Kafka broker started for this data dir; returns 1 otherwise.
running_pid() {
  local dir="$1" pid
  [[ -f "$dir/kafka.pid" ]] || return 1
  pid="$(tr -cd '0-9' < "$dir/kafka.pid")"
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a recycled pid: the command line must be ours.
  if [[ -r "/proc/$pid/cmdline" ]]; then
    local cmd
    cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline")"
    [[ "$cmd" == *"kafka.Kafka"* && "$cmd" == *"$dir/server.properties"* ]] || return 1
  fi
  echo "$pid"
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

log_tail() {
  local dir="$1"
  if [[ -f "$dir/kafka.log" ]]; then
    echo "----- last 60 lines of $dir/kafka.log -----" >&2
    tail -n 60 "$dir/kafka.log" >&2 || true
    echo "-------------------------------------------" >&2
  fi
}

broker_answers() {
  local cp="$1" port="$2"
  timeout 60 java "${TOOL_OPTS[@]}" -cp "$cp" org.apache.kafka.tools.BrokerApiVersionsCommand \
    --bootstrap-server "127.0.0.1:$port" >/dev/null 2>&1
}

write_properties() {
  local dir="$1" port="$2" cport="$3"
  cat > "$dir/server.properties" <<EOF
# Written by compat/kafka/kafka.sh: single-node KRaft broker + controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/logs
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=true
delete.topic.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  if [[ -n "${KAFKA_EXTRA_PROPS:-}" ]]; then
    printf '%s\n' "$KAFKA_EXTRA_PROPS" >> "$dir/server.properties"
  fi
}

cmd_start() {
  [[ $# -eq 2 ]] || usage
  local dir port cport cp pid
  dir="$(abs_dir "$1")"
  port="$2"
  [[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65535 )) || die "bad port: $port"
  cport=$((port + 1))

  if pid="$(running_pid "$dir")"; then
    cp="$(classpath)"
    if broker_answers "$cp" "$port"; then
      echo "kafka.sh: already running (pid $pid) on 127.0.0.1:$port"
      return 0
    fi
    die "a broker (pid $pid) runs for $dir but does not answer on 127.0.0.1:$port; stop it first"
  fi
  rm -f "$dir/kafka.pid"

  for p in "$port" "$cport"; do
    if port_open "$p"; then
      die "port 127.0.0.1:$p is already in use by another process"
    fi
  done

  cp="$(classpath)"
  command -v java >/dev/null || die "java not found"

  write_properties "$dir" "$port" "$cport"
  mkdir -p "$dir/logs"

  if [[ ! -f "$dir/logs/meta.properties" ]]; then
    local cluster_id
    cluster_id="$(java "${TOOL_OPTS[@]}" -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    [[ -n "$cluster_id" ]] || die "StorageTool random-uuid failed"
    if ! java "${TOOL_OPTS[@]}" -cp "$cp" kafka.tools.StorageTool format \
        -t "$cluster_id" -c "$dir/server.properties" --ignore-formatted \
        > "$dir/format.log" 2>&1; then
      cat "$dir/format.log" >&2
      die "StorageTool format failed"
    fi
  fi

  # shellcheck disable=SC2086
  (
    cd "$dir"
    exec setsid java $HEAP_OPTS -XX:+UseG1GC -Djava.awt.headless=true \
      -Dorg.slf4j.simpleLogger.showDateTime=true \
      -Dorg.slf4j.simpleLogger.dateTimeFormat="yyyy-MM-dd HH:mm:ss.SSS" \
      -cp "$cp" kafka.Kafka "$dir/server.properties"
  ) >> "$dir/kafka.log" 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > "$dir/kafka.pid"

  local deadline=$((SECONDS + START_TIMEOUT))
  while (( SECONDS < deadline )); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log_tail "$dir"
      rm -f "$dir/kafka.pid"
      die "Kafka exited during startup"
    fi
    if port_open "$port" && broker_answers "$cp" "$port"; then
      echo "kafka.sh: Kafka $(kafka_version "$cp") ready on 127.0.0.1:$port (pid $pid, data $dir)"
      return 0
    fi
    sleep 1
  done
  log_tail "$dir"
  echo "kafka.sh: not ready after ${START_TIMEOUT}s; stopping it" >&2
  stop_pid "$dir" "$pid" || true
  exit 1
}

stop_pid() {
  local dir="$1" pid="$2"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "kafka.sh: pid $pid still alive after ${STOP_TIMEOUT}s, sending KILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    local kdeadline=$((SECONDS + 15))
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < kdeadline )); do
      sleep 0.2
    done
  fi
  if kill -0 "$pid" 2>/dev/null; then
    die "could not stop pid $pid"
  fi
  rm -f "$dir/kafka.pid"
}

cmd_stop() {
  [[ $# -eq 1 ]] || usage
  local dir pid
  [[ -d "$1" ]] || { echo "kafka.sh: $1 does not exist; nothing to stop"; return 0; }
  dir="$(cd "$1" && pwd)"
  if pid="$(running_pid "$dir")"; then
    stop_pid "$dir" "$pid"
    echo "kafka.sh: stopped (pid $pid)"
  else
    rm -f "$dir/kafka.pid"
    echo "kafka.sh: not running"
  fi
}

cmd_status() {
  [[ $# -eq 1 ]] || usage
  local dir pid
  [[ -d "$1" ]] || { echo "not running"; return 1; }
  dir="$(cd "$1" && pwd)"
  if pid="$(running_pid "$dir")"; then
    echo "running (pid $pid)"
  else
    echo "not running"
    return 1
  fi
}

kafka_version() {
  java "${TOOL_OPTS[@]}" -cp "$1" kafka.Kafka --version 2>/dev/null | tail -n 1
}

cmd_version() {
  local cp v
  cp="$(classpath)"
  v="$(kafka_version "$cp")"
  [[ -n "$v" ]] || die "could not determine the Kafka version"
  echo "$v"
}

[[ $# -ge 1 ]] || usage
action="$1"
shift
case "$action" in
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status "$@" ;;
  version) cmd_version "$@" ;;
  -h|--help|help) usage ;;
  *) usage ;;
esac
