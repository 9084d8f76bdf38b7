// How the engine composes stage 07's cascade with a tile family, a prefix pass
// on stage 09's tile (bf16 caches on an sm_90 GPU or the CPU runtime) and stage
// 08's learned sinks (added to each row's own suffix partial by the suffix pass).
//
// Stage 09's tile keeps stage 07's idea (all of a group's queries as tile rows,
// the prefix's keys once, split into ranges, partials out) on Hopper's machinery:
// TMA into a ring, wgmma, two or three consumer warpgroups. What the engine adds around
// it: the suffix pass as its dependent launch, merging the prefix partials in
// its epilogue, or, for decode batches where that does not pay, beside it on a
// second stream with one merge kernel after both; and a cost model for when a
// group should cascade at all.
#pragma once

#include <algorithm>
#include <type_traits>

#include "common/merge.cuh"
#include "compose.h"
#include "solutions/04_split_kv/split_kv.cuh"
#include "solutions/07_cascade/cascade.cuh"
#include "solutions/07_cascade/cost_model.cuh"
#include "solutions/08_attention_sinks/attention_sinks.cuh"
#include "solutions/09_hopper_pipeline/hopper_pipeline.cuh"

namespace pa::engine::detail {
namespace {

using stage07::Cascade;
using stage07::CascadePartials;
using stage07::Path;
using stage07::prefix_partials;
using stage07::SuffixMerge;
using stage07::SuffixSplits;
using stage07::TileShape;

// Whether stage 09's tile can run a cascade's prefix pass over p's cache: bf16,
// slots a tensor copy addresses. (The prefix pass reads no sinks and no window:
// learned sinks join the suffix pass, and a cascade takes no window.)
inline bool hopper_prefix_serves(const AttentionParams& p) {
  return p.kv.format == KvFormat::bf16 && stage09::slots_fit_coordinates(p);
}

// Stage 09's tile for every group: 128 rows (192 at head_dim 64), one program
// per SM, prefix splits of whole K/V tiles (its key ranges begin at a multiple
// of TILE_K: 128 keys up to head_dim 128, 64 at 256; 128 serves every one).
inline TileShape hopper_prefix_tile(const AttentionParams& p, int /*group_rows*/) {
  const int rows = stage03::tile_head_dim(p.kv.head_dim) == 64 ? stage09::HopperTile<64>::ROWS
                                                               : stage09::HopperTile<128>::ROWS;
  return TileShape{rows, 1, stage09::HopperTile<128>::TILE_K};
}

// SuffixMerge for the suffix pass that follows the prefix pass in its stream
// (forward_prefix_first): started as that kernel's
// dependent launch (launch_for_slice), its programs may take free SM slots
// while the prefix pass still runs, walk their own keys, and wait for the
// prefix partials only in the epilogue, where they read them. Every batch row
// that reads partials waits first, so the pass never ends before the prefix
// pass has; the merge kernel and the second stream are not needed.
struct SuffixMergeAfterPrefix : SuffixMerge {
  static constexpr bool AFTER_PRIOR_GRID = true;

  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    wait_for_prior_grid();  // the prefix pass's partials are complete and visible
    SuffixMerge::store_row(p, q_row, o, half, t4, inv_l, lse);
  }
};


// The suffix pass's Slice when it runs beside the prefix pass (decode batches,
// forward_prefix_first): stage 04's splits over the request's own keys, each
// split a partial, one split included; the merge (CascadePartials) folds them all.
struct SuffixPartials : SuffixSplits {
  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    const size_t part_row = static_cast<size_t>(blockIdx.x) * p.batch.num_tokens * p.num_q_heads + q_row;
    stage04::store_partial_row(part_o, part_lse, part_row, p.kv.head_dim, o, half, t4, inv_l, lse);
  }
};


// Whether a decode batch's suffix pass should merge the prefix partials in its
// epilogue, after the prefix pass, rather than run beside it with a
// merge kernel after both. The fused epilogue saves the merge kernel, the
// second stream's join and a launch, but every program waits there for its
// rows' prefix partials, 4 splits per round trip (PrefixPartials::merge_into),
// after its own keys. That pays once: one wave of unsplit suffix programs, and
// a prefix of at most FUSED_MAX_PREFIX_SPLITS splits (2 round trips). Measured
// on the H200 (stage README): 2-5 us faster at B = 64 (Qwen3-8B shape); 11 us
// slower for MHA (2048 one-row programs, four waves) and 7-8 us slower with 8
// members and 32 prefix splits.
constexpr int FUSED_MAX_PREFIX_SPLITS = 8;
inline bool fused_merge_pays(const AttentionParams& p, int suffix_splits, int prefix_splits, int num_sms) {
  const int programs = p.batch.num_requests * p.kv.num_kv_heads;
  return suffix_splits == 1 && programs <= stage04::programs_per_sm(p) * num_sms &&
         prefix_splits <= FUSED_MAX_PREFIX_SPLITS;
}

