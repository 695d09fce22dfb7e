#!/bin/sh
# launch_bench.sh - bench/mpinccl_bench as a test: every operation at small
# sizes with its check on (-c 1: every received byte against its pattern, and
# nothing written outside the messages), some in CUDA-graph mode (-G 1) and
# with registered buffers (-R 1).  A run passes when it exits 0 (the
# benchmark exits 1 on a wrong byte, 3 when a capture fails) and its --json
# file is valid JSON with one result per size and no error.  No timing is
# judged here.
top=${MPINCCL_TOP_BUILDDIR:-$(dirname "$0")/../..}
bin=$top/bench/mpinccl_bench
[ -x "$bin" ] || { echo "launch_bench: $bin not built"; exit 99; }
command -v python3 >/dev/null || { echo "launch_bench: python3 is needed to read the JSON"; exit 77; }
flags=$("$(dirname "$0")/../run-test" --mpirun-flags)
json=$(mktemp "${TMPDIR:-/tmp}/launch_bench.XXXXXX") || exit 99
trap 'rm -f "$json"' EXIT
status=0

# run NP ROWS ARGS...: ROWS results expected in the JSON
run() {
  np=$1 rows=$2
  shift 2
  label="np $np $*"
  # shellcheck disable=SC2086 # flags are words
  out=$(timeout 120 ${MPINCCL_MPIRUN:-mpirun} -np "$np" $flags "$bin" -n 3 -w 2 -c 1 --json "$json" "$@" 2>&1)
  rc=$?
  why=
  if [ $rc != 0 ]; then
    why="exit $rc"
  else
    why=$(python3 - "$json" "$rows" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("the JSON does not parse: %s" % e); sys.exit(0)
rows = d.get("results", [])
if d.get("error") is not None: print("error: %s" % d["error"])
elif len(rows) != int(sys.argv[2]): print("%d results, not %s" % (len(rows), sys.argv[2]))
elif any(r.get("errors") != 0 for r in rows): print("wrong bytes reported, or none counted")
elif any(not r.get("time_us") or r["time_us"] <= 0 for r in rows): print("a row without a time")
PY
)
  fi
  if [ -z "$why" ]; then
    echo "launch_bench: $label: PASS"
  else
    printf '%s\n' "$out"
    echo "launch_bench: $label: FAIL ($why)"
    status=1
  fi
}

sizes="-b 8 -e 64K -f 32"   # 8 B, 256 B, 8 KiB: 3 rows
run 2 3 -o sendrecv $sizes
run 4 3 -o sendrecv $sizes -G 1
run 3 3 -o sendrecv $sizes -R 1
run 4 2 -o alltoall -b 1K -e 64K -f 64
run 4 2 -o alltoall -b 1K -e 64K -f 64 -G 1
run 2 3 -o pingpong $sizes
run 4 2 -o halo -b 1K -e 16K -f 16
run 2 3 -o put $sizes
run 2 3 -o putpingpong $sizes -G 1
run 4 2 -o rmaalltoall -b 1K -e 64K -f 64
run 4 1 -o barrier
exit $status
