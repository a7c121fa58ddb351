#!/usr/bin/env bash
# Linearizability of committed group offsets under coordinator faults: a 3-node Keel
# cluster on loopback, clients committing and fetching one group's offsets while its
# coordinator is killed and paused in turn, and porcupine checking the history (see
# compat/go/cmd/offsets).
#
#   compat/faults/offsets.sh [--seconds 60] [--netns] [--keep] [-- extra flags of cmd/offsets]
#
# Ports OFFSETS_PORT..+2 (default 29392; admin +100, node-to-node +200). With --netns
# the nodes run in network namespaces (compat/faults/netns-cluster.sh; root, ip netns
# and nft, else SKIP and exit 77) and the coordinator is killed, cut off from the other
# two (clients still reach it) and paused in turn. Exit status: 0 linearizable, 1 not (the
# history is drawn in the run directory's offsets-history.html), 2 the run could not
# finish, 77 skipped.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base=${OFFSETS_PORT:-29392}
seconds=60
keep=0
use_netns=0
extra=()
while (($#)); do
  case "$1" in
    --seconds) seconds=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --netns) use_netns=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--seconds 60] [--netns] [--keep] [-- extra flags]" >&2; exit 2 ;;
  esac
done
netns="$here/netns.sh"
skip() { echo "SKIP: offsets under network partitions: $*" >&2; echo "offsets: SKIP $*"; exit 77; }
if ((use_netns)); then
  # shellcheck source=netns-cluster.sh
  . "$here/netns-cluster.sh"
  netns_require
fi
bin="${KEEL_BIN:-$root/target/release/keel}"
[[ -x "$bin" ]] || (cd "$root" && nice -n 10 cargo build --release -p keel-broker)
checker="$root/compat/go/.bin/offsets"
(cd "$root/compat/go" && nice -n 10 go build -o "$checker" ./cmd/offsets)

dir=$(mktemp -d "${TMPDIR:-/tmp}/keel-offsets.XXXXXX")
rc=2
made_net=0
cleanup() {
  if ((use_netns)); then
    netns_cluster_stop "$dir"
    ((made_net)) && "$netns" down 3
  else
    "$root/compat/cluster.sh" stop "$dir" >/dev/null 2>&1 || true
  fi
  if ((rc == 0 && keep == 0)); then rm -rf "$dir"; else echo "offsets.sh: node logs and history in $dir" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cluster_sh="$root/compat/cluster.sh" fault_flags=() in_clients=()
if ((use_netns)); then
  netns_up
  netns_cluster_start "$dir" "$base" "$bin" || exit 2
  cluster_sh="$here/netns-cluster.sh" fault_flags=(-fault-sh "$netns" -faults kill,partition,pause)
  # The checker (the clients) runs in the clients' namespace, keel-cl.
  in_clients=("$netns" clients)
else
  # `--smp 1` so that `cluster.sh restart` has a flag to replay.
  nice -n 10 "$root/compat/cluster.sh" start 3 "$dir" "$base" --smp 1 >&2
  brokers="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
fi
set +e
(cd "$dir" && ${in_clients[@]+"${in_clients[@]}"} timeout --kill-after=10 $((seconds + 240)) "$checker" -brokers "$brokers" -cluster-dir "$dir" \
  -cluster-sh "$cluster_sh" -duration "${seconds}s" "${fault_flags[@]}" "${extra[@]}")
rc=$?
set -e
((rc == 124 || rc == 137)) && rc=2
exit "$rc"
