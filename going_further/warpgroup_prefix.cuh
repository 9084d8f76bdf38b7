// Going further (after stage 07): the prefix pass on Hopper's warpgroup MMA,
// beside the suffix pass instead of before it. The engine runs it
// (engine::plan_cascade plans for it, engine::run_cascade launches it).
//
// The prefix pass is the one part of a decode step that is not memory bound:
// 64 decodes x 32 query heads against a 4000-key prefix are 4.2 GFLOP for 16 MB
// of K/V (Qwen3-8B), where the whole step's bytes take 11 us on the H200.
// Stage 03's 128-row tile does it with mma.sync: each of its warps owns 16 rows
// and reads every K/V tile from shared memory on its own (ldmatrix), so 8 warps
// read each tile 8 times. On long prefixes (P 16384, B 256) it reaches ~220
// TFLOP/s on the H200 and this kernel ~310; on the main case, whose programs
// cover 8 key tiles each, this kernel takes ~24 us, much of it what every
// program pays to start and finish (notes/07_cascade.md).
//
// This kernel keeps the idea (all of a group's queries as tile rows, the
// prefix's keys once, split into ranges, partials out) and changes the machine
// underneath:
//  - a warpgroup (4 warps, 64 rows) multiplies with wgmma (common/wgmma.cuh):
//    the tensor core reads Q, K and V from shared memory itself, once per 64
//    rows, and P is an A fragment in registers, exactly mma.sync's;
//  - Q and the K/V tiles sit in shared memory in the hardware's 128-byte
//    swizzle, as 64-dim slabs, so that a descriptor can name them;
//  - the key loop is software-pipelined (FlashAttention-3's intra-warpgroup
//    overlap): the softmax of one tile runs while the tensor core multiplies;
//  - the query gather is folded into the Q load (row -> its batch row through
//    gather_rows), which saves the gather launch;
//  - the suffix pass that follows is this kernel's dependent launch
//    (cascade.cuh): its programs start once all of these have, take the SM
//    slots these leave free, and merge the prefix partials in their epilogue.
//    Decode batches for which that epilogue costs more than a merge kernel
//    (many suffix programs, or many prefix splits) run the suffix pass on a
//    second stream instead, and one merge kernel joins the partials of both.
//    On the H200 the two passes hardly overlap either way: these programs
//    leave little room beside them (notes/07_cascade.md).
// The online softmax, the masks' rule and the partials' layout are stage 03/04's.
// bf16 caches with head_dim up to 128; other shapes take stage 03's tiles.
#pragma once

#include "common/attention_params.h"
#include "common/check.h"
#include "common/cuda_compat.cuh"
#include "common/kv_lookup.cuh"
#include "common/launch.cuh"
#include "common/merge.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/stages.h"
#include "common/wgmma.cuh"
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "solutions/07_cascade/cascade.cuh"
#include "solutions/07_cascade/cost_model.cuh"

