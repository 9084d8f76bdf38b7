// Stage 08: attention sinks, learned logits (gpt-oss) and sink tokens
// (StreamingLLM), on the paths of the earlier stages over bf16 caches:
// whole-context tiles (stage 03), split-KV (stage 04), windows (stage 06).
// attention_sinks.cuh has the policies; this file checks the batch and picks
// the path. The engine (engine/engine.h) composes the same policies with the
// 8-bit caches, batch-invariant mode and cascade.
#include <string>

#include "attention_sinks.cuh"
#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/merge.cuh"
#include "common/stages.h"
#include "common/todo.cuh"

namespace pa::stage08 {
namespace {

// Stage 03's shape rules, plus this stage's: bf16 caches (the engine composes
// sinks with 8-bit caches, batch-invariant mode and cascade), window and sink
// tokens >= 0.
stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window >= 0, "stage 08: window " + std::to_string(p.window) + " is negative (0 = no window)");
  PA_REQUIRE(p.sink_tokens >= 0,
             "stage 08: sink_tokens " + std::to_string(p.sink_tokens) + " is negative (0 = no sink tokens)");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             "stage 08 reads bf16 caches; sinks over 8-bit caches run in the engine (engine/engine.h)");
  PA_REQUIRE(!p.batch_invariant,
             "stage 08 has no batch-invariant mode of its own; the engine (engine/engine.h) composes sinks with "
             "batch-invariant mode (going_further/batch_invariant.cuh)");
  return stage03::checked_packing(p, "08");
}

// Decode batches with sink tokens: split 0 the sink tokens, splits 1.. the
// window (num_splits 0: stage 04's plan over the window's span), then stage
// 04's merge.
template <class Adapt>
void run_sink_token_splits(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream, int num_splits,
                           const Adapt& adapt) {
  using Tiles = stage03::Bf16Tiles;
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
    launch_merge<HEAD_DIM, stage04::MERGE_LANES<HEAD_DIM>>(p, stage04::split_partials(slice), stream);
  });
}

// Stage 03's bf16 tiles through stage 04's splits or whole query tiles, with
// stage 06's window, extended by the sink tokens when there are any.
template <class Adapt>
void run(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream, int num_splits,
         const Adapt& adapt) {
  using Tiles = stage03::Bf16Tiles;
  // Decodes with sink tokens take the sink tokens' own split, also when only the
  // q_lens (not the flags) show decodes; run_splits_or_tiles checks the request
  // itself on the other paths.
  if (p.sink_tokens > 0 && stage04::check_split_request(p, num_splits)) {
    run_sink_token_splits(p, pk, stream, num_splits, adapt);
  } else if (p.sink_tokens > 0) {
    stage04::run_splits_or_tiles<Tiles, WindowWithSinkTokens>(p, pk, stream, num_splits, stage06::span_keys(p), adapt);
  } else {
    stage04::run_splits_or_tiles<Tiles, stage06::SlidingWindow>(p, pk, stream, num_splits, stage06::span_keys(p),
                                                                 adapt);
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
  if (p.sinks != nullptr) {
    run(p, pk, stream, num_splits, AddSinks{p.sinks});
  } else {
    run(p, pk, stream, num_splits, stage03::SameSlice{});
  }
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("08_attention_sinks");
}

}  // namespace pa::stage08
