// Stage 06: sliding-window attention.
//
// The window counts positions: a query at q_pos sees the keys at k_pos with
// k_pos <= q_pos (causal) and q_pos - k_pos < window. A decode at 32768 with a
// 4096 window needs 4096 keys, so it must read only those: 1/8 of the bytes.
//  - The key loop starts late: a tile's keys begin at the block holding the
//    first key of its OLDEST query's window (SlidingWindow::first_key); every
//    later query's window starts further on, so nothing it needs comes before.
//  - Per warp, tiles older than every row's window are skipped, and on the few
//    tiles where a row's window starts, the keys before it are masked
//    (SlidingWindow::for_warp).
//  - Split-KV splits only the window's span: stage 04's plan is sized by
//    span_keys(), and its Splits count from the first key.
// All of it is a `Mask` policy of the tiles of stages 03 and 05, so the same
// code serves bf16 and 8-bit caches, prefill tiles and decode splits.
#include <algorithm>
#include <string>

#include "common/batch_ops.h"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
// Stage 06 builds on the reference solutions of stages 03-05.
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "solutions/05_quantized_kv/quantized_tile.cuh"

namespace pa::stage06 {
namespace {

using stage03::CausalMask;

// The Mask policy of the tiles for p.window > 0: causal, and keys older than
// the window masked.
struct SlidingWindow {
  // The first key a tile reads, when its oldest query sits at oldest_q_pos: the
  // start of the block holding the first key of that query's window (loads stay
  // block-aligned, as without a window; the few keys before the window's start
  // are masked).
  __device__ __forceinline__ static int first_key(const AttentionParams& p, const stage03::Packing& pk,
                                                  int oldest_q_pos) {
    // TODO 1: the key loop's first key: the block boundary at or below the oldest query's first visible key
    (void)p, (void)pk, (void)oldest_q_pos;
    if (threadIdx.x == 0) PA_TODO(1);
    return 0;  // placeholder: key 0 (whole tiles then read every key; splits, sized for the window, miss the newest keys)
  }

  // The oldest key a query at q_pos sees: max(0, q_pos - window + 1), computed
  // in 64 bits (a window near INT_MAX must not wrap).
  __device__ __forceinline__ static int oldest_visible_key(const AttentionParams& p, int q_pos) {
    // TODO 2: the oldest key that q_pos - k_pos < window keeps (never below 0; no int overflow for windows near INT_MAX)
    (void)p, (void)q_pos;
    if (threadIdx.x == 0) PA_TODO(2);
    return 0;  // placeholder: no key is too old
  }

  // One warp's rows: the causal limits, plus where each row's window begins.
  struct Warp : CausalMask::Warp {
    int row_kv_begin[2];  // rows g, g + 8 see keys from here on
    int unmasked_begin;   // from here on every row of the warp sees every key (its newest token's window)
    int skip_end;         // a tile wholly below this is outside every row's window (its oldest token's)

    __device__ __forceinline__ bool skip_tile(int kv_start, int width) const { return kv_start + width <= skip_end; }
    __device__ __forceinline__ bool needs_mask(int kv_start, int width) const {
      return CausalMask::Warp::needs_mask(kv_start, width) || kv_start < unmasked_begin;
    }
    __device__ __forceinline__ bool masked(int key, int i) const {
      return CausalMask::Warp::masked(key, i) || key < row_kv_begin[i];
    }
  };

  __device__ __forceinline__ static Warp for_warp(const AttentionParams& p, const int (&q_pos)[2],
                                                  const stage03::WarpKeys& wk, int kv_end) {
    Warp w;
    static_cast<CausalMask::Warp&>(w) = CausalMask::for_warp(p, q_pos, wk, kv_end);
    w.row_kv_begin[0] = oldest_visible_key(p, q_pos[0]);
    w.row_kv_begin[1] = oldest_visible_key(p, q_pos[1]);
    w.unmasked_begin = oldest_visible_key(p, wk.newest_pos);
    w.skip_end = oldest_visible_key(p, wk.oldest_pos);
    return w;
  }
};

// Stage 03's shape rules, plus this stage's: a window >= 0, no sinks, and an
// 8-bit cache has its codes and scales.
stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window >= 0, "stage 06: window " + std::to_string(p.window) + " is negative (0 = no window)");
  PA_REQUIRE(p.sinks == nullptr, "stage 06 implements causal sliding-window attention: no sinks (stage 08)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             std::string("stage 06: a ") + name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  return stage03::checked_packing(p, "06");
}

// The keys the longest request's decode reads: at most window + block_size - 1
// (the loop starts on the block holding the window's first key), and never more
// than max_seq_len. 64-bit arithmetic: a window near INT_MAX must not wrap.
int span_keys(const AttentionParams& p) {
  const long long span = static_cast<long long>(p.window) + p.kv.block_size - 1;
  return static_cast<int>(std::min<long long>(p.batch.max_seq_len, span));
}

}  // namespace

stage04::SplitPlan plan(const AttentionParams& p_in, int num_sms) {
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  return stage04::plan_rule(p, num_sms, span_keys(p));
}

void forward(const AttentionParams& p_in, cudaStream_t stream) { forward(p_in, stream, 0); }

void forward(const AttentionParams& p_in, cudaStream_t stream, int num_splits) {
  const stage03::Packing pk = validate(p_in);
  // No window (0) is a window no context outgrows: q_pos - k_pos <= max_seq_len - 1.
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  const int span = span_keys(p);
  using stage05::run_splits_or_tiles;
  switch (p.kv.format) {
    case KvFormat::bf16:
      run_splits_or_tiles<stage03::Bf16Tiles, SlidingWindow>(p, pk, stream, num_splits, span);
      break;
    case KvFormat::int8:
      run_splits_or_tiles<stage05::QuantizedTiles<KvFormat::int8>, SlidingWindow>(p, pk, stream, num_splits, span);
      break;
    case KvFormat::fp8_e4m3:
      run_splits_or_tiles<stage05::QuantizedTiles<KvFormat::fp8_e4m3>, SlidingWindow>(p, pk, stream, num_splits,
                                                                                       span);
      break;
  }
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("06_sliding_window");
}

}  // namespace pa::stage06
