// Stage 08's policies: attention sinks, in two kinds.
//
// (a) Learned sink logits (gpt-oss). Query head h has a logit sink_h that joins
// its softmax denominator and contributes no value:
//     o = sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sink_h}).
// In the shared state's terms the sink is the state (m = sink_h * log2 e, l = 1, o = 0)
// (common/online_softmax.cuh). Merging is associative and commutative, so
// starting a row's running state from it and merging it into the row's finished
// state give the same result, and neither can overflow: the merge rescales
// against the larger max. WithSinks does the latter, in the Slice's epilogue,
// so it goes in exactly once whatever the tile and split layout: every
// whole-context row, split 0's partial (also when split 0 saw no key: its empty
// state plus the sink is just the sink), a cascade's suffix partial. The lse
// written includes the sink.
//
// (b) Sink tokens (StreamingLLM). With a window, the first S positions stay
// visible to every query. A Mask (WindowWithSinkTokens) extends stage 06's
// window with them; for decodes, SinkTokenSplits gives the sink tokens a split
// of their own, so a decode reads only their blocks and the window.
#pragma once

#include <type_traits>

#include "common/attention_params.h"
#include "common/cuda_compat.cuh"
#include "common/online_softmax.cuh"
#include "common/tile_contract.cuh"
#include "common/todo.cuh"
// Stage 08 builds on the reference solutions of stages 03-07.
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "solutions/06_sliding_window/sliding_window.cuh"

namespace pa::stage08 {
namespace {

using stage03::KeyRange;

// Wraps a Slice: the row's finished state (o * inv_l, lse) is merged with the
// sink state of its query head before the inner Slice stores it. A split-KV
// Slice adds it in split 0 only.
template <Slice Inner>
struct WithSinks : Inner {
  const float* sinks;  // [num_q_heads]  natural-log logits

  __device__ __forceinline__ bool carries_sink() const {
    if constexpr (std::is_base_of_v<stage04::Splits, Inner>) {
      return blockIdx.x == 0;
    } else {
      return true;
    }
  }

  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    if (carries_sink()) {
      // TODO 1: merge the sink of this row's query head (q_row % num_q_heads): the state (sink * log2 e, 1, 0) with the row's (lse, 1) -> scale inv_l by the row's weight, and the new lse
      (void)sinks;
      if (t4 == 0 && half == 0) PA_TODO(1);
    }
    Inner::store_row(p, q_row, o, half, t4, inv_l, lse);
  }
};

// The Slice adapter a launcher applies (stage03::SameSlice's interface).
struct AddSinks {
  const float* sinks;  // [num_q_heads], or null: no learned sinks

  template <Slice S>
  WithSinks<S> operator()(const S& s) const {
    WithSinks<S> w;
    static_cast<S&>(w) = s;
    w.sinks = sinks;
    return w;
  }
};
static_assert(Slice<WithSinks<stage03::WholeContext>> && Slice<WithSinks<stage04::Splits>>);

// Stage 06's window plus the first p.sink_tokens positions, visible to every query.
struct WindowWithSinkTokens {
  // Tiles of the first query tile start at key 0 when there are sink tokens
  // (their math skips the tiles between the sink tokens and the window).
  __device__ __forceinline__ static int first_key(const AttentionParams& p, const stage03::Packing& pk,
                                                  int oldest_q_pos) {
    return p.sink_tokens > 0 ? 0 : stage06::SlidingWindow::first_key(p, pk, oldest_q_pos);
  }

  struct Warp : stage06::SlidingWindow::Warp {
    int sink_tokens;

    __device__ __forceinline__ bool skip_tile(int kv_start, int width) const {
      return kv_start >= sink_tokens && stage06::SlidingWindow::Warp::skip_tile(kv_start, width);
    }
    __device__ __forceinline__ bool masked(int key, int i) const {
      // TODO 2: causal, and outside the window unless the key is one of the first sink_tokens positions
      if (key < sink_tokens) PA_TODO(2);  // a sink token reached the placeholder: report this TODO
      return stage06::SlidingWindow::Warp::masked(key, i);  // placeholder: the window alone
    }
  };

  __device__ __forceinline__ static Warp for_warp(const AttentionParams& p, const int (&q_pos)[2],
                                                  const stage03::WarpKeys& wk, int kv_end) {
    Warp w;
    static_cast<stage06::SlidingWindow::Warp&>(w) = stage06::SlidingWindow::for_warp(p, q_pos, wk, kv_end);
    w.sink_tokens = p.sink_tokens;
    return w;
  }
};
static_assert(Mask<WindowWithSinkTokens>);

// Split-KV for decodes with sink tokens: split 0 covers the sink tokens that
// lie before the window's first block, splits 1.. cut the window, so a decode
// reads only those blocks. keys_per_split (inherited) sizes the window's splits.
struct SinkTokenSplits : stage04::Splits {
  int sink_tokens;
  int window;
  int block_shift;

  __device__ __forceinline__ KeyRange key_range(int /*tile_kv_begin*/, int tile_kv_end) const {
    // A decode row sits at position tile_kv_end - 1; its window starts in this block.
    const int window_begin = max(0, tile_kv_end - window) >> block_shift << block_shift;
    // TODO 3: split 0: the sink tokens before the window's block, [0, min(sink_tokens, window_begin)); split s >= 1: keys_per_split keys of the window from window_begin + (s - 1) * keys_per_split, clipped to tile_kv_end
    (void)window_begin, (void)tile_kv_end;
    if (threadIdx.x == 0) PA_TODO(3);
    return {0, 0};  // placeholder: no keys
  }
};
static_assert(Slice<SinkTokenSplits>);

}  // namespace
}  // namespace pa::stage08
