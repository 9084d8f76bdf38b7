// Stage 03's kernel: GQA-packed attention tiles on tensor cores.
//
// Program (request r, query tile, KV head) owns a tile of ROWS = 16 * ROW_WARPS
// rows, and a row is a (token, query head) pair, all sharing one KV head. The
// request's rows are numbered token by token, GROUP_PAD per token, and tile t
// holds rows t * ROWS .. t * ROWS + ROWS - 1:
//     row i = t * ROWS + m  ->  token i / GROUP_PAD,  query head kv_head * GROUP + i % GROUP_PAD,
// with GROUP = Hq / Hkv (1..64) and GROUP_PAD the next power of two (rows of
// the padding heads, e.g. 3 -> 4, 12 -> 16, are zero queries that are never
// written). So each K/V tile is loaded once for the whole group, and even a
// decode token brings GROUP_PAD rows to the 16-row tensor-core MMA. A tile
// holds ROWS / GROUP_PAD tokens, or, for groups wider than it, part of one
// token's heads (the launchers pick a tile at least as wide as the group).
//
// Each warp owns 16 consecutive rows and computes S = Q K^T and O += P V with
// mma.sync m16n8k16 (bf16 in, fp32 accumulate). K/V tiles stream through the
// cp.async ring (common/cp_async_ring.cuh); the rows of every shared tile are
// XOR-swizzled so that ldmatrix reads are conflict-free; the online softmax is
// the shared FragSoftmax (common/online_softmax.cuh).
//
// Two policies let later stages reuse the pieces without editing this file
// (their concepts, the tile contract: common/tile_contract.cuh):
//  - Slice: which query tile and keys a program reads and where its finished
//    rows go. Here WholeContext (a tile's whole causal range, final out/lse);
//    stage 04's Splits reads one split and writes a partial.
//  - Mask: which keys each row sees. Here CausalMask; stage 06 adds a window.
// Stage 05's 8-bit kernel is its own kernel built from the same pieces.
// gqa_shapes.cuh holds the tile shapes and the host-side batch checks.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/attention_params.h"
#include "common/check.h"
#include "common/cp_async_ring.cuh"
#include "common/cuda_compat.cuh"
#include "common/kv_lookup.cuh"
#include "common/launch.cuh"
#include "common/mma_fragments.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/tile_contract.cuh"
#include "common/todo.cuh"
#include "solutions/03_gqa_packing/gqa_shapes.cuh"  // the shapes: not a file the learner edits

namespace pa::stage03 {
// Internal linkage: stages 03-06 each instantiate these templates in their own
// library, and the benchmark links them all.
namespace {

// The query tile a program owns, and where its rows come from.
struct QueryTile {
  int r, kv_head;
  int row_begin;   // the request's first row of q / out
  int q_len, pos0;  // its queries, and the position of query 0 (seq_len - q_len)
  int row0;        // this tile's first row of the request's rows (token t, head h) -> t * GROUP_PAD + h
  int tile_first;  // its first token (within the request): row0 / GROUP_PAD
  int rows;        // ROWS: GROUP_PAD / ROWS tiles per token when a group is wider than a tile

  // One tile row's token (within the request) and head (within the group).
  struct Row {
    int token, head_in_group;
    bool real;  // a query of the batch: not past q_len, not a padding head
  };

  // Tile query_tile of request `request` (request_of(slice): blockIdx.z unless
  // the Slice says otherwise). false: the tile starts past the request's
  // queries (the grid is sized for the longest request).
  template <class T>
  __device__ __forceinline__ bool init(const AttentionParams& p, const Packing& pk, int query_tile, int request) {
    r = request, kv_head = blockIdx.y;
    rows = T::ROWS;
    row_begin = p.batch.query_start_loc[r];
    q_len = p.batch.query_start_loc[r + 1] - row_begin;
    row0 = query_tile * T::ROWS;
    tile_first = row0 >> pk.group_shift;
    pos0 = p.batch.seq_lens[r] - q_len;
    return tile_first < q_len;
  }

