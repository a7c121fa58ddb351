#!/usr/bin/env bash
# A 3-node Keel cluster in network namespaces, for the harnesses that cut or degrade
# its network (partition.sh, offsets.sh --netns, soak.sh --netns). Sourced; the caller
# sets `netns` (the path of netns.sh) and `skip` (prints a SKIP line and exits 77).
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
#                            node lists 3 brokers and a controller, and sets `brokers`.
#                            With KEEL_NETNS_LOOP_MIB set, each node's data directory is
#                            first put on its own loop file system of that many MiB
#                            (netns_loop_up), or the caller skips when that cannot be done
#   netns_cluster_stop DIR   SIGTERM to every node at once, SIGKILL after 10 s; then
#                            unmounts the loop file systems, if any (netns_loop_down)
#   netns_loop_require       checks losetup, mkfs.ext4 and mount (e2fsprogs installed with
#                            apt-get when missing) and that a loop file system can be
#                            made and mounted here; prints why not and fails otherwise
#   netns_loop_up DIR MIB    gives each node's data directory its own ext4 file system
#                            of MIB MiB on a loop device: the image DIR/loop/node-i.ext4
#                            mounted at DIR/node-i/disk (made with no blocks reserved
#                            for root), the data directory DIR/node-i/data a symlink to
#                            disk/data (netns_cluster_start calls it)
#   netns_loop_down DIR      unmounts and detaches what netns_loop_up made (the nodes must
#                            be stopped); safe to call when it made nothing. The images
#                            stay, for `mount -o loop` when the run is kept
#
# Run as a command, it is the namespace cluster's counterpart of compat/cluster.sh's
# node verbs, for the ledger's -cluster-sh (soak.sh --netns):
#
#   compat/faults/netns-cluster.sh kill|pause|resume|restart NODE DIR
#
# `restart` starts the node again with the flags `netns_cluster_start` recorded in
# DIR/netns.conf, under libfaketime when DIR/node-NODE/faketime holds a wall-clock
# offset and noting its fsyncs when DIR/node-NODE/power-loss exists (as compat/keel.sh
# does), and returns once its admin API answers.
#
# The namespaces must be up (`netns_up`).

