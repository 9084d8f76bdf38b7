// The tile contract: what the attention tiles of stages 03-08 (stage 03's
// gqa_packing_kernel, stage 05's quantized_kernel, going_further's two-warp
// tile) ask of the policies that plug into them, as C++20 concepts:
//  - Slice: which query tile and keys a program reads, and where its finished
//    rows go (stage 03's WholeContext, stage 04's Splits, stage 07's passes,
//    stage 08's WithSinks adapter, ...);
//  - Mask: which keys each row sees, and which key tiles to skip (stage 03's
//    CausalMask, stage 06's SlidingWindow, stage 08's WindowWithSinkTokens);
//  - TileFamily: a cache format's tile shapes, shared memory and launch
//    (stage 03's Bf16Tiles, stage 05's QuantizedTiles, further::Bf16SplitTiles).
// The kernels and launchers are constrained with them, so a new policy that
// lacks a member, or has one of the wrong shape, fails where it is first
// launched with the concept's name, not deep inside a kernel. Optional members
// have their defaults here, next to the concept that allows them (serves(),
// after_prior_grid). The batch-shape preconditions are run-time checks
// (stage 03's checked_packing()); a concept cannot state them. The merge of
// finished partials has a contract of its own: PartialSource (merge.cuh).
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

#if defined(__CUDACC__) || defined(PA_HOST_CUDA_HEADERS)
#include <cuda_runtime.h>
#endif

#include "attention_params.h"

namespace pa {

// ---- The contract's vocabulary (stage 03 computes these).

// Keys [begin, end) of one program; end <= begin: none (no tile is loaded).
struct KeyRange {
  int begin, end;
};

// The tile kernels' arguments, derived from the batch on the host once per
// launch (stage 03's checked_packing()).
struct Packing {
  int group;         // query heads per KV head, 1..64 (stage 03's MAX_GROUP)
  int group_shift;   // log2(GROUP_PAD): row i of a request holds token i >> group_shift, head i & (GROUP_PAD - 1)
  int block_shift;   // log2(block_size)
  float scale_log2;  // softmax_scale * log2(e): scores in the shared state's log2 units
};

// The keys one warp's 16 rows need: its rows span a few tokens (stage 03's warp_keys()).
struct WarpKeys {
  int tile_kv_end;  // keys at or past this are masked for every row of the tile
  int oldest_pos;   // position of the warp's first token
  int newest_pos;   // position of its last real token
  int kv_end;       // keys it must compute: up to its newest position; 0 for a warp of padding rows only
};

// ---- Slice

// store_row for a tile of O_TILES = HEAD_DIM / 8 accumulator tiles: this lane's
// part of finished row q_row (of [num_tokens * Hq]) is dims 8j + 2 t4 and
// 8j + 2 t4 + 1, held in o[j][2 half] and o[j][2 half + 1] (the MMA accumulator
// layout), still to be scaled by inv_l; lse is the row's natural-log
// log-sum-exp (-inf, with inv_l = 0, for a row that saw no key). Dims from
// head_dim on are the tile's padding: never stored.
template <class S, int O_TILES>
concept StoresRows = requires(const S& s, const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                              int half, int t4, float inv_l, float lse) {
  s.store_row(p, q_row, o, half, t4, inv_l, lse);
};

// The optional members, detected in one place.
template <class S>
concept DeclaresServes = requires { &S::serves; };
template <class S>
concept DeclaresAfterPriorGrid = requires { S::AFTER_PRIOR_GRID; };
template <class S>
concept DeclaresRequest = requires { &S::request; };

template <class S>
concept Slice =
    // A kernel argument: its bytes are copied to the device as they are.
    std::is_trivially_copyable_v<S> &&
    requires(const S& s, int tile_kv_begin, int tile_kv_end) {
      // The query tile this program owns (read from blockIdx).
      { s.query_tile() } -> std::same_as<int>;
      // The keys it reads, given its tile's range [tile_kv_begin, tile_kv_end)
      // (tile_kv_begin: the Mask's first_key).
      { s.key_range(tile_kv_begin, tile_kv_end) } -> std::same_as<KeyRange>;
    } &&
    // Every tile row length: head_dim 64, 128 and 256.
    StoresRows<S, 8> && StoresRows<S, 16> && StoresRows<S, 32> &&
    // Optional: bool serves(int q_len), whether a request's programs run at all.
    (!DeclaresServes<S> || requires(const S& s, int q_len) {
      { s.serves(q_len) } -> std::same_as<bool>;
    }) &&
    // Optional: static constexpr bool AFTER_PRIOR_GRID (after_prior_grid below).
    (!DeclaresAfterPriorGrid<S> || requires {
      requires std::same_as<decltype(S::AFTER_PRIOR_GRID), const bool>;
      typename std::bool_constant<S::AFTER_PRIOR_GRID>;
    }) &&
    // Optional: int request(), the request this program serves (request_of below).
    (!DeclaresRequest<S> || requires(const S& s) {
      { s.request() } -> std::same_as<int>;
    });

// Whether the program of a request with q_len queries runs at all: a Slice
// without serves() serves every request. (The batch-invariant mode runs a mixed
// batch as two launches whose programs each serve their own requests.)
template <Slice S>
__device__ __forceinline__ bool serves(const S& slice, int q_len) {
  if constexpr (DeclaresServes<S>) {
    return slice.serves(q_len);
  } else {
    return true;
  }
}

// The request a program serves: blockIdx.z (the grids of stages 03-08 have one
// z per request), unless the Slice maps its programs to requests itself (the
// engine's work list, whose flat grid of items spans all requests).
template <Slice S>
__device__ __forceinline__ int request_of(const S& slice) {
  if constexpr (DeclaresRequest<S>) {
    return slice.request();
  } else {
    return static_cast<int>(blockIdx.z);
  }
}

// Whether a Slice's programs read the results of the kernel launched just before
// them only after wait_for_prior_grid() (ptx.cuh), so that it may start as that
// kernel's dependent launch (launch_for_slice, launch.cuh). False unless the
// Slice declares AFTER_PRIOR_GRID (as the suffix pass after the engine's
// prefix pass does, engine/compose_cascade.cuh).
template <Slice S>
inline constexpr bool after_prior_grid = false;
template <Slice S>
  requires DeclaresAfterPriorGrid<S>
inline constexpr bool after_prior_grid<S> = S::AFTER_PRIOR_GRID;

// ---- Mask

// One warp's answers for its key tiles [kv_start, kv_start + width) and for
// the lane's two rows (i = 0: row g, 1: row g + 8).
template <class W>
concept MaskWarp = requires(const W& w, int kv_start, int width, int key, int i) {
  { w.skip_tile(kv_start, width) } -> std::same_as<bool>;   // no row of the warp sees a key of it: no math
  { w.needs_mask(kv_start, width) } -> std::same_as<bool>;  // some row must not see some key of it
  { w.masked(key, i) } -> std::same_as<bool>;               // row i must not see `key`
};

// Static members, for the tile and for one warp: first_key(p, pk, oldest_q_pos)
// is where the tile's key loop starts, given its oldest query's position (0
// without a window); for_warp(p, q_pos, wk, kv_end) is the warp's Warp for the
// positions of the lane's rows, the warp's keys and the program's end of keys
// (keys past kv_end are zero-filled: they would score 0, not -inf).
template <class M>
concept Mask = requires(const AttentionParams& p, const Packing& pk, int oldest_q_pos, const int (&q_pos)[2],
                        const WarpKeys& wk, int kv_end) {
  typename M::Warp;
  { M::first_key(p, pk, oldest_q_pos) } -> std::same_as<int>;
  { M::for_warp(p, q_pos, wk, kv_end) } -> std::same_as<typename M::Warp>;
} && MaskWarp<typename M::Warp>;

// ---- TileFamily

// The least a Slice and a Mask offer. TileFamily launches a family's tiles with
// them in its check, which is unevaluated: they are never defined nor run.
struct SliceArchetype {
  __device__ int query_tile() const;
  __device__ KeyRange key_range(int tile_kv_begin, int tile_kv_end) const;
  template <int O_TILES>
  __device__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4], int half, int t4,
                            float inv_l, float lse) const;
};
struct MaskArchetype {
  struct Warp {
    __device__ bool skip_tile(int kv_start, int width) const;
    __device__ bool needs_mask(int kv_start, int width) const;
    __device__ bool masked(int key, int i) const;
  };
  __device__ static int first_key(const AttentionParams& p, const Packing& pk, int oldest_q_pos);
  __device__ static Warp for_warp(const AttentionParams& p, const int (&q_pos)[2], const WarpKeys& wk, int kv_end);
};
static_assert(Slice<SliceArchetype> && !DeclaresServes<SliceArchetype> && !after_prior_grid<SliceArchetype>);
static_assert(Mask<MaskArchetype>);

