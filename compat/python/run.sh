#!/usr/bin/env bash
# Runs the Python client compatibility suite (confluent-kafka/librdkafka and
# kafka-python) against a Kafka-compatible broker:
#
#   compat/python/run.sh <bootstrap host:port> [pytest args...]
#
# Creates or reuses a virtualenv in compat/python/.venv and installs
# requirements.txt into it (wheels only) when the file changed.
set -euo pipefail

if [ $# -lt 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
	echo "usage: $0 <bootstrap host:port> [pytest args...]" >&2
	exit 2
fi
bootstrap=$1
shift

here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
	"$python" -m venv "$venv"
fi
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
	"$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: -r "$here/requirements.txt"
	echo "$want" >"$stamp"
fi

first=${bootstrap%%,*}
if ! timeout 5 bash -c "exec 3<>/dev/tcp/${first%:*}/${first##*:}" 2>/dev/null; then
	echo "cannot connect to $first" >&2
	exit 1
fi

export KEEL_BOOTSTRAP=$bootstrap
cd "$here"
# Bounded: the whole suite normally takes well under two minutes.
exec timeout --kill-after=10 "${PYTHON_SUITE_TIMEOUT:-600}" "$venv/bin/python" -m pytest "$@"
