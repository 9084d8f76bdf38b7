// The engine's lattice for bf16 caches: stage 04's two-warp decode tile (going further), stage 03's prefill tile, with learned sinks.
#include "compose.cuh"
#include "going_further/two_warp_decode.cuh"

namespace pa::engine::detail {
void run_bf16_sinks(const Launch& l) { run_with_sinks<further::Bf16SplitTiles>(l); }
}  // namespace pa::engine::detail
