#!/usr/bin/env bash
# session 44, call 4: sender_gone_loop's invalid reads under memcheck: alone and after sender_gone_first,
# with NCCL_DEBUG=TRACE for IPC and P2P; the same without the sanitizer.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
san=/usr/local/cuda/bin/compute-sanitizer
command -v compute-sanitizer >/dev/null && san=$(command -v compute-sanitizer)
M="$san --report-api-errors no --error-exitcode 9 --tool memcheck --print-limit 3"
r() { local tag=$1 only=$2; shift 2
  NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=IPC,P2P TEST_P2P_ONLY="$only" timeout 60 mpirun -np 2 $flags -x TEST_P2P_ONLY -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS "$@" ./tests/gpu/test_p2p > $out/$tag.log 2>&1
  local rc=$?
  echo "$tag [$only]: exit $rc; $(grep -c 'Invalid __global__' $out/$tag.log) invalid reads; $(grep -h 'failures$' $out/$tag.log | tr '\n' ' ')"
  grep -h 'Access to\|wrong\|hangs' $out/$tag.log | head -4; }
r loop-san sender_gone_loop $M
r loop-plain sender_gone_loop
r both-san sender_gone $M
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
