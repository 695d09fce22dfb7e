#!/usr/bin/env bash
# print-failed-logs.sh - after a failed `make check`, print to stderr the log
# of every test whose .trs records FAIL, XPASS or ERROR.  Run in the build
# tree (run-tests, scripts/check-sanitized.sh).
find tests -name '*.trs' -print0 2>/dev/null |
  xargs -0 -r grep -l -E '^:test-result: (FAIL|XPASS|ERROR)' |
  while read -r trs; do
    log=${trs%.trs}.log
    echo "===================== $log" >&2
    cat "$log" >&2 || true
  done
