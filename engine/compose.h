// The engine's internal seam: what plan.cu hands to the translation unit of one
// (cache format, learned sinks) pair. Each pair is its own .cu file
// (run_<format>[_sinks].cu), so the lattice compiles in parallel and an edit to
// one stage rebuilds only the units that include it.
#pragma once

#include <string>

#include "common/attention_params.h"
#include "common/check.h"
#include "common/stages.h"
#include "engine.h"

namespace pa::engine::detail {

struct Launch {
  const Plan& plan;
  AttentionParams p;  // the batch with the plan's bounds as its host-side sizes
  float* part_o;      // [plan.num_splits, rows, Hq, D]  the workspace's partials, or null
  float* part_lse;    // [plan.num_splits, rows, Hq]
  cudaStream_t stream;
};

void run_bf16(const Launch& l);
void run_bf16_sinks(const Launch& l);
void run_int8(const Launch& l);
void run_int8_sinks(const Launch& l);
void run_fp8(const Launch& l);
void run_fp8_sinks(const Launch& l);

// Stops with a clear error, what naming the part asked for, where stage 09's
// sm_90a code cannot run: a GPU build on a device that is not sm_90 (the CPU
// runtime emulates TMA, mbarriers and wgmma, so it runs everywhere there).
void require_hopper_device(const std::string& what);
// The same as a question: true on the CPU runtime and on an sm_90 GPU.
bool hopper_code_runs();

// Cascade (stage 07) with or without learned sinks, one unit per format.
void cascade_bf16(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream);
void cascade_int8(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream);
void cascade_fp8(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream);

}  // namespace pa::engine::detail
