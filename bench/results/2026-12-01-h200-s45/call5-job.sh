#!/usr/bin/env bash
# session 45, call 5: sync_beside.cu plain and under memcheck, with and without a kernel on B.
nvcc -O2 -o /tmp/sync_beside .device/sync_beside.cu -lcuda || exit 1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in "" "$cs --tool memcheck" "$cs --tool racecheck" "$cs --tool synccheck"; do
  for arg in "" nokernel; do
    echo "== ${tool:+${tool##* }} ${tool:-plain} ${arg:-kernel}" | sed 's|/[^ ]*compute-sanitizer --tool||'
    timeout 60 $tool /tmp/sync_beside $arg 2>&1 | grep -v "^=*$\|COMPUTE-SANITIZER" | tail -3; echo "exit ${PIPESTATUS[0]}"
  done
done
