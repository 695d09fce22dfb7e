#!/usr/bin/env bash
# Twenty-ninth session, one H200: make check after the reviews' fixes, then
# test_p2p sender_gone_first without and under MPS (where its message takes
# the inbox), and under MPS with the kept pairs taken out (the receiver
# must fail or time out), restored after.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
build() { make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }; }
build
make -j16 check >"$out/check.log" 2>&1
echo "== make check: exit $?"; grep -E "^(FAIL|ERROR|SKIP):|^# " "$out/check.log"
for f in $(grep -E "^(FAIL|ERROR):" "$out/check.log" | awk '{print $2}'); do cp "$f.log" "$out/" 2>/dev/null; done
flags=$(tests/run-test --mpirun-flags)
one() { # label np [env...]
  local label=$1 np=$2; shift 2
  env "$@" TEST_P2P_ONLY=sender_gone_first MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP=$np \
    MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY ${extra:-}" tests/run-test ./tests/gpu/test_p2p >"$out/$label.log" 2>&1
  echo "== $label (np $np): exit $?"; grep -E "wrong|expected|failures|PASS|FAIL|timed out" "$out/$label.log" | head -6
}
one gone-np2 2
one gone-np4 4
mps_start >/dev/null 2>&1 && sleep 1
extra="-x CUDA_MPS_PIPE_DIRECTORY"
one gone-mps-np2 2
one gone-mps-np3 3
cp src/p2p/pair.c /tmp/pair.c.keep
sed -i 's/      int keep = unopened \&\& kept_add(m->pair.name);/      int keep = 0;/' src/p2p/pair.c
cmp -s src/p2p/pair.c /tmp/pair.c.keep && echo "   mutation did not apply"
build
one no-keep-mps-np2 2
cp /tmp/pair.c.keep src/p2p/pair.c
build
mps_stop >/dev/null 2>&1
ls /dev/shm | grep -c mpinccl | sed 's/^/mpinccl names left in \/dev\/shm: /'
