#!/usr/bin/env bash
# session 51, call 4: the final library source (after the copies-lost report and the late-served id): make check; test_comm_mpi at 3
# five times; the floors of a small sweep; test_p2p, test_rma under MPS at 2 and 4, test_peer_left under MPS.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
cp tests/gpu/launch_bench.sh.log tests/gpu/test_peer_left.log tests/gpu/launch_halo3d.sh.log tests/gpu/launch_ring.sh.log $out/ 2>/dev/null
grep -h 'launch_bench:' tests/gpu/launch_bench.sh.log | sed 's/^launch_bench: //' | tr '\n' ';'; echo
grep -h 'test_peer_left:' tests/gpu/test_peer_left.log | sort | uniq -c
grep -h 'FAIL\|PASS' tests/gpu/launch_halo3d.sh.log | grep -c PASS
grep -h 'failures$' tests/gpu/test_p2p_ucx.sh.log tests/gpu/test_rma_ucx.sh.log | sort | uniq -c
grep -h 'test_abort:' tests/gpu/launch_abort_*.sh.log | sed 's/.*: //' | sort | uniq -c
flags=$(tests/run-test --mpirun-flags)
for i in 1 2 3 4 5; do timeout 100 mpirun -np 3 $flags tests/mpi/test_comm_mpi > $out/comm-mpi-3-$i.log 2>&1; echo -n "test_comm_mpi np3 rc=$? "; done; echo
mpirun -np 2 $flags bench/mpinccl_bench -o sendrecv -e 64K -n 5 --json $out/floors.json > $out/floors.txt 2>&1
echo "small sweep rc=$? copy_bytes=$(grep -o '"copy_bytes": [0-9]*' $out/floors.json)"; grep -E '^# (floors|copy|flag|delegated|engine)' $out/floors.txt | head -6
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for np in 2 4; do
  for t in test_p2p test_rma; do
    MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=200 MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
      tests/run-test tests/gpu/$t > $out/mps-$t-$np.log 2>&1
    echo "MPS $t np=$np rc=$? :: $(grep -h 'failures$' $out/mps-$t-$np.log | tr '\n' ' ')"
  done
done
MPINCCL_TEST_NP=2 MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test tests/gpu/test_peer_left > $out/mps-peer-left.log 2>&1
echo "MPS test_peer_left rc=$?"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
for f in $out/test_*.log $out/*.sh.log; do [ -f "$f" ] && grep -hE 'expected|F:|E:|FAIL' "$f" | head -5; done
grep -hE 'expected|FAIL' $out/mps-peer-left.log | head -5
rm -f $out/mps-*.log $out/comm-mpi-*.log $out/*.sh.log $out/test_*.log $out/floors.*
