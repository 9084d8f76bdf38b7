// Stage 07's device side: the Slice policies that turn the tiles of stages 03
// and 05 into the two passes of cascade attention, and the kernels around them.
//
// Requests that share a cached prefix (a system prompt) read it once for the
// group instead of once per request:
//  - prefix pass: the group's queries, gathered into one contiguous batch (one
//    "request" per group, its queries placed after the prefix), run the usual
//    GQA-packed tile over the prefix's keys [0, prefix_len) only, cut into
//    splits so that enough programs fill the GPU (PrefixSplits). Every K/V byte
//    of the prefix is read once per tile of up to 128 rows, and a tile's rows
//    are the queries of many requests;
//  - suffix pass: every request runs the tile over its own keys [prefix_len,
//    seq_len) (0 for requests in no group) through its own block table; its
//    epilogue merges the prefix partials of the row with the shared state's
//    merge before writing the final row (SuffixMerge), so no merge launch is
//    needed. Long decode suffixes take stage 04's splits (SuffixSplits) and
//    the shared merge (common/merge.cuh), which folds in the prefix partials
//    after the splits (CascadePartials).
// The engine runs the same groups with stage 09's tile (TMA, wgmma) as the
// prefix pass (engine/compose_cascade.cuh), which reuses these Slices.
#pragma once

#include <algorithm>
#include <type_traits>

#include "common/attention_params.h"
#include "common/launch.cuh"
#include "common/merge.cuh"
#include "common/stages.h"
#include "common/cuda_compat.cuh"
#include "common/online_softmax.cuh"
#include "common/todo.cuh"
// Stage 07 builds on the reference solutions of stages 03-04.
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"

namespace pa::stage07 {
namespace {

using stage03::KeyRange;

// The prefix pass's Slice: blockIdx.x = split * num_query_tiles + query tile;
// grid z = the group. Its AttentionParams are the gathered batch: row q_row of
// [gathered tokens * Hq].
struct PrefixSplits {
  float* part_o;            // [num_splits, gathered tokens, Hq, D]  normalized partial outputs
  float* part_lse;          // [num_splits, gathered tokens, Hq]     their lse, -inf when empty
  const int* prefix_lens;   // [num_groups]
  int num_query_tiles;
  int keys_per_split;

  __device__ __forceinline__ int query_tile() const { return num_query_tiles - 1 - blockIdx.x % num_query_tiles; }

  __device__ __forceinline__ KeyRange key_range(int tile_kv_begin, int tile_kv_end) const {
    //@ TODO 1: split blockIdx.x / num_query_tiles of the prefix: keys_per_split keys from tile_kv_begin + split * keys_per_split, clipped to the group's prefix_len (and tile_kv_end)
    const int split = blockIdx.x / num_query_tiles;
    const int begin = tile_kv_begin + split * keys_per_split;
    return {begin, min(min(tile_kv_end, prefix_lens[blockIdx.z]), begin + keys_per_split)};
    //@ skeleton
    //@ (void)tile_kv_begin, (void)tile_kv_end;
    //@ if (threadIdx.x == 0) PA_TODO(1);
    //@ return {0, 0};  // placeholder: the prefix contributes nothing
    //@ end
  }

  // As stage 04's partials: o * inv_l in fp32 and the lse, at (split, q_row).
  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    const size_t part_row =
        static_cast<size_t>(blockIdx.x / num_query_tiles) * p.batch.num_tokens * p.num_q_heads + q_row;
    stage04::store_partial_row(part_o, part_lse, part_row, p.kv.head_dim, o, half, t4, inv_l, lse);
  }
};

// The prefix partials of one batch row, as the suffix pass's epilogue and the
// merge kernel read them.
struct PrefixPartials {
  const float* part_o;          // [num_splits, gathered tokens, Hq, D]
  const float* part_lse;        // [num_splits, gathered tokens, Hq]
  const int* gathered_row_of;   // [batch tokens]  gathered row of a batch row, -1: not cascaded
  int num_splits;
  int num_gathered;             // gathered tokens

