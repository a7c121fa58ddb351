#!/usr/bin/env bash
# Starts and stops a Keel broker for the test and benchmark harnesses.
#   compat/keel.sh start <data-dir> <port> [extra `keel serve` flags...]
#   compat/keel.sh stop <data-dir>
# The binary is target/release/keel unless KEEL_BIN is set. The admin API listens on
# port+100. `start` returns when the Kafka port accepts connections.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bin="${KEEL_BIN:-$root/target/release/keel}"
# shellcheck source=node-env.sh
. "$here/node-env.sh"

wait_port() {
  local port=$1 deadline=$((SECONDS + ${2:-60}))
  while ((SECONDS < deadline)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  return 1
}

# Ready means the admin API answers and the Kafka port accepts: right after a crash the
# kernel may still accept connections on a dead process's listeners for a moment.
wait_ready() {
  local port=$1 admin=$2 deadline=$((SECONDS + ${3:-60}))
  while ((SECONDS < deadline)); do
    if curl -sf --max-time 1 "http://127.0.0.1:$admin/v1/health" >/dev/null 2>&1 && wait_port "$port" 1; then return 0; fi
    sleep 0.2
  done
  return 1
}

cmd=${1:-}
case "$cmd" in
  start)
    dir=$(realpath -m "$2"); port=$3; shift 3
    mkdir -p "$dir"
    [[ -x "$bin" ]] || { echo "keel.sh: $bin not built (cargo build --release -p keel-broker)" >&2; exit 1; }
    if [[ -f "$dir/keel.pid" ]] && kill -0 "$(cat "$dir/keel.pid")" 2>/dev/null; then
      echo "keel.sh: already running (pid $(cat "$dir/keel.pid"))"; exit 0
    fi
    # A `faketime` file in the directory runs the broker with its wall clock off, as on
    # a host whose clock is wrong (compat/ledger/run.sh --skew); a `power-loss` file has
    # it note its fsyncs for the fault harness's power cuts (compat/node-env.sh).
    node_env "$dir" || exit 1
    nohup env ${envs[@]+"${envs[@]}"} "$bin" serve --data-dir "$dir/data" --kafka-addr "127.0.0.1:$port" \
      --admin-addr "127.0.0.1:$((port + 100))" "$@" >>"$dir/keel.log" 2>&1 &
    echo $! >"$dir/keel.pid"
    if ! wait_ready "$port" "$((port + 100))" 60 || ! kill -0 "$(cat "$dir/keel.pid")" 2>/dev/null; then
      echo "keel.sh: broker did not start; log tail:" >&2; tail -n 30 "$dir/keel.log" >&2; exit 1
    fi
    echo "keel.sh: ready on 127.0.0.1:$port (pid $(cat "$dir/keel.pid"))"
    ;;
  stop)
    dir=$(realpath -m "$2")
    [[ -f "$dir/keel.pid" ]] || exit 0
    pid=$(cat "$dir/keel.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/keel.pid"
    ;;
  *) echo "usage: $0 start <data-dir> <port> [keel serve flags] | stop <data-dir>" >&2; exit 2 ;;
esac