  __device__ __forceinline__ Row row(const Packing& pk, int m) const {
    // TODO 1: the token and the query head of tile row m, and whether the row is real (not past q_len, not a padding head)
    (void)pk, (void)m;
    if (threadIdx.x == 0) PA_TODO(1);
    return {0, 0, false};  // placeholder: every row is a zero query that is never written
  }

  // The row of q / out ([num_tokens * Hq]) of a real tile row.
  __device__ __forceinline__ size_t q_row(const AttentionParams& p, const Packing& pk, const Row& row) const {
    return static_cast<size_t>(row_begin + row.token) * p.num_q_heads + kv_head * pk.group + row.head_in_group;
  }
};

// The keys one warp's 16 rows need (WarpKeys, common/tile_contract.cuh): its rows span a few tokens.
__device__ __forceinline__ WarpKeys warp_keys(const QueryTile& qt, const Packing& pk, int row_warp) {
  // TODO 2: the key ranges: the tile's [0, tile_kv_end), and this warp's oldest/newest token positions and kv_end
  (void)qt, (void)pk, (void)row_warp;
  if (threadIdx.x == 0) PA_TODO(2);
  return WarpKeys{0, 0, 0, 0};  // placeholder: no keys at all
}

// The Mask policy without a window: a query at q_pos sees keys [0, q_pos].
struct CausalMask {
  __device__ __forceinline__ static int first_key(const AttentionParams&, const Packing&, int /*oldest_q_pos*/) {
    return 0;
  }

  struct Warp {
    int row_kv_end[2];  // rows g, g + 8 see keys below this: causal, and inside the program's range
    int unmasked_end;   // below this every row of the warp sees every key

    __device__ __forceinline__ bool skip_tile(int /*kv_start*/, int /*width*/) const { return false; }
    __device__ __forceinline__ bool needs_mask(int kv_start, int width) const {
      return kv_start + width > unmasked_end;
    }
    __device__ __forceinline__ bool masked(int key, int i) const { return key >= row_kv_end[i]; }
  };

  // q_pos: the positions of rows g and g + 8; kv_end: the program's end of keys
  // (keys past it are zero-filled and would score 0, not -inf).
  __device__ __forceinline__ static Warp for_warp(const AttentionParams&, const int (&q_pos)[2], const WarpKeys& wk,
                                                  int kv_end) {
    // TODO 3: the causal limits: each row sees keys below min(its q_pos + 1, kv_end); no row masks a key below the warp's oldest position + 1
    (void)q_pos, (void)wk, (void)kv_end;
    if (threadIdx.x == 0) PA_TODO(3);
    return Warp{{0, 0}, 0};  // placeholder: every key is masked
  }
};
static_assert(Mask<CausalMask>);

// Sets the scores of keys a row must not see to -inf. column_key(j, c): the
// key (from kv_start) of column c of S's 8-key tile j.
template <int S_TILES, MaskWarp W, class ColumnKey>
__device__ __forceinline__ void apply_mask(float (&s)[S_TILES][4], const W& mask, int kv_start, int width,
                                           int t4, ColumnKey column_key) {
  if (!mask.needs_mask(kv_start, width)) return;
#pragma unroll
  for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (mask.masked(kv_start + column_key(j, 2 * t4 + (e & 1)), e >> 1)) s[j][e] = -INFINITY;
    }
  }
}

// Stage 03's Slice policy: a program reads its query tile's whole causal range
// and writes the final output and lse. Its three members answer the Slice
// concept's questions (stage 04's Splits answers them differently).
struct WholeContext {
  // Which query tile this program owns. Tiles are numbered from the end, so the
  // longest (last, most keys) causal tiles of a prompt start first and the short
  // ones fill in the tail.
  __device__ __forceinline__ int query_tile() const { return gridDim.x - 1 - blockIdx.x; }

