#!/usr/bin/env bash
# Keel's log append bandwidth against the disk's sequential O_DIRECT write bandwidth,
# measured by fio in the same run on the same file system, and the log's restart
# time after a crash and after a clean close.
#
#   benches/append-vs-fio.sh [DIR]        MB=10240 (log size), DIR default target-bench/runs
#
# Runs fio twice (4 MiB blocks with an fdatasync after each, as Keel's flush pass
# does; 1 MiB blocks at queue depth 8), then storage/tests/storage/restart_time.rs, and
# writes benches/results/append-<UTC>/report.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dir="${1:-$root/target-bench/runs}/append"
mb=${MB:-10240}
out="$root/benches/results/append-$(date -u +%Y%m%dT%H%M%SZ)"
command -v fio >/dev/null || { echo "append-vs-fio.sh: fio is not installed (apt-get install fio)" >&2; exit 1; }
mkdir -p "$dir" "$out"
trap 'rm -rf "$dir"' EXIT

fio_mbps() { # name, extra fio args...
  local name=$1; shift
  fio --name="$name" --directory="$dir" --ioengine=io_uring --direct=1 --rw=write \
    --size="${mb}M" --output-format=json "$@" >"$out/fio-$name.json"
  rm -f "$dir"/"$name"*
  python3 -c 'import json,sys; print("%.0f" % (json.load(open(sys.argv[1]))["jobs"][0]["write"]["bw"] * 1024 / 1e6))' "$out/fio-$name.json"
}
fio_sync=$(fio_mbps sync4m --bs=4M --iodepth=1 --fdatasync=1)
fio_qd8=$(fio_mbps qd8 --bs=1M --iodepth=8)

KEEL_RESTART_MB=$mb KEEL_RESTART_DIR="$dir" cargo test --quiet --release -p keel-storage \
  --test storage restart_time:: -- --ignored --nocapture 2>&1 | tee "$out/restart_time.txt"
keel=$(grep -o '= [0-9]* MB/s' "$out/restart_time.txt" | grep -o '[0-9]*')
restart=$(grep -o 'open after crash .*' "$out/restart_time.txt")

{
  echo "# Append bandwidth and restart time, $(date -u +%Y-%m-%dT%H:%MZ), ${mb} MiB log"
  echo
  echo "| what | MB/s | Keel / this |"
  echo "|---|---:|---:|"
  echo "| fio, 4 MiB O_DIRECT writes, fdatasync after each | $fio_sync | $(python3 -c "print('%.2fx' % ($keel / $fio_sync))") |"
  echo "| fio, 1 MiB O_DIRECT writes, queue depth 8 | $fio_qd8 | $(python3 -c "print('%.2fx' % ($keel / $fio_qd8))") |"
  echo "| Keel log, 64 KiB batches, a flush every 4 MiB | $keel | |"
  echo
  echo "Restart: $restart"
} | tee "$out/report.md"
