#!/usr/bin/env bash
# Twenty-sixth session, call 4: the full run at the session's final library
# code (bench/run-device.sh --no-variants), then two mutations, each of
# which must make its test fail: without the watchdog's repeated release,
# launch_fault_ipc.sh (3 graph replays after a peer's death); without the
# stages' unpin at a graph's destroy, test_p2p graph_pool_stage at 2.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
bench/run-device.sh "$out/res" --no-variants > "$out/log.txt" 2>&1
echo "== run-device.sh: exit $?"
grep -E '^(FAIL|ERROR|# (TOTAL|PASS|SKIP|FAIL))' "$out/res/check.log"
mutate() { # file sed-expression label
  cp "$1" "/tmp/$(basename "$1").good"
  sed -i "$2" "$1"
  echo "== mutation $3: $(grep -c 'mutation:' "$1") line(s) changed"
  make -j16 >/dev/null 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_fault_ipc >/dev/null 2>&1 || echo "mutation build failed"
}
restore() { cp "/tmp/$(basename "$1").good" "$1"; }
mutate src/core/watchdog.c 's/^      mpn_p2p_release_peer(comm, peer);$/      (void)0; \/* mutation: released once *\//' "released once"
tests/gpu/launch_fault_ipc.sh > "$out/mutation-release.log" 2>&1
echo "   launch_fault_ipc.sh: exit $? (must fail)"
grep -h "test_fault_ipc:" "$out/mutation-release.log"
restore src/core/watchdog.c
mutate src/p2p/graphs.c 's/^    if (r->held\[i\].stage) mpn_stage_unpin(r->held\[i\].stage);$/    (void)0; \/* mutation: stages stay pinned *\//' "stages stay pinned"
TEST_P2P_ONLY=graph_pool_stage MPINCCL_TEST_NP=2 MPINCCL_MPIRUN_FLAGS="$(tests/run-test --mpirun-flags) -x TEST_P2P_ONLY" \
  tests/run-test ./tests/gpu/test_p2p > "$out/mutation-stage.log" 2>&1
echo "   test_p2p graph_pool_stage at 2: exit $? (must fail)"
grep -h "pool stages held" "$out/mutation-stage.log"
restore src/p2p/graphs.c
make -j16 >/dev/null 2>&1
grep -h "pool stages held" "$out/res/check.log" tests/gpu/test_p2p.log 2>/dev/null | sort | uniq -c
grep -h "test_fault_ipc:" tests/gpu/launch_fault_ipc.sh.log 2>/dev/null