  // Which keys it reads, given the tile's range [tile_kv_begin, tile_kv_end)
  // (tile_kv_begin is 0 without a sliding window).
  __device__ __forceinline__ KeyRange key_range(int tile_kv_begin, int tile_kv_end) const {
    return {tile_kv_begin, tile_kv_end};
  }

  // Where a finished row goes: this lane's part of row q_row (of [num_tokens *
  // Hq]) is dims 8j + 2 t4 and 8j + 2 t4 + 1, held in o[j][2 half] and
  // o[j][2 half + 1] (the MMA accumulator layout), still to be scaled by inv_l.
  // Dims from head_dim on are the tile's padding (gqa_shapes.cuh) and not stored.
  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    const int dims = p.kv.head_dim;
    bf16* out_row = p.out + q_row * dims;  // [head_dim]
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) {
      if (8 * j >= dims) break;
      *reinterpret_cast<__nv_bfloat162*>(out_row + 8 * j + 2 * t4) =
          __floats2bfloat162_rn(o[j][2 * half] * inv_l, o[j][2 * half + 1] * inv_l);
    }
    if (p.lse != nullptr && t4 == 0) p.lse[q_row] = lse;
  }
};
static_assert(Slice<WholeContext>);

// Q tile -> shared memory [ROWS, HEAD_DIM] (swizzled), as one cp.async group.
// Rows that are not real are zero-filled (nothing is read): their scores are 0,
// finite, and they are never written. So are the padding dims of a head_dim
// below the tile's HEAD_DIM: zero queries there make the padding add nothing.
template <class T>
__device__ __forceinline__ void load_q_tile(bf16* q_s, const AttentionParams& p, const Packing& pk,
                                            const QueryTile& qt) {
  const int dims = p.kv.head_dim;  // q's row length: HEAD_DIM or less
  for (int c = threadIdx.x; c < T::ROWS * T::CHUNKS; c += T::NUM_THREADS) {
    const int m = c / T::CHUNKS, chunk = c % T::CHUNKS;
    const QueryTile::Row row = qt.row(pk, m);
    const bool read = row.real && chunk * 8 < dims;
    const bf16* src = read ? p.q + qt.q_row(p, pk, row) * dims + chunk * 8 : p.q;
    cp_async_16(q_s + swizzle<T::HEAD_DIM>(m, chunk), src, read);
  }
  cp_async_commit();
}

// The positions of the lane's rows g and g + 8 of row warp row_warp.
__device__ __forceinline__ void row_positions(const QueryTile& qt, const Packing& pk, int row_warp, int g,
                                              int (&q_pos)[2]) {
  q_pos[0] = qt.pos0 + ((qt.row0 + row_warp * 16 + g) >> pk.group_shift);
  q_pos[1] = qt.pos0 + ((qt.row0 + row_warp * 16 + g + 8) >> pk.group_shift);
}

// ROWS keys from key `first` on -> K and V tiles [ROWS, HEAD_DIM] (swizzled),
// 16 bytes per copy, copied by NUM_COPIERS threads (this one is `copier`), each
// key's row found through the block table. Keys at or past keys_end are
// zero-filled: the slots past seq_len may hold anything (NaN in the tests), and
// 0 * NaN = NaN. So are the padding dims past head_dim: the zero queries there
// must not meet stale shared memory.
//
// A ring copies its tiles in order, so each copy() also reads the block-table
// entries of the next tile, `next_first` on (common's EntriesAhead says why):
// a tile's copies never wait for a block-table read, and the ring's first two
// tiles wait for one round trip, not two.
template <int HEAD_DIM, int ROWS, int NUM_COPIERS>
struct KvRowCopies {
  static constexpr int CHUNKS = HEAD_DIM / 8;  // 16-byte chunks of a bf16 row
  static_assert((ROWS * CHUNKS) % NUM_COPIERS == 0, "every copier issues the same number of copies");
  static constexpr int COPIES = ROWS * CHUNKS / NUM_COPIERS;
  using Entries = EntriesAhead<COPIES>;
  Entries ahead;  // the entries of the tile from key ahead.first on

