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
#include "solutions/09_hopper_pipeline/hopper_pipeline.cuh"
#include "hopper_cp_async.cuh"
#include "persistent_chunks.cuh"

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

// ---- Stage 09's tile in place of stage 03's prefill tile.
//
// It stands in where the family's prefill tile is stage 03's bf16 tile, the
// mask causal and the Slice whole contexts unadapted (no learned sinks): the
// layers stage 09 serves. plan() chose it (Plan::hopper_prefill); the pool is
// checked again here, as a plan does not pin num_blocks (stage 03's tile runs a
// pool too large for a tensor copy's coordinates).
template <class Tiles, class Mask, class Adapt>
constexpr bool HOPPER_COMPOSES =
    std::is_same_v<typename Tiles::template Prefill<128>, stage03::Bf16Tiles::Prefill<128>> &&
    std::is_same_v<Mask, stage03::CausalMask> && std::is_same_v<Adapt, stage03::SameSlice>;

inline bool hopper_prefill(const Plan& plan, const AttentionParams& p) {
  return plan.hopper_prefill && stage09::serves_layer(p);
}

// Stage 09's tiles over p's batch for slice, filled as the plan says (Plan::cp_async_copies).
template <int HEAD_DIM, Slice S = stage03::WholeContext>
void launch_hopper_tiles(const Plan& plan, const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream,
                         const S& slice = {}) {
  if (plan.cp_async_copies) {
    stage09::launch_tiles<HEAD_DIM, S, detail::CpAsyncProducer>(p, pk, stream, slice);
  } else {
    stage09::launch_tiles<HEAD_DIM, S>(p, pk, stream, slice);
  }
}

// Stage 09's tiles over the query tiles slice serves, on the plan's chunk
// programs (persistent_chunks.cuh), filled as the plan says.
template <int HEAD_DIM, Slice S>
void launch_hopper_chunks(const Plan& plan, const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream,
                          const S& slice) {
  if (plan.cp_async_copies) {
    launch_persistent_chunks<HEAD_DIM, detail::CpAsyncProducer>(p, pk, slice, plan.chunk_programs, stream);
  } else {
    launch_persistent_chunks<HEAD_DIM, stage09::TmaProducer>(p, pk, slice, plan.chunk_programs, stream);
  }
}

// ---- The mixed path: a batch of prefill chunks and decodes, each on its own tile.
//
// Launch 1, the 128-row tiles over the whole context, serves the requests with
// more than one query; its programs let the next grid start as soon as they
// run. Launch 2, the decode tile over the plan's splits, serves the decodes and
// reads nothing of launch 1, so as a dependent launch its programs take the SM
// slots that launch 1's last wave leaves free: the decodes' memory traffic
// runs beside the chunks' tensor-core work. With Plan::chunk_programs, launch 1
// is that many programs of stage 09's tile per KV head, each running several
// query tiles (persistent_chunks.cuh): all of them start at once, so launch 2
// starts at once on the other SMs. Launch 3 merges the decode rows' partials
// once launch 2 has finished.

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
void run_mixed(const Plan& plan, const AttentionParams& p, const stage03::Packing& pk, const SplitSlice& splits,
               cudaStream_t stream, const Adapt& adapt) {
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
    bool on_hopper = false;
    if constexpr (HOPPER_COMPOSES<Tiles, Mask, Adapt>) {
      on_hopper = hopper_prefill(plan, p);
      if (on_hopper && plan.chunk_programs > 0) {
        launch_hopper_chunks<HEAD_DIM>(plan, p, pk, stream, further::ServesPrefills<stage03::WholeContext>{});
      } else if (on_hopper) {
        launch_hopper_tiles<HEAD_DIM>(plan, p, pk, stream, chunks(stage03::WholeContext{}));
      }
    }
    if (!on_hopper) {
      stage03::run_whole_context<typename Tiles::template Prefill<HEAD_DIM>, Tiles, Mask>(p, pk, stream, chunks);
    }
    stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
      Tiles::template launch_tile<T, std::decay_t<decltype(slice)>, Mask>(p, pk, slice, grid, stream);
    });
    // The invariant mode's source reads this layout (decode rows only); no fixed
    // fold is needed here, so it runs over stage 04's split lanes.
    launch_merge_dependent<HEAD_DIM, stage04::MERGE_LANES<HEAD_DIM>>(
        p, further::InvariantPartials{splits.part_o, splits.part_lse, splits.num_splits}, stream);
  });
}

