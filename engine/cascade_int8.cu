// The engine's cascade for int8 caches (stage 05's 8-bit tiles), with and without learned sinks.
#include "compose_cascade.cuh"
#include "solutions/05_quantized_kv/quantized_tile.cuh"

namespace pa::engine::detail {
void cascade_int8(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream) {
  run_cascade_tiles<stage05::QuantizedTiles<KvFormat::int8>, false>(p, c, stream);
}
}  // namespace pa::engine::detail
