// Stage 06: sliding-window attention.
//
// The window counts positions: a query at q_pos sees the keys at k_pos with
// k_pos <= q_pos (causal) and q_pos - k_pos < window. A decode at 32768 with a
// 4096 window needs 4096 keys, so it must read only those: 1/8 of the bytes.
//  - The key loop starts late: a tile's keys begin at the block holding the
//    first key of its OLDEST query's window (SlidingWindow::first_key); every
//    later query's window starts further on, so nothing it needs comes before.
//  - The mask drops, per row, the keys older than the window
//    (SlidingWindow::row_kv_begin), on the few tiles where that can happen.
//  - Split-KV splits only [first key, end): stage 04's plan sizes the splits by
//    the window's span, and its Splits policy starts counting at the first key.
// Both are a `Mask` policy of stage 03's kernel, so the same source serves
// bf16 and 8-bit caches (stage 05's QuantizedKv), prefill tiles and decode
// splits; without a window the policy is CausalMask and none of this is compiled.
#include <string>

#include "common/batch_ops.h"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
// At stage 06 the learner has finished stages 03-05: their code is used as written there.
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "solutions/05_quantized_kv/quantized_kv.cuh"

namespace pa::stage06 {
namespace {

// The Mask policy of gqa_packing_kernel for p.window > 0.
struct SlidingWindow {
  static constexpr bool WINDOWED = true;

  // The first key a tile reads, when its oldest query sits at oldest_q_pos: the
  // start of the block holding the first key of that query's window (loads stay
  // block-aligned, as without a window; the few keys before the window's start
  // are masked).
  __device__ __forceinline__ static int first_key(const AttentionParams& p, const stage03::Packing& pk,
                                                  int oldest_q_pos) {
    //@ TODO 1: the key loop's first key: the block boundary at or below max(0, oldest_q_pos - window + 1)
    const int oldest_visible = max(0, oldest_q_pos - p.window + 1);
    return (oldest_visible >> pk.block_shift) << pk.block_shift;
    //@ skeleton
    //@ (void)p, (void)pk, (void)oldest_q_pos;
    //@ if (threadIdx.x == 0) PA_TODO(1);
    //@ return 0;  // placeholder: the whole context is read (the mask still gives the right answer, slowly)
    //@ end
  }

  // The oldest key a query at q_pos sees: keys before it are masked.
  __device__ __forceinline__ static int row_kv_begin(const AttentionParams& p, int q_pos) {
    //@ TODO 2: the mask: the oldest key that q_pos - k_pos < window keeps
    return q_pos - p.window + 1;  // may be negative: then nothing is masked
    //@ skeleton
    //@ (void)p, (void)q_pos;
    //@ if (threadIdx.x == 0) PA_TODO(2);
    //@ return 0;  // placeholder: no key is too old
    //@ end
  }
};

// Stage 03's shape rules, plus this stage's: a window >= 0, no sinks.
stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window >= 0, "stage 06: window " + std::to_string(p.window) + " is negative (0 = no window)");
  PA_REQUIRE(p.sinks == nullptr, "stage 06 implements causal sliding-window attention: no sinks (stage 08)");
  return stage03::checked_packing(p, "06");
}

}  // namespace

stage04::SplitPlan plan(const AttentionParams& p, int num_sms) { return stage04::plan_rule(p, num_sms); }

void forward(const AttentionParams& p_in, cudaStream_t stream) { forward(p_in, stream, 0); }

void forward(const AttentionParams& p_in, cudaStream_t stream, int num_splits) {
  const stage03::Packing pk = validate(p_in);
  // No window (0) is a window no context outgrows: q_pos - k_pos <= max_seq_len - 1.
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  using stage04::forward_splits_or_tiles;
  switch (p.kv.format) {
    case KvFormat::bf16:
      forward_splits_or_tiles<stage03::Bf16Kv, SlidingWindow>(p, pk, stream, num_splits, "06");
      break;
    case KvFormat::int8:
      forward_splits_or_tiles<stage05::QuantizedKv<KvFormat::int8>, SlidingWindow>(p, pk, stream, num_splits, "06");
      break;
    case KvFormat::fp8_e4m3:
      forward_splits_or_tiles<stage05::QuantizedKv<KvFormat::fp8_e4m3>, SlidingWindow>(p, pk, stream, num_splits, "06");
      break;
  }
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("06_sliding_window");
}

}  // namespace pa::stage06
