#!/usr/bin/env bash
# session 45, call 3: first_launch.cu with k2 loaded (cuFuncLoad) but not launched before the wait,
# plain and under memcheck; test_p2p and test_rma threads_ring under memcheck with lazy and eager loading.
out=$1
nvcc -O2 -o /tmp/first_launch .device/first_launch.cu -lcuda || exit 1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for v in "plain lazy loaded::loaded" "memcheck lazy loaded::loaded" "memcheck lazy warm::warm"; do
  name=${v%%:*}; rest=${v#*:}; envs=${rest%%:*}; arg=${rest#*:}
  case $name in memcheck*) tool="$cs --tool memcheck" ;; *) tool="" ;; esac
  echo "== $name"
  env $envs timeout 60 $tool /tmp/first_launch $arg 2>&1 | tail -4; echo "exit ${PIPESTATUS[0]}"
done
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
M="$cs --report-api-errors no --error-exitcode 9 --tool memcheck"
i=0
s() { local t=$1 np=$2 load=$3; shift 3; i=$((i+1)); local t0=$SECONDS
  CUDA_MODULE_LOADING=$load TEST_P2P_ONLY=threads_ring TEST_RMA_ONLY=threads_ring timeout 90 mpirun -np $np $flags \
    -x CUDA_MODULE_LOADING -x TEST_P2P_ONLY -x TEST_RMA_ONLY "$@" ./tests/gpu/$t > $out/s$i.log 2>&1
  echo "$t threads_ring np $np $load $( [ $# -gt 0 ] && echo memcheck || echo plain): exit $? in $((SECONDS-t0)) s; $(grep -c 'ERROR SUMMARY: 0 errors' $out/s$i.log) ranks 0 errors; $(grep -h 'failures$' $out/s$i.log | tr '\n' ' ')"
  grep -h 'hangs\|ERROR SUMMARY: [1-9]\|Invalid\|expected' $out/s$i.log | head -3; }
for t in test_p2p test_rma; do
  s $t 1 LAZY $M; s $t 1 EAGER $M; s $t 2 EAGER $M; s $t 2 LAZY
done
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
