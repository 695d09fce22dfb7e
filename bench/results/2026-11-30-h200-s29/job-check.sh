#!/usr/bin/env bash
# Twenty-ninth session, one H200: make check (GPU tests included), then the
# new steps against their mutations: test_rma windows_in_group with the
# deferral taken out (the first registration must time out), test_p2p
# pool_default_stream with a stage on the legacy stream taken as unused
# again (must read wrong data), both restored after.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
build() { make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }; }
build
make -j16 check >"$out/check.log" 2>&1
echo "== make check: exit $?"; grep -E "^(FAIL|ERROR|SKIP):|^# " "$out/check.log"
flags=$(tests/run-test --mpirun-flags)
one() { # label test step np [env...]
  local label=$1 t=$2 step=$3 np=$4 var; shift 4
  var=$([ "$t" = test_p2p ] && echo TEST_P2P_ONLY || echo TEST_RMA_ONLY)
  env "$@" $var=$step MPINCCL_TEST_TIMEOUT=90 MPINCCL_TEST_NP=$np MPINCCL_MPIRUN_FLAGS="$flags -x $var" \
    tests/run-test ./tests/gpu/$t >"$out/$label.log" 2>&1
  echo "== $label ($t $step, np $np): exit $?"; grep -E "wrong|expected|failures|PASS|FAIL" "$out/$label.log" | head -8
}
one landed-windows test_rma windows_in_group 2
one landed-pool test_p2p pool_default_stream 2
one landed-limit test_p2p graph_group_limit 2
cp src/rma/window.c /tmp/window.c.keep
sed -i 's/  if (mpn_group_depth() > 0) return mpn_win_defer_register/  if (0) return mpn_win_defer_register/' src/rma/window.c
cmp -s src/rma/window.c /tmp/window.c.keep && echo "   mutation 1 did not apply"
build
one no-defer-windows test_rma windows_in_group 1 MPINCCL_BOOTSTRAP_TIMEOUT=5
cp /tmp/window.c.keep src/rma/window.c
cp src/p2p/stage.c /tmp/stage.c.keep
sed -i 's/  } else if (use == MPN_STAGE_STREAM \&\& cudaEventRecord/  } else if (use == MPN_STAGE_STREAM \&\& stream != NULL \&\& cudaEventRecord/' src/p2p/stage.c
cmp -s src/p2p/stage.c /tmp/stage.c.keep && echo "   mutation 2 did not apply"
build
one null-unused-pool test_p2p pool_default_stream 2
cp /tmp/stage.c.keep src/p2p/stage.c
build
