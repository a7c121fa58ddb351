# Sourced by the harnesses that start Keel nodes under test-only conditions.
#
#   faketime_lib     prints the path of libfaketime.so.1, installing the Debian package
#                    with apt-get when it is missing; prints nothing if it cannot be had
#                    (the clock-skew harnesses, compat/ledger/run.sh --skew and
#                    compat/faults/soak.sh, then skip out loud)
#   node_env DIR     sets the array `envs` to the environment a node whose directory is
#                    DIR starts with (compat/keel.sh, compat/faults/netns-cluster.sh):
#                    under libfaketime with its wall clock off by DIR/faketime's content
#                    (e.g. +300 or -90 seconds; monotonic clocks untouched), and noting
#                    what each fdatasync made durable in DIR/synced.tsv when
#                    DIR/power-loss exists (storage/src/sync_log.rs); fails when
#                    DIR/faketime is given but libfaketime is not installed
#
# libfaketime reads the offset from the file itself (FAKETIME_TIMESTAMP_FILE), again at
# most a second after it last did (FAKETIME_CACHE_DURATION=1), so replacing the file
# steps the clock of a running node (the ledger's `step` rounds) as well as setting it
# for the next start. Its default re-reads every 10 s, which a step held for 4 s can
# miss entirely; an offset passed in FAKETIME is read once, at start.

libfaketime_path() { ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1; }

faketime_lib() {
  if [[ -z "$(libfaketime_path)" ]] && command -v apt-get >/dev/null; then
    echo "node-env.sh: installing libfaketime with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q faketime >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q faketime >&2; } || true
  fi
  libfaketime_path
}

node_env() {
  local dir=$1 lib
  envs=()
  if [[ -f "$dir/faketime" ]]; then
    lib=$(libfaketime_path)
    [[ -n "$lib" ]] || { echo "node-env.sh: $dir/faketime given but libfaketime is not installed" >&2; return 1; }
    envs+=("LD_PRELOAD=$lib" "FAKETIME_TIMESTAMP_FILE=$(cd "$dir" && pwd)/faketime" FAKETIME_CACHE_DURATION=1
      FAKETIME_DONT_FAKE_MONOTONIC=1)
  fi
  if [[ -f "$dir/power-loss" ]]; then envs+=("KEEL_TEST_SYNC_LOG=$dir/synced.tsv"); fi
}
