// Stage 08: attention sinks, learned logits (gpt-oss) and sink tokens
// (StreamingLLM), on every path of the earlier stages: whole-context tiles,
// split-KV, windows, 8-bit caches, cascade. attention_sinks.cuh has the
// policies; this file checks the batch and picks the path.
#include <string>

#include "attention_sinks.cuh"
#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
#include "solutions/04_split_kv/split_kv_invariant.cuh"
#include "solutions/04_split_kv/split_kv_warps.cuh"
#include "solutions/05_quantized_kv/quantized_tile.cuh"
#include "solutions/07_cascade/cascade.cuh"

namespace pa::stage08 {
namespace {

stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window >= 0, "stage 08: window " + std::to_string(p.window) + " is negative (0 = no window)");
  PA_REQUIRE(p.sink_tokens >= 0,
             "stage 08: sink_tokens " + std::to_string(p.sink_tokens) + " is negative (0 = no sink tokens)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             std::string("stage 08: a ") + name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  return stage03::checked_packing(p, "08");
}

// Decode batches with sink tokens: split 0 the sink tokens, splits 1.. the
// window (num_splits 0: stage 04's plan over the window's span), then stage
// 04's merge.
template <class Tiles, class Adapt>
void run_sink_token_splits(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream, int num_splits,
                           const Adapt& adapt) {
  const int span = stage06::span_keys(p);
  const stage04::SplitPlan sp = num_splits == 0 ? stage04::plan_rule(p, stage04::sm_count(), span)
                                                : stage04::plan_fixed_rule(span, p.kv.block_size, num_splits);
  stage04::check_plan(sp, span, p.kv.block_size);
  const int total = sp.num_splits + 1;
  SinkTokenSplits slice;
  static_cast<stage04::Splits&>(slice) = stage04::workspace_splits(p, total, sp.blocks_per_split * p.kv.block_size);
  slice.sink_tokens = p.sink_tokens;
  slice.window = p.window;
  slice.block_shift = pk.block_shift;
  const auto adapted = adapt(slice);
  stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
    stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
      Tiles::template launch_tile<T, std::decay_t<decltype(adapted)>, WindowWithSinkTokens>(
          p, pk, adapted, dim3(total, p.kv.num_kv_heads, p.batch.num_requests), stream);
    });
    launch(stage04::merge_splits_kernel<HEAD_DIM>, dim3(p.batch.num_requests, p.num_q_heads),
           dim3(stage04::MERGE_THREADS), 0, stream, p, static_cast<const stage04::Splits&>(slice));
  });
}

// The same in stage 04's batch-invariant mode: split 0 the sink tokens, then
// splits of its fixed size over the window, for the decodes; whole 128-row
// tiles for everything else.
template <class Tiles, class Adapt>
void run_invariant_sink_tokens(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream,
                               const Adapt& adapt) {
  stage04::launch_invariant_tiles<Tiles, WindowWithSinkTokens>(p, pk, stream, adapt);
  SinkTokenSplits slice;
  static_cast<stage04::Splits&>(slice) = stage04::invariant_splits(p, stage06::span_keys(p), /*leading=*/1);
  slice.sink_tokens = p.sink_tokens;
  slice.window = p.window;
  slice.block_shift = pk.block_shift;
  stage04::launch_invariant_splits<Tiles, WindowWithSinkTokens>(p, pk, slice, stream, adapt);
}

template <class Tiles, class Adapt>
void run(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream, int num_splits,
         const Adapt& adapt) {
  if (p.sink_tokens > 0 && p.batch_invariant) {
    stage04::require_invariant_split_request(p, num_splits);
    run_invariant_sink_tokens<Tiles>(p, pk, stream, adapt);
    return;
  }
  // Decodes with sink tokens take the sink tokens' own split, also when only the
  // q_lens (not the flags) show decodes; run_splits_or_tiles checks the request
  // itself on the other paths.
  if (p.sink_tokens > 0 && stage04::check_split_request(p, num_splits)) {
    run_sink_token_splits<Tiles>(p, pk, stream, num_splits, adapt);
  } else if (p.sink_tokens > 0) {
    stage05::run_splits_or_tiles<Tiles, WindowWithSinkTokens>(p, pk, stream, num_splits, stage06::span_keys(p), adapt);
  } else {
    stage05::run_splits_or_tiles<Tiles, stage06::SlidingWindow>(p, pk, stream, num_splits, stage06::span_keys(p),
                                                                 adapt);
  }
}

// The cache format's tiles, with sinks added when there are any.
template <class F>
void with_format_and_sinks(const AttentionParams& p, F&& f) {
  auto with_adapt = [&]<class Tiles>() {
    if (p.sinks != nullptr) {
      f.template operator()<Tiles>(AddSinks{p.sinks});
    } else {
      f.template operator()<Tiles>(stage03::SameSlice{});
    }
  };
  switch (p.kv.format) {
    case KvFormat::bf16: with_adapt.template operator()<stage04::Bf16SplitTiles>(); break;
    case KvFormat::int8: with_adapt.template operator()<stage05::QuantizedTiles<KvFormat::int8>>(); break;
    case KvFormat::fp8_e4m3: with_adapt.template operator()<stage05::QuantizedTiles<KvFormat::fp8_e4m3>>(); break;
  }
}

}  // namespace

void forward(const AttentionParams& p, cudaStream_t stream) { forward(p, stream, 0); }

void forward(const AttentionParams& p_in, cudaStream_t stream, int num_splits) {
  const stage03::Packing pk = validate(p_in);
  check_device_batch(p_in, "stage 08", stream);
  // No window (0) is a window no context outgrows, and then sink tokens change nothing.
  AttentionParams p = p_in;
  if (p.window == 0) {
    p.window = p.batch.max_seq_len + 1;
    p.sink_tokens = 0;
  }
  with_format_and_sinks(p, [&]<class Tiles>(const auto& adapt) { run<Tiles>(p, pk, stream, num_splits, adapt); });
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("08_attention_sinks");
}

void forward(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream) {
  const stage03::Packing pk = validate(p);
  PA_REQUIRE(p.window == 0 && p.sink_tokens == 0,
             "stage 08: cascade takes no sliding window and no sink tokens (stage 07 refuses windows)");
  PA_REQUIRE(!p.batch_invariant,
             "stage 08: cascade has no batch-invariant mode (stage 07: its prefix pass depends on the group)");
  check_device_batch(p, "stage 08", stream);
  PA_REQUIRE(c.suffix_begin.size() >= static_cast<size_t>(p.batch.num_requests),
             "stage 08: the cascade plan was made for another batch");
  const int span = std::max(1, c.max_own_keys);
  with_format_and_sinks(p, [&]<class Tiles>(const auto& adapt) {
    stage07::forward_with<Tiles>(p, pk, c, span, stream, adapt);
  });
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("08_attention_sinks");
}

}  // namespace pa::stage08
