// How the engine composes stage 07's cascade with a tile family, the warpgroup
// prefix pass (bf16) and stage 08's learned sinks (added to each row's own
// suffix partial by the suffix pass).
#pragma once

#include "compose.h"
#include "going_further/warpgroup_prefix.cuh"
#include "solutions/07_cascade/cascade.cuh"
#include "solutions/08_attention_sinks/attention_sinks.cuh"

namespace pa::engine::detail {
namespace {

template <class Tiles, bool WARPGROUP>
void run_cascade_tiles(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream) {
  const stage03::Packing pk = stage03::checked_packing(p, "engine");
  if (p.sinks != nullptr) {
    further::forward_cascade<Tiles, WARPGROUP>(p, pk, c, stream, stage08::AddSinks{p.sinks});
  } else {
    further::forward_cascade<Tiles, WARPGROUP>(p, pk, c, stream);
  }
}

}  // namespace
}  // namespace pa::engine::detail
