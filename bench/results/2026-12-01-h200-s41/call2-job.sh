#!/usr/bin/env bash
# session 41, call 2 (one GPU): build; make check; test_p2p beside_a_close
# at 2 and 4 with the service stream, then against the previous source of
# the seven files it changed (library rebuilt, test_p2p relinked; then
# restored); under MPS test_p2p at 2, 4, 8 and test_rma at 2, 4.
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h 'beside_a_close' tests/gpu/test_p2p.log | sort | uniq -c
step "beside_a_close, new"
for np in 2 4; do MPINCCL_TEST_NP=$np TEST_P2P_ONLY=beside_a_close tests/run-test ./tests/gpu/test_p2p > $out/new-$np.log 2>&1; echo "   new np=$np: exit $? :: $(grep -h 'beside_a_close\|failures$\|expected' $out/new-$np.log | sort | uniq -c | tr '\n' ' ' | cut -c1-500)"; done
step "beside_a_close, previous source"
mkdir -p /tmp/new-src && cp -r src /tmp/new-src/
cp -r .device/old-s41/src/* src/
make -j16 tests/gpu/test_p2p > $out/old-build.log 2>&1 || tail -5 $out/old-build.log
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=60 TEST_P2P_ONLY=beside_a_close tests/run-test ./tests/gpu/test_p2p > $out/old-2.log 2>&1; echo "   old np=2: exit $? :: $(grep -h 'beside_a_close\|failures$\|expected\|timed out' $out/old-2.log | sort | uniq -c | tr '\n' ' ' | cut -c1-600)"
cp -r /tmp/new-src/src/* src/ && make -j16 > /dev/null 2>&1 && make -j16 check TESTS= > /dev/null 2>&1
MPINCCL_TEST_NP=2 TEST_P2P_ONLY=beside_a_close tests/run-test ./tests/gpu/test_p2p > $out/new-again.log 2>&1; echo "   new again np=2: exit $?"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
flags=$(tests/run-test --mpirun-flags)
step "MPS"
for t in "test_p2p 2 4 8" "test_rma 2 4"; do set -- $t; prog=$1; shift
  MPINCCL_TEST_NP="$*" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$prog > $out/$prog-mps.log 2>&1; echo "   $prog MPS np=$*: exit $? :: $(grep -h 'failures$' $out/$prog-mps.log | tr '\n' ' ')"
done
grep -h 'beside_a_close' $out/test_p2p-mps.log | sort | uniq -c
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
step done
