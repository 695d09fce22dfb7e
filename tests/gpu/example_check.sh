# example_check.sh - sourced by the tests/gpu/launch_* scripts that run an
# example as a test.  example_check NAME LABEL COMMAND... runs COMMAND (at
# most 120 s); it passes when COMMAND exits 0 and prints a line
# "check: ... (PASS)", and otherwise prints COMMAND's output and sets
# status=1.
example_check() {
  name=$1 label=$2
  shift 2
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  if [ $rc = 0 ] && printf '%s\n' "$out" | grep -q '^check: .*(PASS)$'; then
    echo "$name: $label: PASS"
  else
    printf '%s\n' "$out"
    echo "$name: $label: FAIL (exit $rc)"
    status=1
  fi
}
