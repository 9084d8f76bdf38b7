#!/usr/bin/env bash
# One call on a GPU machine: build the GPU flavor, run the tests (CPU-sized and
# full-sized cases), check a few under compute-sanitizer, run the main job, the
# benchmark suites (bench_attention, bench_cascade), PyTorch's reference points,
# and the plots; leave every log, JSON, PNG and markdown file in OUTDIR.
#
#   bench/run_gpu.sh OUTDIR [--skip-tests] [--skip-sanitizer] [--skip-bench] [--skip-torch] [--skip-cascade]
#                           [--bench-filter REGEX] [--cascade-filter REGEX] [--ncu REGEX] [--ncu-kernel REGEX] [--bit-exact]
#                           [--autotune] [--tests REGEX] [--test-timeout S] [--skip-backends]
#
# --skip-bench skips bench_attention (and with it the PyTorch reference points and
# summary.md: the results table and stage 08's targets);
# --skip-cascade skips bench_cascade (stage 07: cascade.json, cascade.txt,
# cascade_speedup.png, cascade.md). The filters select benchmarks of each suite.
# --bit-exact also builds the bit-exact flavor (preset gpu-bit-exact), runs its
# crosscheck against bench/crosscheck/cpu_reference_bit_exact.bin
# (crosscheck_bit_exact.txt) and times the engine's rows in both builds, default,
# bit-exact, default again (bit_exact.json, bit_exact.md: what the mode costs).
#
# --ncu REGEX profiles, with Nsight Compute, the first launch of the kernel named by
# --ncu-kernel (default gqa_packing_kernel, stage 03's) in the benchmarks matching REGEX:
# ncu.txt (the sections), ncu_stalls.txt (stall reasons per issued instruction),
# ncu_source.csv (warp samples per SASS instruction) and ncu_hottest.txt (its
# hottest instructions, bench/ncu_hottest.py).
#
# --tests REGEX builds and runs only the test programs whose names match REGEX
# (ctest -R; e.g. 'test_09|test_tma' for one stage and its machinery), and
# checks only those stages under compute-sanitizer; --test-timeout bounds each
# test program (default 900 s); --skip-backends skips the main job.
#
# GoogleTest / Google Benchmark are taken from the system, or from .deps/ (see
# README) on machines without them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/run_gpu.sh OUTDIR [--skip-tests] [--skip-sanitizer]}
shift
skip_tests=0 skip_sanitizer=0 skip_bench=0 skip_torch=0 skip_cascade=0 bench_filter=. cascade_filter=. ncu_filter= ncu_kernel=gqa_packing_kernel
bit_exact=0 autotune=0 tests_regex= test_timeout=900 skip_backends=0
while (($#)); do
  case $1 in
    --skip-tests) skip_tests=1 ;;
    --skip-sanitizer) skip_sanitizer=1 ;;
    --skip-bench) skip_bench=1 ;;
    --skip-torch) skip_torch=1 ;;
    --skip-cascade) skip_cascade=1 ;;
    --bench-filter) bench_filter=$2; shift ;;
    --cascade-filter) cascade_filter=$2; shift ;;
    --ncu) ncu_filter=$2; shift ;;
    --ncu-kernel) ncu_kernel=$2; shift ;;
    --bit-exact) bit_exact=1 ;;
    --autotune) autotune=1 ;;
    --tests) tests_regex=$2; shift ;;
    --test-timeout) test_timeout=$2; shift ;;
    --skip-backends) skip_backends=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
status=0
step() { echo "== $* ($(date -u +%H:%M:%S))"; }

step device
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/device.txt"

