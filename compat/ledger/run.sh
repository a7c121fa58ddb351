#!/usr/bin/env bash
# The leader-kill ledger: a 3-node Keel cluster, an idempotent acks=all franz-go
# producer writing ids at a fixed rate, and kill -9 of partition 0's leader again and
# again; then every partition is read back and checked (see compat/go/cmd/ledger).
#
#   compat/ledger/run.sh [--kafka] [--skew] [--power] [--kills N] [--rate R] [--keep] [-- extra ledger flags...]
#
# `-- -queue N` adds the queue workload beside the ledger (compat/go/cmd/ledger/queue.go):
# N transactional workers sending and polling, their history checked by
# keel-queue-check (built here).
#
# --power starts every node noting what its fsyncs made durable (a power-loss file in
# its directory), which `-- -fault power` and `-- -fault mixed -mixed-power` need: the
# ledger then cuts each file back to that after a whole-cluster kill.
#
# --skew runs every node under libfaketime (installed with apt-get when missing; SKIP
# and exit 77 without it) and the ledger in `-fault skew` mode: each round kills the
# leader of partition 0 and restarts it with its wall clock off by a new offset of up
# to 10 minutes either way.
#
# --kafka runs the same ledger against a 3-node Apache Kafka 4.4.0 cluster
# (compat/kafka/cluster.sh, KRaft, min.insync.replicas=2) instead of Keel, for
# side-by-side figures (benches/leader-kill.sh).
#
# Builds target/release/keel if it is missing (KEEL_BIN overrides it), starts its own
# cluster in a temporary directory on Kafka ports LEDGER_BASE_PORT..+2 (default
# 29092; admin +100, node-to-node +200), and stops it on exit. The directory, with
# each node's keel.log and the client's log, is kept when the run fails or with
# --keep. Exit status is the ledger's: 0 clean, 1 lost/duplicated/reordered
# records, 2 a run that could not finish.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base=${LEDGER_BASE_PORT:-29092}
kills=20
rate=1000
keep=0
kafka=0
skew=0
power=0
extra=()
while (($#)); do
  case "$1" in
    --kills) kills=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --kafka) kafka=1; shift ;;
    --skew) skew=1; shift ;;
    --power) power=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--kafka] [--skew] [--power] [--kills N] [--rate R] [--keep] [-- extra ledger flags]" >&2; exit 2 ;;
  esac
done
if ((skew)); then
  # shellcheck source=../node-env.sh
  . "$root/compat/node-env.sh"
  if [[ -z "$(faketime_lib)" ]]; then
    echo "SKIP: clock-skew ledger: libfaketime is missing and apt-get could not install it" >&2
    echo "skew: SKIP libfaketime missing"
    exit 77
  fi
  extra=(-fault skew "${extra[@]}")
fi

bin="${KEEL_BIN:-$root/target/release/keel}"
cluster_sh="$root/compat/cluster.sh" logs=keel.log offsets=(0 100 200)
if ((kafka)); then
  cluster_sh="$root/compat/kafka/cluster.sh" logs=kafka.log offsets=(0 300)
elif [[ ! -x "$bin" ]]; then
  echo "run.sh: building keel" >&2
  (cd "$root" && nice -n 10 cargo build --release -p keel-broker)
fi
ledger="$root/compat/go/.bin/ledger"
(cd "$root/compat/go" && nice -n 10 go build -o "$ledger" ./cmd/ledger)
# The queue workload's history is judged by keel-queue-check (compat/queue).
for flag in ${extra[@]+"${extra[@]}"}; do
  if [[ "$flag" == -queue || "$flag" == -queue=* ]]; then
    (cd "$root" && nice -n 10 cargo build --release -q -p keel-queue-check)
    extra+=(-queue-check "$root/target/release/keel-queue-check")
    break
  fi
done

for port in "$base" "$((base + 1))" "$((base + 2))"; do
  for off in "${offsets[@]}"; do
    p=$((port + off))
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "run.sh: port $p is in use; set LEDGER_BASE_PORT" >&2
      exit 2
    fi
  done
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/keel-ledger.XXXXXX")
rc=2
cleanup() {
  "$cluster_sh" stop "$dir" || true
  if ((rc == 0 && keep == 0)); then
    rm -rf "$dir"
  else
    echo "run.sh: node logs in $dir/node-*/$logs, client log in $dir/client.log" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# `--smp 1` (what cluster.sh runs anyway) so that `cluster.sh restart` has a flag to
# replay: started with none, it replays one empty argument, which `keel serve` refuses.
if ((skew)); then
  # compat/keel.sh runs a node under libfaketime when its directory has this file.
  for i in 1 2 3; do mkdir -p "$dir/node-$i" && echo "+0" >"$dir/node-$i/faketime"; done
fi
if ((power)); then
  # compat/keel.sh starts a node with KEEL_TEST_SYNC_LOG when its directory has this file.
  for i in 1 2 3; do mkdir -p "$dir/node-$i" && : >"$dir/node-$i/power-loss"; done
fi
if ((kafka)); then
  nice -n 10 "$cluster_sh" start 3 "$dir" "$base" >&2
else
  nice -n 10 "$cluster_sh" start 3 "$dir" "$base" --smp 1 >&2
fi
brokers="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
# Each kill takes about down + settle + election + restart (~7 s); the bound leaves
# room for every wait inside the ledger to run to its own timeout once.
bound=$((180 + kills * 45))
set +e
nice -n 10 timeout --kill-after=10 "$bound" "$ledger" -cluster-dir "$dir" -cluster-sh "$cluster_sh" \
  -brokers "$brokers" -kills "$kills" -rate "$rate" -client-log "$dir/client.log" "${extra[@]}"
rc=$?
set -e
if ((rc == 124 || rc == 137)); then
  echo "run.sh: the ledger did not finish within ${bound}s" >&2
  rc=2
fi
exit "$rc"
