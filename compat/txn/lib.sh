# Shared by compat/txn/copier.sh and tools.sh (sourced, not run): Kafka's classpath, the
# probe client, and a broker each script starts, kills and stops itself.
#
# A script sets `broker` (keel, kafka or external), `broker_dir` and `broker_port` before
# calling broker_start / broker_kill / broker_stop. Keel runs as
# `compat/keel.sh start DIR PORT --smp 2` (target/release/keel, or KEEL_BIN); Kafka as
# `compat/kafka/kafka.sh start DIR PORT` (4.4.0 from Maven Central, controller on PORT+1).

txn_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
txn_root="$(cd "$txn_here/../.." && pwd)"
TOOL_TIMEOUT=${TOOL_TIMEOUT:-120}

txn_classpath() {
  cp=$("$txn_root/compat/kafka/classpath.sh") || { echo "cannot resolve Kafka's classpath (compat/kafka/classpath.sh)" >&2; return 1; }
}

# One of Kafka's tools, quiet (slf4j-simple at warn) and bounded in time.
tool() {
  local class=$1; shift
  timeout "$TOOL_TIMEOUT" java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" "$class" "$@"
}

# Compiles TxnProbe.java into $work/probe (once per run).
probe_build() {
  mkdir -p "$work/probe"
  javac -nowarn -cp "$cp" -d "$work/probe" "$txn_here/TxnProbe.java"
}

probe() {
  timeout "$TOOL_TIMEOUT" java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$work/probe:$cp" TxnProbe "$@"
}

# Long-running probe modes (open, monitor), run in the background: no timeout of their
# own, and the JVM takes the place of the background subshell (its pid is the JVM's).
probe_bg() {
  exec java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$work/probe:$cp" TxnProbe "$@"
}

# bg_run LOG COMMAND...: COMMAND in the background, its output appended to LOG; sets
# bg_pid (the command's own pid, to kill) and bg_job (its wrapper, to wait on). The
# wrapper collects the command's exit, so a kill -9 ends it with status 137 and bash's
# "Killed" notice lands in LOG, not in this script's output.
bg_run() {
  local log=$1; shift
  rm -f "$log.pid"
  ( "$@" &
    echo $! >"$log.pid"
    wait $! ) >>"$log" 2>&1 &
  bg_job=$!
  for _ in $(seq 1 500); do [[ -s "$log.pid" ]] && break; sleep 0.01; done
  bg_pid=$(cat "$log.pid")
  rm -f "$log.pid"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

broker_start() {
  case $broker in
    keel) "$txn_root/compat/keel.sh" start "$broker_dir" "$broker_port" --smp 2 ;;
    kafka) "$txn_root/compat/kafka/kafka.sh" start "$broker_dir" "$broker_port" ;;
    external) return 0 ;;
  esac
}

broker_pid() {
  case $broker in
    keel) cat "$broker_dir/keel.pid" 2>/dev/null ;;
    kafka) cat "$broker_dir/kafka.pid" 2>/dev/null ;;
  esac
}

# kill -9 of the broker's recorded pid; returns once the process is gone.
broker_kill() {
  local pid
  pid=$(broker_pid)
  [[ -n "$pid" ]] || { echo "no broker pid recorded in $broker_dir" >&2; return 1; }
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "broker pid $pid still alive 10 s after kill -9" >&2
  return 1
}

broker_stop() {
  case $broker in
    keel) "$txn_root/compat/keel.sh" stop "$broker_dir" ;;
    kafka) "$txn_root/compat/kafka/kafka.sh" stop "$broker_dir" >/dev/null ;;
    external) return 0 ;;
  esac
}

# A Keel that panicked fails the run whatever the counts say.
broker_panicked() {
  [[ $broker == keel ]] && grep -q "panicked" "$broker_dir/keel.log" 2>/dev/null
}

# Broker choice shared by both scripts: a fresh Keel (default), a fresh Apache Kafka
# (--kafka), or an already running broker (--bootstrap HOST:PORT, nothing started).
broker_describe() {
  case $broker in
    keel) echo "fresh Keel (${KEEL_BIN:-target/release/keel} --smp 2) on 127.0.0.1:$broker_port" ;;
    kafka) echo "fresh Apache Kafka $(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$txn_root/compat/kafka/pom.xml") on 127.0.0.1:$broker_port" ;;
    external) echo "running broker at $bootstrap" ;;
  esac
}
