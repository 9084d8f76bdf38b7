// How the engine composes stage 07's cascade with a tile family, a warpgroup
// prefix pass (bf16: going_further/warpgroup_prefix.cuh's kernel, or stage 09's
// tile) and stage 08's learned sinks (added to each row's own suffix partial by
// the suffix pass).
#pragma once

#include <algorithm>

#include "compose.h"
#include "going_further/warpgroup_prefix.cuh"
#include "solutions/07_cascade/cascade.cuh"
#include "solutions/08_attention_sinks/attention_sinks.cuh"
#include "solutions/09_hopper_pipeline/hopper_pipeline.cuh"

namespace pa::engine::detail {
namespace {

// Whether stage 09's tile can run a cascade's prefix pass over p's cache: bf16,
// slots a tensor copy addresses. (The prefix pass reads no sinks and no window:
// learned sinks join the suffix pass, and a cascade takes no window.)
inline bool hopper_prefix_serves(const AttentionParams& p) {
  return p.kv.format == KvFormat::bf16 && stage09::slots_fit_coordinates(p);
}

// Stage 09's tile for every group: 128 rows, one program per SM, prefix splits
// of whole K/V tiles (its key ranges begin at a multiple of TILE_K: 128 keys up
// to head_dim 128, 64 at 256; 128 serves both).
inline stage07::TileShape hopper_prefix_tile(int /*group_rows*/) {
  return stage07::TileShape{stage09::HopperTile<128>::ROWS, 1, stage09::HopperTile<128>::TILE_K};
}

// The plan's model of that pass: the warpgroup pass's costs (fitted for
// going_further's kernel) with stage 09's tile shape.
inline constexpr stage07::PrefixPassModel HOPPER_PREFIX_PASS{hopper_prefix_serves, hopper_prefix_tile,
                                                             further::choose_path_warpgroup<hopper_prefix_tile>};

// The prefix pass's Slice: stage 07's splits, whose programs let the grid
// launched after them in the stream (the suffix pass, SuffixMergeAfterPrefix)
// start as soon as each has begun: the suffix programs take the SM room the
// prefix programs leave and wait for the partials only in their epilogue, as
// going_further's prefix kernel lets them (notes/07_cascade.md).
struct PrefixStartsSuffix : stage07::PrefixSplits {
  __device__ __forceinline__ int query_tile() const {
    allow_dependent_grid();
    return stage07::PrefixSplits::query_tile();
  }
};
static_assert(Slice<PrefixStartsSuffix>);

// The prefix pass on stage 09's tile: the cascaded queries gathered into the
// plan's copy (stage 07's gather), then one program per (query tile x prefix
// split, KV head, group) over the gathered batch, stage 07's PrefixSplits as
// its Slice (partials out), which starts the suffix pass early.
template <int HEAD_DIM>
void launch_prefix_hopper(const AttentionParams& p, const stage03::Packing& pk, const stage07::Cascade& c,
                          cudaStream_t stream) {
  using T = stage09::HopperTile<HEAD_DIM>;
  PA_REQUIRE(c.prefix_keys_per_split % T::TILE_K == 0,
             "engine: stage 09's prefix pass needs prefix splits of whole " + std::to_string(T::TILE_K) +
                 "-key tiles; this cascade was planned with " + std::to_string(c.prefix_keys_per_split) +
                 " keys a split (plan it with engine::plan_cascade and PrefillTiles::hopper)");
  const int row_elems = p.num_q_heads * p.kv.head_dim;
  launch(stage07::gather_queries_kernel, dim3(c.num_tokens), dim3(std::min(256, row_elems / 8)), 0, stream, p.q,
         const_cast<bf16*>(c.q.data()), c.gather_rows.data(), row_elems);
  AttentionParams pg = stage07::gathered_batch(p, c);
  pg.q = c.q.data();
  const PrefixStartsSuffix slice{{const_cast<float*>(c.part_o.data()), const_cast<float*>(c.part_lse.data()),
                                   c.prefix_lens.data(), stage03::query_tiles(c.max_group_tokens, pk, T::ROWS),
                                   c.prefix_keys_per_split}};
  stage09::launch_grid<HEAD_DIM>(
      pg, pk, slice, dim3(slice.num_query_tiles * c.num_prefix_splits, pg.kv.num_kv_heads, c.num_groups), stream);
}

// A planned cascade with tile family Tiles: stage 09's prefix pass where the
// plan was made for it (HOPPER: the family is bf16's, so the tile is
// instantiated only there), else going_further's (WARPGROUP) or stage 07's.
template <class Tiles, bool WARPGROUP, class Adapt = stage03::SameSlice>
void forward_cascade(const AttentionParams& p, const stage03::Packing& pk, const stage07::Cascade& c,
                     cudaStream_t stream, const Adapt& adapt = {}) {
  if constexpr (WARPGROUP) {
    if (c.num_groups > 0 && c.hopper_prefix) {
      PA_REQUIRE(hopper_prefix_serves(p), "engine: this cascade was planned for stage 09's prefix pass, which "
                                          "reads bf16 caches of at most 2^31 - 1 slots; this batch's is not one");
      return stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
        further::forward_warpgroup<HEAD_DIM, Tiles>(p, pk, c, stream, adapt, [&](cudaStream_t s) {
          launch_prefix_hopper<HEAD_DIM>(p, pk, c, s);
        });
      });
    }
  }
  further::forward_cascade<Tiles, WARPGROUP>(p, pk, c, stream, adapt);
}

template <class Tiles, bool WARPGROUP>
void run_cascade_tiles(const AttentionParams& p, const stage07::Cascade& c, cudaStream_t stream) {
  const stage03::Packing pk = stage03::checked_packing(p, "engine");
  if (p.sinks != nullptr) {
    forward_cascade<Tiles, WARPGROUP>(p, pk, c, stream, stage08::AddSinks{p.sinks});
  } else {
    forward_cascade<Tiles, WARPGROUP>(p, pk, c, stream);
  }
}

}  // namespace
}  // namespace pa::engine::detail
