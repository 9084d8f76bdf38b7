// Stage 09's kernel: stage 03's 128-row prefill tile on Hopper's machinery.
//
// The tile is stage 03's: a program owns 128 rows (192 at head_dim 64, see
// HopperTile) of (token, query head) pairs
// of one KV head's group (stage 03's QueryTile and its causal mask), reads the
// keys of its causal range through the block table, and writes final rows. What
// changes is who does what, and how the bytes move:
//
//   warpgroup 0, the producer: its four warps issue TMA copies (common/tma.cuh)
//     of the K and V tiles into a ring of shared-memory slots, one copy per
//     cache block and 64-dim slab, landing in the 128-byte swizzle that wgmma reads.
//     It never computes: it gives most of its registers to the consumers
//     (setmaxnreg) and spends its time waiting for free slots.
//   warpgroups 1 .. CONSUMERS, the consumers: 64 rows each (two, three at
//     head_dim 64). Each computes S = Q K^T
//     and O += P V with wgmma (the tensor core reads Q, K and V from shared
//     memory itself; P is an A fragment in registers), and the online softmax
//     between them, as stage 03 does per warp.
//
// The ring's protocol is two mbarriers per slot and operand (common/mbarrier.cuh):
//   full[s]:  each producer warp announces its copies' bytes (arrive_expect_tx),
//             the copies complete them; consumers wait on its phase;
//   empty[s]: each consumer warp arrives once its products no longer read the
//             slot; the producer waits on it before refilling.
// Tile t uses slot t % STAGES in round t / STAGES; round r waits for parity r & 1
// of full and (r & 1) ^ 1 of empty (a fresh barrier's "previous" phase counts as
// complete, so the first round's refill does not wait).
//
// Two schedules hide the softmax behind the tensor core:
//   - inside a warpgroup (FlashAttention-3's intra-warpgroup overlap): step t issues
//     S of tile t + 1 and P V of tile t back to back, and turns the scores of
//     t + 1 into weights while both run;
//   - between the consumer warpgroups (ping-pong): a warpgroup issues its
//     products only on its turn, then hands the turn to the next one (in a
//     ring), so one's softmax runs while the others' products hold the tensor
//     core. The turn is a named barrier per warpgroup
//     (common/named_barrier.cuh): its owner waits on it (bar.sync), the one
//     before it in the ring arrives on it (bar.arrive).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/attention_params.h"
#include "common/check.h"
#include "common/cuda_compat.cuh"
#include "common/kv_lookup.cuh"
#include "common/launch.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/todo.cuh"
#include "common/wgmma.cuh"
#include "common/wgmma_wide.cuh"
#include "solutions/03_gqa_packing/gqa_packing.cuh"

namespace pa::stage09 {
namespace {

using stage03::QueryTile;

// CONSUMERS warpgroups x 64 rows, K/V tiles of TILE_K keys in 64-dim Sw128 slabs.
template <int HEAD_DIM_>
struct HopperTile {
  static constexpr int HEAD_DIM = HEAD_DIM_;
  // At head_dim 64 a step's two products are half as long as at 128, but its
  // softmax (an exp2 per score, on the SM's 16 exp units a clock) is as long:
  // a third consumer keeps the tensor core busy while two of them turn scores
  // into weights. Its registers fit: S, P and O of 64 dims are 128 a thread.
  static constexpr int CONSUMERS = HEAD_DIM == 64 ? 3 : 2;
  static constexpr int ROWS = 64 * CONSUMERS, NUM_THREADS = 128 * (1 + CONSUMERS);
  // Warp specialisation's register split (setmaxnreg): the producer keeps few,
  // the consumers take the rest of the SM's 64K (24 x 128 + 2 x 240 x 128,
  // 32 x 128 + 3 x 160 x 128).
  static constexpr int PRODUCER_REGS = CONSUMERS == 2 ? 24 : 32, CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;
  static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= 64 * 1024, "the register file is 64K");
  // S of 64 rows x TILE_K keys, P and O (64 x HEAD_DIM) live in a consumer's
  // registers together, twice over for S during the pipelined step: 128 keys
  // fit beside O up to head_dim 128, 64 beside head_dim 256's 128 registers of O.
  static constexpr int TILE_K = HEAD_DIM == 256 ? 64 : 128;
  static constexpr int SLABS = HEAD_DIM / 64;
  static constexpr int KV_ELEMS = SLABS * TILE_K * 64;  // one K or V tile: [SLABS][TILE_K][64]
  static constexpr int Q_ELEMS = SLABS * ROWS * 64;     // Q: [SLABS][ROWS][64]
  // The bytes one fill of a slot announces (arrive_expect_tx): what its copies
  // deliver. Every box of a tile is copied, the ones past the range's end too
  // (as zeros), so that this is one number.
  static constexpr uint32_t tile_bytes() {
    //@ TODO 2: the bytes the copies of one K (or V) tile deliver to its full barrier
    return sizeof(bf16) * KV_ELEMS;
    //@ skeleton
    //@ return 0;  // placeholder: a phase that completes before its bytes land
    //@ end
  }
  // Ring slots per operand: as many as the 227 KB of shared memory hold with Q.
  static constexpr int STAGES = HEAD_DIM == 64 ? 4 : 2;
  static constexpr size_t ALIGN = 1024;  // the swizzle's 8-row atoms
  static constexpr int NUM_BARRIERS = 4 * STAGES + CONSUMERS;
  static constexpr size_t smem_bytes() {
    return ALIGN + sizeof(bf16) * (Q_ELEMS + 2 * STAGES * KV_ELEMS) + sizeof(Mbarrier) * NUM_BARRIERS;
  }
  static_assert(smem_bytes() <= 227 * 1024, "one program per SM: at most 227 KB of shared memory");
};

// The ring's and the schedule's barriers, after the tiles in shared memory.
template <class T>
struct Barriers {
  Mbarrier full_k[T::STAGES], full_v[T::STAGES];    // the slot's tile has landed
  Mbarrier empty_k[T::STAGES], empty_v[T::STAGES];  // every consumer warp is done with the slot
  Mbarrier q_ready[T::CONSUMERS];                    // consumer c's 64 rows of Q have landed

