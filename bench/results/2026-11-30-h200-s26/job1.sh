#!/usr/bin/env bash
# Twenty-sixth session, call 2: the full run (bench/run-device.sh
# --no-variants: make check, the GPU tests under MPS, the benchmarks) at the
# code with creation funneled below MPI_THREAD_MULTIPLE and pair files
# unlinked by their second side; then a mutation of the latter: without the
# second side's unlink, test_gpu_comm at 2 processes must find the files.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
bench/run-device.sh "$out/res" --no-variants > "$out/log.txt" 2>&1
echo "== run-device.sh: exit $?"
cp src/p2p/pair.c /tmp/pair.c.good
sed -i 's/^        shm_unlink(name);$/        (void)0; \/* mutation: the second side keeps the name *\//' src/p2p/pair.c
grep -c "mutation: the second side" src/p2p/pair.c
make -j16 >/dev/null 2>&1 && make -j16 tests/gpu/test_gpu_comm >/dev/null 2>&1 || echo "mutation build failed"
MPINCCL_TEST_NP=2 tests/run-test ./tests/gpu/test_gpu_comm > "$out/mutation.log" 2>&1
echo "== mutation (no unlink by the second side): test_gpu_comm np 2 exit $? (must fail)"
grep -c "is still there" "$out/mutation.log"
grep -m2 "is still there" "$out/mutation.log"
cp /tmp/pair.c.good src/p2p/pair.c
make -j16 >/dev/null 2>&1 && make -j16 tests/gpu/test_gpu_comm >/dev/null 2>&1
ls /dev/shm | grep -c mpinccl || true