namespace pa::further {
namespace {

// Stage 07's plan, Slices and kernels, which this pass reuses.
using stage07::Cascade;
using stage07::CascadePartials;
using stage07::gathered_batch;
using stage07::Packing;
using stage07::Path;
using stage07::prefix_partials;
using stage07::SuffixMerge;
using stage07::SuffixSplits;
using stage07::TileShape;

// What the warpgroup prefix kernel reads besides its AttentionParams: the
// gathered batch of cascade.cuh (one "request" per group, its queries after its
// prefix, the prefixes' block tables) with q the batch's own queries.
struct PrefixJob {
  const int* gather_rows;  // [gathered tokens]           batch row of each cascaded query, group by group
  const int* prefix_lens;  // [num_groups]
  float* part_o;           // [num_splits, gathered tokens, Hq, D]  normalized partials
  float* part_lse;         // [num_splits, gathered tokens, Hq]     their lse, -inf when empty
  int num_query_tiles;
  int keys_per_split;      // a multiple of TILE_K
};

// WARPGROUPS x 64 rows, 64-key K/V tiles in ring slots.
template <int HEAD_DIM_, int WARPGROUPS_>
struct WarpgroupTile {
  static constexpr int HEAD_DIM = HEAD_DIM_, WARPGROUPS = WARPGROUPS_;
  static constexpr int ROWS = 64 * WARPGROUPS, NUM_THREADS = 128 * WARPGROUPS, TILE_K = 64;
  // A tile's math (~0.5 us) is shorter than a copy's latency from the L2 or
  // HBM under load, so 2-3 tiles stay in flight: 4 slots for the 128-row tile
  // (one program per SM: 161 KB at head_dim 128, which leaves room for one
  // suffix program beside it), 3 for the 64-row tile (two programs per SM).
  static constexpr int STAGES = WARPGROUPS == 2 ? 4 : 3;
  static constexpr int SLABS = HEAD_DIM / 64;      // 64-dim slabs of a K/V row
  static constexpr int SLAB_ELEMS = TILE_K * 64;   // one slab of a tile: 8 KB
  static constexpr int KV_ELEMS = SLABS * SLAB_ELEMS;
  static constexpr int CHUNKS = HEAD_DIM / 8;
  static constexpr size_t ALIGN = 1024;            // the swizzle atoms must be 1024-byte aligned
  static constexpr size_t smem_bytes() {
    return ALIGN + sizeof(bf16) * (2 * STAGES * KV_ELEMS + static_cast<size_t>(ROWS) * HEAD_DIM);
  }
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "Q and O in registers: head_dim up to 128");
  static_assert((WARPGROUPS == 2 ? 1 : 2) * (smem_bytes() + stage04::SMEM_RESERVED_PER_BLOCK) <=
                    stage04::HOPPER_SMEM_PER_SM,
                "one 128-row or two 64-row programs per H100/H200 SM (the prefix split plan counts on it)");
};

// The rows of one prefix query tile: row m is gathered token (row0 + m) /
// GROUP_PAD and head (row0 + m) % GROUP_PAD of the KV head's group; rows past
// the group's tokens or heads are padding.
struct PrefixTileRows {
  int row0, group_tokens;

  __device__ __forceinline__ bool at(const stage03::Packing& pk, int m, int& token, int& head) const {
    token = (row0 + m) >> pk.group_shift;
    head = (row0 + m) & ((1 << pk.group_shift) - 1);
    return token < group_tokens && head < pk.group;
  }
};

// Q of one query tile, gathered on the way in: row m comes from its batch row
// (group tokens from tok0 on, through gather_rows; zeros for padding rows and
// dims), into 64-dim Sw128 slabs [SLABS][ROWS][64] that a descriptor can name,
// so that the tensor core reads Q from shared memory as it reads K.
// All of a thread's gathered rows are read before its first copy: a cp.async
// is a compiler barrier for memory, so a read between two copies waits for the
// first copy's issue, and the reads would form a chain of round trips.
template <class T>
__device__ __forceinline__ void load_gathered_q(bf16* q_s, const AttentionParams& p, const stage03::Packing& pk,
                                                const PrefixJob& job, const PrefixTileRows& rows, int tok0,
                                                int kv_head) {
  constexpr int COPIES = T::ROWS * T::CHUNKS / T::NUM_THREADS;  // 16-byte copies per thread
  static_assert(T::ROWS * T::CHUNKS % T::NUM_THREADS == 0, "whole copies per thread");
  const int dims = p.kv.head_dim;
  int batch_row[COPIES];  // of copy i's row, -1 for padding rows and dims
#pragma unroll
  for (int i = 0; i < COPIES; ++i) {
    const int c = threadIdx.x + i * T::NUM_THREADS, m = c / T::CHUNKS, chunk = c % T::CHUNKS;
    int token, head;
    batch_row[i] = rows.at(pk, m, token, head) && chunk * 8 < dims ? job.gather_rows[tok0 + token] : -1;
  }
#pragma unroll
  for (int i = 0; i < COPIES; ++i) {
    const int c = threadIdx.x + i * T::NUM_THREADS, m = c / T::CHUNKS, chunk = c % T::CHUNKS;
    int token, head;
    rows.at(pk, m, token, head);
    const bool read = batch_row[i] >= 0;
    const bf16* src =
        read ? p.q + (static_cast<size_t>(batch_row[i]) * p.num_q_heads + kv_head * pk.group + head) * dims + chunk * 8
             : p.q;
    cp_async_16(q_s + (chunk / 8) * T::ROWS * 64 + sw128(m, (chunk % 8) * 8), src, read);
  }
}

// The K/V copies of one prefix split: this thread copies KEYS_PER_THREAD keys
// of each 64-key tile (16 lanes a key at head_dim 128), through the group's
// block table, into 64-dim Sw128 slabs [SLABS][TILE_K][64] of a ring slot.
template <class T>
struct SplitCopies {
  static constexpr int KEYS_PER_THREAD = T::TILE_K * T::CHUNKS / T::NUM_THREADS;
  KvLookup lookup;  // the group's prefix blocks
  int begin;        // the split's first key
  int end;          // its end: set once the prefix length has been read