// A tile shape (stage 03's Tiling<Shape>), as the launchers outside its family
// read it: its row length, its rows (16 per row warp) and its threads.
template <class T>
concept TileShape = requires {
  typename std::integral_constant<int, T::HEAD_DIM>;
  typename std::integral_constant<int, T::ROWS>;
  typename std::integral_constant<int, T::NUM_THREADS>;
};

// A family at one tile row length: a decode and a prefill shape, the dynamic
// shared memory of each as a constant (stage 04 counts the programs an SM holds
// from it), and launch_tile<T, S, M>(p, pk, slice, grid, stream) of either with
// any Slice and Mask. The decode shape is one row warp (stage 04's splits run it).
template <class F, int HEAD_DIM>
concept TileFamilyAt =
    TileShape<typename F::template Decode<HEAD_DIM>> && TileShape<typename F::template Prefill<HEAD_DIM>> &&
    requires(const AttentionParams& p, const Packing& pk, const SliceArchetype& slice, dim3 grid,
             cudaStream_t stream) {
      requires F::template Decode<HEAD_DIM>::ROWS == 16;
      typename std::integral_constant<size_t, F::template smem_bytes<typename F::template Decode<HEAD_DIM>>()>;
      typename std::integral_constant<size_t, F::template smem_bytes<typename F::template Prefill<HEAD_DIM>>()>;
      F::template launch_tile<typename F::template Decode<HEAD_DIM>, SliceArchetype, MaskArchetype>(p, pk, slice,
                                                                                                    grid, stream);
      F::template launch_tile<typename F::template Prefill<HEAD_DIM>, SliceArchetype, MaskArchetype>(p, pk, slice,
                                                                                                     grid, stream);
    };

// Every tile row length a launcher asks for (stage 03's tile_head_dim()).
template <class F>
concept TileFamily = TileFamilyAt<F, 64> && TileFamilyAt<F, 128> && TileFamilyAt<F, 256>;

}  // namespace pa
