# Shared by benches/keyed.sh and benches/partition-sweep.sh (sourced): one broker at a
# time on a fresh data directory, on ports below the ephemeral range (32768-60999 here),
# so no client socket can hold them.
#
#   start_broker kafka|keel DIR LOG   sets $port, $pid and $metrics (Keel's /metrics URL,
#                                     empty for Kafka); returns 1 if the broker did not start
#   stop_broker kafka|keel DIR        stops it, deletes DIR and lets the disk settle
#
# Kafka 4.4.0 runs with a 4 GiB heap (as in benches/run.sh) and its default durability
# (no fsync); Keel with --smp 2 (KEEL_SMP), acknowledging after an fdatasync.

start_broker() {
  local broker=$1 dir=$2 log=$3
  rm -rf "$dir"; mkdir -p "$dir"
  metrics=""
  if [[ $broker == kafka ]]; then
    port=31092
    KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms4g -Xmx4g}" compat/kafka/kafka.sh start "$dir" "$port" >"$log" 2>&1 || return 1
    pid=$(cat "$dir/kafka.pid")
  else
    port=31192
    compat/keel.sh start "$dir" "$port" --smp "${KEEL_SMP:-2}" >"$log" 2>&1 || return 1
    pid=$(cat "$dir/keel.pid")
    metrics="http://127.0.0.1:$((port + 100))/metrics"
  fi
}

stop_broker() {
  local broker=$1 dir=$2
  if [[ $broker == kafka ]]; then compat/kafka/kafka.sh stop "$dir" >/dev/null 2>&1; else compat/keel.sh stop "$dir"; fi
  rm -rf "$dir"
  # Keel acknowledges after an fdatasync, so the previous broker's leftover disk work
  # (seen for 10-15 s after Kafka stops and its data is deleted) would be charged to it.
  sync; sleep 15
}
