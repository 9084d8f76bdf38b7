// The engine's lattice for bf16 caches: stage 04's two-warp decode tile (going further), stage 03's prefill tile, without learned sinks.
#include "compose.cuh"
#include "solutions/04_split_kv/split_kv_warps.cuh"

namespace pa::engine::detail {
void run_bf16(const Launch& l) { run_plain<stage04::Bf16SplitTiles>(l); }
}  // namespace pa::engine::detail