  // Prefix position of this thread's key i of `tile`.
  __device__ __forceinline__ int pos(int tile, int i) const {
    return begin + tile * T::TILE_K + (threadIdx.x + i * T::NUM_THREADS) / T::CHUNKS;
  }
  using Entries = EntriesAhead<KEYS_PER_THREAD>;
  // The block-table entries of this thread's keys of `tile` below `limit` (0 past it).
  __device__ __forceinline__ void read_entries(int tile, int limit, int block_shift, Entries& entries) const {
    entries.fetch(lookup, block_shift, pos(tile, 0), limit, [&](int i) { return pos(tile, i); });
  }
  // This thread's copies of `tile` into ring slot (k_dst, v_dst), zero-filled past `end`.
  __device__ __forceinline__ void copy(bf16* k_dst, bf16* v_dst, const AttentionParams& p, int block_shift, int tile,
                                       const Entries& entries) const {
    const int dims = p.kv.head_dim;
#pragma unroll
    for (int i = 0; i < KEYS_PER_THREAD; ++i) {
      const int c = threadIdx.x + i * T::NUM_THREADS;
      const int j = c / T::CHUNKS, chunk = c % T::CHUNKS;
      const int kv_pos = pos(tile, i);
      const bool in_range = kv_pos < end && chunk * 8 < dims;
      const size_t head_row =
          lookup.head_row_of_slot(KvLookup::slot(entries.entry[i], kv_pos, block_shift), p.kv.num_kv_heads);
      const size_t offset = in_range ? head_row * dims + chunk * 8 : 0;
      const int dst = (chunk / 8) * T::SLAB_ELEMS + sw128(j, (chunk % 8) * 8);
      cp_async_16(k_dst + dst, p.kv.k_cache + offset, in_range);
      cp_async_16(v_dst + dst, p.kv.v_cache + offset, in_range);
    }
  }
};

// Grid: (query tiles x splits, num_kv_heads, groups); blockIdx.x = split *
// num_query_tiles + query tile. Dynamic shared memory: T::smem_bytes().
//
// The key loop is pipelined the way FlashAttention-3 does it inside a
// warpgroup: the tensor core gets the next tile's S = Q K^T and this tile's
// O += P V back to back, and while they run the warps turn the next tile's
// scores into weights. So the softmax (exp2 on the CUDA cores) hides behind
// the products instead of leaving the tensor core idle between them. The
// cost: two tiles of state live at once (S of tile t + 1 and P of tile t), and
// O is rescaled one step late, after the product that adds to it has
// finished. On the H200 this made long prefixes 8-11% faster than the
// unpipelined loop (one product, wait, softmax, the other, wait); what bounds
// the loop now is the warps' own instructions: the copies' address arithmetic
// and the softmax (notes/07_cascade.md).
template <class T>
__global__ void __launch_bounds__(T::NUM_THREADS, 1)
    prefix_warpgroup_kernel(AttentionParams p, stage03::Packing pk, PrefixJob job) {
  constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K, STAGES = T::STAGES, SLABS = T::SLABS;
  constexpr int S_TILES = TILE_K / 8, O_TILES = HEAD_DIM / 8;
  unsigned char* raw = dynamic_smem<unsigned char>();
  bf16* k_s = reinterpret_cast<bf16*>(raw + (T::ALIGN - reinterpret_cast<uintptr_t>(raw) % T::ALIGN) % T::ALIGN);
  bf16* v_s = k_s + STAGES * T::KV_ELEMS;  // [STAGES][SLABS][TILE_K][64] Sw128, as k_s
  bf16* q_s = v_s + STAGES * T::KV_ELEMS;  // [SLABS][ROWS][64] Sw128
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t4 = lane % 4;
  const int split = blockIdx.x / job.num_query_tiles, query_tile = blockIdx.x % job.num_query_tiles;
  const int kv_head = blockIdx.y, grp = blockIdx.z;
  // A suffix pass launched as this kernel's dependent (cascade.cuh's
  // SuffixMergeAfterPrefix) may take SM slots as soon as every program here
  // has started: it walks its own keys meanwhile and waits for these partials
  // in its epilogue. Measured on the main case: 1.5 us per step less than
  // letting it start when these programs exit.
  allow_dependent_grid();
  using Entries = typename SplitCopies<T>::Entries;
  SplitCopies<T> copies{KvLookup(p, grp, kv_head), split * job.keys_per_split, 0};

  // The program's first round trip: every global load that needs no other
  // load's result is issued here, back to back: the group's token range and
  // prefix length, and the block-table entries of the ring's first STAGES
  // tiles. Read where their copies need them, they were a chain of round
  // trips (the group's range, then Q's gathered rows, then one per prologue
  // tile) before the first product. An entry is read wherever it lies in the
  // group's (padded) table row, which holds valid block ids throughout;
  // whether its key is copied is decided once the prefix length is known.
  const int tok0 = p.batch.query_start_loc[grp], tok_end = p.batch.query_start_loc[grp + 1];
  const int prefix_len = job.prefix_lens[grp];
  const int table_end = min(copies.begin + job.keys_per_split, p.batch.max_blocks_per_seq << pk.block_shift);
  Entries first_entries[STAGES];
#pragma unroll
  for (int t = 0; t < STAGES; ++t) copies.read_entries(t, table_end, pk.block_shift, first_entries[t]);
  const int group_tokens = tok_end - tok0;
  const PrefixTileRows rows{query_tile * T::ROWS, group_tokens};
  if ((rows.row0 >> pk.group_shift) >= group_tokens) return;  // the grid is sized for the largest group
  // The second: Q's gathered rows (their batch rows), then Q's copies.
  load_gathered_q<T>(q_s, p, pk, job, rows, tok0, kv_head);
  cp_async_commit();

  // This split's keys of the prefix; every query comes after the prefix, so all see all of them.
  copies.end = min(prefix_len, copies.begin + job.keys_per_split);
  const int num_tiles = copies.end > copies.begin ? (copies.end - copies.begin + TILE_K - 1) / TILE_K : 0;
  auto load_tile = [&](int tile, int slot, const Entries& entries) {
    copies.copy(k_s + slot * T::KV_ELEMS, v_s + slot * T::KV_ELEMS, p, pk.block_shift, tile, entries);
  };
  // Tiles 0 .. STAGES-2 in flight, with the entries read above. The loop
  // below waits for tile t + 1 at the top of step t, so it keeps its own
  // count of the ring's groups (CpAsyncRing's advance() waits for tile t).
  // It reads the entries of each later tile one step before its copies: read
  // in the same step, each entry is a global round trip that stalls the
  // copies (waits on global loads led the profile of that loop, and these are
  // its only global loads).
  static_assert(STAGES >= 3, "step t reads K of tile t + 1 and V of tile t while it refills a third slot");
  CpAsyncRing<STAGES>::prologue(num_tiles, [&](int tile, int slot) { load_tile(tile, slot, first_entries[tile]); });
  Entries next_entries = first_entries[STAGES - 1];  // of tile t + STAGES - 1 at step t

  const bf16* q_wg = q_s + (warp / 4) * 64 * 64;  // this warpgroup's 64 rows in each Q slab
  // Starts S = Q K^T of `tile` (64 rows x 64 keys per warpgroup, k-steps of 16 dims) as one group.
  auto start_scores = [&](float(&s)[S_TILES][4], int tile) {
    const bf16* k_tile = k_s + (tile % STAGES) * T::KV_ELEMS;
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    wgmma_pin(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < HEAD_DIM / 16; ++ks) {
      wgmma_ss_k_major(s, q_wg + (ks / 4) * T::ROWS * 64, (ks % 4) * 16, k_tile + (ks / 4) * T::SLAB_ELEMS,
                       (ks % 4) * 16);
    }
    wgmma_commit();
  };
  FragSoftmax<O_TILES> sm;
  sm.init();
  // Scores of `tile`, finished, to weights in place: raises m and l (not o:
  // alpha is returned for rescale_o).
  auto to_weights = [&](float(&s)[S_TILES][4], int tile, float(&alpha)[2]) {
    // Keys past the split's end score -inf: selects on every tile rather than
    // a branch around the last one (see the loop below).
    const int valid = copies.end - (copies.begin + tile * TILE_K);  // keys of this tile inside the split
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 8 * j + 2 * t4 + (e & 1) < valid ? s[j][e] : -INFINITY;
    }
    const bool moved = sm.raise_max_m_l(s, pk.scale_log2, alpha);
    sm.weights(s, pk.scale_log2);
    return moved;
  };
  // The weights as P's A fragments, straight from S's accumulators (as stage 03).
  auto pack_weights = [&](const float(&s)[S_TILES][4], uint32_t(&pa)[TILE_K / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < TILE_K / 16; ++kk) {
      pa[kk][0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };

  float s[S_TILES][4];
  uint32_t p_now[TILE_K / 16][4];  // P of the tile being added to O
  float alpha[2];
  // Starts O += P V of `tile` as one group, one 64-dim slab of V (and of O) per n-block.
  auto start_output = [&](int tile) {
    const bf16* v_tile = v_s + (tile % STAGES) * T::KV_ELEMS;
    wgmma_pin(p_now);  // P and the rescaled O are in their registers before the fence
    wgmma_pin(sm.o);
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < SLABS; ++h) {
      float(&o_slab)[8][4] = *reinterpret_cast<float(*)[8][4]>(&sm.o[8 * h]);
#pragma unroll
      for (int kk = 0; kk < TILE_K / 16; ++kk) wgmma_mn_major(o_slab, p_now[kk], v_tile + h * T::SLAB_ELEMS, 16 * kk);
    }
    wgmma_commit();
  };
  if (num_tiles > 0) {
    cp_async_wait<STAGES - 2>();  // Q and tile 0 have landed (for this thread) ...
    fence_async_smem();           // ... are handed to the tensor core's reads (another proxy) ...
    __syncthreads();              // ... and everyone's have.
    start_scores(s, 0);
    wgmma_wait<0>();
    wgmma_pin(s);
    to_weights(s, 0, alpha);  // o is still zero: nothing to rescale
    pack_weights(s, p_now);
  }
  // Every step but the last has a next tile. Nothing branches between a
  // step's first product and its last wait: ptxas tracks which wgmma group a
  // wait retires only within straight-line code. Across a branch it either
  // serializes every wgmma of the kernel (its warning C7514) or quietly waits
  // for both groups before the softmax, which is then not overlapped at all.
  for (int tile = 0; tile + 1 < num_tiles; ++tile) {
    // K of tile + 1 has landed for everyone, and everyone is done with the
    // slot of tile - 1 (its P V was waited for at the end of step tile - 1).
    cp_async_wait<STAGES - 3>();
    fence_async_smem();
    __syncthreads();
    start_scores(s, tile + 1);
    start_output(tile);
    // While both products run: the copies of tile + STAGES - 1 into the slot
    // that tile - 1 used, unconditionally (past the last tile they write
    // zeros to a slot nobody reads again) because of the rule above.
    load_tile(tile + STAGES - 1, (tile + STAGES - 1) % STAGES, next_entries);
    copies.read_entries(tile + STAGES, copies.end, pk.block_shift, next_entries);  // used a step later
    cp_async_commit();
    wgmma_wait<1>();  // the scores of tile + 1 (P V may still run)
    wgmma_pin(s);
    const bool moved = to_weights(s, tile + 1, alpha);
    wgmma_wait<0>();  // P V has finished: O may be rescaled and P's registers reused
    wgmma_pin(sm.o);
    wgmma_pin(p_now);
    if (moved) sm.rescale_o(alpha);
    pack_weights(s, p_now);
  }
  if (num_tiles > 0) {  // the last tile's P V (its V landed with its K)
    start_output(num_tiles - 1);
    wgmma_wait<0>();
    wgmma_pin(sm.o);
  }
  CpAsyncRing<STAGES>::drain();
  sm.sum_rows();

  const int g = lane / 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    int token, head;
    if (!rows.at(pk, warp * 16 + g + 8 * i, token, head)) continue;
    const size_t part_row = (static_cast<size_t>(split) * p.batch.num_tokens + tok0 + token) * p.num_q_heads +
                            kv_head * pk.group + head;
    stage04::store_partial_row(job.part_o, job.part_lse, part_row, p.kv.head_dim, sm.o, i, t4, sm.inv_l(i), sm.lse(i));
  }
}

