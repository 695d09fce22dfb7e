#!/usr/bin/env bash
# Twenty-ninth session (from the twenty-eighth's): default stream handles in groups spanning GPUs
# (src/core/alias.c), on a machine with 2 GPUs.  The init_all_devices steps
# of test_p2p and test_rma as landed, then without the aliases and with
# aliases not forked (scratch: both must fail), then the steps with ranks
# of one process, test_p2p and test_rma at 2 processes, examples/ring.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
nvidia-smi -L
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
build() { make -j32 >>"$out/build.log" 2>&1 && make -j32 tests/gpu/test_p2p tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }; }
build
flags=$(tests/run-test --mpirun-flags)
one() { # label test step
  local label=$1 t=$2 step=$3 var
  var=$([ "$t" = test_p2p ] && echo TEST_P2P_ONLY || echo TEST_RMA_ONLY)
  env $var=$step MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP=1 MPINCCL_MPIRUN_FLAGS="$flags -x $var" \
    tests/run-test ./tests/gpu/$t >"$out/$label-$t.log" 2>&1
  echo "== $label $t $step: exit $?"; grep -E "init_all_devices|DEBUG|failures|wrong|before they|PASS|FAIL" "$out/$label-$t.log" | head -12
}
one landed test_p2p init_all_devices
one landed test_rma init_all_devices
cp src/core/group.c /tmp/group.c.keep
cp src/core/alias.c /tmp/alias.c.keep
sed -i 's/  if (res == ncclSuccess) res = mpn_alias_fork(lists, &alias);/  (void)0;/' src/core/group.c
cmp -s src/core/group.c /tmp/group.c.keep && echo "   mutation 1 did not apply"
build
one no-alias test_p2p init_all_devices
one no-alias test_rma init_all_devices
cp /tmp/group.c.keep src/core/group.c
sed -i 's/    if (err == cudaSuccess) err = cudaStreamWaitEvent(m->alias->s, m->alias->fork, 0);/    (void)0;/' src/core/alias.c
cmp -s src/core/alias.c /tmp/alias.c.keep && echo "   mutation 2 did not apply"
build
one no-fork test_p2p init_all_devices
one no-fork test_rma init_all_devices
cp /tmp/alias.c.keep src/core/alias.c
build
one again test_p2p init_all
one again test_p2p threads_ring
one again test_rma threads_
for t in test_p2p test_rma; do
  MPINCCL_TEST_TIMEOUT=120 MPINCCL_TEST_NP="2" tests/run-test ./tests/gpu/$t >"$out/$t-np2.log" 2>&1
  echo "== $t at 2 processes: exit $?"; grep -E "ranks, |np=.*(PASS|FAIL)" "$out/$t-np2.log"
done
for r in 2 4; do timeout 60 ./examples/ring -r $r 2>&1 | tail -1; done
# Twenty-ninth session: the UCX tests of make check on this machine (the
# destroy order of captured UCX work changed).
make -j32 check TESTS="tests/gpu/test_p2p_ucx.sh tests/gpu/test_rma_ucx.sh tests/gpu/launch_abort_ucx.sh tests/gpu/launch_fault_ucx.sh" >"$out/ucx-check.log" 2>&1
echo "== UCX tests: exit $?"; grep -E "^(PASS|FAIL|SKIP|ERROR):|^# " "$out/ucx-check.log"
