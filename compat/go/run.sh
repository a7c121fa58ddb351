#!/usr/bin/env bash
# Runs franz-go's own kgo integration suite against a Kafka-compatible broker.
#
#   compat/go/run.sh <bootstrap> [--all]
#
# By default only the tests listed in compat/go/allowlist.txt run; --all runs
# every test of the package. Results go to compat/go/results-<label>.tsv
# (label from RESULTS_LABEL, default "keel"), the raw `go test -json` stream
# to compat/go/logs/go-test-<label>.json.
#
# Environment (defaults in brackets):
#   RESULTS_LABEL        [keel]   names the results file
#   KGO_TEST_RF          [1]      replication factor of the topics tests create
#   KGO_TEST_RECORDS     [10000]  records the ETL tests produce
#   KGO_LOG_LEVEL        [info]   client log level in the raw log (debug|info|none)
#   GO_TEST_TIMEOUT      [1500s]  go test -timeout
#   GO_TEST_EXTRA_FLAGS  []       extra go test flags, e.g. "-parallel 4"
set -euo pipefail

usage() {
	echo "usage: $0 <bootstrap host:port[,host:port...]> [--all]" >&2
	exit 2
}

[ $# -ge 1 ] || usage
bootstrap=$1
shift
all=0
while [ $# -gt 0 ]; do
	case "$1" in
	--all) all=1 ;;
	*) usage ;;
	esac
	shift
done
case "$bootstrap" in
-*|"") usage ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
label=${RESULTS_LABEL:-keel}
case "$label" in
*[!A-Za-z0-9._-]*|"") echo "RESULTS_LABEL must be [A-Za-z0-9._-]+" >&2; exit 2 ;;
esac
timeout=${GO_TEST_TIMEOUT:-1500s}
results="$here/results-$label.tsv"
raw="$here/logs/go-test-$label.json"
mkdir -p "$here/logs" "$here/.bin"

cd "$here"

# Build the results parser first so that a build problem is not mistaken for
# a test failure.
go build -o "$here/.bin/kgoresults" ./cmd/kgoresults

run_args=()
if [ "$all" -eq 0 ]; then
	names=()
	while IFS= read -r line || [ -n "$line" ]; do
		line=${line%%#*}
		line=$(echo "$line" | tr -d '[:space:]')
		[ -n "$line" ] || continue
		if ! [[ "$line" =~ ^(Test|Fuzz)[A-Za-z0-9_]*$ ]]; then
			echo "allowlist.txt: not a test name: $line" >&2
			exit 2
		fi
		names+=("$line")
	done <"$here/allowlist.txt"
	if [ ${#names[@]} -eq 0 ]; then
		echo "allowlist.txt lists no test" >&2
		exit 2
	fi
	pattern="^($(IFS='|'; echo "${names[*]}"))\$"
	run_args=(-run "$pattern")
	echo "running ${#names[@]} allowlisted franz-go tests against $bootstrap"
else
	echo "running every franz-go kgo test against $bootstrap"
fi

# Fail fast, with a clear message, if nothing listens at the first seed: the
# suite's admin client would otherwise panic after 10s and take every test
# down with it.
first=${bootstrap%%,*}
host=${first%:*}
port=${first##*:}
if ! timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
	echo "cannot connect to $first" >&2
	exit 1
fi

export KGO_SEEDS=$bootstrap
export KGO_TEST_RF=${KGO_TEST_RF:-1}
export KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-10000}
export KGO_LOG_LEVEL=${KGO_LOG_LEVEL:-info}

start=$(date +%s)
set +e
# shellcheck disable=SC2086
go test -count=1 -vet=off -json -timeout "$timeout" ${GO_TEST_EXTRA_FLAGS:-} \
	"${run_args[@]}" github.com/twmb/franz-go/pkg/kgo >"$raw" 2>&1
gorc=$?
"$here/.bin/kgoresults" parse -in "$raw" -out "$results"
rc=$?
set -e
end=$(date +%s)

echo "results: $results (raw log: $raw), wall time $((end - start))s"
if [ "$rc" -eq 0 ] && [ "$gorc" -ne 0 ]; then
	echo "go test exited $gorc; see $raw" >&2
	rc=$gorc
fi
exit "$rc"