// ---- The work list: decodes cut by their own lengths, on a flat grid of items.
//
// Stage 04 gives every request of a batch the same split count, from the
// plan's bounds; a 32768-key context beside 63 of 512 then runs unsplit while
// the short ones finish. Here each program works out, from the batch's lengths
// on the device, which item it is: with T items a wave holds per KV head and
// K = max(min_keys, ceil(total keys / T)) rounded up to a block, request r
// gets n_r = max(1, seq_len_r / K) items of ~seq_len_r / n_r keys each, and
// with sink tokens one more for those its window leaves out (a block or two:
// stage 08's split 0, as an item of the same list). Then sum n_r <= T +
// num_requests (T + 2 num_requests with sink tokens) whatever the lengths, so
// the plan sizes the grid from its bounds; the items past sum n_r are idle (no
// key, nothing merged).

struct WorkItem {
  int request;  // the request (0 past the last one: an idle item, which reads no key)
  int first;    // the request's first item in the flat list
  int count;    // its items (0: not a decode, or an idle item)
  int keys;     // keys of each of them (a multiple of the block size; the last may hold fewer)
};

struct WorkList {
  int items_per_wave;  // T
  int min_keys;        // a multiple of the block size
  int block_size;

  __device__ __forceinline__ static bool is_decode(const AttentionParams& p, int r) {
    return p.batch.query_start_loc[r + 1] - p.batch.query_start_loc[r] == 1;
  }

  // The keys decode r reads: all of its context, or with a window from the
  // block holding the window's first key (stage 06's first_key), as the tile's
  // key range begins there.
  __device__ __forceinline__ int decode_keys(const AttentionParams& p, int r) const {
    const int seq_len = p.batch.seq_lens[r];
    if (p.window == 0 || seq_len == 0) return seq_len;
    const int first = stage06::SlidingWindow::oldest_visible_key(p, seq_len - 1) / block_size * block_size;
    return seq_len - first;
  }

  // The sink tokens decode r reads in an item of its own, after its window's
  // items: those before the block its window's keys begin in (the window's
  // items read the rest); none without sink tokens or a window.
  __device__ __forceinline__ static int sink_keys(const AttentionParams& p, int r, int window_keys) {
    if (p.window == 0 || p.sink_tokens == 0) return 0;
    return min(p.sink_tokens, p.batch.seq_lens[r] - window_keys);
  }

  // The walk below runs one warp wide: every lane of the calling warps calls
  // it, lane l reads requests l, l + 32, ... (the tiles and the merge call it
  // before any branch, with whole warps). A serial walk read the batch's
  // lengths one after the other: 2 R dependent loads before a program's first
  // key, which cost uniform batches more the more requests they had.

  // K: the keys per item this batch's lengths give.
  __device__ __forceinline__ int item_keys(const AttentionParams& p) const {
    const int lane = threadIdx.x % 32;
    long long total = 0;
    for (int r = lane; r < p.batch.num_requests; r += 32) {
      if (is_decode(p, r)) total += decode_keys(p, r);
    }
#pragma unroll
    for (int d = 16; d >= 1; d /= 2) total += __shfl_xor_sync(0xffffffffu, total, d);
    const long long per_item = (total + items_per_wave - 1) / items_per_wave;
    const long long k = per_item > min_keys ? per_item : min_keys;
    return static_cast<int>((k + block_size - 1) / block_size * block_size);
  }