  // Merges the partials of batch row q_row (token * Hq + head) into acc, whose
  // N values are dims dim(i) of the row (dims from head_dim on, a tile's
  // padding, merge as 0). Rows that are not cascaded are left alone.
  template <int N, class Dim>
  __device__ __forceinline__ void merge_into(SoftmaxState<N>& acc, size_t q_row, int num_q_heads, int head_dim,
                                             Dim dim) const {
    const int token = static_cast<int>(q_row / num_q_heads), head = static_cast<int>(q_row % num_q_heads);
    merge_gathered_into(acc, gathered_row_of[token], head, num_q_heads, head_dim, dim);
  }

  // The same, for a caller that read the token's gathered row g_row itself
  // (-1: not cascaded, left alone).
  template <int N, class Dim>
  __device__ __forceinline__ void merge_gathered_into(SoftmaxState<N>& acc, int g_row, int head, int num_q_heads,
                                                      int head_dim, Dim dim) const {
    if (g_row < 0) return;
    // Unrolled so that the loads of several splits are in flight together: a
    // merge kernel that waits for one split's load before the next spends ~1 us
    // per split in L2 round trips. 8 at a time where a thread holds few values
    // (the merge kernel's 4: the main case's 8 prefix splits in one round trip),
    // 4 where it holds a tile row's (the suffix pass's epilogue).
#pragma unroll(N <= 4 ? 8 : 4)
    for (int s = 0; s < num_splits; ++s) {
      //@ TODO 2: merge prefix split s of this row: the state SoftmaxState<N>::partial(its lse, its N values of o)
      const size_t part_row = (static_cast<size_t>(s) * num_gathered + g_row) * num_q_heads + head;
      float o[N];
#pragma unroll
      for (int i = 0; i < N; ++i) o[i] = dim(i) < head_dim ? part_o[part_row * head_dim + dim(i)] : 0.0f;
      acc.merge(SoftmaxState<N>::partial(part_lse[part_row], o));
      //@ skeleton
      //@ (void)s, (void)head_dim, (void)dim;
      //@ if (threadIdx.x == 0) PA_TODO(2);
      //@ end
    }
  }
};

// The suffix pass's Slice over whole query tiles: keys from the request's
// suffix_begin on, and an epilogue that merges the prefix partials.
struct SuffixMerge {
  const int* suffix_begin;  // [num_requests]  prefix_len of the request's cascaded group, else 0
  PrefixPartials prefix;

  __device__ __forceinline__ int query_tile() const { return gridDim.x - 1 - blockIdx.x; }

  __device__ __forceinline__ KeyRange key_range(int tile_kv_begin, int tile_kv_end) const {
    //@ TODO 3: the request's own keys: from max(tile_kv_begin, its suffix_begin) to tile_kv_end
    return {max(tile_kv_begin, suffix_begin[blockIdx.z]), tile_kv_end};
    //@ skeleton
    //@ (void)tile_kv_begin, (void)tile_kv_end;
    //@ if (threadIdx.x == 0) PA_TODO(3);
    //@ return {0, 0};  // placeholder: no keys of its own
    //@ end
  }

  // The lane holds dims 8j + 2t4 + h of the row (o[j][2 half + h]); merged
  // with the prefix partials, then written by stage 03's WholeContext.
  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    constexpr int N = 2 * O_TILES;
    float mine[N];
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) mine[2 * j] = o[j][2 * half] * inv_l, mine[2 * j + 1] = o[j][2 * half + 1] * inv_l;
    SoftmaxState<N> acc = SoftmaxState<N>::partial(lse, mine);
    auto dim = [t4](int i) { return 8 * (i >> 1) + 2 * t4 + (i & 1); };
    prefix.merge_into(acc, q_row, p.num_q_heads, p.kv.head_dim, dim);
    float merged[O_TILES][4] = {};  // back in the accumulator layout, row `half`
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) merged[j][2 * half] = acc.o[2 * j], merged[j][2 * half + 1] = acc.o[2 * j + 1];
    stage03::WholeContext{}.store_row(p, q_row, merged, half, t4, acc.inv_l(), acc.lse());
  }
};

// The suffix pass's Slice for decode batches with long suffixes: stage 04's
// splits, counted from the request's suffix_begin; the merge then folds them
// with the prefix partials (CascadePartials).
struct SuffixSplits : stage04::Splits {
  const int* suffix_begin;  // [num_requests]