// The warpgroup tile for the largest group: one warpgroup when its rows fit
// 64, else two (128 rows, one program per SM).
inline int warpgroups_for(int group_rows) { return group_rows <= 64 ? 1 : 2; }

// Whether the warpgroup prefix pass serves this batch: bf16 caches, rows of up to 128 values.
inline bool warpgroup_prefix_serves(const AttentionParams& p) {
  return p.kv.format == KvFormat::bf16 && stage03::tile_head_dim(p.kv.head_dim) <= 128;
}

// pg: the gathered batch, q left as the batch's queries (cascade.cuh's gathered_batch).
template <int HEAD_DIM>
void launch_prefix_warpgroups(const AttentionParams& pg, const stage03::Packing& pk, const Cascade& c,
                              cudaStream_t stream) {
  auto run = [&]<int WARPGROUPS>() {
    using T = WarpgroupTile<HEAD_DIM, WARPGROUPS>;
    PrefixJob job{c.gather_rows.data(), c.prefix_lens.data(), const_cast<float*>(c.part_o.data()),
                  const_cast<float*>(c.part_lse.data()), stage03::query_tiles(c.max_group_tokens, pk, T::ROWS),
                  c.prefix_keys_per_split};
    PA_REQUIRE(job.keys_per_split % T::TILE_K == 0, "stage 07: the prefix splits must hold whole 64-key tiles");
    launch(prefix_warpgroup_kernel<T>, dim3(job.num_query_tiles * c.num_prefix_splits, pg.kv.num_kv_heads, c.num_groups),
           dim3(T::NUM_THREADS), T::smem_bytes(), stream, pg, pk, job);
  };
  if (warpgroups_for(c.max_group_tokens << pk.group_shift) == 1) {
    run.template operator()<1>();
  } else {
    run.template operator()<2>();
  }
}