  // The requests in order, each with its items, until stop(r, first, count)
  // holds: that request's entry (past the last request: an idle one). stop
  // must hold for every request after the first one it holds for, or for
  // that one alone: the first of each 32 that satisfies it is taken.
  template <class Stop>
  __device__ __forceinline__ WorkItem walk(const AttentionParams& p, Stop stop) const {
    const int k = item_keys(p);
    const int lane = threadIdx.x % 32;
    int first = 0;  // items of the requests before this round of 32
    for (int r0 = 0; r0 < p.batch.num_requests; r0 += 32) {
      const int r = r0 + lane;
      int count = 0, keys = 0;
      if (r < p.batch.num_requests && is_decode(p, r)) {
        const int span = decode_keys(p, r);
        count = max(1, span / k);
        keys = ((span + count - 1) / count + block_size - 1) / block_size * block_size;
        if (sink_keys(p, r, span) > 0) ++count;  // the sink tokens' item, last
      }
      int inclusive = count;  // items of requests r0 .. r
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int below = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += below;
      }
      const int r_first = first + inclusive - count;
      const unsigned hits = __ballot_sync(0xffffffffu, r < p.batch.num_requests && stop(r, r_first, count));
      if (hits != 0) {
        const int src = __ffs(static_cast<int>(hits)) - 1;
        return {r0 + src, __shfl_sync(0xffffffffu, r_first, src), __shfl_sync(0xffffffffu, count, src),
                __shfl_sync(0xffffffffu, keys, src)};
      }
      first += __shfl_sync(0xffffffffu, inclusive, 31);
    }
    return {0, first, 0, 0};
  }

  // The request item `item` of the flat list belongs to.
  __device__ __forceinline__ WorkItem item_at(const AttentionParams& p, int item) const {
    return walk(p, [&](int, int first, int count) { return item < first + count; });
  }

  // Request r's entry: its first item and count.
  __device__ __forceinline__ WorkItem request_items(const AttentionParams& p, int r) const {
    return walk(p, [&](int s, int, int) { return s == r; });
  }
};

// The tile's Slice: program (item blockIdx.x, KV head blockIdx.y) over its keys,
// its finished rows as partials at its item: part_o [items, Hq, head_dim],
// part_lse [items, Hq].
struct WorkListSplits : WorkList {
  float* part_o;
  float* part_lse;
  AttentionParams params;  // the batch's lengths: the contract's Slice methods get no AttentionParams

  __device__ __forceinline__ int query_tile() const { return 0; }
  __device__ __forceinline__ int request() const { return item_at(params, blockIdx.x).request; }
  __device__ __forceinline__ bool serves(int q_len) const { return q_len == 1; }

  // Item i of request r: keys [first + i K_r, + K_r) of its window's span
  // (first: the block its decode's keys begin in, 0 without a window), or its
  // sink tokens before that block (the last item, where there are some). The
  // tile's own begin is not used: with sink tokens the mask starts it at key 0.
  __device__ __forceinline__ KeyRange key_range(int /*tile_kv_begin*/, int tile_kv_end) const {
    const WorkItem it = item_at(params, blockIdx.x);
    if (it.count == 0) return {0, 0};  // idle: no key, an empty partial nobody merges
    const int span = decode_keys(params, it.request), item = static_cast<int>(blockIdx.x) - it.first;
    const int sinks = sink_keys(params, it.request, span);
    if (sinks > 0 && item == it.count - 1) return {0, sinks};
    const int begin = params.batch.seq_lens[it.request] - span + item * it.keys;
    return {begin, min(tile_kv_end, begin + it.keys)};
  }

  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    const size_t part_row = static_cast<size_t>(blockIdx.x) * p.num_q_heads + q_row % p.num_q_heads;
    stage04::store_partial_row(part_o, part_lse, part_row, p.kv.head_dim, o, half, t4, inv_l, lse);
  }
};
static_assert(Slice<WorkListSplits>);

// The items' partials as the merge reads them: row (r, h) merges r's n_r items,
// then the learned sink of head h, if any (stage 08's sink state: no item
// knows whether it is its request's first, so the merge adds it, once a row).
struct WorkListPartials : WorkList {
  const float* part_o;    // [items, Hq, head_dim]
  const float* part_lse;  // [items, Hq]
  const float* sinks;     // [Hq] natural-log logits, or null
  int num_items;

  struct Row : MergeRow {
    size_t part_row0;  // first item * Hq + h
    int count;
    int head;
  };

