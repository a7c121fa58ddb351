#!/usr/bin/env bash
# Starts and stops a Keel cluster on loopback, one `--smp 1` broker per node.
#   compat/cluster.sh start <n> [dir] [base-port] [extra `keel serve` flags...]
#     KEEL_RPC_TLS_DIR=DIR: mutual TLS on the node-to-node port with the certificates
#     compat/security/node-certs.sh made in DIR (node i: keel-node-i.crt/.key, ca.pem)
#   compat/cluster.sh stop [dir]
#   compat/cluster.sh kill <node> [dir]      (kill -9 one node)
#   compat/cluster.sh pause <node> [dir]     (SIGSTOP; resume: SIGCONT)
#   compat/cluster.sh restart <node> [dir]
# Node i (1..n) listens for Kafka on base-port + i - 1 (default base 21092), for its
# admin API on that + 100 and for its peers on that + 200, with data in <dir>/node-i
# (default target/cluster). `start` returns once every node lists all n brokers and a
# controller; it prints the bootstrap list.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bin="${KEEL_BIN:-$root/target/release/keel}"

# Node i's shard runs on core (i-1) mod the cores this script may use, so that nodes
# share the host's cores instead of all taking the first.
cpu_of() {
  local cpus; mapfile -t cpus < <(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
    awk -F- '{hi = ($2 == "") ? $1 : $2; for (c = $1; c <= hi; c++) print c}')
  echo "${cpus[$(( ($1 - 1) % ${#cpus[@]} ))]}"
}

cmd=${1:-}
case "$cmd" in
  start)
    n=${2:?number of nodes}; dir=$(realpath -m "${3:-$root/target/cluster}"); base=${4:-21092}
    shift $(( $# < 4 ? $# : 4 ))
    peers=""
    for i in $(seq 1 "$n"); do peers+="${peers:+,}$i@127.0.0.1:$((base + i - 1 + 200))"; done
    echo "$n $base $peers" >"$(mkdir -p "$dir" && echo "$dir")/cluster.conf"
    (( $# )) && printf '%s\n' "$@" >"$dir/extra-flags" || : >"$dir/extra-flags"
    for i in $(seq 1 "$n"); do
      port=$((base + i - 1)) tls=()
      if [[ -n ${KEEL_RPC_TLS_DIR:-} ]]; then
        tls=(--rpc-tls-cert "$KEEL_RPC_TLS_DIR/keel-node-$i.crt" --rpc-tls-key "$KEEL_RPC_TLS_DIR/keel-node-$i.key"
          --rpc-tls-ca "$KEEL_RPC_TLS_DIR/ca.pem")
      fi
      "$here/keel.sh" start "$dir/node-$i" "$port" --node-id "$i" --rpc-addr "127.0.0.1:$((port + 200))" \
        --peers "$peers" --cpuset "$(cpu_of "$i")" "${tls[@]}" "$@" >/dev/null
    done
    deadline=$((SECONDS + 60))
    bootstrap=$(seq -s, "$base" "$((base + n - 1))" | sed 's/\([0-9]*\)/127.0.0.1:\1/g')
    until [[ "$(curl -sf --max-time 2 "http://127.0.0.1:$((base + 100))/v1/cluster" 2>/dev/null || true)" == *"\"brokers\":$n"*"\"controller\":"[1-9]* ]]; do
      if ((SECONDS > deadline)); then
        echo "cluster.sh: the cluster did not form; log tails:" >&2
        for i in $(seq 1 "$n"); do echo "--- node $i" >&2; tail -n 20 "$dir/node-$i/keel.log" >&2; done
        exit 1
      fi
      sleep 0.3
    done
    echo "cluster.sh: $n nodes ready; bootstrap $bootstrap"
    ;;
  stop)
    dir=$(realpath -m "${2:-$root/target/cluster}")
    for d in "$dir"/node-*; do [[ -d "$d" ]] && "$here/keel.sh" stop "$d"; done
    ;;
  kill)
    node=${2:?node}; dir=$(realpath -m "${3:-$root/target/cluster}")
    pid=$(cat "$dir/node-$node/keel.pid"); kill -KILL "$pid"; rm -f "$dir/node-$node/keel.pid"
    ;;
  pause | resume)
    # SIGSTOP / SIGCONT: a stall (GC pause, VM freeze) rather than a crash.
    node=${2:?node}; dir=$(realpath -m "${3:-$root/target/cluster}")
    kill "-$([[ $cmd == pause ]] && echo STOP || echo CONT)" "$(cat "$dir/node-$node/keel.pid")"
    ;;
  restart)
    node=${2:?node}; dir=$(realpath -m "${3:-$root/target/cluster}")
    read -r n base peers <"$dir/cluster.conf"
    extra=(); mapfile -t extra <"$dir/extra-flags"
    port=$((base + node - 1))
    "$here/keel.sh" start "$dir/node-$node" "$port" --node-id "$node" --rpc-addr "127.0.0.1:$((port + 200))" \
      --peers "$peers" --cpuset "$(cpu_of "$node")" ${extra[@]+"${extra[@]}"}
    ;;
  *) echo "usage: $0 start <n> [dir] [base-port] [flags] | stop [dir] | kill|pause|resume|restart <node> [dir]" >&2; exit 2 ;;
esac
