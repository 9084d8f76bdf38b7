// Stage 03: GQA packing on tensor cores.
//
// The kernel and its pieces are in gqa_packing.cuh (later stages reuse them): a
// program's rows are tokens x the (padded) query heads of one KV head's group,
// so each K/V tile is loaded once per group and feeds mma.sync. This file
// checks the batch, picks the tile shape (dispatch_whole_context) and launches
// it over the whole context of every query tile.
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/stages.h"
#include "common/todo.cuh"
#include "gqa_packing.cuh"

namespace pa::stage03 {

void forward(const AttentionParams& p, cudaStream_t stream) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 03 implements plain causal attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             "stage 03 reads bf16 caches; run 8-bit caches through stage 05 (05_quantized_kv)");
  const Packing pk = checked_packing(p, "03");
  PA_REQUIRE(!p.batch_invariant,
             "stage 03 has no batch-invariant mode: its tile (16 or 128 rows) follows the batch's longest query, "
             "so a request's bits depend on its batch; the engine (engine/engine.h) has the mode");
  check_device_batch(p, "stage 03", stream);
  with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() { dispatch_whole_context<HEAD_DIM>(p, pk, stream); });
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("03_gqa_packing");
}

}  // namespace pa::stage03
