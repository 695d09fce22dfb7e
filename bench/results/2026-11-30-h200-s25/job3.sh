#!/usr/bin/env bash
# Twenty-fifth session, call 3: where the finalize marks' cost comes from.
# 8 B sendrecv under MPS (loops of 1000), 4 jobs each, interleaved: the
# library as committed (mark), without the marks (nomark: work_mark's body
# removed), marks keyed by handle without the stream id (noid), and the
# library at 1147341 (old).
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
( rm -rf /tmp/old && mkdir -p /tmp/old && tar xf .device/old.tar -C /tmp/old &&
  cd /tmp/old && autoreconf -fi && ./configure -q && make -j16 libmpinccl.la ) >"$out/old-build.log" 2>&1 &
variant() { # name sed-file sed-expression
  cp "$2" /tmp/keep.c; sed -i "$3" "$2"; make -j16 libmpinccl.la >/dev/null 2>&1
  mkdir -p /tmp/$1; cp -a .libs/libmpinccl.so* /tmp/$1/; cp /tmp/keep.c "$2"; touch "$2"
}
mkdir -p /tmp/mark; cp -a .libs/libmpinccl.so* /tmp/mark/
variant nomark src/core/group.c 's|if (!op->capturing) mpn_drain_mark(op->comm, op->stream);|(void)0;|'
variant noid src/core/drain.c 's|unsigned long long id = mpn_cuda_stream_id(s);|unsigned long long id = (unsigned long long)(uintptr_t)s;|'
make -j16 libmpinccl.la >/dev/null 2>&1
wait
flags=$(tests/run-test --mpirun-flags)
mps_start
for k in 1 2 3 4; do
  for lib in mark nomark noid old; do
    L=/tmp/$lib; [ $lib = old ] && L=/tmp/old/.libs
    line=$(LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY -x LD_LIBRARY_PATH ./bench/.libs/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +8 ' | head -1)
    echo "   mps 8B $lib job $k: ${line:-failed}"
  done
done | tee "$out/mps-8B.txt"
mps_stop
