#!/usr/bin/env bash
# session 41, call 6 (one GPU): build; make check; test_rma
# free_before_deregister at 1, 2, 4 with the deferral, then with ncclMemFree
# freeing at once (memory.c patched; library rebuilt, test relinked), then
# restored; under MPS test_p2p at 2, 4, 8 and test_rma at 2, 4, 8;
# compute-sanitizer on test_rma free_before_deregister at 2.
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h 'beside_a_close\|free_before_deregister' tests/gpu/test_p2p.log tests/gpu/test_rma.log | sort | uniq -c
step "free_before_deregister, deferred"
for np in 1 2 4; do MPINCCL_TEST_NP=$np TEST_RMA_ONLY=free_before_deregister tests/run-test ./tests/gpu/test_rma > $out/new-$np.log 2>&1; echo "   np=$np: exit $? :: $(grep -h 'failures$' $out/new-$np.log)"; done
step "free_before_deregister, freed at once"
cp src/cuda/memory.c /tmp/memory.c.new
python3 - <<'PY'
p='src/cuda/memory.c'; s=open(p).read()
old="""    return ncclSuccess;
  }
  cudaError_t err = alloc_release(a);"""
assert old in s
s=s.replace(old,"""    cudaFree(a->base); /* (old behaviour: freed at once) */
    return ncclSuccess;
  }
  cudaError_t err = alloc_release(a);""",1); open(p,'w').write(s)
PY
make -j16 tests/gpu/test_rma > $out/old-build.log 2>&1 || tail -5 $out/old-build.log
for np in 1 2; do MPINCCL_TEST_NP=$np TEST_RMA_ONLY=free_before_deregister tests/run-test ./tests/gpu/test_rma > $out/old-$np.log 2>&1; echo "   old np=$np: exit $? :: $(grep -h 'failures$\|expected\|wrong' $out/old-$np.log | sort | uniq -c | head -6 | tr '\n' ' ' | cut -c1-600)"; done
cp /tmp/memory.c.new src/cuda/memory.c && make -j16 > /dev/null 2>&1 && make -j16 check TESTS= > /dev/null 2>&1
MPINCCL_TEST_NP=2 TEST_RMA_ONLY=free_before_deregister tests/run-test ./tests/gpu/test_rma > $out/new-again.log 2>&1; echo "   new again np=2: exit $?"
step "compute-sanitizer"
TEST_RMA_ONLY=free_before_deregister timeout 200 mpirun -np 2 $(tests/run-test --mpirun-flags) -x TEST_RMA_ONLY $(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer) --tool memcheck --report-api-errors no --error-exitcode 9 tests/gpu/test_rma > $out/sanitizer.log 2>&1; echo "   exit $? :: $(grep -h 'ERROR SUMMARY\|failures$' $out/sanitizer.log | sort | uniq -c | tr '\n' ' ')"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
flags=$(tests/run-test --mpirun-flags)
step "MPS"
for t in "test_p2p 2 4 8" "test_rma 2 4 8"; do set -- $t; prog=$1; shift
  MPINCCL_TEST_NP="$*" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$prog > $out/$prog-mps.log 2>&1; echo "   $prog MPS np=$*: exit $? :: $(grep -h 'failures$' $out/$prog-mps.log | tr '\n' ' ')"
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
step done
