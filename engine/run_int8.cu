// The engine's lattice for int8 caches: stage 05's 8-bit tiles, without learned sinks.
#include "compose.cuh"
#include "solutions/05_quantized_kv/quantized_tile.cuh"

namespace pa::engine::detail {
void run_int8(const Launch& l) { run_plain<stage05::QuantizedTiles<KvFormat::int8>>(l); }
}  // namespace pa::engine::detail