  __device__ __forceinline__ void copy(bf16* k_dst, bf16* v_dst, const AttentionParams& p, const KvLookup& lookup,
                                       int block_shift, int first, int next_first, int keys_end, int copier) {
    auto fetch = [&](Entries& e, int tile_first) {
      e.fetch(lookup, block_shift, tile_first, keys_end, [=](int i) { return tile_first + row(copier, i); });
    };
    if (ahead.first == first) {
      issue(ahead, k_dst, v_dst, p, lookup, block_shift, keys_end, copier);
      fetch(ahead, next_first);
    } else {  // the ring's first tile: its entries and the next tile's in one round trip
      Entries now;
      fetch(now, first);
      fetch(ahead, next_first);
      issue(now, k_dst, v_dst, p, lookup, block_shift, keys_end, copier);
    }
  }

 private:
  // Copy i of this copier: tile row (key offset) and 16-byte chunk.
  __device__ __forceinline__ static int row(int copier, int i) { return (copier + i * NUM_COPIERS) / CHUNKS; }
  __device__ __forceinline__ static int chunk(int copier, int i) { return (copier + i * NUM_COPIERS) % CHUNKS; }

  __device__ __forceinline__ static void issue(const Entries& e, bf16* k_dst, bf16* v_dst, const AttentionParams& p,
                                               const KvLookup& lookup, int block_shift, int keys_end, int copier) {
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const int j = row(copier, i), c = chunk(copier, i);
      const int kv_pos = e.first + j;
      const bool in_range = kv_pos < keys_end && c * 8 < p.kv.head_dim;
      const size_t head_row =
          lookup.head_row_of_slot(KvLookup::slot(e.entry[i], kv_pos, block_shift), p.kv.num_kv_heads);
      const size_t offset = in_range ? head_row * p.kv.head_dim + c * 8 : 0;  // elements from the cache base
      cp_async_16(k_dst + swizzle<HEAD_DIM>(j, c), p.kv.k_cache + offset, in_range);
      cp_async_16(v_dst + swizzle<HEAD_DIM>(j, c), p.kv.v_cache + offset, in_range);
    }
  }
};

// Row warp row_warp's 16 rows of the Q tile (swizzled) as the MMA A fragment of
// k-step ks (matrices 0..3 = rows 0-7 / 8-15 x dims lo / hi).
template <int HEAD_DIM>
__device__ __forceinline__ void q_a_fragment(uint32_t (&a)[4], const bf16* q_s, int row_warp, int ks, int lane) {
  const int row = row_warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
  ldmatrix_x4(a, q_s + swizzle<HEAD_DIM>(row, 2 * ks + (lane >> 4)));
}

// S = Q K^T for one warp's WARP_K keys of a bf16 K tile [TILE_K, HEAD_DIM]
// (swizzled). B[k][n] = K[key n][dim k], so K's rows are B's columns and a plain
// ldmatrix of 8 key rows gives the col-major B fragment. q_frag(a, ks): Q's A
// fragment of k-step ks.
template <int HEAD_DIM, int S_TILES, class QFragment>
__device__ __forceinline__ void scores_bf16(float (&s)[S_TILES][4], const bf16* k_tile, QFragment&& q_frag,
                                            int lane) {
#pragma unroll
  for (int j = 0; j < S_TILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < HEAD_DIM / 16; ++ks) {
    uint32_t qa[4];
    q_frag(qa, ks);
#pragma unroll
    for (int jp = 0; jp < S_TILES / 2; ++jp) {
      // Matrices 0..3 = (keys 0-7, dims lo), (keys 0-7, dims hi), (keys 8-15, dims lo), (keys 8-15, dims hi).
      uint32_t kb[4];
      const int key = jp * 16 + (lane & 7) + (lane >> 4) * 8;
      ldmatrix_x4(kb, k_tile + swizzle<HEAD_DIM>(key, 2 * ks + ((lane >> 3) & 1)));
      const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
      mma_m16n8k16_bf16(s[2 * jp], qa, b0, s[2 * jp]);
      mma_m16n8k16_bf16(s[2 * jp + 1], qa, b1, s[2 * jp + 1]);
    }
  }
}

