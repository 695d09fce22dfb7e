#!/usr/bin/env bash
# Twenty-third session: does the 8 B sendrecv's slow state (no MPS) depend
# on which of the two processes delegates?  A scratch build lets the higher
# rank delegate for messages over 32 B, so in one job the 8 B row has the
# lower rank delegating and the 64 B row the higher; the unchanged build
# is the control (both rows: the lower rank).  Usage: job.sh OUTDIR
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mkdir -p /tmp/libA /tmp/libB && cp -a .libs/libmpinccl.so* /tmp/libA/
cp src/p2p/sliced.c /tmp/sliced.c.orig
sed -i 's/return p->prepared \&\& p->op->comm->rank < p->op->peer \&\& mpn_sliced_peer(p->op);/return p->prepared \&\& ((p->op->comm->rank < p->op->peer) != (p->op->bytes > 32)) \&\& mpn_sliced_peer(p->op);/' src/p2p/sliced.c
cmp -s src/p2p/sliced.c /tmp/sliced.c.orig && echo "the scratch change did not apply"
make -j16 >>"$out/build.log" 2>&1
cp -a .libs/libmpinccl.so* /tmp/libB/
cp /tmp/sliced.c.orig src/p2p/sliced.c && make -j16 >>"$out/build.log" 2>&1
LD_LIBRARY_PATH=/tmp/libA ldd bench/.libs/mpinccl_bench | grep mpinccl
flags=$(tests/run-test --mpirun-flags)
for k in 1 2 3 4 5 6 7 8; do
  for v in A B; do
    echo "== $v job $k"
    LD_LIBRARY_PATH=/tmp/lib$v timeout 60 mpirun -np 2 $flags -x LD_LIBRARY_PATH bench/.libs/mpinccl_bench \
      -o sendrecv -b 8 -e 64 -f 8 -n 200 -w 20 2>&1 | grep -E '^# +delegated|^ +(8|64) '
  done
done | tee "$out/rows.txt"