// Whether a planned cascade runs its suffix pass beside the prefix
// pass (a second stream, then the merge kernel) rather than after it: decode
// batches for which the fused merge does not pay. A function of the plan
// alone, so engine::plan_cascade makes the second stream exactly where a run
// will use it.
inline bool suffix_beside_prefix(const AttentionParams& p, const Cascade& c) {
  const bool decode_only = p.batch.decode_only || p.batch.max_query_len <= 1;
  return c.num_groups > 0 && c.warpgroup_prefix && decode_only &&
         !fused_merge_pays(p, c.suffix_splits, c.num_prefix_splits, c.num_sms);
}


// The prefix pass's Slice: stage 07's splits, whose programs let the grid
// launched after them in the stream (the suffix pass, SuffixMergeAfterPrefix)
// start as soon as each has begun: the suffix programs take the SM room the
// prefix programs leave and wait for the partials only in their epilogue, as
// stage 07's dependent launch lets them (notes/07_cascade.md).
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
                 " keys a split (plan it with engine::plan_cascade)");
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

// The prefix pass (the query gather and stage 09's tile), then the suffix pass as its dependent launch, merging the prefix partials in
// its epilogue (SuffixMergeAfterPrefix). Decode batches for which that merge
// does not pay (suffix_beside_prefix) run their suffix pass on the plan's
// second stream beside the prefix pass instead, as partials in the plan, and
// one merge kernel joins both. Launches only: the plan made everything.
template <int HEAD_DIM, class Tiles, class Adapt>
void forward_prefix_first(const AttentionParams& p, const stage03::Packing& pk, const Cascade& c, cudaStream_t stream,
                          const Adapt& adapt) {
  if (!suffix_beside_prefix(p, c)) {
    launch_prefix_hopper<HEAD_DIM>(p, pk, c, stream);
    // Whole query tiles, as stage 03 launches them. Only a kernel that comes
    // right after the prefix pass in the same stream may start before it ends.
    auto to_suffix = [&](const stage03::WholeContext&) {
      return adapt(SuffixMergeAfterPrefix{{c.suffix_begin.data(), prefix_partials(c)}});
    };
    stage03::dispatch_whole_context<HEAD_DIM, Tiles, stage03::CausalMask>(p, pk, stream, to_suffix);
    return;
  }
  PA_REQUIRE(c.side != nullptr && c.suffix_o.size() > 0,
             "engine: this cascade runs its suffix pass beside the prefix pass, which needs the plan's second "
             "stream and suffix partials: plan it with engine::plan_cascade");
  const SideStream& side = *c.side;
  PA_CHECK(cudaEventRecord(side.fork, stream));  // the side stream starts after everything before this step
  PA_CHECK(cudaStreamWaitEvent(side.stream, side.fork, 0));
  launch_prefix_hopper<HEAD_DIM>(p, pk, c, stream);  // first, so that its large programs find room

  SuffixPartials slice;
  static_cast<stage04::Splits&>(slice) = stage07::suffix_splits(c);
  slice.suffix_begin = c.suffix_begin.data();
  const auto adapted = adapt(slice);
  stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
    Tiles::template launch_tile<T, std::decay_t<decltype(adapted)>, stage03::CausalMask>(
        p, pk, adapted, dim3(c.suffix_splits, p.kv.num_kv_heads, p.batch.num_requests), side.stream);
  });
  PA_CHECK(cudaEventRecord(side.join, side.stream));
  PA_CHECK(cudaStreamWaitEvent(stream, side.join, 0));
  launch_merge<HEAD_DIM, 1>(p, CascadePartials{stage04::split_partials(slice), prefix_partials(c)}, stream);
}