# shellcheck source=../node-env.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/node-env.sh"

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
  if [[ -n "${KEEL_NETNS_LOOP_MIB:-}" ]]; then
    local why
    why=$(netns_loop_require) || skip "data directories on loop file systems (KEEL_NETNS_LOOP_MIB): $why"
    netns_loop_up "$dir" "$KEEL_NETNS_LOOP_MIB" || return 2
  fi
  for i in 1 2 3; do peers+="${peers:+,}$i@$("$netns" addr "$i"):$((port + 200))"; done
  { echo "$port $bin $peers"; (($#)) && printf '%s\n' "$@"; } >"$dir/netns.conf"
  for i in 1 2 3; do
    brokers+="${brokers:+,}$("$netns" addr "$i"):$port"
    netns_node_start "$dir" "$i"
  done
  # Ready: every node's admin API (reached over the bridge) lists 3 brokers and a controller.
  local deadline=$((SECONDS + 60)) j
  for i in 1 2 3; do
    if ! netns_node_ready "$dir" "$i" "$deadline" '"brokers":3'; then
      echo "netns-cluster.sh: the cluster did not form; log tails:" >&2
      for j in 1 2 3; do echo "--- node $j" >&2; tail -n 20 "$dir/node-$j/keel.log" >&2; done
      return 2
    fi
  done
  echo "netns-cluster.sh: 3 nodes ready in namespaces keel-n1..3; bootstrap $brokers" >&2
}

# netns_node_start DIR I: starts node I with the flags in DIR/netns.conf.
netns_node_start() {
  local dir=$1 i=$2 port bin peers a extra=() envs
  { read -r port bin peers; mapfile -t extra; } <"$dir/netns.conf"
  a=$("$netns" addr "$i")
  mkdir -p "$dir/node-$i"
  node_env "$dir/node-$i" || return 1
  # `ip netns exec` and env exec keel, so $! is the broker's own pid.
  nice -n 10 ip netns exec "keel-n$i" env ${envs[@]+"${envs[@]}"} "$bin" serve --data-dir "$dir/node-$i/data" \
    --kafka-addr "$a:$port" --admin-addr "$a:$((port + 100))" --node-id "$i" \
    --rpc-addr "$a:$((port + 200))" --peers "$peers" --smp 1 ${extra[@]+"${extra[@]}"} >>"$dir/node-$i/keel.log" 2>&1 &
  echo $! >"$dir/node-$i/keel.pid"
  # Killing nodes is the harness's business: no "Killed" job report from this shell.
  disown $!
}

# netns_node_ready DIR I DEADLINE [PATTERN]: waits (until SECONDS reaches DEADLINE) for
# node I's admin API to answer: /v1/cluster listing PATTERN and a controller, or
# without PATTERN /v1/health (a restarted node of a cluster that is still down has no
# controller yet). Fails if the node died.
netns_node_ready() {
  local dir=$1 i=$2 deadline=$3 pattern=${4:-} a port
  a=$("$netns" addr "$i")
  read -r port _ <"$dir/netns.conf"
  local url="http://$a:$((port + 100))/v1/cluster" out
  [[ -n "$pattern" ]] || url="http://$a:$((port + 100))/v1/health"
  while :; do
    out=$(curl -sf --max-time 2 "$url" 2>/dev/null) &&
      [[ -z "$pattern" || "$out" == *"$pattern"*'"controller":'[1-9]* ]] && return 0
    if ((SECONDS > deadline)) || ! kill -0 "$(cat "$dir/node-$i/keel.pid" 2>/dev/null)" 2>/dev/null; then
      return 2
    fi
    sleep 0.3
  done
}

netns_cluster_stop() {
  local dir=$1 i pids=()
  for i in 1 2 3; do
    [[ -f "$dir/node-$i/keel.pid" ]] && pids+=("$(cat "$dir/node-$i/keel.pid")")
    rm -f "$dir/node-$i/keel.pid"
  done
  if ((${#pids[@]})); then netns_nodes_stop "${pids[@]}"; fi
  netns_loop_down "$dir"
}

# netns_nodes_stop PID...: SIGTERM, then SIGKILL after 10 s; returns once they are gone
# (or 5 s after the SIGKILL).
netns_nodes_stop() {
  kill -CONT "$@" 2>/dev/null || true
  kill -TERM "$@" 2>/dev/null || true
  # A node that stops hands its leaderships over first (up to 5 s), then flushes.
  netns_pids_gone 100 "$@" && return 0
  kill -KILL "$@" 2>/dev/null || true
  netns_pids_gone 50 "$@" || true
}

# netns_pids_gone TRIES PID...: waits until none of the processes is left, checking
# every 0.1 s at most TRIES times; fails if some still are.
netns_pids_gone() {
  local tries=$1 pid alive
  shift
  for _ in $(seq 1 "$tries"); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  return 1
}

netns_loop_require() {
  local missing=() tool probe dev="" ok=0
  for tool in losetup mkfs.ext4 mount umount; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  if ((${#missing[@]})) && command -v apt-get >/dev/null; then
    echo "netns-cluster.sh: installing e2fsprogs and mount with apt-get (missing: ${missing[*]})" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q e2fsprogs mount >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q e2fsprogs mount >&2; } || true
  fi
  for tool in losetup mkfs.ext4 mount umount; do
    command -v "$tool" >/dev/null || { echo "'$tool' not found (e2fsprogs, mount)"; return 1; }
  done
  ((EUID == 0)) || { echo "needs root to mount a loop file system"; return 1; }
  probe=$(mktemp -d "${TMPDIR:-/tmp}/keel-loop-probe.XXXXXX")
  if truncate -s 16M "$probe/img" && mkfs.ext4 -q -F "$probe/img" >/dev/null 2>&1 &&
    dev=$(losetup -f --show "$probe/img" 2>/dev/null) && mkdir "$probe/mnt" && mount "$dev" "$probe/mnt" 2>/dev/null; then
    ok=1
    umount "$probe/mnt"
  fi
  [[ -n "$dev" ]] && losetup -d "$dev" 2>/dev/null
  rm -rf "$probe"
  ((ok)) || { echo "no loop file system could be made and mounted here (losetup -f, or mount of ext4, refused)"; return 1; }
}

netns_loop_up() {
  local dir=$1 mib=$2 i img dev
  mkdir -p "$dir/loop"
  for i in 1 2 3; do
    img="$dir/loop/node-$i.ext4"
    mkdir -p "$dir/node-$i/disk"
    truncate -s "${mib}M" "$img"
    mkfs.ext4 -q -F -m 0 "$img" >/dev/null || { echo "netns-cluster.sh: mkfs.ext4 $img failed" >&2; return 2; }
    dev=$(losetup -f --show "$img") || { echo "netns-cluster.sh: no free loop device for $img" >&2; return 2; }
    echo "$dev" >"$dir/loop/node-$i.dev"
    mount "$dev" "$dir/node-$i/disk" || { echo "netns-cluster.sh: mount $dev failed" >&2; return 2; }
    echo "$dir/node-$i/disk" >"$dir/loop/node-$i.mount"
    mkdir -p "$dir/node-$i/disk/data"
    ln -sfn disk/data "$dir/node-$i/data"
  done
  echo "netns-cluster.sh: each node's data directory on its own ${mib} MiB ext4 loop file system" >&2
}

netns_loop_down() {
  local dir=$1 i
  [[ -d "$dir/loop" ]] || return 0
  for i in 1 2 3; do
    if [[ -f "$dir/loop/node-$i.mount" ]]; then
      umount "$(cat "$dir/loop/node-$i.mount")" 2>/dev/null || umount -l "$(cat "$dir/loop/node-$i.mount")" 2>/dev/null ||
        echo "netns-cluster.sh: could not unmount $(cat "$dir/loop/node-$i.mount")" >&2
      rm -f "$dir/loop/node-$i.mount"
    fi
    if [[ -f "$dir/loop/node-$i.dev" ]]; then
      losetup -d "$(cat "$dir/loop/node-$i.dev")" 2>/dev/null || true
      rm -f "$dir/loop/node-$i.dev"
    fi
  done
}

# As a command: the node verbs of compat/cluster.sh for a namespace cluster.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  netns="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/netns.sh"
  verb=${1:-} node=${2:-} dir=${3:-}
  [[ "$node" =~ ^[1-3]$ && -f "$dir/netns.conf" ]] ||
    { echo "usage: $0 kill|pause|resume|restart NODE(1-3) DIR (a directory netns_cluster_start used)" >&2; exit 2; }
  pidfile="$dir/node-$node/keel.pid"
  case "$verb" in
    kill) kill -KILL "$(cat "$pidfile")"; rm -f "$pidfile" ;;
    pause) kill -STOP "$(cat "$pidfile")" ;;
    resume) kill -CONT "$(cat "$pidfile")" ;;
    restart)
      netns_node_start "$dir" "$node"
      netns_node_ready "$dir" "$node" $((SECONDS + 60)) ||
        { echo "netns-cluster.sh: node $node did not come back; log tail:" >&2; tail -n 30 "$dir/node-$node/keel.log" >&2; exit 1; }
      ;;
    *) echo "usage: $0 kill|pause|resume|restart NODE DIR" >&2; exit 2 ;;
  esac
fi
