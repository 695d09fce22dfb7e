#!/usr/bin/env bash
# Twenty-third session, one device call: the left-out write of a barrier's
# signal to the rank itself (src/rma/self.c).  Usage, in the repo root on the
# GPU machine: bench/results/2026-11-30-h200-self/job.sh OUTDIR
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
step() { echo "== $* ($(date +%T))"; }
rma() { # log np-list env...
  local log=$1 nps=$2; shift 2
  local x="" v
  for v in "$@"; do x+=" -x ${v%%=*}"; done
  env "$@" MPINCCL_TEST_TIMEOUT=90 MPINCCL_TEST_NP="$nps" MPINCCL_MPIRUN_FLAGS="$flags $x" \
    tests/run-test ./tests/gpu/test_rma >"$out/$log.log" 2>&1
  echo "   $log: exit $? $(grep -cE 'FAIL|fail' "$out/$log.log") lines with fail"
}
step "test_rma, no MPS"
rma rma-elide "1 2 3 4 8" MPINCCL_RMA_SELF_ELIDE=1
rma rma-noelide "2 4" MPINCCL_RMA_SELF_ELIDE=0
step "barrier A/B, 8 ranks, no MPS"
for k in 1 2 3; do
  for e in 1 0; do
    line=$(MPINCCL_RMA_SELF_ELIDE=$e timeout 60 mpirun -np 8 $flags -x MPINCCL_RMA_SELF_ELIDE \
      ./bench/mpinccl_bench -o barrier -n 1000 -w 100 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   elide=$e job $k: ${line:-failed}"
  done
done | tee "$out/barrier-ab.txt"
step "plain CUDA barrier shapes, 8 ranks"
timeout 120 mpirun -np 8 $flags ./bench/mpinccl_barriers -n 1000 >"$out/barrier-shapes.txt" 2>&1
cat "$out/barrier-shapes.txt" | tail -8
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check >"$out/check.log" 2>&1
grep -E '^# |^FAIL' "$out/check.log"
step "MPS: test_rma 2 4 8, barrier"
mps_start
rma rma-mps "2 4 8" CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY
for k in 1 2 3; do
  line=$(timeout 60 mpirun -np 8 $flags -x CUDA_MPS_PIPE_DIRECTORY ./bench/mpinccl_bench -o barrier -n 1000 -w 100 2>&1 |
    grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
  echo "   MPS job $k: ${line:-failed}"
done | tee "$out/barrier-mps.txt"
mps_stop
step "mutations (scratch, reverted): each must fail its test"
cp src/rma/self.c /tmp/self.c.orig
sed -i 's/\*addr = stand ? self->stand_addr : counter;/*addr = counter; (void)stand;/; s/\*value = stand ? self->stand_value : count - 1;/*value = count - 1;/' src/rma/self.c
make -j16 >/dev/null 2>&1 && TEST_RMA_ONLY=self_order MPINCCL_TEST_TIMEOUT=40 MPINCCL_TEST_NP=2 \
  MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" tests/run-test ./tests/gpu/test_rma >"$out/mut-nostand.log" 2>&1
echo "   no stand-in: exit $?"
cp /tmp/self.c.orig src/rma/self.c
sed -i 's/if (expected0 > sent0) return;/if (0) return;/' src/rma/self.c
make -j16 >/dev/null 2>&1 && TEST_RMA_ONLY=self_early_wait MPINCCL_TEST_TIMEOUT=40 MPINCCL_TEST_NP=2 \
  MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" tests/run-test ./tests/gpu/test_rma >"$out/mut-early.log" 2>&1
echo "   early wait ignored: exit $?"
cp /tmp/self.c.orig src/rma/self.c
make -j16 >/dev/null 2>&1
step done
