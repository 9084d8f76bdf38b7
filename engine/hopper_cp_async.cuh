// Stage 09's ring filled by cp.async instead of tensor copies
// (Options::prefill_copies = PrefillCopies::cp_async).
//
// The slots, their barriers and parities, the consumers and their releases are
// stage 09's; only the producer differs: every thread of the producer
// warpgroup (the tensor copies' producer issues one box per copy) copies the
// tile's rows in 16-byte chunks straight into the 128-byte swizzle that wgmma
// reads, zero-filling keys past the range's end and dims past head_dim, as
// the tensor copies do. A cp.async completes on no barrier by itself: each
// thread arrives on the slot's full barrier through cp.async.mbarrier.arrive,
// which fires once its copies have landed, so a fill is FULL_ARRIVALS = 128
// arrivals, announces no bytes, and the warpgroup runs ahead through the ring
// as the tensor copies' producer does. The copies write through the generic
// proxy: a consumer fences for the async proxy after its wait (landed()),
// before its wgmma reads the slot.
//
// Why both exist: a tensor copy moves one box per cache block, so a tile of
// 16-slot pages is 8 boxes per 64-dim slab; cp.async moves 16 bytes a lane
// whatever the page. Which is faster at blocks 16 and 64 is measured
// (bench_attention's engine_cp_async rows beside engine's).
#pragma once

#include <cstdint>

#include "common/attention_params.h"
#include "common/cuda_compat.cuh"
#include "common/kv_lookup.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/tile_contract.cuh"
#include "common/wgmma.cuh"
#include "solutions/09_hopper_pipeline/hopper_pipeline.cuh"

namespace pa::engine::detail {

struct CpAsyncProducer {
  static constexpr int WARPS = 4;                   // the whole producer warpgroup copies
  static constexpr int FULL_ARRIVALS = 32 * WARPS;  // every producer thread, once its copies landed

  // A consumer's step after its wait on a full barrier: the copies wrote through
  // the generic proxy, and wgmma reads the slot through the async proxy.
  __device__ __forceinline__ static void landed() { fence_async_smem(); }

  // Tiles 0 .. num_tiles - 1 of keys [keys.begin, keys.end) into the ring's
  // positions first, first + 1, .., K then V of each. Thread i of the warpgroup
  // copies chunks i, i + 128, ... of a tile (TILE_K rows of HEAD_DIM / 8
  // chunks), each from its key's slot: the block table's entry is an L1 hit
  // after the tile's first lookups, so every thread looks up its own rows rather
  // than sharing them.
  template <class T>
  __device__ __forceinline__ static void fill(const stage09::TmaMaps&, const AttentionParams& p,
                                              const Packing& pk, const KvLookup& lookup,
                                              const KeyRange& keys, int num_tiles, bf16* k_s, bf16* v_s,
                                              stage09::Barriers<T>& bar, int first) {
    constexpr int TILE_K = T::TILE_K, CHUNKS = T::HEAD_DIM / 8, THREADS = 32 * WARPS;
    static_assert(TILE_K * CHUNKS % THREADS == 0, "every thread copies as many chunks of a tile");
    const int me = threadIdx.x % THREADS, dims = p.kv.head_dim;
    for (int t = 0; t < num_tiles; ++t) {
      const stage09::RingPos<T::STAGES> pos(first + t);
      const int tile_first = keys.begin + t * TILE_K;
#pragma unroll
      for (int which = 0; which < 2; ++which) {  // K, then V
        Mbarrier& empty = which == 0 ? bar.empty_k[pos.slot] : bar.empty_v[pos.slot];
        Mbarrier& full = which == 0 ? bar.full_k[pos.slot] : bar.full_v[pos.slot];
        const bf16* cache = which == 0 ? p.kv.k_cache : p.kv.v_cache;  // [slots][num_kv_heads][head_dim]
        bf16* tile = (which == 0 ? k_s : v_s) + pos.slot * T::KV_ELEMS;  // [SLABS][TILE_K][64] Sw128
        empty.wait(pos.empty_parity);
#pragma unroll 4
        for (int e = me; e < TILE_K * CHUNKS; e += THREADS) {
          const int r = e / CHUNKS, ch = e % CHUNKS, k = tile_first + r;
          const bool read = k < keys.end && ch * 8 < dims;
          const bf16* src =
              read ? cache + lookup.head_row(k, pk.block_shift, p.kv.num_kv_heads) * dims + ch * 8 : cache;
          cp_async_16(tile + (ch / 8) * TILE_K * 64 + sw128(r, (ch % 8) * 8), src, read);
        }
        full.arrive_on_cp_async();  // once this thread's copies of the fill have landed
      }
    }
  }
};

}  // namespace pa::engine::detail
