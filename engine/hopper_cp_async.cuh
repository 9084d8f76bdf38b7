// Stage 09's ring filled by cp.async instead of tensor copies
// (Options::prefill_copies = PrefillCopies::cp_async).
//
// The slots, their barriers and parities, the consumers and their releases are
// stage 09's; only the producer warp differs. Its lanes copy the tile's rows in
// 16-byte chunks (two rows of 128 dims per warp instruction) straight into the
// 128-byte swizzle that wgmma reads, zero-filling keys past the range's end and
// dims past head_dim, as the tensor copies do. A cp.async completes on no
// barrier by itself: each lane arrives on the slot's full barrier through
// cp.async.mbarrier.arrive, which fires once the lane's copies have landed, so a
// fill is FULL_ARRIVALS = 32 arrivals, announces no bytes, and the warp runs
// ahead through the ring as the tensor copies' producer does. The copies write
// through the generic proxy: a consumer fences for the async proxy after its
// wait (landed()), before its wgmma reads the slot.
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
  static constexpr int FULL_ARRIVALS = 32;  // every lane of the producer warp, once its copies landed

  // A consumer's step after its wait on a full barrier: the copies wrote through
  // the generic proxy, and wgmma reads the slot through the async proxy.
  __device__ __forceinline__ static void landed() { fence_async_smem(); }

  // Tiles 0 .. num_tiles - 1 of keys [keys.begin, keys.end) into the ring, K then
  // V of each. A tile's rows come in boxes of one cache block (at most TILE_K
  // rows, as stage 09's): lane b looks up box b's first slot a tile ahead of
  // its copies, and every lane copies chunks of every box.
  template <class T>
  __device__ __forceinline__ static void fill(const stage09::TmaMaps&, const AttentionParams& p,
                                              const Packing& pk, const KvLookup& lookup,
                                              const KeyRange& keys, int num_tiles, bf16* k_s, bf16* v_s,
                                              stage09::Barriers<T>& bar) {
    constexpr int TILE_K = T::TILE_K, CHUNKS = T::HEAD_DIM / 8;  // 16-byte chunks of a tile row
    constexpr int MAX_BOXES_PER_LANE = (TILE_K + 31) / 32;      // block size 1: TILE_K boxes of one row
    constexpr uint32_t PAST_END = 0xffffffffu;
    const int lane = threadIdx.x % 32;
    const int box_rows = min(1 << pk.block_shift, TILE_K), boxes = TILE_K / box_rows;
    const int dims = p.kv.head_dim;
    for (int t = 0; t < num_tiles; ++t) {
      const stage09::RingPos<T::STAGES> pos(t);
      const int tile_first = keys.begin + t * TILE_K;
      uint32_t first[MAX_BOXES_PER_LANE];  // box lane + 32 i's first slot; PAST_END: no key of it is read
#pragma unroll
      for (int i = 0; i < MAX_BOXES_PER_LANE; ++i) {
        const int b = lane + 32 * i, k0 = tile_first + b * box_rows;
        first[i] = b < boxes && k0 < keys.end ? KvLookup::slot(lookup.entry(k0, pk.block_shift), k0, pk.block_shift)
                                              : PAST_END;
      }
#pragma unroll
      for (int which = 0; which < 2; ++which) {  // K, then V
        Mbarrier& empty = which == 0 ? bar.empty_k[pos.slot] : bar.empty_v[pos.slot];
        Mbarrier& full = which == 0 ? bar.full_k[pos.slot] : bar.full_v[pos.slot];
        const bf16* cache = which == 0 ? p.kv.k_cache : p.kv.v_cache;  // [slots][num_kv_heads][head_dim]
        bf16* tile = (which == 0 ? k_s : v_s) + pos.slot * T::KV_ELEMS;  // [SLABS][TILE_K][64] Sw128
        empty.wait(pos.empty_parity);
#pragma unroll
        for (int i = 0; i < MAX_BOXES_PER_LANE; ++i) {
          for (int bl = 0; bl < 32; ++bl) {
            const int b = 32 * i + bl;
            if (b >= boxes) break;
            const uint32_t s0 = __shfl_sync(0xffffffffu, first[i], bl);
            const int k0 = tile_first + b * box_rows;
            for (int e = lane; e < box_rows * CHUNKS; e += 32) {
              const int r = e / CHUNKS, ch = e % CHUNKS;
              const bool read = s0 != PAST_END && k0 + r < keys.end && ch * 8 < dims;
              const bf16* src =
                  read ? cache + lookup.head_row_of_slot(s0 + r, p.kv.num_kv_heads) * dims + ch * 8 : cache;
              cp_async_16(tile + (ch / 8) * TILE_K * 64 + sw128(b * box_rows + r, (ch % 8) * 8), src, read);
            }
          }
        }
        full.arrive_on_cp_async();  // once this lane's copies of the fill have landed
      }
    }
  }
};

}  // namespace pa::engine::detail