// O += P V for one warp's WARP_K keys of a bf16 V tile [TILE_K, HEAD_DIM]
// (swizzled), P = the weights in S's accumulators.
template <int HEAD_DIM, int S_TILES, int O_TILES>
__device__ __forceinline__ void accumulate_pv_bf16(float (&o)[O_TILES][4], const float (&s)[S_TILES][4],
                                                   const bf16* v_tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < S_TILES / 2; ++kk) {
    // The S accumulators of key tiles 2kk, 2kk+1 are exactly the A fragment of
    // P's 16-key slice kk (same rows, columns 2t4.. and 2t4+8..), so P goes from
    // registers to the tensor core without touching shared memory.
    // TODO 5: P's A fragment for keys 16kk..16kk+15, straight from the S accumulators (rounded to bf16)
    const uint32_t pa[4] = {0, 0, 0, 0};  // placeholder: P = 0
    if (lane == 0) PA_TODO(5);
#pragma unroll
    for (int jp = 0; jp < O_TILES / 2; ++jp) {
      // B[k][n] = V[key k][dim n] is V row-major: ldmatrix .trans of 8 key rows.
      // Matrices 0..3 = (keys 0-7, dims lo), (keys 8-15, dims lo), (keys 0-7, dims hi), (keys 8-15, dims hi).
      uint32_t vb[4];
      const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      ldmatrix_x4_trans(vb, v_tile + swizzle<HEAD_DIM>(key, 2 * jp + (lane >> 4)));
      const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
      mma_m16n8k16_bf16(o[2 * jp], pa, b0, o[2 * jp]);
      mma_m16n8k16_bf16(o[2 * jp + 1], pa, b1, o[2 * jp + 1]);
    }
  }
}

