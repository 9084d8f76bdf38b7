// The engine's cascade for bf16 caches (stage 04's two-warp decode tile for the suffix pass), with and without learned sinks.
#include "compose_cascade.cuh"
#include "solutions/04_split_kv/split_kv_warps.cuh"

namespace pa::engine::detail {
void cascade_bf16(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream) {
  run_cascade_tiles<stage04::Bf16SplitTiles>(p, c, stream);
}
}  // namespace pa::engine::detail