  __device__ __forceinline__ KeyRange key_range(int tile_kv_begin, int tile_kv_end) const {
    return stage04::Splits::key_range(max(tile_kv_begin, suffix_begin[blockIdx.z]), tile_kv_end);
  }
};

// The partials of a decode batch's split suffix pass, as the merge
// (common/merge.cuh) reads them: program (request r, query head h) folds r's
// suffix splits in split order (stage 04's layout and row, one lane), then,
// when r is cascaded, its prefix partials.
struct CascadePartials {
  stage04::SplitPartials suffix;
  PrefixPartials prefix;

  struct Row : MergeRow {
    int g_row;  // the row's gathered row in the prefix pass, -1: not cascaded
    int head;
  };

  // Reads the gathered row now, so that this load is in flight with the
  // suffix partials' instead of a round trip after them.
  __device__ __forceinline__ Row row(const AttentionParams& p, int r, int h) const {
    const MergeRow own = suffix.row(p, r, h);
    return {own, own.merges ? prefix.gathered_row_of[p.batch.query_start_loc[r]] : -1, h};
  }

  __device__ __forceinline__ int num_partials() const { return suffix.num_partials(); }

  __device__ __forceinline__ SoftmaxState<4> partial(const AttentionParams& p, const Row& row, int split,
                                                     const MergeChunk& chunk) const {
    return suffix.partial(p, row, split, chunk);
  }

  __device__ __forceinline__ void after_partials(const AttentionParams& p, const Row& row, SoftmaxState<4>& acc,
                                                 const MergeChunk& chunk) const {
    prefix.merge_gathered_into(acc, row.g_row, row.head, p.num_q_heads, p.kv.head_dim,
                               [chunk](int i) { return chunk.dim(i); });
  }
};
static_assert(PartialSource<CascadePartials> && !skips_empty<CascadePartials>);

// Gathered row v = batch row rows[v]: [Hq * D] bf16 each, 16 bytes per copy.
__global__ void gather_queries_kernel(const bf16* __restrict__ q,  // [batch tokens, Hq, D]
                                      bf16* __restrict__ q_g,      // [gathered tokens, Hq, D]
                                      const int* __restrict__ rows, int row_elems) {
  const int v = blockIdx.x;
  const bf16* src = q + static_cast<size_t>(rows[v]) * row_elems;
  bf16* dst = q_g + static_cast<size_t>(v) * row_elems;
  for (int i = 8 * threadIdx.x; i < row_elems; i += 8 * blockDim.x) {
    *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
  }
}

// ---- Host side: the passes of a planned cascade.

using stage03::Packing;

using stage04::ceil_div;

// The prefix pass's partials, as the suffix pass's epilogue and the merge kernel read them.
PrefixPartials prefix_partials(const Cascade& c) {
  return {c.part_o.data(), c.part_lse.data(), c.gathered_row_of.data(), c.num_prefix_splits, c.num_tokens};
}

// The suffix pass's partials for the plan's splits, one row per batch row: a
// pass that writes its own keys as partials (split decodes) merges them later.
inline void allocate_suffix_partials(Cascade& c, const AttentionParams& p) {
  const size_t rows = static_cast<size_t>(c.suffix_splits) * p.batch.num_tokens * p.num_q_heads;
  c.suffix_o.resize(rows * p.kv.head_dim);
  c.suffix_lse.resize(rows);
}

// The suffix pass's splits as plan() made them for a decode batch, partials in the plan.
stage04::Splits suffix_splits(const Cascade& c) {
  return {const_cast<float*>(c.suffix_o.data()), const_cast<float*>(c.suffix_lse.data()), c.suffix_splits,
          c.suffix_keys_per_split};
}