// Grid: (query tiles, or whatever the Slice maps blockIdx.x to; num_kv_heads; num_requests).
// Dynamic shared memory: Bf16Tiles::smem_bytes<T>().
template <class T, Slice S = WholeContext, Mask M = CausalMask>
__global__ void __launch_bounds__(T::NUM_THREADS, T::MIN_PROGRAMS_PER_SM)
    gqa_packing_kernel(AttentionParams p, Packing pk, S slice) {
  static_assert(T::KV_WARPS == 1, "bf16 tiles: each warp computes all keys of its rows");
  constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K, STAGES = T::STAGES;
  constexpr int S_TILES = TILE_K / 8;    // 8-key column tiles of S
  constexpr int O_TILES = HEAD_DIM / 8;  // 8-dim column tiles of O
  bf16* q_s = dynamic_smem<bf16>();        // [ROWS, HEAD_DIM] swizzled
  bf16* k_s = q_s + T::Q_ELEMS;            // [STAGES, TILE_K, HEAD_DIM] swizzled
  bf16* v_s = k_s + STAGES * T::KV_ELEMS;  // [STAGES, TILE_K, HEAD_DIM] swizzled
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // MMA fragment coordinates: this lane holds rows g and g + 8

  QueryTile qt;
  if (!qt.init<T>(p, pk, slice.query_tile(), request_of(slice)) || !serves(slice, qt.q_len)) return;
  load_q_tile<T>(q_s, p, pk, qt);
  const WarpKeys wk = warp_keys(qt, pk, warp);
  // The keys this program reads, [kv_begin, kv_end): all of [0, tile_kv_end) in
  // stage 03; one split of it in stage 04; from the window's first block on in
  // stage 06. Keys at or past kv_end are masked.
  const KeyRange keys = slice.key_range(M::first_key(p, pk, qt.pos0 + qt.tile_first), wk.tile_kv_end);

  // K/V tile `tile` -> ring slot `slot`, copied by the whole program.
  const KvLookup lookup(p, qt.r, qt.kv_head);
  KvRowCopies<HEAD_DIM, TILE_K, T::NUM_THREADS> copies;
  auto load_kv_tile = [&](int tile, int slot) {
    const int first = keys.begin + tile * TILE_K;
    copies.copy(k_s + slot * T::KV_ELEMS, v_s + slot * T::KV_ELEMS, p, lookup, pk.block_shift, first,
                first + TILE_K, keys.end, threadIdx.x);
  };
  using Ring = CpAsyncRing<STAGES>;
  const int num_kv_tiles = (keys.end - keys.begin + TILE_K - 1) / TILE_K;
  Ring::prologue(num_kv_tiles, load_kv_tile);
  Ring::wait_prologue();  // the Q group has landed
  __syncthreads();

  // This warp's 16 rows of Q as MMA A fragments (matrices 0..3 = rows 0-7 /
  // 8-15 x dims lo / hi), kept in registers for the whole key loop when they
  // fit: with head_dim 256 the output alone takes 128 registers per lane, so
  // there Q is re-read from shared memory at every tile.
  constexpr bool Q_IN_REGISTERS = HEAD_DIM <= 128;
  auto load_q_fragment = [&](uint32_t(&a)[4], int ks) { q_a_fragment<HEAD_DIM>(a, q_s, warp, ks, lane); };
  uint32_t q_regs[Q_IN_REGISTERS ? HEAD_DIM / 16 : 1][4];  // [16-dim slice][a0..a3]
  if constexpr (Q_IN_REGISTERS) {
#pragma unroll
    for (int ks = 0; ks < HEAD_DIM / 16; ++ks) load_q_fragment(q_regs[ks], ks);
  }
  auto q_fragment = [&](uint32_t(&a)[4], int ks) {
    if constexpr (Q_IN_REGISTERS) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = q_regs[ks][i];
    } else {
      load_q_fragment(a, ks);
    }
  };

  FragSoftmax<O_TILES> sm;
  sm.init();
  int q_pos[2];
  row_positions(qt, pk, warp, g, q_pos);
  const typename M::Warp mask = M::for_warp(p, q_pos, wk, keys.end);
  auto column_key = [](int j, int c) { return 8 * j + c; };

  for (int tile = 0; tile < num_kv_tiles; ++tile) {
    // A one-warp program (the decode tile) copies exactly what it reads: a warp barrier is enough.
    const int slot = Ring::template advance<T::NUM_WARPS == 1>(tile, num_kv_tiles, load_kv_tile);
    const int kv_start = keys.begin + tile * TILE_K;
    // Warp-uniform: keys wholly above this warp's diagonal (or a warp of padding
    // rows), or outside every row's window, cost no math; the warp still takes
    // part in the loads and barriers.
    if (kv_start >= wk.kv_end || mask.skip_tile(kv_start, TILE_K)) continue;

    float s[S_TILES][4];  // [8-key tile][c0..c3], layout as sm.o
    scores_bf16<HEAD_DIM>(s, k_s + slot * T::KV_ELEMS, q_fragment, lane);
    apply_mask(s, mask, kv_start, TILE_K, t4, column_key);
    // TODO 4: the online softmax of this tile with the shared state: raise the rows' max to the tile's, then turn S into weights
    for (int j = 0; j < S_TILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;  // placeholder: every weight 0
    if (lane == 0) PA_TODO(4);
    accumulate_pv_bf16<HEAD_DIM>(sm.o, s, v_s + slot * T::KV_ELEMS, lane);
  }
  Ring::drain();
  sm.sum_rows();

  // Only real rows are stored; padding heads and tokens past q_len never are.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const QueryTile::Row row = qt.row(pk, warp * 16 + g + 8 * i);
    if (!row.real) continue;
    // TODO 6: finish row i with the shared state: 1 / l (exact 0 for an empty row) and the natural-log lse (-inf when empty)
    const float inv_l = 0.0f, lse = 0.0f;  // placeholder: zero rows
    if (lane == 0) PA_TODO(6);
    slice.store_row(p, qt.q_row(p, pk, row), sm.o, i, t4, inv_l, lse);
  }
}

