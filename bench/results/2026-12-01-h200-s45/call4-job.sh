#!/usr/bin/env bash
# session 45, call 4: test_p2p threads_ring under memcheck (1 process); after 12 s every thread's
# host stack (gdb or cuda-gdb attached), and where each thread sleeps in the kernel.
out=$1
[ -f Makefile ] || { (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1; }
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
dbg=$(command -v gdb || echo /usr/local/cuda/bin/cuda-gdb); echo "debugger: $dbg"
flags=$(tests/run-test --mpirun-flags)
NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=ALL NCCL_DEBUG_FILE=$out/trace.%p.txt TEST_P2P_ONLY=threads_ring timeout 60 mpirun -np 1 $flags \
  -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS -x NCCL_DEBUG_FILE -x TEST_P2P_ONLY $cs --tool memcheck ./tests/gpu/test_p2p > $out/run.log 2>&1 &
sleep 14
pid=$(pgrep -x test_p2p | head -1)
echo "pid $pid: $(tr '\0' ' ' < /proc/$pid/cmdline)"
for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm) wchan=$(cat $t/wchan) $(cut -d' ' -f1-3 $t/syscall)"; done
timeout 60 $dbg -p $pid -batch -ex "set pagination off" -ex "thread apply all bt 25" > $out/bt.txt 2>&1; echo "debugger exit $?"
grep -E "^Thread|^#" $out/bt.txt | grep -v "libcuda.so\|in ?? ()" | head -150
wait
tail -5 $out/run.log
cd $out && tar czf res.tgz *.txt *.log && find . -maxdepth 1 \( -name '*.log' -o -name '*.txt' \) -delete
