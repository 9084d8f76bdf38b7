#!/usr/bin/env bash
# Exercise 04 across GPUs: starts one nccl_decode process per GPU and waits for
# them all. Rank 0 prints the step's times and writes OUT.json.
#
#   exercises/04_context_parallel/run_nccl.sh RANKS OUT.json [--batch B] [--ctx N] [--sharding S] [--iters I]
#
# BUILD (default build/gpu) is the GPU flavor's build folder, configured with NCCL
# found (exercises/CMakeLists.txt says how).
set -uo pipefail
ranks=${1:?usage: run_nccl.sh RANKS OUT.json [options]}
out=${2:?usage: run_nccl.sh RANKS OUT.json [options]}
shift 2
bin=${BUILD:-build/gpu}/exercises/exercise_04_context_parallel_nccl
[ -x "$bin" ] || { echo "run_nccl.sh: $bin is not built (GPU flavor with NCCL: see exercises/04_context_parallel/README.md)" >&2; exit 2; }
# NVLink SHARP (multicast) stays off: the exercise measures plain all-gathers.
export NCCL_NVLS_ENABLE=0
id_file=$(mktemp -u "${TMPDIR:-/tmp}/nccl_decode_id.XXXXXX")
pids=()
for ((r = 0; r < ranks; ++r)); do
  "$bin" --ranks "$ranks" --rank "$r" --id-file "$id_file" --out "$out" "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
rm -f "$id_file"
exit $status
