// Going further (after stage 04): split-KV inside a program, two warps per decode tile.
//
// Stage 03's decode tile is one warp: 64 decodes x 8 KV heads make 512 one-warp
// programs, 4 per SM, so each of an SM's 4 schedulers has a single warp to
// issue from. That warp's own dependency chains then set the pace: on the H200
// it issues once every ~3.2 cycles, and a tile's instructions (copies, MMAs,
// the softmax of TILE_K keys) take about as long as memory takes to deliver the
// tile. At head_dim 64 a tile holds twice as many keys per byte as at 128
// (twice the softmax work), and the one-warp tile reads at ~0.80 of the floor
// against ~0.90 at 128.
//
// The remedy is this stage's idea once more, one level down: split the keys.
// Program (split, KV head, request) gets KV_WARPS = 2 warps with the same 16
// rows; warp w computes keys [w * WARP_K, (w + 1) * WARP_K) of every K/V tile,
// copying only those rows (a warp-private ring: no block barrier in the loop),
// and at the end the two states merge with the shared state's merge, as the
// splits' partials do in common/merge.cuh. Same bytes, same shared memory,
// twice the warps to issue from.
//
// It runs for head_dim 64 and 128 (a 4096-byte tile has 16 keys at 256, too few
// to halve: WARP_K must be a multiple of 16), through the tile family
// Bf16SplitTiles, which the engine (engine/) launches for bf16 caches. The
// stages run stage 03's one-warp tile, the idea; both are tested against the
// same oracle.
#pragma once

#include <type_traits>

#include "common/cp_async_ring.cuh"
#include "common/kv_lookup.cuh"
#include "common/launch.cuh"
#include "common/mma_fragments.cuh"
#include "common/online_softmax.cuh"
#include "common/tile_contract.cuh"
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"

namespace pa::further {
namespace {

// 16 rows, TILE_K = 4096 / HEAD_DIM keys per 8 KB tile (as stage 03's decode
// tile), split over 2 warps.
//
// Head sizes between 64 and 128 (80, 96) get a tile of their own rather than
// the 128-dim tile with padded rows: a padded row keeps 256 bytes of shared
// memory for 160 or 192 bytes of data, so the 3 ring stages that fit 4 programs
// per SM hold only 10 or 12 KB of each tile, and a decode then reads at ~0.7 /
// ~0.8 of the floor against ~0.97 at 128 (H200, 64 x 4096): too few bytes in
// flight. With rows stored at their own length (the swizzle adapts to it) a
// 32-key tile takes 10 or 12 KB, and 5 or 4 stages fit beside each other.
template <int HEAD_DIM_>
struct TwoWarpDecodeShape {
  static constexpr int HEAD_DIM = HEAD_DIM_, ROW_WARPS = 1, KV_WARPS = 2;
  static constexpr int TILE_K = HEAD_DIM % 64 == 0 ? 4096 / HEAD_DIM : 32;
  static constexpr int STAGES = HEAD_DIM % 64 == 0 ? 3 : HEAD_DIM <= 80 ? 5 : 4;
  static constexpr int MIN_PROGRAMS_PER_SM = 1;
};

// The per-lane state of warp 1 handed to warp 0 through shared memory. Both
// warps hold the same rows in the same fragment layout, so lane l of warp 0
// needs exactly lane l's registers of warp 1: stored lane-major, conflict-free.
template <int O_TILES>
struct WarpState {
  static constexpr int FLOATS = (4 * O_TILES + 4) * 32;  // o, then m[2], l[2]

  __device__ __forceinline__ static void put(float* s, const FragSoftmax<O_TILES>& sm, int lane) {
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[(4 * j + e) * 32 + lane] = sm.o[j][e];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      s[(4 * O_TILES + i) * 32 + lane] = sm.m[i];
      s[(4 * O_TILES + 2 + i) * 32 + lane] = sm.l[i];
    }
  }

  __device__ __forceinline__ static void merge_into(FragSoftmax<O_TILES>& sm, const float* s, int lane) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      auto o_b = [&](int j, int h) { return s[(4 * j + 2 * i + h) * 32 + lane]; };
      sm.merge_row(i, s[(4 * O_TILES + i) * 32 + lane], s[(4 * O_TILES + 2 + i) * 32 + lane], o_b);
    }
  }
};

