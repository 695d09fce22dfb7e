#!/usr/bin/env bash
# session 40, two GPUs: where empty_messages hangs at 2 processes (one per
# GPU).  Scratch progress prints in the test (this job's copy only).
out=$1
python3 - <<'PY'
p='tests/gpu/test_p2p.c'; s=open(p).read()
s=s.replace("  held_sender(0);\n  held_sender(1);","  fprintf(stderr, \"[rank %d] part 1 done\\n\", rank);\n  held_sender(0);\n  fprintf(stderr, \"[rank %d] held 0 done\\n\", rank);\n  held_sender(1);\n  fprintf(stderr, \"[rank %d] held 1 done\\n\", rank);")
s=s.replace("  MPI_Barrier(MPI_COMM_WORLD);\n  sender_released = 1;","  fprintf(stderr, \"[rank %d] held %d: at barrier\\n\", rank, captured);\n  MPI_Barrier(MPI_COMM_WORLD);\n  sender_released = 1;")
open(p,'w').write(s)
PY
[ -f Makefile ] || { (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
flags=$(tests/run-test --mpirun-flags)
for v in "X=1" "MPINCCL_KERNEL_SYNC_EARLY=0" "MPINCCL_KERNEL_SYNC=0" "MPINCCL_EAGER_MAX=0"; do
  echo "== $v"
  env $v TEST_P2P_ONLY=empty_messages timeout 40 mpirun -np 2 $flags ./tests/gpu/test_p2p > $out/diag.tmp 2>&1; echo "exit $?"
  grep -E 'rank|failures' $out/diag.tmp | head -20; cat $out/diag.tmp >> $out/diag.log
done
