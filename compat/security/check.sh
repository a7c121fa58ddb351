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
