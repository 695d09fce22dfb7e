#!/usr/bin/env bash
# session 44, call 5: does compute-sanitizer follow the driver's count of CUDA IPC opens (ipc_twice.cu)?
out=$1
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
$nvcc -arch=sm_90 -o /tmp/ipc_twice .device/ipc_twice.cu || exit 1
echo "== plain"; timeout 60 /tmp/ipc_twice; echo "exit $?"
echo "== memcheck"; timeout 120 $san --target-processes all --tool memcheck --print-limit 2 /tmp/ipc_twice 2>&1 | grep -v 'Host Frame' | head -30; echo "exit ${PIPESTATUS[0]}"
