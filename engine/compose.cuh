// How the engine composes the stages' policies for one tile family (a cache
// format's tiles) and one Slice adapter (learned sinks or none): the mask from
// the plan's window and sink tokens, then the plan's path. Every piece is the
// stage's own (stage 03's whole tiles, stage 04's splits and merge, stage 04's
// batch-invariant mode, stage 06's window, stage 08's sinks); what lives here
// is only which of them meet, and the workspace they write to.
#pragma once

#include <type_traits>

#include "compose.h"
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "common/merge.cuh"
#include "common/ptx.cuh"
#include "going_further/batch_invariant.cuh"
#include "solutions/06_sliding_window/sliding_window.cuh"
#include "solutions/08_attention_sinks/attention_sinks.cuh"

namespace pa::engine::detail {
namespace {

// The plan's splits as stage 04's Splits, partials in the workspace (one split
// without the invariant mode writes the final rows itself: no partials).
inline stage04::Splits plan_splits(const Launch& l) {
  const bool partials = l.plan.part_o_floats > 0;
  return stage04::Splits{partials ? l.part_o : nullptr, partials ? l.part_lse : nullptr, l.plan.num_splits,
                         l.plan.keys_per_split};
}

// Stage 08's split layout for decodes with sink tokens: split 0 the sink
// tokens, splits 1.. the window.
inline stage08::SinkTokenSplits sink_token_splits(const Launch& l, const stage03::Packing& pk) {
  stage08::SinkTokenSplits s;
  static_cast<stage04::Splits&>(s) = plan_splits(l);
  s.sink_tokens = l.p.sink_tokens;
  s.window = l.p.window;
  s.block_shift = pk.block_shift;
  return s;
}

// ---- The mixed path: a batch of prefill chunks and decodes, each on its own tile.
//
// Launch 1, the 128-row tiles over the whole context, serves the requests with
// more than one query; its programs let the next grid start as soon as they
// run. Launch 2, the decode tile over the plan's splits, serves the decodes and
// reads nothing of launch 1, so as a dependent launch its programs take the SM
// slots that launch 1's last wave leaves free: the decodes' memory traffic
// runs beside the chunks' tensor-core work. Launch 3 merges the decode rows'
// partials once launch 2 has finished.

// Launch 1's Slice: Inner (the adapted WholeContext) for requests of more than
// one query; query_tile() runs first in every program, so that is where it lets
// the dependent grid start.
template <Slice Inner>
struct StartsDecodes : further::ServesPrefills<Inner> {
  __device__ __forceinline__ int query_tile() const {
    allow_dependent_grid();
    return Inner::query_tile();
  }
};

// Launch 2's Slice: the decodes' splits, partials by request (the layout of
// batch-invariant mode, so a chunk's tokens take no room), started as the
// dependent of launch 1. It never waits for launch 1: their rows are disjoint.
template <Slice Inner>
struct DecodesBesideChunks : further::InvariantSplits<Inner> {
  static constexpr bool AFTER_PRIOR_GRID = true;
};

template <class Tiles, class Mask, Slice SplitSlice, class Adapt>
void run_mixed(const AttentionParams& p, const stage03::Packing& pk, const SplitSlice& splits, cudaStream_t stream,
               const Adapt& adapt) {
  auto chunks = [&](const stage03::WholeContext& whole) {
    using Inner = std::decay_t<decltype(adapt(whole))>;
    StartsDecodes<Inner> s;
    static_cast<Inner&>(s) = adapt(whole);
    return s;
  };
  DecodesBesideChunks<SplitSlice> decodes;
  static_cast<SplitSlice&>(decodes) = splits;
  const auto slice = adapt(decodes);
  static_assert(after_prior_grid<std::decay_t<decltype(slice)>>, "the decodes start beside the chunks");
  const dim3 grid(splits.num_splits, p.kv.num_kv_heads, p.batch.num_requests);
  stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
    stage03::run_whole_context<typename Tiles::template Prefill<HEAD_DIM>, Tiles, Mask>(p, pk, stream, chunks);
    stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
      Tiles::template launch_tile<T, std::decay_t<decltype(slice)>, Mask>(p, pk, slice, grid, stream);
    });
    // The invariant mode's source reads this layout (decode rows only); no fixed
    // fold is needed here, so it runs over stage 04's split lanes.
    launch_merge_dependent<HEAD_DIM, stage04::MERGE_LANES<HEAD_DIM>>(
        p, further::InvariantPartials{splits.part_o, splits.part_lse, splits.num_splits}, stream);
  });
}

template <class Tiles, class Mask, class Adapt>
void run_path(const Launch& l, const stage03::Packing& pk, const Adapt& adapt) {
  const AttentionParams& p = l.p;
  constexpr bool SINK_TOKENS = std::is_same_v<Mask, stage08::WindowWithSinkTokens>;
  switch (l.plan.path) {
    case Path::whole_tiles:
      stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
        stage03::dispatch_whole_context<HEAD_DIM, Tiles, Mask>(p, pk, l.stream, adapt);
      });
      return;
    case Path::splits: {
      const stage04::Splits part = plan_splits(l);
      stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
        stage04::launch_splits<HEAD_DIM, Tiles, Mask>(p, pk, part, l.stream, adapt);
      });
      return;
    }
    case Path::sink_token_splits:
      if constexpr (SINK_TOKENS) {
        const auto slice = adapt(sink_token_splits(l, pk));
        const stage04::Splits part = slice;
        stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
          stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
            Tiles::template launch_tile<T, std::decay_t<decltype(slice)>, Mask>(
                p, pk, slice, dim3(part.num_splits, p.kv.num_kv_heads, p.batch.num_requests), l.stream);
          });
          stage04::launch_merge_splits<HEAD_DIM>(p, part, l.stream);
        });
      }
      return;
    case Path::mixed:
      if constexpr (SINK_TOKENS) {
        run_mixed<Tiles, Mask>(p, pk, sink_token_splits(l, pk), l.stream, adapt);
      } else {
        run_mixed<Tiles, Mask>(p, pk, plan_splits(l), l.stream, adapt);
      }
      return;
    case Path::invariant:
      further::launch_invariant_tiles<Tiles, Mask>(p, pk, l.stream, adapt);
      if constexpr (SINK_TOKENS) {
        further::launch_invariant_splits<Tiles, Mask>(p, pk, sink_token_splits(l, pk), l.stream, adapt);
      } else {
        further::launch_invariant_splits<Tiles, Mask>(p, pk, plan_splits(l), l.stream, adapt);
      }
      return;
  }
}

// The mask: none (causal), stage 06's window, or stage 08's window with sink tokens.
template <class Tiles, class Adapt>
void run_tiles(const Launch& l, const Adapt& adapt) {
  const stage03::Packing pk = stage03::checked_packing(l.p, "engine");
  if (l.p.window == 0) {
    run_path<Tiles, stage03::CausalMask>(l, pk, adapt);
  } else if (l.p.sink_tokens == 0) {
    run_path<Tiles, stage06::SlidingWindow>(l, pk, adapt);
  } else {
    run_path<Tiles, stage08::WindowWithSinkTokens>(l, pk, adapt);
  }
}

template <class Tiles>
void run_plain(const Launch& l) {
  run_tiles<Tiles>(l, stage03::SameSlice{});
}

template <class Tiles>
void run_with_sinks(const Launch& l) {
  run_tiles<Tiles>(l, stage08::AddSinks{l.p.sinks});
}

}  // namespace
}  // namespace pa::engine::detail