// Grid and Slice / Mask policies as stage 03's gqa_packing_kernel; one row warp.
// Dynamic shared memory: Bf16SplitTiles::smem_bytes<T>().
template <class T, Slice S, Mask M>
__global__ void __launch_bounds__(T::NUM_THREADS, T::MIN_PROGRAMS_PER_SM)
    two_warp_decode_kernel(AttentionParams p, stage03::Packing pk, S slice) {
  static_assert(T::ROW_WARPS == 1 && T::KV_WARPS == 2 && T::HEAD_DIM <= 128, "16 rows, keys over 2 warps, Q in registers");
  constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K, WARP_K = T::WARP_K;
  constexpr int S_TILES = WARP_K / 8, O_TILES = HEAD_DIM / 8;
  bf16* q_s = dynamic_smem<bf16>();          // [16, HEAD_DIM] swizzled
  bf16* k_s = q_s + T::Q_ELEMS;              // [STAGES, TILE_K, HEAD_DIM]: warp w's rows w*WARP_K.., swizzled per warp
  bf16* v_s = k_s + T::STAGES * T::KV_ELEMS;  // the same for V
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int key0 = warp * WARP_K;  // this warp's first key of every tile
  // The merge kernel that follows a split launch may be scheduled once every
  // program of this grid has started (it waits for this grid's results itself).
  allow_dependent_grid();

  stage03::QueryTile qt;
  if (!qt.init<T>(p, pk, slice.query_tile(), request_of(slice)) || !serves(slice, qt.q_len)) return;
  stage03::load_q_tile<T>(q_s, p, pk, qt);
  const stage03::WarpKeys wk = stage03::warp_keys(qt, pk, 0);
  const stage03::KeyRange keys = slice.key_range(M::first_key(p, pk, qt.pos0 + qt.tile_first), wk.tile_kv_end);

  // This warp's WARP_K rows of K/V tile `tile` -> its half of ring slot `slot`,
  // copied by its own 32 lanes.
  const KvLookup lookup(p, qt.r, qt.kv_head);
  stage03::KvRowCopies<HEAD_DIM, WARP_K, 32> copies;
  auto load_kv_rows = [&](int tile, int slot) {
    const int first = keys.begin + tile * TILE_K + key0;
    copies.copy(k_s + slot * T::KV_ELEMS + key0 * HEAD_DIM, v_s + slot * T::KV_ELEMS + key0 * HEAD_DIM, p, lookup,
                pk.block_shift, first, first + TILE_K, keys.end, lane);
  };
  using Ring = CpAsyncRing<T::STAGES>;
  const int num_kv_tiles = (keys.end - keys.begin + TILE_K - 1) / TILE_K;
  Ring::prologue(num_kv_tiles, load_kv_rows);
  Ring::wait_prologue();  // this thread's part of Q has landed ...
  __syncthreads();        // ... and everyone's

  uint32_t q_regs[HEAD_DIM / 16][4];  // [16-dim slice][a0..a3], the same 16 rows in both warps
#pragma unroll
  for (int ks = 0; ks < HEAD_DIM / 16; ++ks) stage03::q_a_fragment<HEAD_DIM>(q_regs[ks], q_s, 0, ks, lane);
  auto q_fragment = [&](uint32_t(&a)[4], int ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = q_regs[ks][i];
  };

  FragSoftmax<O_TILES> sm;
  sm.init();
  int q_pos[2];
  stage03::row_positions(qt, pk, 0, g, q_pos);
  const typename M::Warp mask = M::for_warp(p, q_pos, wk, keys.end);
  auto column_key = [](int j, int c) { return 8 * j + c; };

  for (int tile = 0; tile < num_kv_tiles; ++tile) {
    const int slot = Ring::template advance<true>(tile, num_kv_tiles, load_kv_rows);  // warp-private rows
    const int kv_start = keys.begin + tile * TILE_K + key0;
    if (kv_start >= wk.kv_end || mask.skip_tile(kv_start, WARP_K)) continue;

    float s[S_TILES][4];
    stage03::scores_bf16<HEAD_DIM>(s, k_s + slot * T::KV_ELEMS + key0 * HEAD_DIM, q_fragment, lane);
    stage03::apply_mask(s, mask, kv_start, WARP_K, t4, column_key);
    float alpha[2];
    sm.raise_max(s, pk.scale_log2, alpha);
    sm.weights(s, pk.scale_log2);
    stage03::accumulate_pv_bf16<HEAD_DIM>(sm.o, s, v_s + slot * T::KV_ELEMS + key0 * HEAD_DIM, lane);
  }
  Ring::drain();
  sm.sum_rows();

  // Merge the two warps' states (the ring and Q are free once both are past the loop).
  __syncthreads();
  float* state_s = dynamic_smem<float>();  // [WarpState::FLOATS]
  if (warp == 1) WarpState<O_TILES>::put(state_s, sm, lane);
  __syncthreads();
  if (warp == 1) return;
  WarpState<O_TILES>::merge_into(sm, state_s, lane);

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const stage03::QueryTile::Row row = qt.row(pk, g + 8 * i);
    if (!row.real) continue;
    slice.store_row(p, qt.q_row(p, pk, row), sm.o, i, t4, sm.inv_l(i), sm.lse(i));
  }
}

