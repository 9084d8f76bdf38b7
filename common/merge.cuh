// The merge of finished partials, written once: split-KV (stage 04, stage 08's
// sink-token split), the batch-invariant fold (going_further) and the cascade's
// decode merge (stage 07, and the engine's warpgroup cascade) all launch
// merge_partials_kernel, each with a small PartialSource policy that lives
// beside the code that writes its partials and says where they are.
//
// A partial is a finished state: normalized o_s (fp32, [head_dim]) and its
// natural-log lse_s, the state SoftmaxState::partial(lse_s, o_s); an empty one
// has lse_s = -inf and weight 2^-inf = 0 (online_softmax.cuh). Program
// (request r, query head h) merges the partials of one row, or returns when r
// has no row to merge. Its threads are LANES lanes x HEAD_DIM / 4 chunks:
// thread (lane, chunk) owns dims [4 chunk, 4 chunk + 4) of partials lane,
// lane + LANES, ..., and loads MERGE_BATCH of them before merging any, so that
// their loads are in flight together (a fold that waits for each load spends
// an L2 round trip per partial). The lanes then merge in lane order through
// shared memory, the source's hook runs (the cascade's prefix partials), and
// lane 0 writes the bf16 row and its lse. The order of every merge is fixed by
// LANES and the source's count alone, so a source's results are a function of
// its partials: LANES = 1 is the plain fold in partial order.
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

#include "attention_params.h"
#include "cuda_compat.cuh"
#include "launch.cuh"
#include "online_softmax.cuh"
#include "ptx.cuh"

namespace pa {

// The row one merge program writes, as its PartialSource finds it. A source's
// Row derives from it to carry what it read with it (the cascade: the row's
// gathered prefix row, read before the partials so that the load overlaps).
struct MergeRow {
  bool merges;   // false: the request has no such row; the program returns at once
  size_t q_row;  // token * Hq + head: the row of out [num_tokens * Hq, D] and lse [num_tokens * Hq]
};

// The dims [4 chunk, 4 chunk + 4) of a row that one thread of a merge program holds.
struct MergeChunk {
  int chunk;
  bool real;  // inside head_dim; false: the tile's padding past it, merged as zeros and never stored

  // Dim i (0..3) of the four.
  __device__ __forceinline__ int dim(int i) const { return 4 * chunk + i; }

