// Stage 04's split-KV machinery: the `Splits` slice policy of stage 03's tile,
// the `SplitPartials` source of the shared merge kernel (common/merge.cuh) and
// the dispatch rule; split_kv.cu is the stage's launcher.
//
// A decode batch has one query token per request, so stage 03's grid has only
// requests x KV heads programs: 4 requests x 8 KV heads = 32 programs for 132
// SMs, each walking 32k keys alone. Here a third grid dimension cuts each
// context into block-aligned splits. Program (split, KV head, request) runs
// stage 03's one-warp decode tile (the whole GQA group on tensor cores, K/V
// streamed through a cp.async ring) over its split's keys only, and writes a
// normalized partial output with its log-sum-exp; a second kernel (the merge
// of common/merge.cuh) merges the splits with SoftmaxState::merge. With one
// split the tile writes the final output itself and no merge runs.
//
// Later stages run the same splits with their own tile family (stage 05's 8-bit
// tiles) and key span (stage 06's window): launch_splits and forward_splits take
// both as arguments, so this file holds only split-KV.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.h"
#include "common/cuda_compat.cuh"
#include "common/launch.cuh"
#include "common/merge.cuh"
#include "common/online_softmax.cuh"
#include "common/stages.h"
#include "common/tile_contract.cuh"
#include "common/todo.cuh"
// Stage 04 builds on the reference solution of stage 03 (its tile, as written there).
#include "solutions/03_gqa_packing/gqa_packing.cuh"

namespace pa::stage04 {
// Internal linkage, like stage 03's kernel: stages 04-06 each instantiate it.
namespace {

using stage03::KeyRange;

constexpr int MAX_SPLITS = 64;           // partials per row stay small next to the cache
constexpr int MIN_KEYS_PER_SPLIT = 256;  // below this a split costs more in merge than it saves
constexpr int MERGE_THREADS = 128;

// Decode tiles an SM holds at once: the H100/H200 figure. Shared memory decides
// there: Q + a 3-stage K/V ring is 50-56 KB (head_dim 64-256) plus 1 KB the
// hardware reserves per block, against 228 KB per SM on Hopper. Registers do
// not limit the one-warp bf16 program. (Other GPUs hold fewer; the rule stays
// right in spirit, only the wave count it aims for is off.)
constexpr int PROGRAMS_PER_SM = 4;
constexpr size_t HOPPER_SMEM_PER_SM = 228 * 1024, SMEM_RESERVED_PER_BLOCK = 1024;
// Whether PROGRAMS_PER_SM programs of tile T (of family Tiles) share an SM.
template <TileFamily Tiles, class T>
constexpr bool tile_fits_per_sm() {
  return PROGRAMS_PER_SM * (Tiles::template smem_bytes<T>() + SMEM_RESERVED_PER_BLOCK) <= HOPPER_SMEM_PER_SM;
}
template <TileFamily Tiles, int HEAD_DIM>
constexpr bool fits_per_sm() {
  return tile_fits_per_sm<Tiles, typename Tiles::template Decode<HEAD_DIM>>();
}
static_assert(fits_per_sm<stage03::Bf16Tiles, 64>() && fits_per_sm<stage03::Bf16Tiles, 128>() &&
                  fits_per_sm<stage03::Bf16Tiles, 256>(),
              "PROGRAMS_PER_SM decode tiles must fit an H100/H200 SM");

// One finished row as a partial: o * inv_l in fp32 at row part_row of part_o
// ([rows, head_dim]) and its lse in part_lse ([rows]). The lane's values are
// laid out as in stage03::WholeContext::store_row; a tile's padding dims past
// head_dim are not stored. (Stage 07's prefix pass and the batch-invariant
// mode write their partials with it too, at rows of their own layouts.)
template <int O_TILES>
__device__ __forceinline__ void store_partial_row(float* part_o, float* part_lse, size_t part_row, int head_dim,
                                                  const float (&o)[O_TILES][4], int half, int t4, float inv_l,
                                                  float lse) {
  float* o_row = part_o + part_row * head_dim;  // [head_dim]
#pragma unroll
  for (int j = 0; j < O_TILES; ++j) {
    if (8 * j >= head_dim) break;
    *reinterpret_cast<float2*>(o_row + 8 * j + 2 * t4) = make_float2(o[j][2 * half] * inv_l, o[j][2 * half + 1] * inv_l);
  }
  if (t4 == 0) part_lse[part_row] = lse;
}

// The slice policy of stage 03's kernel for split-KV: it writes the partials
// that SplitPartials (below) reads for the merge. blockIdx.x of the tile kernel
// is the split.
struct Splits {
  float* part_o;    // [num_splits, num_tokens, num_q_heads, head_dim]  o_s / l_s (0 for an empty split)
  float* part_lse;  // [num_splits, num_tokens, num_q_heads]            m_s + log(l_s) (-inf when empty)
  int num_splits;
  int keys_per_split;  // blocks_per_split * block_size: splits start on a cache block