  // One thread, before the program's last __syncthreads: each barrier's arrival
  // count. full_arrivals: the producer's arrivals per fill (its Producer's).
  __device__ void init(int full_arrivals) {
    for (int s = 0; s < T::STAGES; ++s) {
      full_k[s].init(full_arrivals);
      full_v[s].init(full_arrivals);
      empty_k[s].init(128 * T::CONSUMERS);  // every consumer thread (see release)
      empty_v[s].init(128 * T::CONSUMERS);
    }
    for (int c = 0; c < T::CONSUMERS; ++c) {
      q_ready[c].init(128);  // every thread of consumer c, once its copies of Q landed
    }
    fence_mbarrier_init();
  }
};

// The tensor maps over the paged pool, made on the host per launch: K and V as
// [slots][num_kv_heads][head_dim] with a box of one block's rows (at most
// TILE_K) x one head x 64 dims, and the same with boxes of 1, 2, 4, .., 64
// rows, for the box that holds the range's end (copy_rows: its rows up to the
// end from its slots, the rest from outside the tensor, which TMA fills with
// zeros). Only the ones below the block's box are made: the others are never read.
constexpr int ROW_MAPS = 7;  // rows 2^0 .. 2^6: any count below a 128-key tile
struct alignas(64) TmaMaps {
  TmaMap k_box, v_box;
  TmaMap k_rows[ROW_MAPS], v_rows[ROW_MAPS];
};

// Rows [0, count) of one 64-dim slab (dims x .., KV head `head`) of a box ->
// dst, from slot `first` on, or zeros when first < 0 (every piece then comes
// from outside the tensor): one copy per binary digit of count, 64 rows, then
// 32, .., 1, so that a part of a box is at most ROW_MAPS copies, not count.
// (count < 128; rows: the kernel's __grid_constant__ maps themselves.)
__device__ __forceinline__ void copy_rows(bf16* dst, const TmaMap (&rows)[ROW_MAPS], int x, int head, int first,
                                          int count, Mbarrier& full) {
  int done = 0;
#pragma unroll
  for (int j = ROW_MAPS - 1; j >= 0; --j) {
    if (count & (1 << j)) {
      tma_load_3d(dst + done * 64, rows[j], x, head, first < 0 ? -(1 << j) : first + done, full);
      done += 1 << j;
    }
  }
}

// Tile t's ring slot, and the parities its waits name: round r = t / STAGES
// waits for the phase of parity r & 1 of the slot's full barrier (the r-th fill
// completes phase r), and for parity (r & 1) ^ 1 of its empty barrier (the
// consumers' release of round r - 1; round 0's "previous" phase counts as
// complete on a fresh barrier, so the first fill does not wait).
// Host and device: the launcher checks it on the host first (check_protocol),
// because a wrong parity does not fail on a GPU, it hangs.
template <int STAGES>
struct RingPos {
  int slot;
  uint32_t full_parity, empty_parity;
  __host__ __device__ __forceinline__ explicit RingPos(int t) {
    //@ TODO 1: tile t's slot and the parities of its two waits (full: the round's, empty: its complement)
    slot = t % STAGES;
    full_parity = static_cast<uint32_t>(t / STAGES) & 1u;
    empty_parity = full_parity ^ 1u;
    //@ skeleton
    //@ (void)t;
    //@ slot = 0, full_parity = 0, empty_parity = 0;  // placeholder: one slot, and a first fill that waits forever
    //@ end
  }
};

// The producer warpgroup's four warps fill the ring with tensor copies.
constexpr int TMA_WARPS = 4;

// The producer: tiles 0 .. num_tiles - 1 of keys [kv_begin, kv_end) into the
// ring, K then V of each (kv_begin: a multiple of TILE_K, so that no box
// straddles two blocks); tile t takes the ring's position first + t (first: 0
// in this stage, where a program runs one query tile). A tile is boxes x SLABS
// copies, copy o = box o / SLABS (one block of rows, or TILE_K rows of a longer
// block) of slab o % SLABS.
// Copy o goes to warp o % TMA_WARPS: a warp issues its tensor copies one after
// another whatever lane holds them (each moves its coordinates to the uniform
// datapath first), so four warps issue a tile four times as fast as one. Each
// warp announces the bytes of its own copies (lane 0's arrive_expect_tx: four
// arrivals a fill). Every box of a tile is copied, past the end too, so that
// every tile is tile_bytes(): a box wholly past the end is read from outside
// the tensor (zeros), the box that holds the end in pieces (copy_rows). The block table
// is read a tile ahead, so its latency hides behind the copies of the tile before.
template <class T>
__device__ __forceinline__ void produce(const TmaMaps& maps, const Packing& pk, const KvLookup& lookup,
                                        const KeyRange& keys, int num_tiles, bf16* k_s, bf16* v_s, Barriers<T>& bar,
                                        int first) {
  constexpr int TILE_K = T::TILE_K, SLABS = T::SLABS;
  static_assert(TILE_K <= 1 << ROW_MAPS, "copy_rows: a part of a box is below 2^ROW_MAPS rows");
  constexpr int COPIES_PER_LANE = (TILE_K * SLABS + 32 * TMA_WARPS - 1) / (32 * TMA_WARPS);  // block size 1: most copies
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int block = 1 << pk.block_shift;
  const int box_rows = min(block, TILE_K), boxes = TILE_K / box_rows, copies = boxes * SLABS;
  const int kv_end = keys.end;
  // This warp's copies and the bytes they deliver to a fill.
  const int warp_copies = copies > w ? (copies - w + TMA_WARPS - 1) / TMA_WARPS : 0;
  const uint32_t warp_bytes = static_cast<uint32_t>(warp_copies) * (T::tile_bytes() / copies);
  auto copy_of = [&](int i) { return w + TMA_WARPS * (lane + 32 * i); };  // this lane's i-th copy
  // The slot rows of this lane's copies in tile t: -1 past the end, the first
  // slot of the box otherwise (read once, for K and for V).
  auto rows_of = [&](int t, int (&row)[COPIES_PER_LANE]) {
#pragma unroll
    for (int i = 0; i < COPIES_PER_LANE; ++i) {
      const int o = copy_of(i), k0 = keys.begin + t * TILE_K + (o / SLABS) * box_rows;
      row[i] = o < copies && k0 < kv_end ? static_cast<int>(KvLookup::slot(lookup.entry(k0, pk.block_shift), k0,
                                                                             pk.block_shift))
                                         : -1;
    }
  };
  int row[COPIES_PER_LANE], next[COPIES_PER_LANE];
  rows_of(0, row);
  for (int t = 0; t < num_tiles; ++t) {
    const RingPos<T::STAGES> pos(first + t);
    if (t + 1 < num_tiles) rows_of(t + 1, next);
#pragma unroll
    for (int which = 0; which < 2; ++which) {  // K, then V
      Mbarrier& empty = which == 0 ? bar.empty_k[pos.slot] : bar.empty_v[pos.slot];
      Mbarrier& full = which == 0 ? bar.full_k[pos.slot] : bar.full_v[pos.slot];
      const TmaMap& box_map = which == 0 ? maps.k_box : maps.v_box;
      const TmaMap(&row_maps)[ROW_MAPS] = which == 0 ? maps.k_rows : maps.v_rows;
      bf16* tile = (which == 0 ? k_s : v_s) + pos.slot * T::KV_ELEMS;  // [SLABS][TILE_K][64]
      empty.wait(pos.empty_parity);
      if (lane == 0) full.arrive_expect_tx(warp_bytes);
      __syncwarp();
#pragma unroll
      for (int i = 0; i < COPIES_PER_LANE; ++i) {
        const int o = copy_of(i), b = o / SLABS, h = o % SLABS, k0 = keys.begin + t * TILE_K + b * box_rows;
        if (o >= copies) break;
        bf16* dst = tile + h * TILE_K * 64 + b * box_rows * 64;
        //@ TODO 3: copy box b of slab h: whole when it ends at or before kv_end (the range's end), from outside the tensor (zeros) when it lies wholly past it, and when it holds the end, its rows before kv_end from its slots and the rest as zeros (copy_rows, twice)
        if (k0 + box_rows <= kv_end || row[i] < 0) {
          tma_load_3d(dst, box_map, 64 * h, lookup.kv_head, row[i] < 0 ? -box_rows : row[i], full);
        } else {
          const int n = kv_end - k0;  // 1 .. box_rows - 1 rows before the end
          copy_rows(dst, row_maps, 64 * h, lookup.kv_head, row[i], n, full);
          copy_rows(dst + n * 64, row_maps, 64 * h, lookup.kv_head, -1, box_rows - n, full);
        }
        //@ skeleton
        //@ (void)row_maps, (void)k0;
        //@ if (t == 0 && o == 0) PA_TODO(3);
        //@ tma_load_3d(dst, box_map, 64 * h, lookup.kv_head, max(row[i], 0), full);  // placeholder: every box whole, slot 0 past the end
        //@ end
      }
    }
#pragma unroll
    for (int i = 0; i < COPIES_PER_LANE; ++i) row[i] = next[i];
  }
}

// Who fills the ring, as a kernel parameter: this stage's is the TMA warps above
// (the engine times another way of filling the same slots against it).
struct TmaProducer {
  static constexpr int WARPS = TMA_WARPS;          // warps of the producer warpgroup that fill
  static constexpr int FULL_ARRIVALS = TMA_WARPS;  // each warp's arrive_expect_tx; the copies complete the bytes
  template <class T>
  __device__ __forceinline__ static void fill(const TmaMaps& maps, const AttentionParams&, const Packing& pk,
                                              const KvLookup& lookup, const KeyRange& keys, int num_tiles, bf16* k_s,
                                              bf16* v_s, Barriers<T>& bar, int first) {
    produce<T>(maps, pk, lookup, keys, num_tiles, k_s, v_s, bar, first);
  }
  // A consumer's step after its wait on a full barrier: tensor copies write
  // through the async proxy that wgmma reads, so there is nothing to order.
  __device__ __forceinline__ static void landed() {}
};

// Q's 64 rows of consumer c -> its rows of the Sw128 slabs [SLABS][ROWS][64],
// by cp.async (a tile's rows are not one box of q when the group is padded).
// Rows that are not real and dims past head_dim are zeros.
template <class T>
__device__ __forceinline__ void load_q_rows(bf16* q_s, const AttentionParams& p, const Packing& pk,
                                            const QueryTile& qt, int c) {
  constexpr int CHUNKS = T::HEAD_DIM / 8;
  const int dims = p.kv.head_dim;
  for (int i = threadIdx.x % 128; i < 64 * CHUNKS; i += 128) {
    const int m = 64 * c + i / CHUNKS, chunk = i % CHUNKS;
    const QueryTile::Row row = qt.row(pk, m);
    const bool read = row.real && chunk * 8 < dims;
    const bf16* src = read ? p.q + qt.q_row(p, pk, row) * dims + chunk * 8 : p.q;
    cp_async_16(q_s + (chunk / 8) * T::ROWS * 64 + sw128(m, (chunk % 8) * 8), src, read);
  }
  cp_async_commit();
}

// The consumers' turn barriers: named barriers TURN_BARRIER + c (0 is __syncthreads').
constexpr int TURN_BARRIER = 1;

// A program's shared memory: Q, the ring's K and V slots, then its barriers.
template <class T>
struct SharedTiles {
  bf16* q_s;  // [SLABS][ROWS][64] Sw128
  bf16* k_s;  // [STAGES][SLABS][TILE_K][64] Sw128
  bf16* v_s;  // [STAGES][SLABS][TILE_K][64] Sw128
  Barriers<T>* bar;
};
template <class T>
__device__ __forceinline__ SharedTiles<T> shared_tiles() {
  unsigned char* raw = dynamic_smem<unsigned char>();
  SharedTiles<T> sh;
  sh.q_s = reinterpret_cast<bf16*>(raw + (T::ALIGN - reinterpret_cast<uintptr_t>(raw) % T::ALIGN) % T::ALIGN);
  sh.k_s = sh.q_s + T::Q_ELEMS;
  sh.v_s = sh.k_s + T::STAGES * T::KV_ELEMS;
  sh.bar = reinterpret_cast<Barriers<T>*>(sh.v_s + T::STAGES * T::KV_ELEMS);
  return sh;
}

// The warpgroup index through a shuffle from lane 0: the compiler then knows it
// is one value for the warp and keeps what derives from it, the products'
// descriptors, in uniform registers (from threadIdx.x, it moves each
// descriptor from a thread's registers to uniform ones before every product).
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
}

