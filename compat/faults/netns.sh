#!/usr/bin/env bash
# Network namespaces and nftables faults for Keel's fault harnesses: one namespace per
# node on a private bridge, and node-to-node partitions cut with nft rules inside the
# nodes' namespaces. Needs root, iproute2 (`ip netns`) and nftables (`nft`).
#
#   compat/faults/netns.sh check               exit 0 if namespaces and nft work here, 77 if not
#   compat/faults/netns.sh up <n>              bridge keel-br0 (SUBNET.1/24) and namespaces
#                                              keel-n1..n, node i at SUBNET.(10+i), and the
#                                              clients' namespace keel-cl at SUBNET.2
#   compat/faults/netns.sh down [<n>]          remove the rules, namespaces, veths and bridge
#   compat/faults/netns.sh addr <i>            node i's address
#   compat/faults/netns.sh isolate <i> <n>     drop all traffic between node i and every
#                                              other node; the clients (keel-cl and the
#                                              bridge address) still reach it
#   compat/faults/netns.sh sever <i> <j>       drop all traffic between nodes i and j (rules in
#                                              both namespaces); with 3 nodes the third is
#                                              then a bridge between two halves
#   compat/faults/netns.sh cut-clients <i>     drop all traffic between node i and the clients
#                                              (keel-cl and the bridge address); its peers
#                                              still reach it
#   compat/faults/netns.sh drop <i> <pct>      drop pct% (1..99) of node i's packets at random,
#                                              in and out, whoever the peer (nodes and clients)
#   compat/faults/netns.sh heal <i>            remove node i's fault rules
#   compat/faults/netns.sh exec <i> cmd...     run a command in node i's namespace
#   compat/faults/netns.sh clients cmd...      run a command in the clients' namespace
#
# `up` exits 3, having made nothing, when a name or the subnet is taken.
# SUBNET is KEEL_NETNS_SUBNET (default 10.77.0, a /24). Everything this script makes is
# named keel-br0, keel-n<i>, keel-h<i> (host end of node i's veth), keel-cl and keel-hc
# (the clients' namespace and the host end of its veth) and, inside a node's
# namespace, the nft table `inet keel_fault`; `up` refuses to start when any of them
# already exists (another run, or a crashed one: `down` clears it), and `down` and
# `heal` touch nothing else. Rules are only ever added inside keel-n<i> namespaces and
# only name addresses of SUBNET.
set -euo pipefail
subnet=${KEEL_NETNS_SUBNET:-10.77.0}
bridge=keel-br0
clients=keel-cl
table="inet keel_fault"

die() { echo "netns.sh: $*" >&2; exit 2; }
refuse() { echo "netns.sh: $*" >&2; exit 3; } # nothing was made
ns() { echo "keel-n$1"; }
addr() { echo "$subnet.$((10 + $1))"; }
node_index() { [[ "$1" =~ ^[1-9]$ ]] || die "node index must be 1..9, got '$1'"; }

