#!/usr/bin/env bash
# Prints a markdown table comparing franz-go kgo results across brokers
# (columns: test | Keel | Apache Kafka | notes), e.g. for docs/compatibility.md:
#
#   compat/go/report.sh [--broker-only] [results-keel.tsv results-kafka.tsv ...]
#
# With no files it reads compat/go/results-keel.tsv and
# compat/go/results-kafka.tsv; a missing file gives a column of "—".
# Notes carry skip reasons, first failure lines, and the reasons given in
# allowlist.txt comments ("# TestName: reason") for tests left out.
# --broker-only folds the client-side unit tests into one summary row.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
broker_only=
files=()
for a in "$@"; do
	case "$a" in
	--broker-only) broker_only=1 ;;
	-*) echo "usage: $0 [--broker-only] [results-*.tsv ...]" >&2; exit 2 ;;
	/*) files+=("$a") ;;
	*) files+=("$PWD/$a") ;;
	esac
done
if [ ${#files[@]} -eq 0 ]; then
	files=("$here/results-keel.tsv" "$here/results-kafka.tsv")
fi
mkdir -p "$here/.bin"
(cd "$here" && go build -o "$here/.bin/kgoresults" ./cmd/kgoresults)
exec "$here/.bin/kgoresults" report -allowlist "$here/allowlist.txt" ${broker_only:+-broker-only} "${files[@]}"