// The cost model of stage 07 (cost_model.cuh) with the engine's prefix pass's
// figures, fitted on the H200 for its first prefix kernel (notes/07_cascade.md)
// and kept for stage 09's tile (notes/09_hopper_pipeline.md). Its decode steps
// either run the suffix pass after the prefix pass with the merge in its
// epilogue (fused_merge_pays), or beside it and then a merge kernel: the model
// times the one it launches.
struct PrefixPassCosts {
  double flop_per_s;          // wgmma in 64/128-row tiles, all SMs
  double row_key_s;           // one key through one program, per tile row
  double start_s;             // per wave: Q's gathered load, the ring's fill
  double join_s;              // the second stream's join and the merge kernel
  double split_merge_s;       // per prefix split, in the merge kernel
  double fused_merge_wave_s;  // per full wave of suffix programs waiting for the prefix partials
};
inline constexpr PrefixPassCosts H200_PREFIX_PASS_COSTS{2.6e14, 0.05e-9, 2e-6, 7e-6, 0.2e-6, 5e-6};

Path choose_path_hopper(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len,
                        int num_sms) {
  if (members < 2 || queries < 1) return Path::plain;  // a group of one reads its prefix once either way
  const stage07::PassTimes t{p, members, queries, num_sms};
  const PrefixPassCosts& w = H200_PREFIX_PASS_COSTS;
  const double plain = t.own_keys(prefix_len + suffix_len + queries, false);
  const stage07::PrefixSplitPlan pre =
      stage07::prefix_split_plan(p, members * queries, prefix_len, 1, num_sms, hopper_prefix_tile);
  // The query gather's launch, then the tile's (stage 09 reads the gathered
  // copy: its Q rows are boxes of one batch).
  const double prefix_pass = t.costs.launch_s +
                             t.prefix_pass(pre, prefix_len, w.row_key_s * pre.tile.rows, w.flop_per_s, w.start_s);
  const double merge_prefix = pre.num_splits * w.split_merge_s;
  double cascade = prefix_pass + t.own_keys(suffix_len + queries, false) + merge_prefix;
  if (queries == 1) {
    AttentionParams batch = p;
    batch.batch.num_requests = members;
    const stage04::SplitPlan sp = stage04::plan_rule(batch, num_sms, suffix_len + queries);
    const double suffix_pass = t.own_keys(suffix_len + queries, true);
    if (fused_merge_pays(batch, sp.num_splits, pre.num_splits, num_sms)) {
      const double waves = static_cast<double>(members) * p.kv.num_kv_heads / (stage04::programs_per_sm(batch) * num_sms);
      cascade = prefix_pass + suffix_pass + w.fused_merge_wave_s * waves;
    } else {
      cascade = std::max(prefix_pass, suffix_pass) + w.join_s + merge_prefix;
    }
  }
  return cascade < plain ? Path::cascade : Path::plain;
}

// What stage07::plan needs to plan groups for stage 09's prefix pass
// (engine::plan_cascade passes it).
inline constexpr stage07::PrefixPassModel HOPPER_PREFIX_PASS{hopper_prefix_serves, hopper_prefix_tile,
                                                             choose_path_hopper};

// A planned cascade with tile family Tiles: stage 09's prefix pass where the
// plan was made for it (HOPPER: the family is bf16's, so the tile is
// instantiated only there), else stage 07's own passes.
template <class Tiles, bool HOPPER, class Adapt = stage03::SameSlice>
void forward_cascade(const AttentionParams& p, const stage03::Packing& pk, const Cascade& c, cudaStream_t stream,
                     const Adapt& adapt = {}) {
  if constexpr (HOPPER) {
    if (c.num_groups > 0 && c.warpgroup_prefix) {
      PA_REQUIRE(hopper_prefix_serves(p), "engine: this cascade was planned for stage 09's prefix pass, which "
                                          "reads bf16 caches of at most 2^31 - 1 slots; this batch's is not one");
      return stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
        forward_prefix_first<HEAD_DIM, Tiles>(p, pk, c, stream, adapt);
      });
    }
  } else {
    PA_REQUIRE(c.num_groups == 0 || !c.warpgroup_prefix,
               "engine: this cascade was planned for stage 09's prefix pass, which reads bf16 caches");
  }
  stage07::forward_with<Tiles>(p, pk, c, stream, adapt);
}

template <class Tiles, bool HOPPER>
void run_cascade_tiles(const AttentionParams& p, const Cascade& c, cudaStream_t stream) {
  const stage03::Packing pk = stage03::checked_packing(p, "engine");
  if (p.sinks != nullptr) {
    forward_cascade<Tiles, HOPPER>(p, pk, c, stream, stage08::AddSinks{p.sinks});
  } else {
    forward_cascade<Tiles, HOPPER>(p, pk, c, stream);
  }
}

}  // namespace
}  // namespace pa::engine::detail
