// Stage 04: split-KV (Flash-Decoding) for decode batches.
//
// The machinery (the `Splits` slice policy of stage 03's tile, the merge kernel,
// the dispatch rule) is in split_kv.cuh, which later stages reuse with their own
// tiles. This launcher serves bf16 caches without a window: it validates the
// batch and runs the splits over each request's whole context.
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/stages.h"
#include "common/todo.cuh"
#include "split_kv.cuh"

namespace pa::stage04 {

SplitPlan plan_fixed(const AttentionParams& p, int num_splits) {
  return plan_fixed_rule(p.batch.max_seq_len, p.kv.block_size, num_splits);
}

SplitPlan plan(const AttentionParams& p, int num_sms) { return plan_rule(p, num_sms, p.batch.max_seq_len); }

void forward(const AttentionParams& p, cudaStream_t stream) { forward(p, stream, 0); }

void forward(const AttentionParams& p, cudaStream_t stream, int num_splits) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 04 implements plain causal decode attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             "stage 04 reads bf16 caches; run 8-bit caches through stage 05 (05_quantized_kv)");
  PA_REQUIRE(!p.batch_invariant,
             "stage 04 has no batch-invariant mode of its own; the engine (engine/engine.h) runs it "
             "(going_further/batch_invariant.cuh)");
  const stage03::Packing pk = stage03::checked_packing(p, "04");
  check_device_batch(p, "stage 04", stream);
  // This stage serves decodes only, so an automatic request on loose flags reads the q_lens too.
  if (!check_split_request(p, num_splits)) require_decode_batch(p);
  forward_splits<stage03::Bf16Tiles, stage03::CausalMask>(p, pk, stream, num_splits, p.batch.max_seq_len);
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("04_split_kv");
}

}  // namespace pa::stage04
