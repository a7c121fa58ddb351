# Sourced: `faketime_lib` prints the path of libfaketime.so.1, installing the Debian
# package with apt-get when it is missing; prints nothing if it cannot be had. The
# clock-skew harnesses (compat/ledger/run.sh --skew, compat/faults/soak.sh) skip out
# loud without it.
faketime_lib() {
  local lib
  lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1)
  if [[ -z "$lib" ]] && command -v apt-get >/dev/null; then
    echo "faketime.sh: installing libfaketime with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q faketime >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q faketime >&2; } || true
    lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1)
  fi
  echo "$lib"
}
