# Sourced by the compat/security scripts: `check NAME COMMAND...` runs the command,
# its output appended to $work/checks.log, prints "PASS NAME" or "FAIL NAME" and counts
# it in $passed or $failed.
passed=0 failed=0
check() {
  local name=$1; shift
  if "$@" >>"$work/checks.log" 2>&1; then
    echo "PASS $name"; passed=$((passed + 1))
  else
    echo "FAIL $name (see $work/checks.log)"; failed=$((failed + 1))
  fi
}

# An EXIT trap for the scripts that start one Keel in $work/keel and one Kafka in
# $work/kafka side by side: stops both, and removes $work unless a check failed or
# $keep is 1.
stop_keel_and_kafka() {
  "$root/compat/keel.sh" stop "$work/keel" >/dev/null 2>&1
  "$root/compat/kafka/kafka.sh" stop "$work/kafka" >/dev/null 2>&1
  if ((failed == 0 && keep == 0)); then rm -rf "$work"; else echo "work directory kept: $work"; fi
}
