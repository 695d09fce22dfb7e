#!/usr/bin/env bash
# session 41, diagnosis: where rank 0's launch in test_p2p beside_a_close
# waits (gdb stacks 3 s in, traced IPC and P2P).
out=$1
step() { echo "== $(date +%T) $*"; }
[ -x tests/gpu/test_p2p ] || { (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1; make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1; }
flags=$(tests/run-test --mpirun-flags)
one() { # label VAR=value...
  local label=$1; shift
  local xs="" v; for v in "$@"; do xs="$xs -x ${v%%=*}"; done
  env "$@" TEST_P2P_ONLY=beside_a_close NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=IPC,P2P,INIT mpirun -np 2 $flags -x TEST_P2P_ONLY -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS $xs tests/gpu/test_p2p > $out/run-$label.log 2>&1 &
  local pid=$!
  sleep 4
  for p in $(pgrep -f tests/gpu/test_p2p | grep -v $pid); do
    echo "---- pid $p" >> $out/stacks-$label.txt
    timeout 20 gdb -p $p -batch -ex "thread apply all bt 16" >> $out/stacks-$label.txt 2>&1
  done
  wait $pid; echo "   $label: exit $? :: $(grep -h 'failures$\|expected' $out/run-$label.log | tr '\n' ' ')"
}
step "diag"
one plain
grep -n "ncclGroupEnd\|mpn_\|cuda\|libcuda" $out/stacks-plain.txt | grep -v "^.*?? ()" | head -80
step done
