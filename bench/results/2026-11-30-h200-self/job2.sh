#!/usr/bin/env bash
# Second call of the session: the mutations of job.sh again, whose scratch
# builds there relinked the library but not test_rma (a check program
# links the library's objects itself), so they ran the unchanged test; then
# the barrier at 2, 4 and 8 ranks without MPS, 5 jobs each.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
mutate() { # name step sed-expression
  cp src/rma/self.c /tmp/self.c.orig
  sed -i "$3" src/rma/self.c
  if cmp -s src/rma/self.c /tmp/self.c.orig; then echo "   $1: the mutation did not apply"; return; fi
  make -j16 tests/gpu/test_rma >/dev/null 2>&1 || echo "   $1: build failed"
  TEST_RMA_ONLY=$2 MPINCCL_TEST_TIMEOUT=40 MPINCCL_TEST_NP=2 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" \
    tests/run-test ./tests/gpu/test_rma >"$out/mut-$1.log" 2>&1
  echo "   $1 ($2): exit $?"
  cp /tmp/self.c.orig src/rma/self.c
}
echo "== mutations: each must fail its test"
mutate nostand self_order 's/\*addr = stand ? self->stand_addr : counter;/*addr = counter; (void)stand;/; s/\*value = stand ? self->stand_value : count - 1;/*value = count - 1;/'
mutate nowait self_order 's/\*addr = stand ? self->stand_addr : counter;/*addr = counter;/; s/\*value = stand ? self->stand_value : count - 1;/*value = stand ? 0 : count - 1;/'
mutate early self_early_wait 's/if (expected0 > sent0) return;/if (0) return;/'
make -j16 tests/gpu/test_rma >/dev/null 2>&1
echo "== the unchanged test, same steps"
TEST_RMA_ONLY=self_ MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" \
  tests/run-test ./tests/gpu/test_rma >"$out/self-steps.log" 2>&1
echo "   self_ steps at 2, 4, 8: exit $?"
echo "== barrier, no MPS, 5 jobs each"
for np in 2 4 8; do
  for k in 1 2 3 4 5; do
    line=$(timeout 60 mpirun -np $np $flags ./bench/mpinccl_bench -o barrier -n 1000 -w 100 2>&1 |
      grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   np $np job $k: ${line:-failed}"
  done
done | tee "$out/barrier-np.txt"
tar czf "$out/logs.tgz" -C "$out" $(cd "$out" && ls *.log)
