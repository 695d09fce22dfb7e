#!/usr/bin/env bash
# session 40, last call (one GPU): build; make check; held_sender (kernel
# form) against the old early return of count 0, relinked, then restored;
# under MPS empty_messages over CUDA IPC and UCX at 2 and 4.
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h 'empty_messages' tests/gpu/test_p2p.log tests/gpu/test_p2p_ucx.sh.log | sort | uniq -c
step "old behaviour: count 0 returns at once"
cp src/core/enqueue.c /tmp/enqueue.c.new
python3 - <<'PY'
p='src/core/enqueue.c'; s=open(p).read()
old="  return mpn_group_add_op(&op);\n}\n\nMPN_API(ncclResult_t, ncclSend"
assert old in s
s=s.replace(old,"  if (count == 0) return ncclSuccess;\n"+old,1); open(p,'w').write(s)
PY
make -j16 check TESTS= > $out/old-build.log 2>&1 || tail $out/old-build.log
MPINCCL_TEST_NP=2 TEST_P2P_ONLY=empty_messages tests/run-test ./tests/gpu/test_p2p > $out/old-empty.log 2>&1; echo "   old empty_messages np=2: exit $? :: $(grep -h 'expected\|failures$' $out/old-empty.log | head -4 | tr '\n' ' ' | cut -c1-400)"
cp /tmp/enqueue.c.new src/core/enqueue.c && make -j16 check TESTS= > /dev/null 2>&1
MPINCCL_TEST_NP=2 TEST_P2P_ONLY=empty_messages tests/run-test ./tests/gpu/test_p2p > $out/new-empty.log 2>&1; echo "   new again empty_messages np=2: exit $?"
step "MPS: empty_messages over UCX and IPC"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
flags=$(tests/run-test --mpirun-flags)
for t in ipc ucx; do env $( [ $t = ucx ] && echo MPINCCL_TRANSPORT=ucx ) TEST_P2P_ONLY=empty_messages MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/test_p2p > $out/mps-empty-$t.log 2>&1; echo "   MPS empty_messages $t np=2 4: exit $? :: $(grep -h 'failures$' $out/mps-empty-$t.log | tr '\n' ' ')"; done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
step done