// SuffixMerge for the suffix pass that follows the warpgroup prefix pass in
// its stream (going further, forward_warpgroup): started as that kernel's
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
// this file): stage 04's splits over the request's own keys, each
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
// epilogue, after the warpgroup prefix pass, rather than run beside it with a
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

// Whether a planned cascade runs its suffix pass beside the warpgroup prefix
// pass (a second stream, then the merge kernel) rather than after it: decode
// batches for which the fused merge does not pay. A function of the plan
// alone, so engine::plan_cascade makes the second stream exactly where a run
// will use it.
inline bool suffix_beside_prefix(const AttentionParams& p, const Cascade& c) {
  const bool decode_only = p.batch.decode_only || p.batch.max_query_len <= 1;
  return c.num_groups > 0 && c.warpgroup_prefix && decode_only &&
         !fused_merge_pays(p, c.suffix_splits, c.num_prefix_splits, c.num_sms);
}


// Going further: the warpgroup prefix pass (this file), no gather,
// then the suffix pass as its dependent launch, merging the prefix partials in
// its epilogue (SuffixMergeAfterPrefix). Decode batches for which that merge
// does not pay (suffix_beside_prefix) run their suffix pass on the plan's
// second stream beside the prefix pass instead, as partials in the plan, and
// one merge kernel joins both. Launches only: the plan made everything.
// launch_prefix(stream): the prefix pass's launches (this file's kernel by
// default; the engine passes stage 09's tile where the plan was made for it).
template <int HEAD_DIM, class Tiles, class Adapt, class PrefixLaunch>
void forward_warpgroup(const AttentionParams& p, const Packing& pk, const Cascade& c, cudaStream_t stream,
                       const Adapt& adapt, const PrefixLaunch& launch_prefix) {
  if (!suffix_beside_prefix(p, c)) {
    launch_prefix(stream);
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
  launch_prefix(stream);  // first, so that its large programs find room

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


// The cost model of stage 07 (cost_model.cuh) with this pass's figures, fitted
// on the H200 (notes/07_cascade.md). Its decode steps either run the suffix
// pass after the prefix pass with the merge in its epilogue (fused_merge_pays),
// or beside it and then a merge kernel: the model times the one it launches.
struct WarpgroupCosts {
  double flop_per_s;          // wgmma in 64/128-row tiles, all SMs
  double row_key_s;           // one key through one program, per tile row
  double start_s;             // per wave: Q's gathered load, the ring's fill
  double join_s;              // the second stream's join and the merge kernel
  double split_merge_s;       // per prefix split, in the merge kernel
  double fused_merge_wave_s;  // per full wave of suffix programs waiting for the prefix partials
};
inline constexpr WarpgroupCosts H200_WARPGROUP_COSTS{2.6e14, 0.05e-9, 2e-6, 7e-6, 0.2e-6, 5e-6};

// The tile the pass runs for a group's rows: 64 rows, two per SM, or 128, one per SM.
inline TileShape warpgroup_tile(int group_rows) {
  return warpgroups_for(group_rows) == 1 ? TileShape{64, 2} : TileShape{128, 1};
}

// tile: the prefix pass's tile for a group's rows (this file's, or the engine's stage 09 tile).
template <TileShape (*tile)(int group_rows) = warpgroup_tile>
Path choose_path_warpgroup(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len,
                           int num_sms) {
  if (members < 2 || queries < 1) return Path::plain;  // a group of one reads its prefix once either way
  const stage07::PassTimes t{p, members, queries, num_sms};
  const WarpgroupCosts& w = H200_WARPGROUP_COSTS;
  const double plain = t.own_keys(prefix_len + suffix_len + queries, false);
  const stage07::PrefixSplitPlan pre =
      stage07::prefix_split_plan(p, members * queries, prefix_len, 1, num_sms, tile);
  const double prefix_pass = t.prefix_pass(pre, prefix_len, w.row_key_s * pre.tile.rows, w.flop_per_s, w.start_s);
  const double merge_prefix = pre.num_splits * w.split_merge_s;
  double cascade = prefix_pass + t.own_keys(suffix_len + queries, false) + merge_prefix;  // no gather launch
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

// What stage07::plan needs to plan groups for this pass (engine::plan_cascade passes it).
inline constexpr stage07::PrefixPassModel WARPGROUP_PREFIX_PASS{warpgroup_prefix_serves, warpgroup_tile,
                                                                choose_path_warpgroup<>};

// A planned cascade with tile family Tiles: this pass where the plan was made
// for it (WARPGROUP: the family is bf16's, so the kernel is instantiated only
// there), else stage 07's own passes.
template <class Tiles, bool WARPGROUP, class Adapt = stage03::SameSlice>
void forward_cascade(const AttentionParams& p, const Packing& pk, const Cascade& c, cudaStream_t stream,
                     const Adapt& adapt = {}) {
  if constexpr (WARPGROUP) {
    if (c.num_groups > 0 && c.warpgroup_prefix && warpgroup_prefix_serves(p)) {
      return stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() {
        if constexpr (HEAD_DIM <= 128) {
          forward_warpgroup<HEAD_DIM, Tiles>(p, pk, c, stream, adapt, [&](cudaStream_t s) {
            launch_prefix_warpgroups<HEAD_DIM>(gathered_batch(p, c), pk, c, s);
          });
        }
      });
    }
  }
  stage07::forward_with<Tiles>(p, pk, c, stream, adapt);
}

}  // namespace
}  // namespace pa::further
