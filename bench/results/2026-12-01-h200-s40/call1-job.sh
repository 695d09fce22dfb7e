#!/usr/bin/env bash
# session 40 call 1: messages of no bytes.  Build; make check; test_p2p
# under MPS at 2, 4, 8 and with memory operations only at 2; UCX
# empty_messages/mismatch/graph_small under MPS; then the old early return
# put back (library only) to see empty_messages fail, and restored.
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h 'empty_messages\|mismatch()\|graph_small' tests/gpu/test_p2p.log tests/gpu/test_p2p_ucx.sh.log | head -20
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
flags=$(tests/run-test --mpirun-flags)
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS"
run() { # label env... -- prog np...
  local label=$1; shift; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local prog=$1; shift
  env "${envs[@]}" MPINCCL_TEST_NP="$*" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$prog > $out/$label.log 2>&1
  echo "   $label ($prog np=$*): exit $? :: $(grep -h 'failures$' $out/$label.log | tr '\n' ' ' | cut -c1-200)"
}
run p2p-mps X=1 -- test_p2p 2 4 8
run p2p-mps-memops MPINCCL_KERNEL_SYNC=0 -- test_p2p 2
run p2p-mps-empty-ucx MPINCCL_TRANSPORT=ucx TEST_P2P_ONLY=empty_messages -- test_p2p 2 4
run p2p-mps-mismatch-ucx MPINCCL_TRANSPORT=ucx TEST_P2P_ONLY=mismatch -- test_p2p 2
run p2p-mps-graph-ucx MPINCCL_TRANSPORT=ucx TEST_P2P_ONLY=graph_small -- test_p2p 2
run p2p-mps-graph-inbox MPINCCL_EAGER_GRAPH=1 TEST_P2P_ONLY=graph_small -- test_p2p 2 4
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
unset CUDA_MPS_PIPE_DIRECTORY
step "old behaviour: count 0 returns at once"
cp src/core/enqueue.c /tmp/enqueue.c.new
python3 - <<'PY'
p='src/core/enqueue.c'; s=open(p).read()
old="  return mpn_group_add_op(&op);\n}\n\nMPN_API(ncclResult_t, ncclSend"
assert old in s
s=s.replace(old,"  if (count == 0) return ncclSuccess;\n"+old,1); open(p,'w').write(s)
PY
make -j16 > $out/old-build.log 2>&1 || tail $out/old-build.log
for np in 1 2; do MPINCCL_TEST_NP=$np TEST_P2P_ONLY=empty_messages tests/run-test ./tests/gpu/test_p2p > $out/old-empty-$np.log 2>&1; echo "   old empty_messages np=$np: exit $? :: $(grep -h 'expected\|failures$' $out/old-empty-$np.log | head -4 | tr '\n' ' ' | cut -c1-400)"; done
cp /tmp/enqueue.c.new src/core/enqueue.c && make -j16 > /dev/null 2>&1
MPINCCL_TEST_NP=2 TEST_P2P_ONLY=empty_messages tests/run-test ./tests/gpu/test_p2p > $out/new-empty.log 2>&1; echo "   new again empty_messages np=2: exit $?"
step done
