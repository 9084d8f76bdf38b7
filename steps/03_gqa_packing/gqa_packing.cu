// Stage 03: GQA packing on tensor cores.
//
// The kernel is in gqa_packing.cuh (stage 04 runs the same tile): a program's
// rows are tokens x the (padded) query heads of one KV head's group, so each
// K/V tile is loaded once per group and feeds mma.sync. This file picks the
// tile shape for the batch (dispatch_whole_context, in the header for stages
// 05 and 06) and launches it over the whole context of every query tile.
#include <string>

#include "common/batch_ops.h"
#include "common/launch.cuh"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
#include "gqa_packing.cuh"

namespace pa::stage03 {

void forward(const AttentionParams& p, cudaStream_t stream) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 03 implements plain causal attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             std::string("stage 03 reads bf16 caches; this one is ") + name(p.kv.format) +
                 ": run 8-bit caches through stage 05 (05_quantized_kv)");
  const Packing pk = checked_packing(p, "03");
  switch (p.kv.head_dim) {
    case 64: dispatch_whole_context<64>(p, pk, stream); break;
    case 128: dispatch_whole_context<128>(p, pk, stream); break;
    default: dispatch_whole_context<256>(p, pk, stream); break;
  }
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("03_gqa_packing");
}

}  // namespace pa::stage03
