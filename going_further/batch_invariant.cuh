// Going further (stage 04): batch-invariant mode (AttentionParams::batch_invariant).
//
// Without it, a request's output depends on the batch it runs in, by up to
// ~1e-3, because the batch picks how its sums are cut:
//  - the split plan counts splits from the batch (requests x KV heads against
//    the SM count, and max_seq_len): 4096 keys alone may run as 16 splits of
//    256, beside 63 other requests as 1 split, and 2 splits beside a longer one;
//  - the tile follows the batch's longest query: a decode beside a prefill
//    chunk runs the 128-row tile (64-key tiles) instead of the decode tile
//    (4096 / head_dim keys per tile), and a short verify block likewise.
// Each cut changes the order of the fp32 sums (and where they are rounded),
// so the bits move. Serving engines want a request's tokens to be the same
// whatever else the scheduler batched with it (reproducible sampling, tests
// that compare with a single-request run, RL rollouts scored by another
// engine), and pay a little speed for it. In this mode:
//  1. Splits are fixed in keys, not in count: every split is
//     INVARIANT_KEYS_PER_SPLIT keys from the request's first key (a multiple
//     of every block size), so request r's split s covers the same keys
//     whatever the batch; the batch only decides how many (empty) splits
//     follow its last one.
//  2. Every decode row goes through partials and the merge, also with one
//     split: the one-split shortcut stores (m + log2 l) ln 2 as the lse, the
//     merge of one partial (lse log2 e + log2 1) ln 2, which is not always the
//     same float.
//  3. The merge is a fixed fold: the shared merge (common/merge.cuh) with one
//     lane and InvariantPartials merges a row's partials one after another in
//     split order and skips the empty ones (lse -inf), so its result is a
//     function of the request's own non-empty partials. (Stage 04's merge
//     spreads splits over lanes and merges the lanes at the end, an order that
//     does not depend on the split count either, but an empty split merged
//     there turns an output of -0.0 into +0.0; skipping is simpler to trust
//     than that argument.)
//  4. The tile follows the request, not the batch: a decode (q_len == 1) runs
//     the split path's decode tile, anything longer the 128-row tile
//     (PrefillShape) over its whole context. A mixed batch is then two
//     launches over the whole grid whose programs each serve their own
//     requests (the Slice's serves(q_len), read right after QueryTile::init)
//     and return at once for the others.
// Everything else a program computes is its own request's: its query tiles
// are numbered from the request's first row, its keys from its first key.
//
// The partials are indexed by (split, request, head), not by token, so a mixed
// batch's prefill tokens take no room; with that and the fixed fold, any number
// of splits works, so this mode has no MAX_SPLITS limit (a context of 131072
// keys makes 64 splits, a longer one more).
//
// Its price (bench_attention's invariant cases measure it): a decode alone
// gets ceil(seq_len / 2048) splits however empty the GPU is (1 x 4096 runs 2
// splits x 8 KV heads where the plan would run 16), a full GPU still pays the
// partials and the merge, and a mixed batch runs one more launch.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "common/cuda_compat.cuh"
#include "common/launch.cuh"
#include "common/merge.cuh"
#include "common/online_softmax.cuh"
#include "common/tile_contract.cuh"
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"

namespace pa::further {
namespace {

constexpr int INVARIANT_KEYS_PER_SPLIT = 2048;
static_assert(INVARIANT_KEYS_PER_SPLIT % 256 == 0, "a split starts on a cache block of every block size (1..256)");

// The invariant plan over span_keys keys (engine::plan takes it in this mode).
stage04::SplitPlan invariant_plan(int span_keys, int block_size) {
  return stage04::SplitPlan{std::max(1, stage04::ceil_div(span_keys, INVARIANT_KEYS_PER_SPLIT)), INVARIANT_KEYS_PER_SPLIT / block_size};
}

// The Slice of a split launch in this mode: Inner's keys (stage 04's Splits,
// or a slice derived from it), decode rows only, partials in a layout indexed
// by request: part_o [num_splits, num_requests, Hq, head_dim], part_lse
// [num_splits, num_requests, Hq].
template <Slice Inner>
struct InvariantSplits : Inner {
  __device__ __forceinline__ bool serves(int q_len) const { return q_len == 1; }

