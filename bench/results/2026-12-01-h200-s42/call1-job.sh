#!/usr/bin/env bash
# session 42, first call at HEAD (one
# GPU): build; make check; under MPS test_p2p at 2, 4, 8 and test_rma at 2, 4;
# halo3d np2 and np4 once each, both regimes (a launch's gate is on every
# group's path).
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
flags=$(tests/run-test --mpirun-flags)
step "halo3d, no MPS"
for np in 2 4; do for mode in "" --flag-sync; do timeout 60 mpirun -np $np $flags ./examples/halo3d $mode 2>&1 | grep -E 'time/iter' | sed "s/^/   np$np ${mode:-exchange}: /"; done; done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS"
for t in "test_p2p 2 4 8" "test_rma 2 4 8"; do set -- $t; prog=$1; shift
  MPINCCL_TEST_NP="$*" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$prog > $out/$prog-mps.log 2>&1; echo "   $prog MPS np=$*: exit $? :: $(grep -h 'failures$' $out/$prog-mps.log | tr '\n' ' ')"
done
for np in 2 4; do for mode in "" --flag-sync; do timeout 60 mpirun -np $np $flags -x CUDA_MPS_PIPE_DIRECTORY ./examples/halo3d $mode 2>&1 | grep -E 'time/iter' | sed "s/^/   MPS np$np ${mode:-exchange}: /"; done; done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
step done
