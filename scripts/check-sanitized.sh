#!/usr/bin/env bash
# check-sanitized.sh - the test suite under AddressSanitizer (with
# LeakSanitizer) and UndefinedBehaviorSanitizer.  Copies the working tree's
# sources (tracked and untracked, not ignored: no build outputs) into a
# scratch folder, builds them there with -fsanitize=address,undefined, and
# runs `make check`: the host-only tests are checked; GPU tests skip without
# a GPU.  Any sanitizer report fails the test that made it.  Exits non-zero
# on any failure, printing the failing tests' logs.  Extra arguments go to
# ./configure; SANITIZED_TESTS, when set, names the tests make check runs
# (its TESTS), and SANITIZED_JOBS how many run at once (default: one per
# CPU; GPU tests share the GPU).  Needs what run-tests installs.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d /tmp/mpinccl-sanitized.XXXXXX)
trap 'rm -rf "$work"' EXIT
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work"
  cd "$work"
else # (a tree without git metadata: all of it, less what a build left)
  tar -cf - . | tar -xf - -C "$work"
  cd "$work"
  if [ -f Makefile ]; then make distclean >/dev/null 2>&1 || true; fi
fi
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
autoreconf -fi >/dev/null 2>&1
./configure -q CFLAGS="-g -O1 $flags" LDFLAGS="-fsanitize=address,undefined" "$@"
make -j"$(nproc)" >build.log 2>&1 || { tail -30 build.log; exit 1; }

# protect_shadow_gap=0: the CUDA driver maps memory where AddressSanitizer
# would keep its guard.  verify_asan_link_order=0: the install test links a
# program without the sanitizer against the installed, instrumented library.
# Leaks are checked in the tests that run without MPI only: Open MPI keeps
# memory to the process's end by design.
asan=protect_shadow_gap=0:verify_asan_link_order=0
export ASAN_OPTIONS=$asan:detect_leaks=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
jobs=${SANITIZED_JOBS:-$(nproc)}
if [ -n "${SANITIZED_TESTS:-}" ]; then
  make check -j"$jobs" TESTS="$SANITIZED_TESTS" || status=1
else
  make check -j"$jobs" || status=1
fi
for t in tests/unit/test_*; do
  [ -f "$t" ] && [ -x "$t" ] && [ "${t%.sh}" = "$t" ] || continue
  if ! ASAN_OPTIONS=$asan:detect_leaks=1 "$t" >"$t.leaks.log" 2>&1; then
    echo "check-sanitized: $t failed with leak checks on" >&2
    cat "$t.leaks.log" >&2
    status=1
  fi
done
if [ $status != 0 ]; then
  echo "check-sanitized: failures; logs of failing tests follow" >&2
  ./scripts/print-failed-logs.sh
  exit 1
fi
echo "check-sanitized: make check and the unit tests with leak checks passed under AddressSanitizer and UBSan"