  // Always a partial (o * inv_l in fp32, and the lse), also with one split.
  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    const size_t head = q_row % p.num_q_heads;
    const size_t part_row = (static_cast<size_t>(blockIdx.x) * p.batch.num_requests + blockIdx.z) * p.num_q_heads + head;
    stage04::store_partial_row(this->part_o, this->part_lse, part_row, p.kv.head_dim, o, half, t4, inv_l, lse);
  }
};
static_assert(Slice<InvariantSplits<stage04::Splits>>);

// The Slice of the whole-tile launch in this mode: Inner (stage 03's
// WholeContext, as a launcher adapts it) for requests with more than one query.
template <Slice Inner>
struct ServesPrefills : Inner {
  __device__ __forceinline__ bool serves(int q_len) const { return q_len > 1; }
};
static_assert(Slice<ServesPrefills<stage03::WholeContext>>);

// The partials of InvariantSplits as the merge (common/merge.cuh) reads them:
// program (request r, query head h) folds the partials of r's decode row one
// after another in split order (one lane), and skips the empty ones. Requests
// with no query or several have no such row (the whole tiles wrote theirs).
struct InvariantPartials {
  const float* part_o;    // [num_splits, num_requests, Hq, head_dim]
  const float* part_lse;  // [num_splits, num_requests, Hq]
  int num_splits;

  static constexpr bool SKIPS_EMPTY = true;

  struct Row : MergeRow {
    size_t part_row0;  // r * Hq + h: the row's partial in split 0
  };

  __device__ __forceinline__ Row row(const AttentionParams& p, int r, int h) const {
    const int token = p.batch.query_start_loc[r];
    const bool decode = p.batch.query_start_loc[r + 1] - token == 1;
    return {{decode, static_cast<size_t>(token) * p.num_q_heads + h}, static_cast<size_t>(r) * p.num_q_heads + h};
  }

  __device__ __forceinline__ int num_partials() const { return num_splits; }

  __device__ __forceinline__ SoftmaxState<4> partial(const AttentionParams& p, const Row& row, int split,
                                                     const MergeChunk& chunk) const {
    const size_t split_stride = static_cast<size_t>(p.batch.num_requests) * p.num_q_heads;  // rows per split
    const size_t part_row = split * split_stride + row.part_row0;
    float o[4];
    chunk.load(part_o + part_row * p.kv.head_dim, o);
    return SoftmaxState<4>::partial(part_lse[part_row], o);
  }
};
static_assert(PartialSource<InvariantPartials> && skips_empty<InvariantPartials>);

// The decode rows of the batch: family Tiles's decode tile per (split, KV head,
// request) over `splits` (invariant_plan's splits in the engine's workspace, or
// a slice derived from them), then the fold. `adapt` wraps the split Slice (stage 08's sinks).
template <TileFamily Tiles, Mask M, Slice SplitSlice, class Adapt = stage03::SameSlice>
void launch_invariant_splits(const AttentionParams& p, const stage03::Packing& pk, const SplitSlice& splits,
                             cudaStream_t stream, const Adapt& adapt = {}) {
  InvariantSplits<SplitSlice> invariant;
  static_cast<SplitSlice&>(invariant) = splits;
  const auto slice = adapt(invariant);
  const dim3 grid(splits.num_splits, p.kv.num_kv_heads, p.batch.num_requests);
  stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
    stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
      Tiles::template launch_tile<T, std::decay_t<decltype(slice)>, M>(p, pk, slice, grid, stream);
    });
    launch_merge<HEAD_DIM, 1>(p, InvariantPartials{splits.part_o, splits.part_lse, splits.num_splits}, stream);
  });
}

// The rows of requests with more than one query: family Tiles's 128-row tile
// over their whole context, whatever the batch's longest query. Nothing to do
// when the host-side bounds say every request is a decode.
template <TileFamily Tiles, Mask M, class Adapt = stage03::SameSlice>
void launch_invariant_tiles(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream,
                            const Adapt& adapt = {}) {
  if (p.batch.decode_only || p.batch.max_query_len <= 1) return;
  auto prefills_only = [&](const stage03::WholeContext& whole) {
    using Inner = std::decay_t<decltype(adapt(whole))>;
    ServesPrefills<Inner> s;
    static_cast<Inner&>(s) = adapt(whole);
    return s;
  };
  stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
    stage03::run_whole_context<typename Tiles::template Prefill<HEAD_DIM>, Tiles, M>(p, pk, stream, prefills_only);
  });
}

}  // namespace
}  // namespace pa::further
