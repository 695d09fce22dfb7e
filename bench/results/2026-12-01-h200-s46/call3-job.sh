#!/usr/bin/env bash
# session 46, call 3: compute-sanitizer memcheck over whole GPU tests at 2 ranks:
# test_rma (every step), test_p2p without the steps the tool cannot follow
# (threads_ring: its cudaStreamSynchronize waits for the other threads' streams;
# sender_gone_loop, graph_small, graph_recapture: recycled IPC handles, P2P.md known
# problem 1), and test_p2p over UCX (MPINCCL_TRANSPORT=ucx).
out=$1
t0=$SECONDS
if [ ! -f Makefile ]; then (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1; fi
make -j16 > $out/build.log 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma > $out/build-tests.log 2>&1 || { tail -20 $out/build*.log; exit 1; }
echo "built in $((SECONDS-t0)) s"
flags=$(tests/run-test --mpirun-flags)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
one() { # tag limit env... -- program
  local tag=$1 limit=$2; shift 2
  local t1=$SECONDS
  env "$@" timeout $limit mpirun -np 2 $flags -x TEST_P2P_SKIP -x TEST_RMA_SKIP -x MPINCCL_TRANSPORT \
    "$san" --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/$prog > $out/$tag.log 2>&1
  echo "$tag: exit $? in $((SECONDS-t1)) s; $(grep -c 'ERROR SUMMARY: 0 errors' $out/$tag.log) ranks with 0 errors; $(grep -h 'failures$' $out/$tag.log | tr '\n' ' ')"
  grep -h 'ERROR SUMMARY\|Invalid\|EXPECT' $out/$tag.log | sort | uniq -c | head -6
}
prog=test_rma one rma 200 MPINCCL_TRANSPORT=auto TEST_P2P_SKIP=none TEST_RMA_SKIP=none
prog=test_p2p one p2p 170 MPINCCL_TRANSPORT=auto TEST_RMA_SKIP=none TEST_P2P_SKIP=threads_ring,sender_gone_loop,graph_small,graph_recapture
prog=test_p2p one p2p-ucx 120 MPINCCL_TRANSPORT=ucx TEST_RMA_SKIP=none TEST_P2P_SKIP=threads_ring,sender_gone_loop,graph_small,graph_recapture
gzip $out/*.log
echo "done in $((SECONDS-t0)) s"
