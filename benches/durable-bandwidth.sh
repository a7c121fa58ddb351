#!/usr/bin/env bash
# How many bytes per second this disk makes durable when every write is followed by
# an fdatasync, as a Keel flush pass does before it acknowledges: fio with O_DIRECT
# writes of pass-sized blocks over an already written file (so no fdatasync carries
# file-system metadata), one job and then two at once (two writers in flight, as
# overlapping one pass's write with the previous pass's fdatasync would give), and
# the same writes without fdatasync for comparison.
#
#   benches/durable-bandwidth.sh [DIR]     SECONDS_EACH=8, DIR default target-bench/runs
#
# The max-rate workload's ceiling for Keel is this bandwidth divided by the bytes Keel
# writes per payload byte (journal and segment file: about 2.05 at 1 KiB records in
# 64 KiB batches). Writes benches/results/durable-<UTC>/report.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v fio >/dev/null || { echo "durable-bandwidth.sh: fio is not installed (apt-get install fio)" >&2; exit 1; }
dir=$(realpath -m "${1:-$root/target-bench/runs}")/durable
secs=${SECONDS_EACH:-8}
out="$root/benches/results/durable-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$dir" "$out"
trap 'rm -rf "$dir"' EXIT

fio_mbps() { # name, extra fio args...
  local name=$1; shift
  fio --name="$name" --directory="$dir" --filename=durable.dat --size=1G --overwrite=1 \
    --ioengine=psync --direct=1 --rw=write --time_based --runtime="$secs" --ramp_time=1 \
    --group_reporting --output-format=json "$@" >"$out/fio-$name.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]["write"]; print("%.0f" % (j["bw"] * 1024 / 1e6))' \
    "$out/fio-$name.json"
}

{
  echo "# Durable write bandwidth, $(date -u +'%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(findmnt -no FSTYPE -T "$dir") on $(findmnt -no SOURCE -T "$dir")"
  echo
  echo "| block | fdatasync after each, 1 writer (MB/s) | 2 writers (MB/s, total) | no fdatasync (MB/s) |"
  echo "|---:|---:|---:|---:|"
  for bs in 64k 160k 320k 1m; do
    one=$(fio_mbps "sync-$bs" --bs="$bs" --fdatasync=1)
    two=$(fio_mbps "sync2-$bs" --bs="$bs" --fdatasync=1 --numjobs=2)
    none=$(fio_mbps "nosync-$bs" --bs="$bs")
    echo "| $bs | $one | $two | $none |"
  done
} | tee "$out/report.md"
echo "durable-bandwidth.sh: wrote $out/report.md"
