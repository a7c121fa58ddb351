#!/usr/bin/env bash
# The network-partition proof: a 3-node Keel cluster, one broker per network namespace
# on a private bridge, an idempotent acks=all franz-go producer in the root namespace,
# and rounds of "cut the leader of partition 0 off from both followers with nft rules
# in its namespace, while clients still reach it; then heal". Checks, with numbers:
#
#   1. the isolated leader's last acknowledgement comes within the election timeout
#      plus a margin of the cut (`-ack-bound`, default 1500 ms: the longest randomized
#      election timeout, 1 s at 50 ms ticks, plus 500 ms);
#   2. no two nodes acknowledge in one term: probes pinned to each node (single-record
#      acks=all Produce requests, no retries) and every node's Metadata say which node
#      acknowledged, and led, each leader epoch;
#   3. after the heal the old leader's uncommitted tail is gone: its segment files for
#      the partition equal the new leader's up to where its tail ended (read from the
#      data directories, batch by batch: base offset, leader epoch, CRC), and at the end
#      all three replicas are identical;
#   4. the ledger: nothing acknowledged lost, duplicated or reordered (the leader-kill
#      ledger's checker, compat/go/cmd/ledger, which runs in `-fault partition` mode).
#
#   compat/faults/partition.sh [--fault partition|drop] [--rounds N] [--rate R] [--keep] [-- extra ledger flags...]
#
# With --fault drop the rounds are random packet loss instead (`netns.sh drop`): 5-20%
# of every node's packets, in and out, nodes and clients alike, for 4 s, then healed.
# Checks: the ledger (4. above), and liveness: some record acknowledged within 10 s of
# each heal; the longest time without an acknowledgement is reported per round.
#
# Needs root, `ip netns` and `nft` (nftables is installed with apt-get when missing);
# without them it prints a SKIP line and exits 77. Node i runs in namespace keel-n<i>
# at 10.77.0.(10+i) (KEEL_NETNS_SUBNET moves the /24), Kafka on port PARTITION_PORT
# (default 39092), admin +100, node-to-node +200; see compat/faults/netns.sh for the
# names it creates. Everything is torn down on exit (processes, nft tables,
# namespaces, veths, bridge); the run directory, with each node's keel.log and the
# client's log, is kept when the run fails or with --keep.
#
# Exit status: 0 clean; 1 a violation (a check above failed); 2 the run could not
# finish; 77 skipped (capability missing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
netns="$here/netns.sh"
port=${PARTITION_PORT:-39092}
fault=partition
rounds=5
rate=500
keep=0
extra=()
while (($#)); do
  case "$1" in
    --fault) fault=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--fault partition|drop] [--rounds N] [--rate R] [--keep] [-- extra ledger flags]" >&2; exit 2 ;;
  esac
done
[[ $fault == partition || $fault == drop ]] || { echo "partition.sh: --fault partition or drop, not '$fault'" >&2; exit 2; }

skip() { echo "SKIP: network-fault test ($fault): $*" >&2; echo "$fault: SKIP $*"; exit 77; }

# shellcheck source=netns-cluster.sh
. "$here/netns-cluster.sh"
netns_require

bin="${KEEL_BIN:-$root/target/release/keel}"
if [[ ! -x "$bin" ]]; then
  echo "partition.sh: building keel" >&2
  (cd "$root" && nice -n 10 cargo build --release -p keel-broker)
fi
ledger="$root/compat/go/.bin/ledger"
(cd "$root/compat/go" && nice -n 10 go build -o "$ledger" ./cmd/ledger)

dir=$(mktemp -d "${TMPDIR:-/tmp}/keel-partition.XXXXXX")
rc=2
made_net=0
cleanup() {
  netns_cluster_stop "$dir"
  ((made_net)) && "$netns" down 3
  if ((rc == 0 && keep == 0)); then
    rm -rf "$dir"
  else
    echo "partition.sh: node logs in $dir/node-*/keel.log, client log in $dir/client.log, probes in $dir/probes.tsv" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

netns_up
# Check 3 reads the segment files, which a journaled log writes in whole pages and
# completes (the last partial page) at each journal checkpoint: checkpoints every
# 250 ms keep the files within a quarter second of the log.
cat >"$dir/keel.yaml" <<EOF
journal_checkpoint_interval_ms: 250
journal_file_bytes: 16777216
EOF
netns_cluster_start "$dir" "$port" "$bin" --config "$dir/keel.yaml" || exit 2

# Each round takes about election + hold + heal + settle (~10 s); the bound leaves
# room for every wait inside the ledger to run to its own timeout once.
bound=$((180 + rounds * 90))
set +e
mode_flags=(-fault "$fault")
[[ $fault == partition ]] && mode_flags+=(-probe-log "$dir/probes.tsv")
# The ledger (the clients) runs in the clients' namespace, keel-cl.
"$netns" clients nice -n 10 timeout --kill-after=10 "$bound" "$ledger" "${mode_flags[@]}" -fault-sh "$netns" \
  -cluster-dir "$dir" -brokers "$brokers" -kills "$rounds" -rate "$rate" -client-log "$dir/client.log" "${extra[@]}"
rc=$?
set -e
if ((rc == 124 || rc == 137)); then
  echo "partition.sh: the ledger did not finish within ${bound}s" >&2
  rc=2
fi
for i in 1 2 3; do
  if grep -q panicked "$dir/node-$i/keel.log"; then
    echo "partition.sh: node $i panicked:" >&2; grep -A5 panicked "$dir/node-$i/keel.log" | head -20 >&2
    ((rc == 0)) && rc=1
  fi
done
exit "$rc"