// The tile's keys: the Slice's part of its causal range [0, position of its
// last query + 1) (the whole range in this stage), and their TILE_K-key tiles.
template <Slice S>
__device__ __forceinline__ KeyRange tile_keys(const S& slice, const QueryTile& qt, const Packing& pk) {
  return slice.key_range(0, stage03::warp_keys(qt, pk, 0).tile_kv_end);
}
template <class T>
__device__ __forceinline__ int key_tiles(const KeyRange& keys) {
  return keys.end > keys.begin ? (keys.end - keys.begin + T::TILE_K - 1) / T::TILE_K : 0;
}

// Rows 16 row_warp + g and + 8 of the tile (stage 03's warp index) with the
// state sm: only real rows are stored (final out and lse, or a partial).
template <Slice S, class State>
__device__ __forceinline__ void store_rows(const AttentionParams& p, const Packing& pk, const S& slice,
                                           const QueryTile& qt, int row_warp, const State& sm) {
  const int g = threadIdx.x % 32 / 4, t4 = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const QueryTile::Row row = qt.row(pk, 16 * row_warp + g + 8 * i);
    if (!row.real) continue;
    slice.store_row(p, qt.q_row(p, pk, row), sm.o, i, t4, sm.inv_l(i), sm.lse(i));
  }
}

