#!/bin/sh
# launch_ring.sh - examples/ring as a test: ncclCommInitAll in one process,
# one thread driving every rank in one group, ranks round robin over the
# visible GPUs (on two or more GPUs that mixes ranks on one GPU with ranks on
# different GPUs of one process).  Each run checks every element and must
# print "check: ... (PASS)".
top=${MPINCCL_TOP_BUILDDIR:-$(dirname "$0")/../..}
bin=$top/examples/ring
[ -x "$bin" ] || { echo "launch_ring: $bin not built"; exit 99; }
. "$(dirname "$0")/example_check.sh"
status=0
# default: one rank per GPU (at least 2); odd counts; count 0; steps
# (warm-up included: 5 unless -w) that are not a multiple of the ranks, nor
# even, so that a ring moving nothing or the wrong way cannot pass; 8 ranks.
for args in "" "-r 3 -c 1000001 -i 8" "-r 4 -c 0 -i 3" "-r 5 -c 12345 -i 11 -w 0" "-r 8 -c 262147 -i 9"; do
  # shellcheck disable=SC2086 # args are words
  example_check launch_ring "${args:-(defaults)}" "$bin" $args
done
exit $status