// The prefix pass of tile family Tiles over the gathered batch pg.
template <int HEAD_DIM, class Tiles>
void launch_prefix(const AttentionParams& pg, const Packing& pk, const Cascade& c, cudaStream_t stream) {
  auto run = [&]<class T>() {
    PrefixSplits slice{const_cast<float*>(c.part_o.data()), const_cast<float*>(c.part_lse.data()),
                       c.prefix_lens.data(), stage03::query_tiles(c.max_group_tokens, pk, T::ROWS),
                       c.prefix_keys_per_split};
    const dim3 grid(slice.num_query_tiles * c.num_prefix_splits, pg.kv.num_kv_heads, c.num_groups);
    Tiles::template launch_tile<T, PrefixSplits, stage03::CausalMask>(pg, pk, slice, grid, stream);
  };
  if ((c.max_group_tokens << pk.group_shift) <= Tiles::template Decode<HEAD_DIM>::ROWS) {
    run.template operator()<typename Tiles::template Decode<HEAD_DIM>>();
  } else {
    run.template operator()<typename Tiles::template Prefill<HEAD_DIM>>();
  }
}

// The suffix pass of tile family Tiles over the real batch, with the prefix
// partials merged in its epilogue (or, for split decodes, in the merge kernel).
template <int HEAD_DIM, class Tiles, class Adapt>
void launch_suffix(const AttentionParams& p, const Packing& pk, const Cascade& c, cudaStream_t stream,
                   const Adapt& adapt) {
  const PrefixPartials prefix = prefix_partials(c);
  if (c.suffix_splits > 1) {  // a decode batch that plan() split (its partials are the plan's)
    SuffixSplits slice;
    static_cast<stage04::Splits&>(slice) = suffix_splits(c);
    slice.suffix_begin = c.suffix_begin.data();
    const auto adapted = adapt(slice);
    stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
      Tiles::template launch_tile<T, std::decay_t<decltype(adapted)>, stage03::CausalMask>(
          p, pk, adapted, dim3(c.suffix_splits, p.kv.num_kv_heads, p.batch.num_requests), stream);
    });
    launch_merge<HEAD_DIM, 1>(p, CascadePartials{stage04::split_partials(slice), prefix}, stream);
    return;
  }
  // Whole query tiles, as stage 03 launches them, with SuffixMerge in place of WholeContext.
  auto to_suffix = [&](const stage03::WholeContext&) { return adapt(SuffixMerge{c.suffix_begin.data(), prefix}); };
  stage03::dispatch_whole_context<HEAD_DIM, Tiles, stage03::CausalMask>(p, pk, stream, to_suffix);
}

// The prefix pass's batch: one "request" per cascaded group, its queries placed
// after its prefix, read through the prefixes' block tables. q stays the
// batch's: stage 03's tiles read the gathered copy (forward_with sets it); a
// prefix pass that gathers on its own reads q through gather_rows.
AttentionParams gathered_batch(const AttentionParams& p, const Cascade& c) {
  AttentionParams pg = p;
  pg.out = nullptr;  // the prefix pass writes partials only
  pg.lse = nullptr;
  pg.batch = BatchView{c.query_start_loc.data(), c.seq_lens.data(), c.block_table.data(), nullptr,
                       c.num_groups, c.num_tokens, c.num_tokens, c.max_prefix_blocks, c.max_group_tokens,
                       c.max_prefix_len + c.max_group_tokens, false};
  return pg;
}

// Both passes with tile family Tiles; `adapt` wraps the suffix pass's Slice
// (stage 08 adds sinks to each row's own partial there).
template <class Tiles, class Adapt = stage03::SameSlice>
void forward_with(const AttentionParams& p, const Packing& pk, const Cascade& c, cudaStream_t stream,
                  const Adapt& adapt = {}) {
  stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
    if (c.num_groups > 0) {
      // The cascaded queries as one batch of one "request" per group, placed after its prefix.
      const int row_elems = p.num_q_heads * p.kv.head_dim;
      launch(gather_queries_kernel, dim3(c.num_tokens), dim3(std::min(256, row_elems / 8)), 0, stream, p.q,
             const_cast<bf16*>(c.q.data()), c.gather_rows.data(), row_elems);
      AttentionParams pg = gathered_batch(p, c);
      pg.q = c.q.data();
      launch_prefix<HEAD_DIM, Tiles>(pg, pk, c, stream);
    }
    launch_suffix<HEAD_DIM, Tiles>(p, pk, c, stream, adapt);
  });
}

}  // namespace
}  // namespace pa::stage07
