// Stage 04: split-KV (Flash-Decoding) for decode batches.
//
// The machinery (the `Splits` slice policy of stage 03's kernel, the merge
// kernel, the dispatch rule) is in split_kv.cuh, which stages 05 and 06 reuse.
// This launcher serves bf16 caches without a window: it validates the batch and
// runs the splits. The only new code of the stage is in that header: the tile
// is stage 03's kernel.
#include <string>

#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
#include "split_kv.cuh"

namespace pa::stage04 {

SplitPlan plan_fixed(const AttentionParams& p, int num_splits) { return plan_fixed_rule(p, num_splits); }

SplitPlan plan(const AttentionParams& p, int num_sms) { return plan_rule(p, num_sms); }

void forward(const AttentionParams& p, cudaStream_t stream) { forward(p, stream, 0); }

void forward(const AttentionParams& p, cudaStream_t stream, int num_splits) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 04 implements plain causal decode attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             std::string("stage 04 reads bf16 caches; this one is ") + name(p.kv.format) +
                 ": run 8-bit caches through stage 05 (05_quantized_kv)");
  const stage03::Packing pk = stage03::checked_packing(p, "04");
  require_decode_batch(p);
  forward_splits<stage03::Bf16Kv, stage03::CausalMask>(p, pk, stream, num_splits);
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("04_split_kv");
}

}  // namespace pa::stage04