step build
jobs=$(nproc)
# Without tests, only the benchmark programs are needed; with --tests, those
# and the matching test programs (a ctest name is its program's target).
programs=(backends bench_attention bench_cascade crosscheck)
((autotune)) && programs+=(exercise_03_autotune_tuner)
cmake --preset gpu > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; echo "configure failed"; exit 1; }
targets=()
((skip_tests && skip_sanitizer)) && targets=(--target "${programs[@]}")
if [[ -n $tests_regex ]]; then
  mapfile -t picked < <(ctest --preset gpu -N -R "$tests_regex" | sed -nE 's/^ *Test +#[0-9]+: +([A-Za-z0-9_]+)$/\1/p')
  ((${#picked[@]})) || { echo "--tests '$tests_regex' matches no test"; exit 2; }
  echo "tests: ${picked[*]}"
  targets=(--target "${picked[@]}" "${programs[@]}")
fi
cmake --build --preset gpu -j "$jobs" "${targets[@]}" >> "$out/build.log" 2>&1 || {
  tail -50 "$out/build.log"; echo "build failed"; exit 1; }

if ((!skip_tests)); then
  step tests
  ctest_args=()
  [[ -n $tests_regex ]] && ctest_args=(-R "$tests_regex")
  ctest --preset gpu -j 4 --timeout "$test_timeout" "${ctest_args[@]}" > "$out/tests.log" 2>&1 || status=1
  tail -25 "$out/tests.log"
fi

if ((!skip_sanitizer)) && command -v compute-sanitizer >/dev/null; then
  step compute-sanitizer
  for t in build/gpu/tests/test_0*_solutions; do
    [[ -x $t ]] || continue
    [[ -z $tests_regex ]] || [[ $(basename "$t") =~ $tests_regex ]] || continue
    compute-sanitizer --tool memcheck --error-exitcode 3 "$t" --gtest_filter='*Milestone_Group*:*Padding*:*Decode*Group*' \
      >> "$out/sanitizer.log" 2>&1 || { status=1; echo "memcheck failed: $t"; }
  done
  # The engine's own kernels on stage 09's tile: the mixed path's chunk
  # programs (one ring over many query tiles) and its one-per-tile grid.
  t=build/gpu/tests/test_engine
  if [[ -x $t ]] && { [[ -z $tests_regex ]] || [[ test_engine =~ $tests_regex ]]; }; then
    for tool in memcheck synccheck; do
      compute-sanitizer --tool $tool --error-exitcode 3 "$t" --gtest_filter='*HopperChunks*:*HopperBalanced*:*HopperPrefill_Mixed*' \
        >> "$out/sanitizer.log" 2>&1 || { status=1; echo "$tool failed: $t"; }
    done
  fi
  tail -3 "$out/sanitizer.log"
fi

if [[ -n $ncu_filter ]] && command -v ncu >/dev/null; then
  # Nsight Compute on the first attention-kernel launch of each matching benchmark.
  step ncu "$ncu_filter"
  ncu -k "regex:$ncu_kernel" -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section LaunchStats \
    --section InstructionStats --section SourceCounters \
    build/gpu/bench/bench_attention --benchmark_filter="$ncu_filter" --benchmark_min_time=0.001s > "$out/ncu.txt" 2>&1 || status=1
  grep -vE "^\s*$|^==PROF==" "$out/ncu.txt" | head -150
  # Where the warps wait: the stall reasons per issued instruction, and the
  # source page (warp samples per SASS instruction) with its hottest lines.
  ncu -k "regex:$ncu_kernel" -c 1 --page raw \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:smsp__inst_executed_pipe_.*\.sum' \
    build/gpu/bench/bench_attention --benchmark_filter="$ncu_filter" --benchmark_min_time=0.001s > "$out/ncu_stalls.txt" 2>&1 || status=1
  ncu -k "regex:$ncu_kernel" -c 1 --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
    build/gpu/bench/bench_attention --benchmark_filter="$ncu_filter" --benchmark_min_time=0.001s > "$out/ncu_source.csv" 2>&1 || status=1
  python3 bench/ncu_hottest.py "$out/ncu_source.csv" --top 60 > "$out/ncu_hottest.txt" || status=1
  head -20 "$out/ncu_hottest.txt"
fi
step crosscheck
# The CPU flavor's committed outputs against this GPU's, bit for bit: a report,
# never a failure of this script (README: "Does the CPU compute what the GPU computes?").
build/gpu/bench/crosscheck/crosscheck --compare bench/crosscheck/cpu_reference.bin > "$out/crosscheck.txt" 2>&1 ||
  echo "crosscheck could not run (see $out/crosscheck.txt)"
grep -E "^stage [0-9]+: " "$out/crosscheck.txt" || true

if ((!skip_backends)); then
  step backends
  build/gpu/bench/backends --out "$out/backends.jsonl" 2> "$out/backends.log" || status=1
  cat "$out/backends.jsonl"
fi

if ((!skip_bench)); then
  step bench_attention
  build/gpu/bench/bench_attention --benchmark_filter="$bench_filter" \
    --benchmark_out="$out/bench.json" --benchmark_out_format=json > "$out/bench.txt" 2>&1 || status=1
  grep -E "read probe|floor_fraction" "$out/bench.txt" | sed -E 's/ +/ /g' | cut -c1-220
  if ((!skip_torch)); then
    step torch reference points
    PYTHONUNBUFFERED=1 python3 bench/torch_reference.py --out "$out/torch.json" > "$out/torch.log" 2>&1 || status=1
    tail -3 "$out/torch.log"
    step plots
    python3 plots/plot_bench.py --bench "$out/bench.json" --torch "$out/torch.json" --out "$out" || status=1
  fi
  # The results table and stage 08's targets (sinks cost, gpt-oss floor fraction).
  step summary
  torch_args=()
  [[ -s $out/torch.json ]] && torch_args=(--torch "$out/torch.json")
  python3 plots/summarize.py --bench "$out/bench.json" "${torch_args[@]}" | tee "$out/summary.md" || status=1
fi

if ((!skip_cascade)); then
  step bench_cascade
  build/gpu/bench/bench_cascade --benchmark_filter="$cascade_filter" \
    --benchmark_out="$out/cascade.json" --benchmark_out_format=json > "$out/cascade.txt" 2>&1 || status=1
  grep -E "read probe|floor_fraction|failed|not run" "$out/cascade.txt" | sed -E 's/ +/ /g' | cut -c1-220
  step cascade plots
  python3 plots/plot_cascade.py --bench "$out/cascade.json" --out "$out" --md "$out/cascade.md" > /dev/null || status=1
  cat "$out/cascade.md"
fi
if ((autotune)); then
  step autotune
  build/gpu/exercises/exercise_03_autotune_tuner --table_out="$out/tuned_table.json" \
    --benchmark_out="$out/autotune.json" --benchmark_out_format=json > "$out/autotune.txt" 2>&1 || status=1
  grep -E "read probe|^plan/" "$out/autotune.txt" | sed -E 's/ +/ /g' | cut -c1-220
  if ((!skip_torch)) && [[ ! -s $out/torch.json ]]; then
    step torch reference points
    PYTHONUNBUFFERED=1 python3 bench/torch_reference.py --out "$out/torch.json" > "$out/torch.log" 2>&1 || status=1
    tail -3 "$out/torch.log"
  fi
  step autotune plot
  torch_args=()
  [[ -s $out/torch.json ]] && torch_args=(--torch "$out/torch.json")
  python3 exercises/03_autotune/plot_autotune.py --run "$out/autotune.json" "${torch_args[@]}" \
    --out "$out/autotune.png" --md "$out/autotune.md" || status=1
fi
if ((bit_exact)); then
  step bit-exact build
  { cmake --preset gpu-bit-exact && cmake --build --preset gpu-bit-exact -j "$jobs" --target crosscheck bench_attention; } \
    > "$out/bit_exact_build.log" 2>&1 || { tail -30 "$out/bit_exact_build.log"; echo "bit-exact build failed"; exit 1; }
  step bit-exact crosscheck
  build/gpu-bit-exact/bench/crosscheck/crosscheck --compare bench/crosscheck/cpu_reference_bit_exact.bin \
    > "$out/crosscheck_bit_exact.txt" 2>&1 || status=1
  grep -E "^stage [0-9]+: |^build: " "$out/crosscheck_bit_exact.txt" || true
  step bit-exact cost
  # Default, bit-exact, default again: the two default runs give the run's spread.
  rows='^(decode|long|mixed|prefill)/engine/'
  runs=()
  for b in gpu gpu-bit-exact gpu; do
    f="$out/bit_exact_run${#runs[@]}_$b.json"
    build/$b/bench/bench_attention --benchmark_filter="$rows" --benchmark_out="$f" --benchmark_out_format=json \
      > /dev/null 2>&1 || status=1
    runs+=("$f")
  done
  python3 plots/compare_bit_exact.py --default "${runs[0]}" "${runs[2]}" --bit-exact "${runs[1]}" \
    --out "$out/bit_exact.json" | tee "$out/bit_exact.md" || status=1
  rm -f "${runs[@]}"
fi
exit $status
