#!/usr/bin/env bash
# session 44, call 9: wait_beside.cu, plain and under compute-sanitizer memcheck (threads_ring's stop).
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
$nvcc -arch=sm_90 -o /tmp/wb .device/wait_beside.cu -lcuda || exit 1
echo "== plain"; timeout 15 /tmp/wb; echo "exit $?"
echo "== memcheck"; timeout 30 $san --tool memcheck /tmp/wb 2>&1 | tail -5; echo "exit ${PIPESTATUS[0]}"