// An empty range (a split past a shorter prefix): empty rows, no barrier. Consumers only.
template <class T, Slice S>
__device__ __forceinline__ void store_empty_rows(const AttentionParams& p, const Packing& pk, const S& slice,
                                                 const QueryTile& qt, int c) {
  FragSoftmax<T::HEAD_DIM / 8> empty;
  empty.init();
  store_rows(p, pk, slice, qt, 4 * c + threadIdx.x / 32 % 4, empty);
}

// The ping-pong, a ring 0, 1, .., CONSUMERS - 1, 0, ..: consumer c's k-th
// products wait for the k-th hand-over of the consumer before it. Named
// barrier TURN + c completes with 256 arrivals: consumer c's 128 threads
// waiting on it and its predecessor's 128 arriving. Consumer 0's first turn is
// handed over before the first tile, by the last consumer, and consumer 0 takes
// one more turn after its last products, so that no arrival is left over.
__device__ __forceinline__ void take_turn(int c) {
  named_barrier_sync(TURN_BARRIER + c, 256);
}
template <class T>
__device__ __forceinline__ void hand_over(int c) {
  // The next consumer in the ring (two: the other one, 1 - c, the form whose
  // schedule ptxas makes fastest at head_dim 128: notes/09_hopper_pipeline.md).
  const int next_consumer = T::CONSUMERS == 2 ? 1 - c : (c + 1) % T::CONSUMERS;
  named_barrier_arrive(TURN_BARRIER + next_consumer, 256);
}

