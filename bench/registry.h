// Every backend the main job and the benchmarks run, in stage order. A backend
// says which batches it supports; the others are reported as skipped with the
// reason, never silently dropped.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/device_batch.h"
#include "common/problem.h"

namespace pa::bench {

struct Backend {
  std::string name;
  // Empty string: supported; otherwise why not.
  std::function<std::string(const Problem&)> unsupported;
  // One decode step on the batch. Null for backends that need a plan (prepare).
  std::function<void(const Problem&, DeviceBatch&)> forward;
  // Adjusts the model configuration before the backend's Problem is built (e.g.
  // an 8-bit cache format, a sliding window, learned sinks, sink tokens); null =
  // the shared Problem. The benchmark's bytes (Problem::kv_bytes_read) come from
  // that Problem, so the floor is the backend's own: codes + scales, or only the
  // window's keys and the sink tokens. A bench_attention case may adjust it
  // further (its model shape, its window), after this.
  std::function<void(AttentionConfig&)> configure = nullptr;
  // Backends with a per-batch plan (stage 07's cascade over the batch's shared
  // prefixes): builds it once, outside the timed region, as a serving engine
  // plans a step, and returns the step that runs forward with it. Null = the
  // step is forward alone.
  using Step = std::function<void()>;
  std::function<Step(const Problem&, DeviceBatch&, const std::vector<PrefixGroup>&)> prepare = nullptr;
  // Exists for batches with shared prefixes (stage 07): suites without them
  // (bench_attention) leave it out; bench_cascade measures it.
  bool for_shared_prefixes = false;
};

const std::vector<Backend>& backends();

// bench_attention's mixed batch with the engine's chunks on n programs of stage
// 09's tile per KV head (engine::Options::chunk_programs), backends
// engine_chunks_n, and on one program per query tile (engine_tile_grid): the
// sweep the plan's own count (backend engine) is checked against. Not in backends():
// an sm_90 GPU's timing question, not a conformance one.
const std::vector<Backend>& chunk_program_sweep();

// The step to time for backend b on this batch: b.prepare's planned step, or
// b.forward. `groups` are the batch's shared prefixes (share_prefixes), empty
// when it has none; only planned backends read them.
Backend::Step make_step(const Backend& b, const Problem& p, DeviceBatch& db, const std::vector<PrefixGroup>& groups);

}  // namespace pa::bench
