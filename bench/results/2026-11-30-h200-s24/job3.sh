#!/usr/bin/env bash
# Twenty-fourth session, call 3: chains for every front whose moved
# messages come from several processes (desk review: chain_single hung).
# 1. a scratch build with the old rule (chains only for several steps, and
#    the flag kernel for single-step fronts) as /tmp/libold; chain_single
#    must hang there, without MPS and under MPS;
# 2. as landed: test_p2p's chain steps at 3, 4, 8 without MPS and 3, 4
#    under MPS; all of test_p2p at 2, 3, 4 without MPS and 2, 4 under MPS;
# 3. old against new, interleaved: halo3d with 4 ranks (the demo), the
#    8-rank halo and the 4-rank alltoall, both regimes.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
flags=$(tests/run-test --mpirun-flags)
cp src/p2p/issue.c /tmp/issue.c.new
sed -i 's/^  return several;$/  return several \&\& front_steps(plans, n, s) > 1;/; /if (half0 == 0 \&\& chained(plans, n, s)) c.ok = 0;/d' src/p2p/issue.c
cmp -s src/p2p/issue.c /tmp/issue.c.new && echo "   the old rule did not apply"
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mkdir -p /tmp/libold && cp -a .libs/libmpinccl.so* /tmp/libold/
echo "== old rule: chain_single (must hang)"
TEST_P2P_ONLY=chain_single MPINCCL_TEST_TIMEOUT=30 MPINCCL_TEST_NP=3 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/old-chain-nomps.log" 2>&1
echo "   no MPS: exit $?"
mps_start
TEST_P2P_ONLY=chain_single MPINCCL_TEST_TIMEOUT=30 MPINCCL_TEST_NP=3 \
  MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY -x CUDA_MPS_PIPE_DIRECTORY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/old-chain-mps.log" 2>&1
echo "   MPS: exit $?"
mps_stop
cp /tmp/issue.c.new src/p2p/issue.c
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "== as landed"
TEST_P2P_ONLY=chain_ MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="3 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/chain-nomps.log" 2>&1
echo "   chain_ steps at 3, 4, 8, no MPS: exit $?"
MPINCCL_TEST_NP="2 3 4" tests/run-test ./tests/gpu/test_p2p >"$out/p2p-nomps.log" 2>&1
echo "   test_p2p at 2, 3, 4, no MPS: exit $?"
mps_start
TEST_P2P_ONLY=chain_ MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="3 4" \
  MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY -x CUDA_MPS_PIPE_DIRECTORY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/chain-mps.log" 2>&1
echo "   chain_ steps at 3, 4, MPS: exit $?"
MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/p2p-mps.log" 2>&1
echo "   test_p2p at 2, 4, MPS: exit $?"
mps_stop
ab() { # regime extra-mpirun-flags
  local r=$1 x=$2 lib t
  for k in 1 2 3; do
    for lib in old new; do
      lp=$([ $lib = old ] && echo /tmp/libold || echo "$PWD/.libs")
      t=$(LD_LIBRARY_PATH=$lp:$LD_LIBRARY_PATH timeout 120 mpirun -np 4 $flags $x -x LD_LIBRARY_PATH ./examples/.libs/halo3d 2>&1 |
        sed -n 's|.*time/iter *\([0-9.]*\) us.*|\1|p')
      echo "   $r halo3d np4 $lib run $k: ${t:-failed} us"
      t=$(LD_LIBRARY_PATH=$lp:$LD_LIBRARY_PATH timeout 120 mpirun -np 8 $flags $x -x LD_LIBRARY_PATH ./bench/.libs/mpinccl_bench -o halo -b 64K -e 64K -n 20 2>&1 |
        grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
      echo "   $r halo np8 $lib run $k: ${t:-failed}"
      t=$(LD_LIBRARY_PATH=$lp:$LD_LIBRARY_PATH timeout 120 mpirun -np 4 $flags $x -x LD_LIBRARY_PATH ./bench/.libs/mpinccl_bench -o alltoall -b 1M -e 4M -f 4 -n 10 2>&1 |
        grep -E '^ +[0-9]+ +[0-9.]+ ' | tr -s ' ' | tr '\n' '|')
      echo "   $r alltoall np4 $lib run $k: ${t:-failed}"
    done
  done
}
echo "== old against new (interleaved)"
ab nomps "" | tee "$out/ab.txt"
mps_start
ab mps "-x CUDA_MPS_PIPE_DIRECTORY" | tee -a "$out/ab.txt"
mps_stop
for f in "$out"/*.log; do grep -E 'failures|np=.*(PASS|FAIL|timed)|hung|wrong' "$f" | head -5 | sed "s|^|$(basename $f): |"; done
