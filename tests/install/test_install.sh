#!/usr/bin/env bash
# test_install.sh - installs the library into a scratch prefix, checks that
# only nccl*, pnccl* and mpinccl* symbols are exported (each NCCL function
# under both names), builds a program written for NCCL with
# -I$prefix/include -L$prefix/lib -lnccl, and runs it under mpirun -np 4.
set -euo pipefail
top=${MPINCCL_TOP_BUILDDIR:?run by make check}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make -s -C "$top" install DESTDIR="$work/root" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$top/mpinccl.pc")
root=$work/root$prefix
for f in lib/libmpinccl.so.0 lib/libnccl.so lib/libnccl.so.2 include/nccl.h include/mpinccl.h \
         lib/pkgconfig/mpinccl.pc; do
  [ -e "$root/$f" ] || { echo "missing after install: $f"; exit 1; }
done

# Exports: nothing but the API, and every NCCL function also as pncclX.
nm -D --defined-only "$root/lib/libmpinccl.so.0" | awk '$2 ~ /[TWiDB]/ {print $3}' | sort >"$work/syms"
if grep -v -E '^(p?nccl|mpinccl)[A-Z]' "$work/syms"; then echo "unexpected exports above"; exit 1; fi
declared=$(sed -n 's/^NCCL_DECLARE([^,]*, *\(nccl[A-Za-z]*\),.*/\1/p' "$src/include/nccl.h")
[ "$(echo "$declared" | wc -l)" -ge 40 ] || { echo "could not read the declarations"; exit 1; }
for fn in $declared; do
  grep -qx "$fn" "$work/syms" && grep -qx "p$fn" "$work/syms" || { echo "not exported: $fn/p$fn"; exit 1; }
done
echo "exports: $(wc -l <"$work/syms") symbols, all nccl*/pnccl*/mpinccl*"

cuda=$(sed -n 's/^CUDA_DIR = //p' "$top/Makefile")
mpicc -Wall -Wextra -Werror -I"$root/include" -I"$cuda/include" "$src/tests/install/nccl_program.c" \
  -L"$root/lib" -lnccl -L"$cuda/lib64" -lcudart -o "$work/nccl_program"
export LD_LIBRARY_PATH=$root/lib:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Not `ldd | grep -q`: with pipefail, grep's early exit can fail ldd (SIGPIPE).
ldd "$work/nccl_program" >"$work/ldd.txt"
grep -q "$root/lib/libmpinccl.so.0" "$work/ldd.txt" || { cat "$work/ldd.txt"; exit 1; }
mpirun=${MPINCCL_MPIRUN:-mpirun}
# shellcheck disable=SC2046 # flags are words
"$mpirun" -np 4 $("$src/tests/run-test" --mpirun-flags) -x LD_LIBRARY_PATH "$work/nccl_program"
