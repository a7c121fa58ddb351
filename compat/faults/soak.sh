#!/usr/bin/env bash
# The long mixed run: one 3-node Keel cluster, one idempotent acks=all ledger producer,
# and back-to-back fault rounds each drawn (seeded) from leader `kill -9`, leader
# SIGSTOP/SIGCONT, `kill -9` of every node at once, a power cut of every node (killed,
# then each file cut back to what its fsyncs made durable and its tail torn) and a
# leader restarted with its wall clock up to 10 minutes off (libfaketime); with --netns
# also the leader cut off from its peers (nft, clients still reach it), the leader and
# one follower cut apart (the third node reaching both), the leader cut off from the
# clients (its peers still reach it), 5-20% random packet loss on every node, bits
# flipped in a stopped follower's segment, or the segment cut short (found by the node,
# and the replica rebuilt from its leader), the leader's wall clock stepped by up to
# 10 minutes while it
# runs, and the leader's disk filled for 4 s (every node's data directory on a
# loop-mounted ext4 file system of its own).
# Beside the ledger, the queue workload: three transactional workers sending and
# polling, their history checked at the end by keel-queue-check (Jepsen's queue checks
# and adya). At the end every partition is read back and checked (nothing acknowledged lost,
# duplicated or reordered), every replica's segment files must hold the same batches,
# and every round must see an acknowledgement within 10 s of its end. Prints each
# round, a summary per fault class and the ledger's verdict.
#
#   compat/faults/soak.sh [--minutes 30] [--rate 500] [--seed S] [--netns [--no-loop]] [--keep] [-- ledger flags]
#
# Rounds start until MINUTES have passed (the ledger's -duration); a round takes 6-12 s
# (settle, fault, 3 s down or 4 s held, restart or heal, 2 s settle). Without --netns
# the nodes run on loopback (compat/ledger/run.sh --skew); with it, each in its own
# network namespace (compat/faults/netns-cluster.sh: root, ip netns and nft), and the
# clients in a fourth (`netns.sh clients`). Ports
# SOAK_PORT..+2 (default 28092; admin +100, node-to-node +200; the namespace nodes all
# use SOAK_PORT on their own addresses). With --netns each node's data directory is an
# ext4 file system of its own, SOAK_LOOP_MIB MiB (default 1024) on a loop device (sparse
# images in the run's directory, unmounted and detached on exit), which the disk-full
# rounds fill. Where that cannot be done (no loop device, not permitted), or with
# --no-loop, the run goes on without disk-full rounds and says so at its start and in
# its last line (`soak: WITHOUT disk-full rounds: ...`). Ledger flags after `--` come
# last (`-- -fault bitflip` runs one class). Exit status: the ledger's (0 clean, 1 a
# violation, 2 could not finish, 77 skipped without libfaketime or namespaces).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
minutes=30
rate=500
seed=$(date +%s)
keep=0
use_netns=0
use_loop=1
extra=()
while (($#)); do
  case "$1" in
    --minutes) minutes=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --netns) use_netns=1; shift ;;
    --keep) keep=1; shift ;;
    --no-loop) use_loop=0; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--minutes 30] [--rate 500] [--seed S] [--netns [--no-loop]] [--keep] [-- ledger flags]" >&2; exit 2 ;;
  esac
done
((minutes > 0)) || { echo "soak.sh: --minutes must be at least 1" >&2; exit 2; }
port=${SOAK_PORT:-28092}
# run.sh's time limit grows with --kills (45 s each): give it one per 5 s of the run.
rounds=$((minutes * 60 / 5))
echo "soak.sh: mixed rounds for $minutes min, seed $seed, $rate records/s$( ((use_netns)) && echo ", network namespaces")" >&2
# Beside the ledger, the queue workload (Jepsen's Kafka queue test, three transactional
# workers; compat/ledger/README.md), its history checked by keel-queue-check at the end.
mixed=(-fault mixed -mixed-skew -mixed-power -seed "$seed" -duration "${minutes}m" -queue 3)
if ((!use_netns)); then
  keep_flag=(); ((keep)) && keep_flag=(--keep)
  LEDGER_BASE_PORT=$port exec "$here/../ledger/run.sh" --skew --power --kills "$rounds" --rate "$rate" \
    ${keep_flag[@]+"${keep_flag[@]}"} -- "${mixed[@]}" ${extra[@]+"${extra[@]}"}