  // A decode request has one token: one query tile.
  __device__ __forceinline__ int query_tile() const { return 0; }

  // This split's keys, inside the tile's range [tile_kv_begin, tile_kv_end)
  // (a decode: [0, seq_len); with stage 06's sliding window, from the window's
  // first block on, so only the window is split).
  __device__ __forceinline__ KeyRange key_range(int tile_kv_begin, int tile_kv_end) const {
    const int split = blockIdx.x;
    //@ TODO 1: split `split`'s keys: keys_per_split of them from tile_kv_begin + split * keys_per_split, clipped to tile_kv_end (may be empty)
    const int begin = tile_kv_begin + split * keys_per_split;
    return {begin, min(tile_kv_end, begin + keys_per_split)};  // end <= begin: a split past seq_len
    //@ skeleton
    //@ (void)split, (void)tile_kv_begin, (void)tile_kv_end;
    //@ if (threadIdx.x == 0) PA_TODO(1);
    //@ return {0, 0};  // placeholder: no keys at all
    //@ end
  }

  // A finished row of this split (layout as stage03::WholeContext::store_row).
  // An empty split arrives as inv_l = 0 and lse = -inf (stage 03's empty-state
  // rule), so it writes o = 0 and lse = -inf: weight exp(-inf) = 0 in the merge.
  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    //@ TODO 2: one split: the final out/lse (stage 03's store); several: the fp32 partial o * inv_l and lse of row (split, q_row)
    if (num_splits == 1) {
      stage03::WholeContext{}.store_row(p, q_row, o, half, t4, inv_l, lse);
      return;
    }
    const size_t part_row = static_cast<size_t>(blockIdx.x) * p.batch.num_tokens * p.num_q_heads + q_row;
    store_partial_row(part_o, part_lse, part_row, p.kv.head_dim, o, half, t4, inv_l, lse);
    //@ skeleton
    //@ (void)inv_l, (void)lse;
    //@ stage03::WholeContext{}.store_row(p, q_row, o, half, t4, 0.0f, 0.0f);  // placeholder: zero rows, lse 0
    //@ if (t4 == 0) PA_TODO(2);
    //@ end
  }
};
static_assert(Slice<Splits>);

// The splits' partials as the merge (common/merge.cuh) reads them: program
// (request r, query head h) merges the num_splits partials of r's decode row.
// Its MERGE_THREADS threads are MERGE_LANES split lanes side by side, each of
// HEAD_DIM / 4 chunks of 4 dims: lane l merges splits l, l + MERGE_LANES, ...,
// then the lanes merge in shared memory.
struct SplitPartials {
  const float* part_o;    // [num_splits, num_tokens, num_q_heads, head_dim]  as Splits::store_row wrote them
  const float* part_lse;  // [num_splits, num_tokens, num_q_heads]
  int num_splits;

  using Row = MergeRow;

  // The decode row of request r (none for a request with no query).
  __device__ __forceinline__ Row row(const AttentionParams& p, int r, int h) const {
    const int token = p.batch.query_start_loc[r];
    return {p.batch.query_start_loc[r + 1] != token, static_cast<size_t>(token) * p.num_q_heads + h};
  }

  __device__ __forceinline__ int num_partials() const { return num_splits; }