// The weights as P's A fragments, straight from S's accumulators (as stage 03):
// s [TILE_K / 8][4] fp32 -> pa [TILE_K / 16][4] bf16 pairs.
template <int TILE_K>
__device__ __forceinline__ void pack_weights(const float (&s)[TILE_K / 8][4], uint32_t (&pa)[TILE_K / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < TILE_K / 16; ++kk) {
    pa[kk][0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// Consumer c's work on one query tile of num_tiles key tiles (num_tiles >= 1):
// its 64 rows of Q, the products and softmax of every key tile, its rows
// stored. Key tile t is the ring's position first + t, and Q lands on phase
// parity q_parity of q_ready[c] (first = q_parity = 0 in this stage: a program
// runs one query tile). Between its turns' first and last it is in the ping-pong
// ring (take_turn / hand_over): the caller hands consumer 0 its first turn and
// takes consumer 0's last one.
template <class T, class Producer, Slice S>
__device__ __forceinline__ void consume(const AttentionParams& p, const Packing& pk, const S& slice,
                                        const QueryTile& qt, const KeyRange& keys, int num_tiles,
                                        const SharedTiles<T>& sh, int c, int first, uint32_t q_parity) {
  constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K;
  constexpr int S_TILES = TILE_K / 8, O_TILES = HEAD_DIM / 8;
  Barriers<T>& bar = *sh.bar;
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int row_warp = 4 * c + warp;  // stage 03's warp index: rows 16 row_warp .. + 15 of the tile
  auto ring = [&](int tile) { return RingPos<T::STAGES>(first + tile); };

  load_q_rows<T>(sh.q_s, p, pk, qt, c);
  cp_async_wait<0>();
  fence_async_smem();  // this thread's Q is written; wgmma reads it through the async proxy
  bar.q_ready[c].arrive();
  bar.q_ready[c].wait(q_parity);

  // The causal limits of this lane's rows g and g + 8 (stage 03's mask).
  int q_pos[2];
  stage03::row_positions(qt, pk, row_warp, g, q_pos);
  const WarpKeys wk = stage03::warp_keys(qt, pk, row_warp);
  const stage03::CausalMask::Warp mask = stage03::CausalMask::for_warp(p, q_pos, wk, keys.end);

  // The products' operands, made once: this consumer's 64 rows of each Q slab,
  // and the first ring slot of K and of V (a product moves them: slot, slab, k-step).
  const Sw128Operand q_op = Sw128Operand::k_major(sh.q_s).rows(64 * c);
  const Sw128Operand k_op = Sw128Operand::k_major(sh.k_s), v_op = Sw128Operand::n_major(sh.v_s, TILE_K * 64);
  // Starts S = Q K^T of `tile` (64 rows x TILE_K keys, k-steps of 16 dims) as one group.
  auto start_scores = [&](float(&s)[S_TILES][4], int tile) {
    const Sw128Operand k_tile = k_op.rows(ring(tile).slot * (T::KV_ELEMS / 64));
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    wgmma_pin(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < HEAD_DIM / 16; ++ks) {
      wgmma_ss_k_major_n<TILE_K>(s, q_op.rows((ks / 4) * T::ROWS).cols((ks % 4) * 16),
                                 k_tile.rows((ks / 4) * TILE_K).cols((ks % 4) * 16));
    }
    wgmma_commit();
  };
  FragSoftmax<O_TILES> sm;
  sm.init();
  // Finished scores of `tile` to weights in place; raises m and l (o waits for
  // the product that adds to it: alpha is returned for rescale_o). Masked keys
  // by select, on the tiles that cross the warpgroup's diagonal (mask_keys, a
  // constant of each call: see the loops below for why there is no branch).
  auto to_weights = [&](bool mask_keys, float(&s)[S_TILES][4], int tile, float(&alpha)[2]) {
    const int kv_start = keys.begin + tile * TILE_K;
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (mask_keys) s[j][e] = mask.masked(kv_start + 8 * j + 2 * t4 + (e & 1), e >> 1) ? -INFINITY : s[j][e];
      }
    }
    const bool moved = sm.raise_max_m_l(s, pk.scale_log2, alpha);
    sm.weights(s, pk.scale_log2);
    return moved;
  };
  float s[S_TILES][4];
  uint32_t p_now[TILE_K / 16][4];  // P of the tile being added to O
  float alpha[2];
  // Starts O += P V of `tile` as one group: each 16-key slice of P against all
  // HEAD_DIM columns of V in one product.
  auto start_output = [&](int tile) {
    const Sw128Operand v_tile = v_op.rows(ring(tile).slot * (T::KV_ELEMS / 64));
    wgmma_pin(p_now);  // P and the rescaled O are in their registers before the fence
    wgmma_pin(sm.o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < TILE_K / 16; ++kk) wgmma_rs_n_major<HEAD_DIM>(sm.o, p_now[kk], v_tile.rows(16 * kk));
    wgmma_commit();
  };
  // A consumer lets go of a slot once its products have read it, and hands
  // the turn over once its products are issued. Every thread arrives: these
  // sit between a step's first product and its last wait, where a branch (one
  // elected thread) would cost the overlap (see the loop below).
  auto release = [&](Mbarrier& empty) { empty.arrive(); };
  auto wait_full = [&](Mbarrier& full, uint32_t parity) {
    full.wait(parity);
    Producer::landed();
  };

  const RingPos<T::STAGES> first_pos = ring(0);
  wait_full(bar.full_k[first_pos.slot], first_pos.full_parity);
  take_turn(c);
  start_scores(s, 0);
  hand_over<T>(c);
  wgmma_wait<0>();
  wgmma_pin(s);
  release(bar.empty_k[first_pos.slot]);
  to_weights(true, s, 0, alpha);  // o is still zero: nothing to rescale
  pack_weights<TILE_K>(s, p_now);
  // Every wait on a barrier (a loop) comes before a step's first product: ptxas
  // tracks which wgmma group a wait retires only within straight-line code, and
  // across a branch it serializes the products or waits for both groups before
  // the softmax (going_further/README.md, the pitfalls of asynchronous MMA).
  // One step: tile's P V and the scores of tile + 1.
  auto step = [&](bool mask_keys, int tile) {
    const RingPos<T::STAGES> now = ring(tile), next = ring(tile + 1);
    wait_full(bar.full_k[next.slot], next.full_parity);
    wait_full(bar.full_v[now.slot], now.full_parity);
    take_turn(c);
    start_scores(s, tile + 1);
    start_output(tile);
    hand_over<T>(c);
    wgmma_wait<1>();  // the scores of tile + 1 (P V may still run)
    wgmma_pin(s);
    const bool moved = to_weights(mask_keys, s, tile + 1, alpha);
    wgmma_wait<0>();  // P V has finished: O may be rescaled and P's registers reused
    wgmma_pin(sm.o);
    wgmma_pin(p_now);
    release(bar.empty_k[next.slot]);
    release(bar.empty_v[now.slot]);
    //@ TODO 4: the rescale between the two products: O, to which P V of this tile has just been added, takes the factors of tile + 1's new maxima (only where a row's max moved)
    if (moved) sm.rescale_o(alpha);
    //@ skeleton
    //@ (void)moved;
    //@ if (threadIdx.x % 128 == 0 && tile == 0) PA_TODO(4);  // placeholder: O keeps the old scale
    //@ end
    pack_weights<TILE_K>(s, p_now);
  };
  // Tiles below masked_from lie wholly under the diagonal of the warpgroup's
  // oldest row: no key of theirs is masked for any of its 64 rows.
  const int unmasked =
      stage03::CausalMask::for_warp(p, q_pos, stage03::warp_keys(qt, pk, 4 * c), keys.end).unmasked_end;
  const int masked_from = max(1, min(num_tiles, (unmasked - keys.begin) / TILE_K));
  int tile = 0;
  for (; tile + 1 < masked_from; ++tile) step(false, tile);
  for (; tile + 1 < num_tiles; ++tile) step(true, tile);
  {  // the last tile's P V
    const RingPos<T::STAGES> last = ring(num_tiles - 1);
    wait_full(bar.full_v[last.slot], last.full_parity);
    take_turn(c);
    start_output(num_tiles - 1);
    hand_over<T>(c);
    wgmma_wait<0>();
    wgmma_pin(sm.o);
    release(bar.empty_v[last.slot]);  // the ring goes on where a program runs another query tile
  }
  sm.sum_rows();
  store_rows(p, pk, slice, qt, row_warp, sm);
}

// Grid: (query tiles, num_kv_heads, num_requests), as stage 03's. Dynamic shared
// memory: T::smem_bytes(). maps: a grid constant, so that TMA reads it in place.
// slice: stage 03's Slice. This stage's forward reads whole contexts
// (WholeContext); the engine passes others (a request subset, a prefix split),
// whose key ranges begin at a multiple of TILE_K.
template <class T, Slice S = stage03::WholeContext, class Producer = TmaProducer>
__global__ void __launch_bounds__(T::NUM_THREADS, 1)
    hopper_pipeline_kernel(const __grid_constant__ TmaMaps maps, AttentionParams p, Packing pk, S slice) {
  static_assert(!after_prior_grid<S>, "the tile starts with its grid: no Slice that waits for an earlier one");
  const SharedTiles<T> sh = shared_tiles<T>();
  const int warpgroup = warpgroup_index(), warp = threadIdx.x / 32 % 4;

  QueryTile qt;
  // The whole program returns: no barrier yet.
  if (!qt.init<T>(p, pk, slice.query_tile(), request_of(slice)) || !serves(slice, qt.q_len)) return;
  const KeyRange keys = tile_keys(slice, qt, pk);
  const int num_tiles = key_tiles<T>(keys);
  if (num_tiles == 0) {
    if (warpgroup > 0) store_empty_rows<T>(p, pk, slice, qt, warpgroup - 1);
    return;
  }

  if (threadIdx.x == 0) sh.bar->init(Producer::FULL_ARRIVALS);
  __syncthreads();  // the last barrier of the whole program: from here the roles part

  if (warpgroup == 0) {
    setmaxnreg_dec<T::PRODUCER_REGS>();
    const KvLookup lookup(p, qt.r, qt.kv_head);
    if (warp < Producer::WARPS) {
      Producer::template fill<T>(maps, p, pk, lookup, keys, num_tiles, sh.k_s, sh.v_s, *sh.bar, 0);
    }
    return;  // the copies complete on the consumers' barriers; the consumers outlive them
  }
  setmaxnreg_inc<T::CONSUMER_REGS>();
  const int c = warpgroup - 1;
  if (c == T::CONSUMERS - 1) hand_over<T>(c);  // consumer 0 goes first
  consume<T, Producer>(p, pk, slice, qt, keys, num_tiles, sh, c, 0, 0);
  if (c == 0) take_turn(c);  // the last consumer's last hand-over
}

// Host. K and V of the pool as [slots][num_kv_heads][head_dim] (a slot's row of
// one head is head_dim contiguous values), in boxes of one block's rows (at
// most tile_k) and of 1, 2, 4, .. rows below it, 64 dims wide, landing in the
// 128-byte swizzle.
inline TmaMaps make_maps(const AttentionParams& p, int tile_k) {
  const uint64_t slots = static_cast<uint64_t>(p.kv.num_blocks) * p.kv.block_size;
  const uint64_t dims[3] = {static_cast<uint64_t>(p.kv.head_dim), static_cast<uint64_t>(p.kv.num_kv_heads), slots};
  const uint64_t strides[2] = {sizeof(bf16) * p.kv.head_dim, sizeof(bf16) * p.kv.head_dim * p.kv.num_kv_heads};
  const uint32_t box_rows = static_cast<uint32_t>(std::min(p.kv.block_size, tile_k));
  const uint32_t box[3] = {64, 1, box_rows};
  TmaMaps maps{};
  maps.k_box = make_tma_map_2byte_3d(p.kv.k_cache, dims, strides, box, TmaSwizzle::b128);
  maps.v_box = make_tma_map_2byte_3d(p.kv.v_cache, dims, strides, box, TmaSwizzle::b128);
  for (int j = 0; j < ROW_MAPS && (1u << j) < box_rows; ++j) {
    const uint32_t rows[3] = {64, 1, 1u << j};
    maps.k_rows[j] = make_tma_map_2byte_3d(p.kv.k_cache, dims, strides, rows, TmaSwizzle::b128);
    maps.v_rows[j] = make_tma_map_2byte_3d(p.kv.v_cache, dims, strides, rows, TmaSwizzle::b128);
  }
  return maps;
}

// Host: whether a tensor copy's 32-bit signed coordinate addresses every slot of the pool.
inline bool slots_fit_coordinates(const AttentionParams& p) {
  return static_cast<int64_t>(p.kv.num_blocks) * p.kv.block_size <= std::numeric_limits<int32_t>::max();
}

// Host: whether the tile serves p's layer: plain causal attention over a bf16
// cache whose slots its copies address (forward() names each refusal).
inline bool serves_layer(const AttentionParams& p) {
  return p.window == 0 && p.sinks == nullptr && p.kv.format == KvFormat::bf16 && !p.batch_invariant &&
         slots_fit_coordinates(p);
}

// Host: the tile's programs over grid, for slice (whose blockIdx mapping the grid matches).
template <int HEAD_DIM, class Producer = TmaProducer, Slice S>
void launch_grid(const AttentionParams& p, const Packing& pk, const S& slice, dim3 grid, cudaStream_t stream) {
  using T = HopperTile<HEAD_DIM>;
  launch(hopper_pipeline_kernel<T, S, Producer>, grid, dim3(T::NUM_THREADS), T::smem_bytes(), stream,
         make_maps(p, T::TILE_K), p, pk, slice);
}

// Host: one program per (query tile, KV head, request) of p's batch, for slice.
template <int HEAD_DIM, Slice S = stage03::WholeContext, class Producer = TmaProducer>
void launch_tiles(const AttentionParams& p, const Packing& pk, cudaStream_t stream, const S& slice = {}) {
  const int rows = HopperTile<HEAD_DIM>::ROWS;
  launch_grid<HEAD_DIM, Producer>(
      p, pk, slice,
      dim3(stage03::query_tiles(p.batch.max_query_len, pk, rows), p.kv.num_kv_heads, p.batch.num_requests), stream);
}

}  // namespace
}  // namespace pa::stage09
