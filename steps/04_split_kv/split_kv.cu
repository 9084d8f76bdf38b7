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
  PA_REQUIRE(p.kv.num_kv_heads > 0 && p.num_q_heads % p.kv.num_kv_heads == 0,
             "stage 04: num_q_heads must be a multiple of num_kv_heads");
  const int group = p.num_q_heads / p.kv.num_kv_heads;
  PA_REQUIRE(group >= 1 && group <= stage03::MAX_GROUP, "stage 04: group " + std::to_string(group) +
                                                            " is not supported (1.." +
                                                            std::to_string(stage03::MAX_GROUP) + ")");
  PA_REQUIRE(p.kv.block_size >= 1 && (p.kv.block_size & (p.kv.block_size - 1)) == 0,
             "stage 04: block_size " + std::to_string(p.kv.block_size) + " is not a power of two");
  PA_REQUIRE(p.kv.head_dim == 64 || p.kv.head_dim == 128 || p.kv.head_dim == 256,
             "stage 04: head_dim " + std::to_string(p.kv.head_dim) + " is not supported (64, 128, 256)");
  require_decode_batch(p);
  forward_splits<stage03::Bf16Kv, stage03::CausalMask>(p, stage03::make_packing(p, group), stream, num_splits);
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("04_split_kv");
}

}  // namespace pa::stage04