  __device__ __forceinline__ Row row(const AttentionParams& p, int r, int h) const {
    const WorkItem it = request_items(p, r);
    const size_t token = p.batch.query_start_loc[r];
    return {{it.count > 0, token * p.num_q_heads + h}, static_cast<size_t>(it.first) * p.num_q_heads + h, it.count, h};
  }

  __device__ __forceinline__ void after_partials(const AttentionParams&, const Row& row, SoftmaxState<4>& acc,
                                                 const MergeChunk&) const {
    if (sinks == nullptr) return;
    SoftmaxState<4> sink;
    sink.init_with_sink(sinks[row.head] * LOG2E);
    acc.merge(sink);
  }

  __device__ __forceinline__ int num_partials() const { return num_items; }
  // The row's own count: its fold stops at n_r items, not at the plan's bound.
  __device__ __forceinline__ int row_partials(const Row& row) const { return row.count; }

  __device__ __forceinline__ SoftmaxState<4> partial(const AttentionParams& p, const Row& row, int i,
                                                     const MergeChunk& chunk) const {
    SoftmaxState<4> s;
    if (i >= row.count) {
      s.init();
      return s;
    }
    const size_t part_row = row.part_row0 + static_cast<size_t>(i) * p.num_q_heads;
    float o[4];
    chunk.load(part_o + part_row * p.kv.head_dim, o);
    return SoftmaxState<4>::partial(part_lse[part_row], o);
  }
};
static_assert(PartialSource<WorkListPartials>);

template <class Tiles, class Mask, class Adapt>
void run_work_list(const Launch& l, const stage03::Packing& pk, const Adapt& adapt) {
  const AttentionParams& p = l.p;
  if (p.batch.num_requests == 0) return;
  const WorkList list{l.plan.items_per_wave, l.plan.keys_per_split, p.kv.block_size};
  WorkListSplits splits;
  static_cast<WorkList&>(splits) = list;
  splits.part_o = l.part_o;
  splits.part_lse = l.part_lse;
  splits.params = p;
  // Learned sinks join in the merge (WorkListPartials), not in the items.
  constexpr bool SINKS = std::is_same_v<Adapt, stage08::AddSinks>;
  const auto slice = [&] {
    if constexpr (SINKS) {
      return splits;
    } else {
      return adapt(splits);
    }
  }();
  const dim3 grid(l.plan.num_splits, p.kv.num_kv_heads, 1);
  stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
    stage04::with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
      Tiles::template launch_tile<T, std::decay_t<decltype(slice)>, Mask>(p, pk, slice, grid, l.stream);
    });
    WorkListPartials src;
    static_cast<WorkList&>(src) = list;
    src.part_o = l.part_o;
    src.part_lse = l.part_lse;
    src.sinks = nullptr;
    if constexpr (SINKS) src.sinks = adapt.sinks;
    src.num_items = l.plan.num_splits;
    launch_merge_dependent<HEAD_DIM, stage04::MERGE_LANES<HEAD_DIM>>(p, src, l.stream);
  });
}

template <class Tiles, class Mask, class Adapt>
void run_path(const Launch& l, const stage03::Packing& pk, const Adapt& adapt) {
  const AttentionParams& p = l.p;
  constexpr bool SINK_TOKENS = std::is_same_v<Mask, stage08::WindowWithSinkTokens>;
  switch (l.plan.path) {
    case Path::whole_tiles:
      stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
        // stage03::dispatch_whole_context's choice, with stage 09's tile for the prefill one.
        if constexpr (HOPPER_COMPOSES<Tiles, Mask, Adapt>) {
          const bool decode_tile = (p.batch.max_query_len << pk.group_shift) <= Tiles::template Decode<HEAD_DIM>::ROWS;
          if (!decode_tile && hopper_prefill(l.plan, p)) {
            launch_hopper_tiles<HEAD_DIM>(l.plan, p, pk, l.stream);
            return;
          }
        }
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
        run_mixed<Tiles, Mask>(l.plan, p, pk, sink_token_splits(l, pk), l.stream, adapt);
      } else {
        run_mixed<Tiles, Mask>(l.plan, p, pk, plan_splits(l), l.stream, adapt);
      }
      return;
    case Path::work_list:
      run_work_list<Tiles, Mask>(l, pk, adapt);
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
