#!/usr/bin/env bash
# session 44, call 3: compute-sanitizer memcheck on the test_p2p steps after threads_ring, one filter
# at a time (2 ranks), and threads_ring alone under memcheck at 1 and 2 processes, then without it.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
san=/usr/local/cuda/bin/compute-sanitizer
command -v compute-sanitizer >/dev/null && san=$(command -v compute-sanitizer)
i=0
s() { local np=$1 lim=$2 only=$3; shift 3; i=$((i+1)); local t0=$SECONDS
  TEST_P2P_ONLY="$only" timeout $lim mpirun -np $np $flags -x TEST_P2P_ONLY "$@" ./tests/gpu/test_p2p > $out/s$i.log 2>&1
  echo "[$only] np $np $(basename "${1:-plain}"): exit $? in $((SECONDS-t0)) s; $(grep -c 'ERROR SUMMARY: 0 errors' $out/s$i.log) ranks 0 errors; $(grep -h 'failures$' $out/s$i.log | tr '\n' ' ')"
  grep -h 'hangs\|ERROR SUMMARY: [1-9]\|Invalid\|expected' $out/s$i.log | head -3; }
M="$san --report-api-errors no --error-exitcode 9 --tool memcheck"
for f in "halo26(" halo26_wide graph_ sender_gone self_pairs mismatch short_ other_memory in_the_way beside_a_close; do s 2 90 "$f" $M; done
s 1 60 threads_ring $M
s 2 60 threads_ring $M
s 2 60 threads_ring
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
