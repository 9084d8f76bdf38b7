#!/usr/bin/env bash
# One call on a GPU machine: build the GPU flavor, run the tests (CPU-sized and
# full-sized cases), check a few under compute-sanitizer, run the main job, and
# leave every log and JSON file in OUTDIR.
#
#   bench/run_gpu.sh OUTDIR [--skip-tests] [--skip-sanitizer]
#
# GoogleTest / Google Benchmark are taken from the system, or from .deps/ (see
# README) on machines without them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/run_gpu.sh OUTDIR [--skip-tests] [--skip-sanitizer]}
shift
skip_tests=0 skip_sanitizer=0
for a in "$@"; do
  case $a in
    --skip-tests) skip_tests=1 ;;
    --skip-sanitizer) skip_sanitizer=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
status=0
step() { echo "== $* ($(date -u +%H:%M:%S))"; }

step device
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"

step build
jobs=$(nproc)
{ cmake --preset gpu && cmake --build --preset gpu -j "$jobs"; } > "$out/build.log" 2>&1 || {
  tail -50 "$out/build.log"; echo "build failed"; exit 1; }

if ((!skip_tests)); then
  step tests
  ctest --preset gpu -j 4 --timeout 900 > "$out/tests.log" 2>&1 || status=1
  tail -25 "$out/tests.log"
fi

if ((!skip_sanitizer)) && command -v compute-sanitizer >/dev/null; then
  step compute-sanitizer
  for t in build/gpu/tests/test_02_fused_paged_solutions build/gpu/tests/test_01_reference_gather_solutions; do
    compute-sanitizer --tool memcheck --error-exitcode 3 "$t" --gtest_filter='Cases/*Milestone*:Cases/*Padding*' \
      >> "$out/sanitizer.log" 2>&1 || { status=1; echo "memcheck failed: $t"; }
  done
  tail -3 "$out/sanitizer.log"
fi

step backends
build/gpu/bench/backends --out "$out/backends.jsonl" 2> "$out/backends.log" || status=1
cat "$out/backends.jsonl"
exit $status
