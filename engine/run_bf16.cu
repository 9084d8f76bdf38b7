// The engine's lattice for bf16 caches: stage 04's two-warp decode tile (going further), stage 03's prefill tile, without learned sinks.
#include "compose.cuh"
#include "going_further/two_warp_decode.cuh"

namespace pa::engine::detail {
void run_bf16(const Launch& l) { run_plain<further::Bf16SplitTiles>(l); }
}  // namespace pa::engine::detail
