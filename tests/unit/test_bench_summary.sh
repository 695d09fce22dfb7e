#!/usr/bin/env bash
# test_bench_summary.sh - bench/summary.py, which writes the verdicts of the
# performance targets into docs/PERFORMANCE.md, against a results folder made
# here: each verdict (met, not met, not run) must follow the figures in the
# files, and an archive of the folder must read as the folder does.
# Skips (77) without python3.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
res=$work/res
mkdir -p "$res"

# A sendrecv run: floors, an 8 B row and a 1 GiB row (vs_copy as given).
sendrecv_json() { # regime copy_ratio
  cat <<EOF
{"op": "sendrecv", "nranks": 2, "gpu": "Test GPU", "gpus": 1, "library": "mpinccl test",
 "floors": {"copy_gbps": 2000.0, "flag_us": 5.0, "delegated_us": 9.0, "engine_us": 140.0,
            "latency_floor": "delegated", "latency_floor_us": 9.0},
 "results": [{"bytes": 8, "time_us": 12.0, "algbw_gbps": 0.001, "busbw_gbps": 0.001, "vs_copy": 1e-6,
              "vs_floor": 1.33, "errors": 0},
             {"bytes": 1073741824, "time_us": 1000.0, "algbw_gbps": 1000.0, "busbw_gbps": 1000.0,
              "vs_copy": $2, "vs_floor": 111.0, "errors": 0}]}
EOF
}
sendrecv_json mps-off 0.80 >"$res/mps-off-sendrecv.json"
sendrecv_json mps-on 0.50 >"$res/mps-on-sendrecv.json"
printf '   sendrecv-8B job 1: (line)\n   median of 5 jobs: 1.34 x the floor (lowest 1.1, highest 1.6)\n' \
  >"$res/mps-off-sendrecv-8B-repeats.txt"
printf '   median of 4 jobs: 11.1 x the floor (lowest 9, highest 12)\n' >"$res/mps-off-barrier-np8-repeats.txt"
printf '   halo3d np4 best of 3: exchange 104.0 us, --put 101.0 us, flag-only 100.0 us, ratios 1.040 1.010\n' \
  >"$res/mps-off-halo3d-best.txt"
printf '   halo3d np2 best of 3: exchange 106.0 us, --put 101.0 us, flag-only 100.0 us, ratios 1.060 1.010\n' \
  >"$res/mps-off-halo3d-np2-best.txt"

out=$work/summary.md
python3 "$src/bench/summary.py" "$res" --commit abc1234 >"$out"
fails=0
expect() { # what regime verdict: the targets row of what in regime has verdict
  local line
  line=$(grep -F "| $1 | $2 |" "$out" | head -n 1)
  if [[ "$line" == *"| $3 |" ]]; then
    echo "ok: $1, $2: $3"
  else
    echo "FAIL: $1, $2: expected '$3', got: ${line:-no row}"
    fails=$((fails + 1))
  fi
}
expect "8 B sendrecv, 2 ranks" "without MPS" "met"
expect "8 B sendrecv, 2 ranks" "with MPS" "not run"
expect "1 GiB sendrecv, 2 ranks, both ways summed" "without MPS" "met"
expect "1 GiB sendrecv, 2 ranks, both ways summed" "with MPS" "**not met**"
expect "halo3d, 4 ranks: time per iteration / flag-only loop" "without MPS" "met"
expect "halo3d, 2 ranks: time per iteration / flag-only loop" "without MPS" "**not met**"
expect "signal barrier, 8 ranks" "without MPS" "**not met**"
expect "1 GiB put, one pair" "without MPS" "not run"
grep -q "median 1.34x the delegated floor over 5 jobs (1.1-1.6)" "$out" ||
  { echo "FAIL: the 8 B figure is not the repeats file's"; fails=$((fails + 1)); }
grep -q '^Run of `bench/run-device.sh` at `abc1234`: Test GPU' "$out" ||
  { echo "FAIL: heading"; fails=$((fails + 1)); }

# --row, from the folder and from an archive of it (as bench/results keeps them).
tar czf "$work/res.tgz" -C "$work" res
want='| x | 1.34x / — | 1.040x / — | 1.060x / — | 11.1x / — |'
for from in "$res" "$work/res.tgz"; do
  got=$(python3 "$src/bench/summary.py" "$from" --row x)
  if [ "$got" = "$want" ]; then echo "ok: --row from $(basename "$from")"; else
    echo "FAIL: --row from $from: $got"
    fails=$((fails + 1))
  fi
done

# No results at all: a clear refusal, not an empty report.
mkdir "$work/empty"
if python3 "$src/bench/summary.py" "$work/empty" >/dev/null 2>"$work/err"; then
  echo "FAIL: an empty folder gave a summary"
  fails=$((fails + 1))
else
  grep -q "no sendrecv results" "$work/err" && echo "ok: empty folder refused" ||
    { echo "FAIL: empty folder: $(cat "$work/err")"; fails=$((fails + 1)); }
fi
echo "test_bench_summary: $fails failures"
[ "$fails" -eq 0 ]
