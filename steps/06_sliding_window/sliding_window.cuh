// Stage 06's Mask policy, the sliding window, and the key span that split-KV
// cuts with it; sliding_window.cu is the stage's launcher. Stage 08 extends
// the window with sink tokens.
#pragma once

#include <algorithm>

#include "common/attention_params.h"
#include "common/cuda_compat.cuh"
#include "common/tile_contract.cuh"
#include "common/todo.cuh"
// Stage 06 builds on the reference solution of stage 03.
#include "solutions/03_gqa_packing/gqa_packing.cuh"

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
static_assert(Mask<SlidingWindow>);

// The keys the longest request's decode reads: at most window + block_size - 1
// (the loop starts on the block holding the window's first key), and never more
// than max_seq_len. 64-bit arithmetic: a window near INT_MAX must not wrap.
int span_keys(const AttentionParams& p) {
  const long long span = static_cast<long long>(p.window) + p.kv.block_size - 1;
  return static_cast<int>(std::min<long long>(p.batch.max_seq_len, span));
}

}  // namespace
}  // namespace pa::stage06