  // Split `split`'s partial of the row, this thread's 4 dims. An empty split
  // is (-inf, 1, 0): the merge gives it weight 2^-inf = 0.
  __device__ __forceinline__ SoftmaxState<4> partial(const AttentionParams& p, const Row& row, int split,
                                                     const MergeChunk& chunk) const {
    //@ TODO 3: split `split`'s partial as the state SoftmaxState<4>::partial(lse_s, o_s): row split * num_tokens * Hq + row.q_row of part_lse, and of part_o (chunk.load reads the thread's 4 dims)
    const size_t part_row = static_cast<size_t>(split) * p.batch.num_tokens * p.num_q_heads + row.q_row;
    float o_part[4];
    chunk.load(part_o + part_row * p.kv.head_dim, o_part);
    return SoftmaxState<4>::partial(part_lse[part_row], o_part);
    //@ skeleton
    //@ (void)p, (void)row, (void)split, (void)chunk;
    //@ if (threadIdx.x == 0) PA_TODO(3);
    //@ SoftmaxState<4> none;  // placeholder: every split empty, so every output is zero
    //@ none.init();
    //@ return none;
    //@ end
  }
};
static_assert(PartialSource<SplitPartials>);

// Split lanes of the merge: the splits read side by side, 8, 4, 2 for head_dim 64, 128, 256.
template <int HEAD_DIM>
constexpr int MERGE_LANES = MERGE_THREADS / (HEAD_DIM / 4);

SplitPartials split_partials(const Splits& part) { return {part.part_o, part.part_lse, part.num_splits}; }

// The merge of the splits' partials, started as the dependent of the split
// kernel just before it in `stream`: it may start while the last splits still
// run, and reads their partials only after wait_for_prior_grid().
template <int HEAD_DIM>
void launch_merge_splits(const AttentionParams& p, const Splits& part, cudaStream_t stream) {
  launch_merge_dependent<HEAD_DIM, MERGE_LANES<HEAD_DIM>>(p, split_partials(part), stream);
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The SM count of the current device, read once per device and host thread.
int sm_count() {
  thread_local int cached_device = -1, cached_count = 0;
  int device = 0;
  PA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    PA_CHECK(cudaDeviceGetAttribute(&cached_count, cudaDevAttrMultiProcessorCount, device));
    cached_device = device;
  }
  return cached_count;
}

// The partials live in one workspace per host thread that only grows. Growing
// calls cudaFree, which waits for the device, so no launch still reads the old
// one. Limitation (kept for simplicity): two streams driven from one host thread
// must not run split launches at the same time, as they would share it.
struct Workspace {
  DeviceBuffer<float> o;    // [num_splits, num_tokens, Hq, D]
  DeviceBuffer<float> lse;  // [num_splits, num_tokens, Hq]
};
Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// Throws, before any launch, when a request has more than one query. The host
// flags decide in the common case; when max_query_len is only a loose bound the
// query starts are read back to name the request (or to find there is none).
void require_decode_batch(const AttentionParams& p) {
  if (p.batch.decode_only || p.batch.max_query_len <= 1) return;
  std::vector<int> starts(p.batch.num_requests + 1);
  PA_CHECK(cudaMemcpy(starts.data(), p.batch.query_start_loc, starts.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int r = 0; r < p.batch.num_requests; ++r) {
    const int q_len = starts[r + 1] - starts[r];
    PA_REQUIRE(q_len <= 1, "split-KV (stage 04) serves decode-only batches (every q_len <= 1): request " +
                               std::to_string(r) + " has " + std::to_string(q_len) +
                               " queries; run prefill chunks and prompts through whole query tiles (stage 03)");
  }
}

// Splits of num_splits partials in this host thread's workspace, grown to fit
// the batch; with one split the tile writes the final rows and needs none.
Splits workspace_splits(const AttentionParams& p, int num_splits, int keys_per_split) {
  Splits part{nullptr, nullptr, num_splits, keys_per_split};
  if (num_splits > 1) {
    const size_t rows = static_cast<size_t>(num_splits) * p.batch.num_tokens * p.num_q_heads;
    Workspace& ws = workspace();
    ws.o.resize(rows * p.kv.head_dim);
    ws.lse.resize(rows);
    part.part_o = ws.o.data();
    part.part_lse = ws.lse.data();
  }
  return part;
}

// The one check of a split count, for every launcher with a split path
// (stages 04-08), before any launch: 0 = automatic (the stage's plan),
// 1..MAX_SPLITS forces that many splits and needs a decode-only batch, anything
// else is refused. Returns whether the batch runs as decodes: forced splits
// read the actual q_lens when max_query_len is only a loose bound (and name a
// request that is not a decode); an automatic request trusts the host flags,
// so a mixed batch pays no read-back, and a decode batch with loose flags runs
// whole query tiles, which serve any batch.
bool check_split_request(const AttentionParams& p, int num_splits) {
  PA_REQUIRE(num_splits >= 0 && num_splits <= MAX_SPLITS,
             "num_splits " + std::to_string(num_splits) + " is outside 0 (automatic) .. " +
                 std::to_string(MAX_SPLITS) + ": 0 lets the stage plan, 1.." + std::to_string(MAX_SPLITS) +
                 " forces that many splits on a decode batch");
  if (num_splits == 0) return p.batch.decode_only || p.batch.max_query_len <= 1;
  require_decode_batch(p);
  return true;
}

// Throws, before any launch, unless `sp` is a plan this launcher can run over
// `span_keys` keys: 1..MAX_SPLITS splits of >= 1 block that together cover the span.
void check_plan(const SplitPlan& sp, int span_keys, int block_size) {
  PA_REQUIRE(sp.num_splits >= 1 && sp.num_splits <= MAX_SPLITS,
             "split-KV: the plan has " + std::to_string(sp.num_splits) + " splits; it needs 1.." +
                 std::to_string(MAX_SPLITS) + " (clamp the rule's result)");
  PA_REQUIRE(sp.blocks_per_split >= 1, "split-KV: the plan has " + std::to_string(sp.blocks_per_split) +
                                           " blocks per split; a split needs at least one block");
  PA_REQUIRE(static_cast<long long>(sp.num_splits) * sp.blocks_per_split * block_size >= span_keys,
             "split-KV: the plan's " + std::to_string(sp.num_splits) + " splits x " +
                 std::to_string(sp.blocks_per_split) + " blocks do not cover the " + std::to_string(span_keys) +
                 " keys of the longest request");
}

// Every family's decode tile has one row warp; a token's GROUP_PAD = 2^group_shift
// rows fit it up to groups of 16.
constexpr int DECODE_TILE_ROWS = 16;
constexpr bool fits_decode_tile(int group_shift) { return (1 << group_shift) <= DECODE_TILE_ROWS; }

// The tile of family Tiles that one decode token's GROUP_PAD rows fit: the
// 16-row decode tile up to groups of 16, the 128-row tile for groups of 17-64
// (one program per SM instead of PROGRAMS_PER_SM: programs_per_sm()).
// f.template operator()<T>().
template <TileFamily Tiles, int HEAD_DIM, class F>
void with_decode_tile(const stage03::Packing& pk, F&& f) {
  using Decode = typename Tiles::template Decode<HEAD_DIM>;
  static_assert(Decode::ROWS == DECODE_TILE_ROWS, "every family's decode tile is one row warp");
  if (fits_decode_tile(pk.group_shift)) {
    f.template operator()<Decode>();
  } else {
    f.template operator()<typename Tiles::template Prefill<HEAD_DIM>>();
  }
}

// Programs of the decode tile an SM holds at once for this batch's group.
int programs_per_sm(const AttentionParams& p) {
  const int group = std::max(1, p.num_q_heads / std::max(1, p.kv.num_kv_heads));
  return fits_decode_tile(stage03::log2_ceil(group)) ? PROGRAMS_PER_SM : 1;
}

// One decode tile of family Tiles per (split, KV head, request) (a q_len <= 1
// row of GROUP_PAD heads fits it: with_decode_tile). Then, with several splits,
// the merge.
template <int HEAD_DIM, TileFamily Tiles, Mask M, class Adapt = stage03::SameSlice>
void launch_splits(const AttentionParams& p, const stage03::Packing& pk, const Splits& part, cudaStream_t stream,
                   const Adapt& adapt = {}) {
  const dim3 grid(part.num_splits, p.kv.num_kv_heads, p.batch.num_requests);
  const auto slice = adapt(part);
  with_decode_tile<Tiles, HEAD_DIM>(pk, [&]<class T>() {
    Tiles::template launch_tile<T, std::decay_t<decltype(slice)>, M>(p, pk, slice, grid, stream);
  });
  if (part.num_splits > 1) launch_merge_splits<HEAD_DIM>(p, part, stream);
}

int max_blocks(int span_keys, int block_size) { return std::max(1, ceil_div(span_keys, block_size)); }

SplitPlan plan_fixed_rule(int span_keys, int block_size, int num_splits) {
  PA_REQUIRE(num_splits >= 1 && num_splits <= MAX_SPLITS,
             "split-KV: num_splits " + std::to_string(num_splits) + " is outside 1.." + std::to_string(MAX_SPLITS));
  return SplitPlan{num_splits, ceil_div(max_blocks(span_keys, block_size), num_splits)};
}

// The dispatch rule over the keys the longest request reads (span_keys: its
// seq_len here; stage 06 passes its window's span).
SplitPlan plan_rule(const AttentionParams& p, int num_sms, int span_keys) {
  const int num_blocks = max_blocks(span_keys, p.kv.block_size);
  const int programs = std::max(1, p.batch.num_requests * p.kv.num_kv_heads);  // without splitting
  const int per_sm = programs_per_sm(p);  // PROGRAMS_PER_SM (1 for groups above 16)
  //@ TODO 4: the split count: as many splits as fit in one wave of per_sm programs per SM, each >= MIN_KEYS_PER_SPLIT keys, clamped to 1..MAX_SPLITS
  const int for_one_wave = std::max(1, per_sm * num_sms / programs);  // 1 once the batch fills the GPU
  const int for_min_size = std::max(1, span_keys / MIN_KEYS_PER_SPLIT);
  const int num_splits = std::clamp(std::min(for_one_wave, for_min_size), 1, MAX_SPLITS);
  //@ skeleton
  //@ (void)programs, (void)num_sms, (void)MIN_KEYS_PER_SPLIT, (void)per_sm;
  //@ PA_TODO_HOST(4, "04_split_kv");
  //@ const int num_splits = 0;
  //@ end
  PA_REQUIRE(num_splits >= 1 && num_splits <= MAX_SPLITS,
             "stage 04 plan(): the rule gave " + std::to_string(num_splits) + " splits; clamp it to 1.." +
                 std::to_string(MAX_SPLITS) + " (a context shorter than 256 keys still needs one split)");
  // Whole blocks per split; rounding up may leave the last split empty, so drop it.
  const int blocks_per_split = ceil_div(num_blocks, num_splits);
  return SplitPlan{ceil_div(num_blocks, blocks_per_split), blocks_per_split};
}

// Plans (num_splits 0: plan_rule from the SM count), checks the plan, fills the
// workspace and launches the split kernels of family Tiles for a validated
// decode-only batch.
template <TileFamily Tiles, Mask M, class Adapt = stage03::SameSlice>
void forward_splits(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream, int num_splits,
                    int span_keys, const Adapt& adapt = {}) {
  const SplitPlan sp = num_splits == 0 ? plan_rule(p, sm_count(), span_keys)
                                       : plan_fixed_rule(span_keys, p.kv.block_size, num_splits);
  check_plan(sp, span_keys, p.kv.block_size);
  const Splits part = workspace_splits(p, sp.num_splits, sp.blocks_per_split * p.kv.block_size);
  stage03::with_head_dim(p.kv.head_dim,
                         [&]<int HEAD_DIM>() { launch_splits<HEAD_DIM, Tiles, M>(p, pk, part, stream, adapt); });
}

// Serves any batch with a tile family and a mask: decode-only batches that the
// split plan splits (or any forced split count 1..64) take the splits,
// everything else whole query tiles (stage 03). span_keys: the keys the longest
// request reads (stage 06: its window's span). Stages 05, 06 and 08 launch
// through it.
template <TileFamily Tiles, Mask M, class Adapt = stage03::SameSlice>
void run_splits_or_tiles(const AttentionParams& p, const stage03::Packing& pk, cudaStream_t stream, int num_splits,
                         int span_keys, const Adapt& adapt = {}) {
  const bool decode_only = check_split_request(p, num_splits);
  if (num_splits > 0 || (decode_only && plan_rule(p, sm_count(), span_keys).num_splits > 1)) {
    forward_splits<Tiles, M>(p, pk, stream, num_splits, span_keys, adapt);
    return;
  }
  stage03::with_head_dim(p.kv.head_dim,
                         [&]<int HEAD_DIM>() { stage03::dispatch_whole_context<HEAD_DIM, Tiles, M>(p, pk, stream, adapt); });
}

}  // namespace
}  // namespace pa::stage04
