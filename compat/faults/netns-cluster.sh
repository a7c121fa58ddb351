# A 3-node Keel cluster in network namespaces, for the harnesses that cut or degrade
# its network (partition.sh, offsets.sh --netns). Sourced; the caller sets `netns` (the
# path of netns.sh) and `skip` (prints a SKIP line and exits 77).
#
#   netns_require            checks root, iproute2, nftables (installed with apt-get
#                            when missing) and that namespaces work here, or skips
#   netns_up                 `netns.sh up 3`; sets `made_net` to 1 when it made the
#                            namespaces (so the caller's cleanup takes them down), and
#                            exits 2 when it could not
#   netns_cluster_start DIR PORT BIN [serve flags...]
#                            node i in namespace keel-n<i> at `netns.sh addr i`, Kafka on
#                            PORT, admin +100, node-to-node +200, data and keel.log in
#                            DIR/node-i, its pid in DIR/node-i/keel.pid (so
#                            compat/cluster.sh pause|resume work on it); waits until every
#                            node lists 3 brokers and a controller, and sets `brokers`
#   netns_cluster_stop DIR   SIGTERM to every node, SIGKILL after 5 s
#
# The namespaces must be up (`netns_up`).

netns_require() {
  ((EUID == 0)) || skip "needs root (network namespaces and nftables)"
  command -v ip >/dev/null || skip "'ip' (iproute2) not found"
  if ! command -v nft >/dev/null; then
    if command -v apt-get >/dev/null; then
      echo "netns-cluster.sh: installing nftables with apt-get" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables >&2; } ||
        skip "nftables is missing and apt-get could not install it"
    fi
    command -v nft >/dev/null || skip "'nft' (nftables) not found"
  fi
  local out rc=0
  out=$("$netns" check 2>&1) || rc=$?
  ((rc == 0)) || skip "$out"
}

netns_up() {
  local rc=0
  made_net=1
  "$netns" up 3 >&2 || rc=$?
  if ((rc != 0)); then
    ((rc == 3)) && made_net=0 # names taken by someone else: leave them alone
    exit 2
  fi
}

netns_cluster_start() {
  local dir=$1 port=$2 bin=$3 peers="" i a
  shift 3
  brokers=""
  for i in 1 2 3; do peers+="${peers:+,}$i@$("$netns" addr "$i"):$((port + 200))"; done
  for i in 1 2 3; do
    a=$("$netns" addr "$i")
    brokers+="${brokers:+,}$a:$port"
    mkdir -p "$dir/node-$i"
    # `ip netns exec` execs keel, so $! is the broker's own pid.
    nice -n 10 ip netns exec "keel-n$i" "$bin" serve --data-dir "$dir/node-$i/data" \
      --kafka-addr "$a:$port" --admin-addr "$a:$((port + 100))" --node-id "$i" \
      --rpc-addr "$a:$((port + 200))" --peers "$peers" --smp 1 "$@" >>"$dir/node-$i/keel.log" 2>&1 &
    echo $! >"$dir/node-$i/keel.pid"
  done
  # Ready: every node's admin API (reached over the bridge) lists 3 brokers and a controller.
  local deadline=$((SECONDS + 60)) j
  for i in 1 2 3; do
    a=$("$netns" addr "$i")
    until [[ "$(curl -sf --max-time 2 "http://$a:$((port + 100))/v1/cluster" 2>/dev/null || true)" == *'"brokers":3'*'"controller":'[1-9]* ]]; do
      if ((SECONDS > deadline)) || ! kill -0 "$(cat "$dir/node-$i/keel.pid")" 2>/dev/null; then
        echo "netns-cluster.sh: the cluster did not form; log tails:" >&2
        for j in 1 2 3; do echo "--- node $j" >&2; tail -n 20 "$dir/node-$j/keel.log" >&2; done
        return 2
      fi
      sleep 0.3
    done
  done
  echo "netns-cluster.sh: 3 nodes ready in namespaces keel-n1..3; bootstrap $brokers" >&2
}

netns_cluster_stop() {
  local dir=$1 i pid pidfile
  for i in 1 2 3; do
    pidfile="$dir/node-$i/keel.pid"
    [[ -f "$pidfile" ]] || continue
    pid=$(cat "$pidfile")
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}
