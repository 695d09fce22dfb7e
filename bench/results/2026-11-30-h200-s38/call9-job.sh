#!/usr/bin/env bash
# session 38 call 9: make check at the final HEAD (a comment and a unit test after run be's source)
out=$1
(autoreconf -fi && ./configure -q && make -j16) > $out/build.log 2>&1 || { tail $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