check() {
  local missing=()
  ((EUID == 0)) || missing+=("root")
  command -v ip >/dev/null || missing+=("ip (iproute2)")
  command -v nft >/dev/null || missing+=("nft (nftables)")
  if ((${#missing[@]})); then echo "netns.sh: missing: ${missing[*]}" >&2; return 77; fi
  local probe="keel-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then echo "netns.sh: 'ip netns add' is not permitted here" >&2; return 77; fi
  local ok=0
  ip netns exec "$probe" nft add table inet keel_probe 2>/dev/null && ok=1
  ip netns del "$probe" 2>/dev/null || true
  if ((!ok)); then echo "netns.sh: nft cannot add a table inside a network namespace" >&2; return 77; fi
  return 0
}

up() {
  local n=$1
  ip link show "$bridge" >/dev/null 2>&1 && refuse "$bridge already exists (another run, or run '$0 down')"
  for i in $(seq 1 "$n"); do
    ip netns list | grep -qw "$(ns "$i")" && refuse "namespace $(ns "$i") already exists (run '$0 down')"
    ip link show "keel-h$i" >/dev/null 2>&1 && refuse "keel-h$i already exists (run '$0 down')"
  done
  ip netns list | grep -qw "$clients" && refuse "namespace $clients already exists (run '$0 down')"
  ip link show keel-hc >/dev/null 2>&1 && refuse "keel-hc already exists (run '$0 down')"
  if ip route show | grep -q "^$subnet\.0/24"; then refuse "$subnet.0/24 is already routed here; set KEEL_NETNS_SUBNET"; fi
  ip link add "$bridge" type bridge
  ip addr add "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq 1 "$n"); do attach "$(ns "$i")" "keel-h$i" "keel-c$i" "$(addr "$i")"; done
  attach "$clients" keel-hc keel-cc "$subnet.2"
}

# attach NAMESPACE HOST_END PEER ADDRESS: a new namespace on the bridge through a veth
# pair, its end named eth0 with ADDRESS/24.
attach() {
  local name=$1 host=$2 peer=$3 address=$4
  ip netns add "$name"
  ip link add "$host" type veth peer name "$peer"
  ip link set "$peer" netns "$name"
  ip link set "$host" master "$bridge" up
  ip -n "$name" link set lo up
  ip -n "$name" link set "$peer" name eth0
  ip -n "$name" addr add "$address/24" dev eth0
  ip -n "$name" link set eth0 up
}

down() {
  local n=${1:-9}
  for i in $(seq 1 "$n"); do
    if ip netns list | grep -qw "$(ns "$i")"; then
      ip netns exec "$(ns "$i")" nft delete table $table 2>/dev/null || true
      ip netns del "$(ns "$i")" 2>/dev/null || true
    fi
    ip link del "keel-h$i" 2>/dev/null || true
  done
  ip netns del "$clients" 2>/dev/null || true
  ip link del keel-hc 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
}

isolate() {
  local i=$1 n=$2 others=()
  for j in $(seq 1 "$n"); do ((j == i)) || others+=("$(addr "$j")"); done
  cut "$i" "$(IFS=,; echo "${others[*]}")"
}

# cut NODE SET: drops every packet between node NODE and the addresses in SET, both
# directions in one atomic nft transaction.
cut() {
  local i=$1 set=$2
  ip netns exec "$(ns "$i")" nft -f - <<EOF
table $table {
  chain input { type filter hook input priority 0; policy accept; ip saddr { $set } drop; }
  chain output { type filter hook output priority 0; policy accept; ip daddr { $set } drop; }
}
EOF
}

# Random loss on every packet of the node's eth0, each packet drawn on its own (nft's
# numgen), so retransmissions, not a clean cut, are what the cluster meets.
drop() {
  local i=$1 pct=$2
  ip netns exec "$(ns "$i")" nft -f - <<EOF
table $table {
  chain input { type filter hook input priority 0; policy accept; iifname "eth0" numgen random mod 100 < $pct drop; }
  chain output { type filter hook output priority 0; policy accept; oifname "eth0" numgen random mod 100 < $pct drop; }
}
EOF
}

heal() {
  ip netns exec "$(ns "$1")" nft delete table $table
}

cmd=${1:-}
case "$cmd" in
  check) check ;;
  up) [[ "${2:-}" =~ ^[1-9]$ ]] || die "usage: $0 up <n>"; up "$2" ;;
  down) down "${2:-9}" ;;
  addr) node_index "${2:-}"; addr "$2" ;;
  isolate) node_index "${2:-}"; node_index "${3:-}"; isolate "$2" "$3" ;;
  sever) node_index "${2:-}"; node_index "${3:-}"; [[ "$2" != "$3" ]] || die "sever needs two different nodes"
    cut "$2" "$(addr "$3")"; cut "$3" "$(addr "$2")" ;;
  cut-clients) node_index "${2:-}"; cut "$2" "$subnet.1, $subnet.2" ;;
  drop) node_index "${2:-}"; [[ "${3:-}" =~ ^[1-9][0-9]?$ ]] || die "drop percentage must be 1..99, got '${3:-}'"; drop "$2" "$3" ;;
  heal) node_index "${2:-}"; heal "$2" ;;
  exec) node_index "${2:-}"; i=$2; shift 2; exec ip netns exec "$(ns "$i")" "$@" ;;
  clients) shift; exec ip netns exec "$clients" "$@" ;;
  *) echo "usage: $0 check | up <n> | down [<n>] | addr <i> | isolate <i> <n> | sever <i> <j> | cut-clients <i> | drop <i> <pct> | heal <i> | exec <i> cmd... | clients cmd..." >&2; exit 2 ;;
esac