// ---- Host side: the tile family of bf16 caches, as later stages launch it.
//
// A tile family (a TileFamily, common/tile_contract.cuh) names its tile shapes,
// its kernel and its shared memory, so that stage 04's splits and stage 05/06's
// dispatch launch any family the same way.
struct Bf16Tiles {
  template <int HEAD_DIM>
  using Decode = Tiling<DecodeShape<HEAD_DIM>>;
  template <int HEAD_DIM>
  using Prefill = Tiling<PrefillShape<HEAD_DIM>>;

  // Q and the ring of K and V tiles.
  template <class T>
  static constexpr size_t smem_bytes() {
    return sizeof(bf16) * (T::Q_ELEMS + 2 * T::STAGES * T::KV_ELEMS);
  }

  template <class T, Slice S, Mask M>
  static void launch_tile(const AttentionParams& p, const Packing& pk, const S& slice, dim3 grid,
                          cudaStream_t stream) {
    launch_for_slice<S>(gqa_packing_kernel<T, S, M>, grid, dim3(T::NUM_THREADS), smem_bytes<T>(), stream, p, pk,
                        slice);
  }
};
static_assert(TileFamily<Bf16Tiles>);

// A Slice adapter that changes nothing. Later stages pass their own to wrap a
// launcher's Slice (stage 08 adds a sink to each row in the epilogue).
struct SameSlice {
  template <Slice S>
  S operator()(const S& s) const {
    return s;
  }
};

// Runs tile shape T over whole query tiles.
template <class T, TileFamily Tiles, Mask M, class Adapt = SameSlice>
void run_whole_context(const AttentionParams& p, const Packing& pk, cudaStream_t stream, const Adapt& adapt = {}) {
  const dim3 grid(query_tiles(p.batch.max_query_len, pk, T::ROWS), p.kv.num_kv_heads, p.batch.num_requests);
  const auto slice = adapt(WholeContext{});
  Tiles::template launch_tile<T, std::decay_t<decltype(slice)>, M>(p, pk, slice, grid, stream);
}

// The 16-row decode tile when every request's tile fits its rows, so a decode
// batch has many small programs; the 128-row tile for everything else.
template <int HEAD_DIM, TileFamily Tiles = Bf16Tiles, Mask M = CausalMask, class Adapt = SameSlice>
void dispatch_whole_context(const AttentionParams& p, const Packing& pk, cudaStream_t stream, const Adapt& adapt = {}) {
  using Decode = typename Tiles::template Decode<HEAD_DIM>;
  if ((p.batch.max_query_len << pk.group_shift) <= Decode::ROWS) {
    run_whole_context<Decode, Tiles, M>(p, pk, stream, adapt);
  } else {
    run_whole_context<typename Tiles::template Prefill<HEAD_DIM>, Tiles, M>(p, pk, stream, adapt);
  }
}

// The tile's row length for head_dim as a template argument:
// f.template operator()<HEAD_DIM>() with HEAD_DIM = tile_head_dim(head_dim).
template <class F>
void with_head_dim(int head_dim, F&& f) {
  PA_REQUIRE(supported_head_dim(head_dim), head_dim_refusal(head_dim));
  switch (tile_head_dim(head_dim)) {
    case 64: f.template operator()<64>(); break;
    case 128: f.template operator()<128>(); break;
    default: f.template operator()<256>(); break;
  }
}

}  // namespace
}  // namespace pa::stage03
