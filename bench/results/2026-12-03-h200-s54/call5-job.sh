#!/usr/bin/env bash
# session 54, call 5: compute-sanitizer (memcheck, as bench/run-device.sh
# runs it) on the session's new GPU steps, 2 processes: test_p2p's
# vmm_buffers (staged virtual-memory buffers, copies over two mappings)
# and test_rma's windows_share_allocation and windows_nonblocking.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run() { # $1: log name, $2: env assignment, $3: program
  env "$2" timeout 240 mpirun -np 2 $flags -x "${2%%=*}" \
    "$san" --tool memcheck --report-api-errors no --error-exitcode 9 "$3" > $out/$1.log 2>&1
  echo "$1: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/$1.log) ranks with 0 errors; $(grep -h 'failures$' $out/$1.log | tr '\n' ' ')"
}
run san-vmm TEST_P2P_ONLY=vmm ./tests/gpu/test_p2p
run san-winshare TEST_RMA_ONLY=windows_share ./tests/gpu/test_rma
run san-winnb TEST_RMA_ONLY=windows_nonblocking ./tests/gpu/test_rma
rm -f $out/configure.log $out/build.log
