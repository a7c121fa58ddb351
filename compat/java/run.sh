#!/usr/bin/env bash
# Runs the Java end-to-end compatibility tests against a running broker.
#   run.sh <bootstrap> [extra maven args, e.g. -Dtest=AdminTest]
# <bootstrap> defaults to $KEEL_BOOTSTRAP, else 127.0.0.1:9092.
# Exits non-zero if any test fails. Surefire prints the "Tests run:" summary.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BOOTSTRAP="${1:-${KEEL_BOOTSTRAP:-127.0.0.1:9092}}"
[[ $# -gt 0 ]] && shift

cd "$HERE"
echo "compat/java: running tests against $BOOTSTRAP"
exec mvn -B -ntp -Dstyle.color=never test -Dbootstrap="$BOOTSTRAP" "$@"
