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

stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window >= 0, "stage 06: window " + std::to_string(p.window) + " is negative (0 = no window)");
  PA_REQUIRE(p.sinks == nullptr, "stage 06 implements causal sliding-window attention: no sinks (stage 08)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             std::string("stage 06: a ") + name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  PA_REQUIRE(p.kv.num_kv_heads > 0 && p.num_q_heads % p.kv.num_kv_heads == 0,
             "stage 06: num_q_heads must be a multiple of num_kv_heads");
  const int group = p.num_q_heads / p.kv.num_kv_heads;
  PA_REQUIRE(group >= 1 && group <= stage03::MAX_GROUP,
             "stage 06: group " + std::to_string(group) + " is not supported (1.." +
                 std::to_string(stage03::MAX_GROUP) + ")");
  PA_REQUIRE(p.kv.block_size >= 1 && (p.kv.block_size & (p.kv.block_size - 1)) == 0,
             "stage 06: block_size " + std::to_string(p.kv.block_size) + " is not a power of two");
  PA_REQUIRE(p.kv.head_dim == 64 || p.kv.head_dim == 128 || p.kv.head_dim == 256,
             "stage 06: head_dim " + std::to_string(p.kv.head_dim) + " is not supported (64, 128, 256)");
  return stage03::make_packing(p, group);
}

// As stage 05: decode-only batches that the (window-sized) split plan splits
// take stage 04's splits, everything else stage 03's tiles.
template <class Kv>
void run(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream, int num_splits) {
  const bool decode_only = p.batch.decode_only || p.batch.max_query_len <= 1;
  PA_REQUIRE(num_splits == 0 || decode_only,
             "stage 06: a forced split count needs a decode-only batch (every q_len <= 1)");
  if (decode_only && (num_splits > 0 || stage04::plan_rule(p, stage04::sm_count()).num_splits > 1)) {
    stage04::forward_splits<Kv, SlidingWindow>(p, pk, stream, num_splits);
    return;
  }
  switch (p.kv.head_dim) {
    case 64: stage03::dispatch_whole_context<64, Kv, SlidingWindow>(p, pk, stream); break;
    case 128: stage03::dispatch_whole_context<128, Kv, SlidingWindow>(p, pk, stream); break;
    default: stage03::dispatch_whole_context<256, Kv, SlidingWindow>(p, pk, stream); break;
  }
}

}  // namespace

stage04::SplitPlan plan(const AttentionParams& p, int num_sms) { return stage04::plan_rule(p, num_sms); }

void forward(const AttentionParams& p_in, cudaStream_t stream) { forward(p_in, stream, 0); }

void forward(const AttentionParams& p_in, cudaStream_t stream, int num_splits) {
  const stage03::Packing pk = validate(p_in);
  // No window (0) is a window no context outgrows: q_pos - k_pos <= max_seq_len - 1.
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  switch (p.kv.format) {
    case KvFormat::bf16: run<stage03::Bf16Kv>(p, pk, stream, num_splits); break;
    case KvFormat::int8: run<stage05::QuantizedKv<KvFormat::int8>>(p, pk, stream, num_splits); break;
    case KvFormat::fp8_e4m3: run<stage05::QuantizedKv<KvFormat::fp8_e4m3>>(p, pk, stream, num_splits); break;
  }
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("06_sliding_window");
}

}  // namespace pa::stage06
