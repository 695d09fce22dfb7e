#!/usr/bin/env bash
# test_nccl_header.sh - checks include/nccl.h against NVIDIA's own nccl.h
# where one is installed (the CUDA toolkit may ship it; NCCL_HOME or
# MPINCCL_NCCL_HEADER name another): every function both declare must have
# the same signature, in C and in C++, and the values, sizes and field
# offsets of nccl_facts.c must agree. Skips (77) when no such header exists.
set -euo pipefail
top=${MPINCCL_TOP_BUILDDIR:?run by make check}
src=$(cd "$(dirname "$0")/../.." && pwd)
cuda=$(sed -n 's/^CUDA_DIR = //p' "$top/Makefile")
ours=$src/include/nccl.h

theirs=
for h in ${MPINCCL_NCCL_HEADER:-} ${NCCL_HOME:+$NCCL_HOME/include/nccl.h} "$cuda/include/nccl.h" \
         /usr/include/nccl.h /usr/local/include/nccl.h; do
  # An installed copy of ours is no reference.
  if [ -f "$h" ] && ! grep -q "mpinccl" "$h"; then theirs=$h; break; fi
done
if [ -z "$theirs" ]; then
  echo "SKIP: no nccl.h of NVIDIA's found (set MPINCCL_NCCL_HEADER to one)"
  exit 77
fi
version=$(sed -n 's/^#define NCCL_VERSION_CODE *//p' "$theirs")
echo "reference: $theirs (NCCL_VERSION_CODE ${version:-unknown})"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. Signatures: our declarations of the functions the reference declares,
# after the reference header; a conflicting redeclaration does not compile.
# A declaration spans lines up to the one that ends in ");".
awk '/^NCCL_DECLARE\(/ { d = $0; while (d !~ /\);[ \t]*$/) { getline l; d = d " " l } print d }' "$ours" |
  sed -E 's/^NCCL_DECLARE\(([^,]*), *([A-Za-z0-9_]+), *\((.*)\)\);[ \t]*$/\2|\1 \2(\3); \1 p\2(\3);/' \
    >"$work/decls"
[ "$(wc -l <"$work/decls")" -ge 40 ] || { echo "could not read our declarations"; exit 1; }
{
  echo "#include <stdint.h>"
  echo "#include \"$theirs\""
  while IFS='|' read -r name decl; do
    grep -Eq "[[:space:]*]$name[[:space:]]*\(" "$theirs" && echo "$decl"
  done <"$work/decls"
} >"$work/signatures.c"
checked=$(grep -c '^[^#]' "$work/signatures.c")
[ "$checked" -ge 30 ] || { echo "only $checked functions in common with the reference"; exit 1; }
cp "$work/signatures.c" "$work/signatures.cc"
cc -std=c11 -fsyntax-only -Wall -Wextra -Wno-deprecated-declarations -Werror \
  -I"$cuda/include" "$work/signatures.c"
c++ -fsyntax-only -Wall -Wextra -Wno-deprecated-declarations -Werror \
  -I"$cuda/include" "$work/signatures.cc"
echo "signatures: $checked functions declared by both agree (C and C++)"

# 2. Values, sizes and offsets.
build_facts() {
  cc -std=c11 -Wall -Wextra -Werror -DNCCL_HEADER="\"$1\"" -I"$cuda/include" \
    "$src/tests/unit/nccl_facts.c" -o "$2" && "$2" | sort >"$2.txt"
}
build_facts "$ours" "$work/ours"
build_facts "$theirs" "$work/theirs"
# Facts both print, by name (the text before the last value).
join -t '|' <(sed -E 's/ ([^ ]+( size [0-9]+)?)$/|\1/' "$work/ours.txt" | sort -t '|' -k1,1) \
  <(sed -E 's/ ([^ ]+( size [0-9]+)?)$/|\1/' "$work/theirs.txt" | sort -t '|' -k1,1) >"$work/both"
common=$(wc -l <"$work/both")
[ "$common" -ge 60 ] || { echo "only $common facts in common with the reference"; exit 1; }
if awk -F '|' '$2 != $3 { print "differs: " $1 ": ours " $2 ", reference " $3; bad = 1 } END { exit bad }' \
  "$work/both"; then
  echo "facts: all $common that both headers give agree (ours gives $(wc -l <"$work/ours.txt"))"
else
  exit 1
fi
