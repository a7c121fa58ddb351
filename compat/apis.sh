#!/usr/bin/env bash
# The Kafka APIs Apache Kafka 4.4.0 and Keel each advertise, side by side, as Kafka's
# own BrokerApiVersionsCommand reads them: the source of the API table in
# docs/compatibility.md. Starts a fresh single-node Kafka and Keel (ports
# APIS_BASE_PORT, default 46092, and +100), stops both on exit, and prints one
# markdown row per API key either serves: key, name, Kafka's versions, Keel's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base=${APIS_BASE_PORT:-46092}
[[ -x "$root/target/release/keel" ]] || (cd "$root" && nice -n 10 cargo build --release -p keel-broker)
cp="$("$root/compat/kafka/classpath.sh")"
dir=$(mktemp -d "${TMPDIR:-/tmp}/keel-apis.XXXXXX")
cleanup() {
  "$root/compat/kafka/kafka.sh" stop "$dir/kafka" >/dev/null 2>&1 || true
  "$root/compat/keel.sh" stop "$dir/keel" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
"$root/compat/kafka/kafka.sh" start "$dir/kafka" "$base" >&2
"$root/compat/keel.sh" start "$dir/keel" "$((base + 100))" >&2

# "<key> <name> <versions>" per API the broker at $1 advertises.
advertised() {
  java -Xmx256m -cp "$cp" org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$1" 2>/dev/null |
    sed -nE 's/^\t([A-Za-z]+)\(([0-9]+)\): ([0-9]+)( to ([0-9]+))? \[usable.*/\2 \1 \3 \5/p' |
    awk '{ print $1, $2, ($4 == "" ? $3 : $3 "–" $4) }' | sort -n
}
advertised "127.0.0.1:$base" >"$dir/kafka.txt"
advertised "127.0.0.1:$((base + 100))" >"$dir/keel.txt"
[[ -s "$dir/kafka.txt" && -s "$dir/keel.txt" ]] || { echo "apis.sh: no ApiVersions answer" >&2; exit 1; }
echo "| key | API | Apache Kafka 4.4.0 | Keel |"
echo "|---:|---|---|---|"
join -a1 -a2 -e - -o 0,1.2,2.2,1.3,2.3 <(sort -k1,1 "$dir/kafka.txt") <(sort -k1,1 "$dir/keel.txt") | sort -n |
  awk '{ name = ($2 == "-") ? $3 : $2; printf "| %s | %s | %s | %s |\n", $1, name, ($4 == "-" ? "—" : $4), ($5 == "-" ? "refused" : $5) }'