// The bf16 tile family that the engine launches: the two-warp decode tile where
// it applies (head_dim <= 128), stage 03's tiles everywhere else.
struct Bf16SplitTiles {
  template <int HEAD_DIM>
  using Decode = std::conditional_t<HEAD_DIM <= 128, stage03::Tiling<TwoWarpDecodeShape<HEAD_DIM>>,
                                    stage03::Bf16Tiles::Decode<HEAD_DIM>>;
  template <int HEAD_DIM>
  using Prefill = stage03::Bf16Tiles::Prefill<HEAD_DIM>;

  template <class T>
  static constexpr size_t smem_bytes() {
    constexpr size_t tiles = stage03::Bf16Tiles::smem_bytes<T>();
    constexpr size_t merge = sizeof(float) * WarpState<T::HEAD_DIM / 8>::FLOATS;
    return tiles > merge ? tiles : merge;
  }

  // The two-warp tile at a head_dim's own row length (80, 96: see TwoWarpDecodeShape).
  template <int HEAD_DIM>
  using CompactDecode = stage03::Tiling<TwoWarpDecodeShape<HEAD_DIM>>;

  template <class T, Slice S, Mask M>
  static void launch_tile(const AttentionParams& p, const stage03::Packing& pk, const S& slice, dim3 grid,
                          cudaStream_t stream) {
    if constexpr (T::KV_WARPS == 2) {
      auto run = [&]<class U>() {
        launch_for_slice<S>(two_warp_decode_kernel<U, S, M>, grid, dim3(U::NUM_THREADS), smem_bytes<U>(), stream, p,
                            pk, slice);
      };
      if constexpr (T::HEAD_DIM == 128) {
        if (p.kv.head_dim == 96) return run.template operator()<CompactDecode<96>>();
        if (p.kv.head_dim == 80) return run.template operator()<CompactDecode<80>>();
      }
      run.template operator()<T>();
    } else {
      stage03::Bf16Tiles::launch_tile<T, S, M>(p, pk, slice, grid, stream);
    }
  }
};
static_assert(TileFamily<Bf16SplitTiles>);
static_assert(stage04::fits_per_sm<Bf16SplitTiles, 64>() && stage04::fits_per_sm<Bf16SplitTiles, 128>() &&
                  stage04::fits_per_sm<Bf16SplitTiles, 256>(),
              "PROGRAMS_PER_SM decode tiles must fit an H100/H200 SM");
static_assert(stage04::tile_fits_per_sm<Bf16SplitTiles, Bf16SplitTiles::CompactDecode<96>>() &&
                  stage04::tile_fits_per_sm<Bf16SplitTiles, Bf16SplitTiles::CompactDecode<80>>(),
              "PROGRAMS_PER_SM compact decode tiles must fit an H100/H200 SM");

}  // namespace
}  // namespace pa::further
