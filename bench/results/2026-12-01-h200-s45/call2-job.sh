#!/usr/bin/env bash
# session 45, call 2: first_launch.cu plain (lazy and eager module loading) and under memcheck
# (eager loading; k2 first launched behind the wait, or launched once before).
out=$1
nvcc -O2 -o /tmp/first_launch .device/first_launch.cu -lcuda || exit 1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for v in "plain lazy::" "plain eager:CUDA_MODULE_LOADING=EAGER:" "plain eager warm:CUDA_MODULE_LOADING=EAGER:warm" \
         "memcheck eager:CUDA_MODULE_LOADING=EAGER:" "memcheck eager warm:CUDA_MODULE_LOADING=EAGER:warm" "memcheck lazy::"; do
  name=${v%%:*}; rest=${v#*:}; envs=${rest%%:*}; arg=${rest#*:}
  case $name in memcheck*) tool="$cs --tool memcheck" ;; *) tool="" ;; esac
  echo "== $name"
  env $envs timeout 60 $tool /tmp/first_launch $arg 2>&1 | tail -4; echo "exit ${PIPESTATUS[0]}"
done