  // This thread's four values of a partial's row o_row ([head_dim], 16-byte
  // aligned: head_dim is a multiple of 16): one float4 load, zeros for padding.
  __device__ __forceinline__ void load(const float* o_row, float (&o)[4]) const {
    const float4 v = real ? *reinterpret_cast<const float4*>(o_row + 4 * chunk) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
  }
};

// ---- PartialSource

// The optional members, detected in one place.
template <class S>
concept DeclaresSkipsEmpty = requires { S::SKIPS_EMPTY; };
template <class S>
concept DeclaresAfterPartials = requires { &S::after_partials; };
template <class S>
concept DeclaresRowPartials = requires { &S::row_partials; };

// What merge_partials_kernel asks of a source of partials:
//  - Row row(p, r, h): the row program (r, h) merges (Row derives from
//    MergeRow). It runs before wait_for_prior_grid(), so it reads only what the
//    kernel before the merge does not write (the batch metadata, the plan);
//  - int num_partials(): how many partials each row has (>= 1);
//  - SoftmaxState<4> partial(p, row, i, chunk): partial i (0 <= i <
//    num_partials()) of the row, for the thread's four dims (chunk.load reads
//    them): SoftmaxState<4>::partial(lse_i, o_i);
//  - optional: int row_partials(row), a row's own count (<= num_partials(),
//    >= 0), where rows have fewer partials than the bound (the engine's work list);
//  - optional: static constexpr bool SKIPS_EMPTY (skips_empty below);
//  - optional: after_partials(p, row, acc, chunk), which merges more into acc
//    once the partials are merged (stage 07's prefix partials; the default
//    merges nothing).
template <class S>
concept PartialSource =
    // A kernel argument: its bytes are copied to the device as they are.
    std::is_trivially_copyable_v<S> &&
    requires { typename S::Row; } &&
    std::derived_from<typename S::Row, MergeRow> && std::is_trivially_copyable_v<typename S::Row> &&
    requires(const S& s, const AttentionParams& p, int r, int h, const typename S::Row& row, int i,
             const MergeChunk& chunk) {
      { s.row(p, r, h) } -> std::same_as<typename S::Row>;
      { s.num_partials() } -> std::same_as<int>;
      { s.partial(p, row, i, chunk) } -> std::same_as<SoftmaxState<4>>;
    } &&
    (!DeclaresSkipsEmpty<S> || requires {
      requires std::same_as<decltype(S::SKIPS_EMPTY), const bool>;
      typename std::bool_constant<S::SKIPS_EMPTY>;
    }) &&
    (!DeclaresRowPartials<S> || requires(const S& s, const typename S::Row& row) {
      { s.row_partials(row) } -> std::same_as<int>;
    }) &&
    (!DeclaresAfterPartials<S> || requires(const S& s, const AttentionParams& p, const typename S::Row& row,
                                           SoftmaxState<4>& acc, const MergeChunk& chunk) {
      s.after_partials(p, row, acc, chunk);
    });

// Whether the fold leaves out empty partials (lse -inf) instead of merging
// them with weight 0: false unless the source declares SKIPS_EMPTY. Merging an
// empty state changes no value but may turn a -0.0 into +0.0 (fmaf(-0, 1, +0)
// = +0), so a fold that must be a function of the non-empty partials alone
// (the batch-invariant mode) skips them.
template <PartialSource S>
inline constexpr bool skips_empty = false;
template <PartialSource S>
  requires DeclaresSkipsEmpty<S>
inline constexpr bool skips_empty<S> = S::SKIPS_EMPTY;

// The source's hook after the partials; nothing for a source without one.
template <PartialSource S>
__device__ __forceinline__ void after_partials(const S& src, const AttentionParams& p, const typename S::Row& row,
                                               SoftmaxState<4>& acc, const MergeChunk& chunk) {
  if constexpr (DeclaresAfterPartials<S>) src.after_partials(p, row, acc, chunk);
}

// How many partials the fold of `row` reads: its own count where the source
// declares one, else every row's num_partials().
template <PartialSource S>
__device__ __forceinline__ int partials_of(const S& src, const typename S::Row& row) {
  if constexpr (DeclaresRowPartials<S>) {
    return src.row_partials(row);
  } else {
    (void)row;
    return src.num_partials();
  }
}

// ---- The kernel

constexpr int MERGE_BATCH = 8;  // partials per thread whose loads are in flight before the first merge

// Program (request blockIdx.x, query head blockIdx.y), LANES * HEAD_DIM / 4
// threads. HEAD_DIM is the tile's row length (64, 128, 256); chunks past
// head_dim merge zeros and store nothing.
template <int HEAD_DIM, int LANES, PartialSource Src>
__global__ void __launch_bounds__(LANES * (HEAD_DIM / 4)) merge_partials_kernel(AttentionParams p, Src src) {
  constexpr int CHUNKS = HEAD_DIM / 4;  // float4 per row: 16, 32, 64
  static_assert(HEAD_DIM % 16 == 0 && LANES >= 1 && LANES * CHUNKS <= 1024, "a merge program's threads");

  const typename Src::Row row = src.row(p, blockIdx.x, blockIdx.y);
  if (!row.merges) return;  // the whole program: no barrier is left waiting
  const int lane = threadIdx.x / CHUNKS;
  const MergeChunk chunk{static_cast<int>(threadIdx.x % CHUNKS), static_cast<int>(threadIdx.x % CHUNKS) * 4 < p.kv.head_dim};
  // With one lane a padding thread has nothing to merge for anyone, and no barrier follows.
  if (LANES == 1 && !chunk.real) return;

  // A merge started as a dependent launch (launch_dependent) may run while the
  // kernel that writes the partials finishes; it reads them only after this
  // wait. After a plain launch it returns at once (griddepcontrol.wait waits
  // for prerequisite grids still in flight, and stream order has finished the
  // kernel before this one), and on the CPU runtime it is nothing.
  wait_for_prior_grid();
  const int count = partials_of(src, row);
  SoftmaxState<4> acc;  // this thread's partials so far
  acc.init();
  for (int i0 = lane; i0 < count; i0 += LANES * MERGE_BATCH) {
    // Every load is issued before the first merge: a slot past the count
    // reads the last partial (in bounds, finite) and is given lse -inf, so no
    // load waits behind a branch.
    SoftmaxState<4> part[MERGE_BATCH];
#pragma unroll
    for (int b = 0; b < MERGE_BATCH; ++b) {
      const int i = i0 + b * LANES;
      part[b] = src.partial(p, row, min(i, count - 1), chunk);
      if (i >= count) part[b].m = -INFINITY;
    }
#pragma unroll
    for (int b = 0; b < MERGE_BATCH; ++b) {
      // One lane's fold is exactly partials [0, count) in order: all its
      // threads agree on the slot, so this branch costs nothing. Lanes side by
      // side (two share a warp at head_dim 64) merge those slots as empty
      // states instead, as stage 04's merge always has.
      if (LANES == 1 && i0 + b >= count) continue;
      if (skips_empty<Src> && part[b].m == -INFINITY) continue;
      acc.merge(part[b]);
    }
  }

  if constexpr (LANES > 1) {
    __shared__ float m_s[LANES];
    __shared__ __align__(16) float o_s[LANES][HEAD_DIM];
    __shared__ float l_s[LANES];
    *reinterpret_cast<float4*>(&o_s[lane][chunk.dim(0)]) = make_float4(acc.o[0], acc.o[1], acc.o[2], acc.o[3]);
    if (chunk.chunk == 0) {
      m_s[lane] = acc.m;
      l_s[lane] = acc.l;
    }
    __syncthreads();
    if (lane != 0) return;  // no barrier follows
    for (int other = 1; other < LANES; ++other) {
      SoftmaxState<4> b;
      b.m = m_s[other];
      b.l = l_s[other];
#pragma unroll
      for (int i = 0; i < 4; ++i) b.o[i] = o_s[other][chunk.dim(i)];
      acc.merge(b);
    }
  }
  after_partials(src, p, row, acc, chunk);

  // A row whose partials are all empty gets exact zeros and lse -inf (the
  // empty-state rule), never NaN.
  if (!chunk.real) return;
  const float inv_l = acc.inv_l();
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(p.out + row.q_row * p.kv.head_dim + chunk.dim(0));
  dst[0] = __floats2bfloat162_rn(acc.o[0] * inv_l, acc.o[1] * inv_l);
  dst[1] = __floats2bfloat162_rn(acc.o[2] * inv_l, acc.o[3] * inv_l);
  if (p.lse != nullptr && chunk.chunk == 0) p.lse[row.q_row] = acc.lse();
}

// The launch: one program per (request, query head), LANES * HEAD_DIM / 4
// threads. launch_merge_dependent starts it as the dependent of the kernel just
// before it in `stream` (launch_dependent, launch.cuh), which writes the partials.
template <int HEAD_DIM, int LANES, PartialSource Src>
void launch_merge(const AttentionParams& p, const Src& src, cudaStream_t stream) {
  launch(merge_partials_kernel<HEAD_DIM, LANES, Src>, dim3(p.batch.num_requests, p.num_q_heads),
         dim3(LANES * (HEAD_DIM / 4)), 0, stream, p, src);
}
template <int HEAD_DIM, int LANES, PartialSource Src>
void launch_merge_dependent(const AttentionParams& p, const Src& src, cudaStream_t stream) {
  launch_dependent(merge_partials_kernel<HEAD_DIM, LANES, Src>, dim3(p.batch.num_requests, p.num_q_heads),
                   dim3(LANES * (HEAD_DIM / 4)), 0, stream, p, src);
}

}  // namespace pa