fi

netns="$here/netns.sh"
skip() { echo "SKIP: mixed soak in namespaces: $*" >&2; echo "soak: SKIP $*"; exit 77; }
# shellcheck source=netns-cluster.sh
. "$here/netns-cluster.sh"
netns_require
# Bit flips and clock steps need only the nodes' files and libfaketime; a full disk
# needs each node's data directory on a file system of its own.
classes=(-mixed-net -mixed-bitflip -mixed-step)
without=""
if ((!use_loop)); then
  without="--no-loop"
elif why=$(netns_loop_require); then
  export KEEL_NETNS_LOOP_MIB=${SOAK_LOOP_MIB:-1024}
  classes+=(-mixed-disk)
else
  without=$why
fi
if [[ -n "$without" ]]; then
  echo "soak.sh: WARNING: data directories NOT on loop file systems ($without): disk-full rounds are NOT drawn" >&2
fi
# shellcheck source=../node-env.sh
. "$root/compat/node-env.sh"
[[ -n "$(faketime_lib)" ]] || skip "libfaketime is missing and apt-get could not install it"
bin="${KEEL_BIN:-$root/target/release/keel}"
[[ -x "$bin" ]] || (cd "$root" && nice -n 10 cargo build --release -p keel-broker)
ledger="$root/compat/go/.bin/ledger"
(cd "$root/compat/go" && nice -n 10 go build -o "$ledger" ./cmd/ledger)
(cd "$root" && nice -n 10 cargo build --release -q -p keel-queue-check)
mixed+=(-queue-check "$root/target/release/keel-queue-check")

dir=$(mktemp -d "${TMPDIR:-/tmp}/keel-soak.XXXXXX")
rc=2
made_net=0
cleanup() {
  netns_cluster_stop "$dir"
  ((made_net)) && "$netns" down 3
  if ((rc == 0 && keep == 0)); then rm -rf "$dir"; else echo "soak.sh: node logs in $dir/node-*/keel.log, client log in $dir/client.log" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_up
# Every node under libfaketime from the start, noting its fsyncs for the power cuts
# (netns_node_start reads node-i/faketime and node-i/power-loss).
for i in 1 2 3; do mkdir -p "$dir/node-$i" && echo "+0" >"$dir/node-$i/faketime" && : >"$dir/node-$i/power-loss"; done
# The end's replica comparison reads segment files, which the journal completes at each
# checkpoint: every 250 ms keeps them within a quarter second of the log.
printf 'journal_checkpoint_interval_ms: 250\njournal_file_bytes: 16777216\n' >"$dir/keel.yaml"
netns_cluster_start "$dir" "$port" "$bin" --config "$dir/keel.yaml" || exit 2
set +e
# The clients (the ledger's producer and probes, the queue's workers) run in a namespace
# of their own, keel-cl, reaching the nodes over the bridge as remote clients would.
"$netns" clients nice -n 10 timeout --kill-after=10 $((180 + rounds * 45)) "$ledger" -cluster-dir "$dir" \
  -cluster-sh "$here/netns-cluster.sh" -fault-sh "$netns" -brokers "$brokers" -kills "$rounds" -rate "$rate" \
  -client-log "$dir/client.log" "${mixed[@]}" "${classes[@]}" ${extra[@]+"${extra[@]}"}
rc=$?
set -e
if ((rc == 124 || rc == 137)); then echo "soak.sh: the ledger did not finish in time" >&2; rc=2; fi
for i in 1 2 3; do
  if grep -q panicked "$dir/node-$i/keel.log"; then
    echo "soak.sh: node $i panicked:" >&2; grep -A5 panicked "$dir/node-$i/keel.log" | head -20 >&2
    ((rc == 0)) && rc=1
  fi
done
if [[ -n "$without" ]]; then echo "soak: WITHOUT disk-full rounds: data directories not on loop file systems ($without)"; fi
exit "$rc"
