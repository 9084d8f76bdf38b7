// Stage 05's tile: stage 03's GQA-packed tile over an 8-bit cache, built from
// the same pieces (QueryTile, WarpKeys, the Mask and Slice policies, the
// cp.async ring, the shared softmax state) with the 8-bit parts in between:
//  - the ring holds code tiles and per-key fp32 scales (CodeTiles): half the
//    bytes of a bf16 tile per key, copied as whole 128-byte lines;
//  - Q is scaled into fp16's range once (QuantQ), since the codes become fp16
//    operands (quantized_kv.cuh);
//  - S and P V run on fp16 MMAs from codes read straight into registers;
//  - P's operands and O are kept in units of the largest v scale seen (a
//    power of two, ValueUnit), so V may have any magnitude fp32 scales hold;
//  - int8 V operands carry a bias of 1152, taken off in fp32 (OperandBias);
//  - the output's dims come back in order, and the KV warps of a decode tile
//    merge their states, through shared memory at the end (finish_rows).
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/cp_async_ring.cuh"
#include "common/online_softmax.cuh"
#include "common/reduce.cuh"
#include "common/tile_contract.cuh"
// The learner's file. In a build of steps/, the stage's .cu has included the
// learner's copy first; its include guard (not #pragma once, which goes by the
// file) then skips this, the solution's, so the tile runs the learner's code.
#include "quantized_kv.cuh"
// Stage 05 builds on the reference solutions of stages 03 and 04.
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"

namespace pa::stage05 {
namespace {

using stage03::KeyRange;
using stage03::Packing;
using stage03::Tiling;

// Decode tiles: a lone warp converting a whole tile of codes to operands would
// take far longer than memory takes to deliver it, so the 16 rows get 2 KV
// warps that split each 64-key tile, 32 keys each: 3 stages of 8 KB of K and V
// codes at head_dim 128, 54 KB in all, so 4 programs share an SM (64 decodes x
// 8 KV heads run in one wave) with 255 registers per lane. Head_dim 256 takes
// 2 warps of 16 keys and 2 stages, so that 4 programs fit.
template <int HEAD_DIM_>
struct DecodeShape {
  static constexpr int HEAD_DIM = HEAD_DIM_, ROW_WARPS = 1, KV_WARPS = 2;
  static constexpr int TILE_K = HEAD_DIM <= 128 ? 64 : 32, STAGES = HEAD_DIM <= 128 ? 3 : 2;
  static constexpr int MIN_PROGRAMS_PER_SM = HEAD_DIM <= 128 ? 1 : 4;
};

template <class T>
struct CodeLayout {
  static constexpr int CODE_CHUNKS = T::HEAD_DIM / 16;  // 16-byte chunks of a row of codes
  // The merge of the KV warps' states (and the output's dims put back in order)
  // reuses the shared memory once the key loop is done: fp32 o of every warp's
  // 16 rows, rows padded by 8 floats against bank conflicts, then m and l, then
  // each warp's value unit.
  static constexpr int O_STRIDE = T::HEAD_DIM + 8;
  static constexpr size_t MERGE_BYTES = sizeof(float) * T::NUM_WARPS * (16 * (O_STRIDE + 2) + 1);
  static_assert(sizeof(int) == sizeof(float), "a warp's unit exponent takes a float's place");
  // Q and the ring of K and V code tiles with their per-key scales.
  static constexpr size_t SMEM_BYTES =
      std::max(sizeof(bf16) * T::Q_ELEMS + 2 * T::STAGES * (T::KV_ELEMS + sizeof(float) * T::TILE_K), MERGE_BYTES);
};

// The ring of code tiles and scales, and how a program fills it.
//
// With one row warp (decode tiles) warp w's lanes copy exactly the key rows
// warp w computes, [key0, key0 + WARP_K) of every tile, so the key loop needs
// only warp barriers. Consecutive threads take consecutive 16-byte chunks of a
// row, so one copy instruction asks L2 for whole 128-byte lines: L2 serves
// requests, not bytes, at a limited rate.
//
// Decode tiles also read the block table ahead: lane l fetches the entry of
// row l % COPY_ROWS of the next tile while this one is computed, and each copy
// takes its row's slot from the owner lane with a shuffle (a lookup at copy
// time would stall the warp for a memory round trip before its first copy).
// The table line four tiles ahead is prefetched into L2, since with memory
// saturated a DRAM round trip outlasts a tile.
template <class T>
struct CodeTiles {
  static constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K, STAGES = T::STAGES;
  static constexpr int CODE_CHUNKS = CodeLayout<T>::CODE_CHUNKS;
  static constexpr bool WARP_PRIVATE = T::ROW_WARPS == 1;
  static constexpr int COPIERS = WARP_PRIVATE ? 32 : T::NUM_THREADS;   // threads that share a tile's copies
  static constexpr int COPY_ROWS = WARP_PRIVATE ? T::WARP_K : TILE_K;  // rows they copy
  static constexpr int ROWS_PER_COPY = COPIERS / CODE_CHUNKS;         // rows of one copy instruction
  static constexpr int COPIES = COPY_ROWS / ROWS_PER_COPY;            // copy instructions per thread per tile (K, and V)
  static_assert(COPIERS % CODE_CHUNKS == 0 && COPY_ROWS % ROWS_PER_COPY == 0 &&
                    (2 * COPY_ROWS <= COPIERS || (WARP_PRIVATE && COPY_ROWS == COPIERS)),
                "whole rows per copy instruction; scales: one per thread, or one row's two per lane");

  uint8_t* k_codes;  // [STAGES, TILE_K, HEAD_DIM] (k_code_offset)
  uint8_t* v_codes;  // [STAGES, TILE_K, HEAD_DIM] (v_code_offset)
  float* k_scale;    // [STAGES, TILE_K]
  float* v_scale;    // [STAGES, TILE_K]
  // The cache (copied out of the kernel's parameters: a pointer to them would
  // make the compiler copy the whole struct to local memory).
  const uint8_t* k_src;  // [num_slots, Hkv, head_dim] codes (head_dim <= HEAD_DIM: the rest of a tile row is padding)
  const uint8_t* v_src;  // [num_slots, Hkv, head_dim] codes
  const float* k_scale_src;  // [num_slots * Hkv]
  const float* v_scale_src;  // [num_slots * Hkv]
  KvLookup lookup;
  int block_shift, num_kv_heads;
  int dims;  // head_dim: a row's bytes in the cache; chunks past it are zero-filled (code 0 is the value 0)
  KeyRange keys;
  int copier, copy_row0;  // this thread's index among the copiers, and their first row of a tile
  int next_entry;         // decode tiles: this lane's block entry of the next tile to load

  __device__ __forceinline__ CodeTiles(uint8_t* base, const AttentionParams& p_, const KvLookup& lookup_,
                                       int block_shift_, KeyRange keys_, int lane, int key0)
      : k_codes(base),
        v_codes(base + STAGES * T::KV_ELEMS),
        k_scale(reinterpret_cast<float*>(base + 2 * STAGES * T::KV_ELEMS)),
        v_scale(k_scale + STAGES * TILE_K),
        k_src(p_.kv.k_codes),
        v_src(p_.kv.v_codes),
        k_scale_src(p_.kv.k_scale),
        v_scale_src(p_.kv.v_scale),
        lookup(lookup_),
        block_shift(block_shift_),
        num_kv_heads(p_.kv.num_kv_heads),
        dims(p_.kv.head_dim),
        keys(keys_),
        copier(WARP_PRIVATE ? lane : static_cast<int>(threadIdx.x)),
        copy_row0(WARP_PRIVATE ? key0 : 0),
        next_entry(0) {}

  // Decode tiles: the block entry of this lane's row of tile `tile` (0 past the end).
  __device__ __forceinline__ int entry_of(int tile) const {
    const int kv_pos = keys.begin + tile * TILE_K + copy_row0 + copier % COPY_ROWS;
    return kv_pos < keys.end ? lookup.entry(kv_pos, block_shift) : 0;
  }

  // Tile `tile` -> ring slot `slot`. Keys at or past keys.end get code 0 AND
  // scale 0 (both zero-filled): their slots may hold NaN, and 0 * NaN = NaN.
  // Chunks past head_dim (the tile's padding) get code 0: they meet zero queries.
  __device__ __forceinline__ void copy(int tile, int slot, int entry) {
    uint8_t* k_dst = k_codes + slot * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
    uint8_t* v_dst = v_codes + slot * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
    const int chunk = copier % CODE_CHUNKS;
    const bool real_chunk = chunk * 16 < dims;
    const int tile_pos = keys.begin + tile * TILE_K;  // the tile's first key
    [[maybe_unused]] uint32_t own_slot = 0;           // decode tiles: the slot of this lane's row
    if constexpr (WARP_PRIVATE) {
      own_slot = KvLookup::slot(entry, tile_pos + copy_row0 + copier % COPY_ROWS, block_shift);
      const uint32_t slot_bytes = static_cast<uint32_t>(num_kv_heads) * dims;  // codes of one slot, all heads
      const size_t fixed = static_cast<size_t>(lookup.kv_head) * dims + chunk * 16;  // this head's row, this chunk
#pragma unroll
      for (int i = 0; i < COPIES; ++i) {
        const int j = copy_row0 + i * ROWS_PER_COPY + copier / CODE_CHUNKS;
        const uint32_t s = __shfl_sync(0xffffffffu, own_slot, j - copy_row0);  // (every lane takes part)
        const bool in_range = tile_pos + j < keys.end && real_chunk;
        const size_t offset = in_range ? static_cast<size_t>(s) * slot_bytes + fixed : 0;  // bytes from the codes' base
        cp_async_16(k_dst + k_code_offset<HEAD_DIM>(j, chunk), k_src + offset, in_range);
        cp_async_16(v_dst + v_code_offset<HEAD_DIM>(j, chunk), v_src + offset, in_range);
      }
    } else {
      // A block-table lookup per row (prefill tiles: the many row warps' MMAs hide its latency).
#pragma unroll
      for (int i = 0; i < COPIES; ++i) {
        const int j = i * ROWS_PER_COPY + copier / CODE_CHUNKS;
        const bool in_range = tile_pos + j < keys.end && real_chunk;
        const size_t offset = in_range ? lookup.head_row(tile_pos + j, block_shift, num_kv_heads) * dims + chunk * 16 : 0;
        cp_async_16(k_dst + k_code_offset<HEAD_DIM>(j, chunk), k_src + offset, in_range);
        cp_async_16(v_dst + v_code_offset<HEAD_DIM>(j, chunk), v_src + offset, in_range);
      }
    }
    // The rows' scales, each thread those of row j: with 2 * COPY_ROWS copiers
    // or more, the first COPY_ROWS the k scales and the next COPY_ROWS the v
    // scales; with as many copiers as rows, both.
    const int j = copy_row0 + copier % COPY_ROWS;
    if (copier < 2 * COPY_ROWS) {
      const bool in_range = tile_pos + j < keys.end;
      size_t head_row = 0;
      if constexpr (WARP_PRIVATE) {
        head_row = lookup.head_row_of_slot(own_slot, num_kv_heads);
      } else if (in_range) {
        head_row = lookup.head_row(tile_pos + j, block_shift, num_kv_heads);
      }
      if constexpr (2 * COPY_ROWS <= COPIERS) {
        const bool is_k = copier < COPY_ROWS;
        const float* scale = is_k ? k_scale_src : v_scale_src;  // [num_slots * Hkv]
        cp_async_4((is_k ? k_scale : v_scale) + slot * TILE_K + j, scale + head_row, in_range);
      } else {
        cp_async_4(k_scale + slot * TILE_K + j, k_scale_src + head_row, in_range);
        cp_async_4(v_scale + slot * TILE_K + j, v_scale_src + head_row, in_range);
      }
    }
  }

  // The first STAGES - 1 tiles in flight. Decode tiles read the block entries
  // of all STAGES first tiles before any copy waits on one: one memory round
  // trip at the start instead of one per tile.
  __device__ __forceinline__ void prologue(int num_tiles) {
    int first[STAGES] = {};  // [tile]
    if constexpr (WARP_PRIVATE) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) first[s] = s < num_tiles ? entry_of(s) : 0;
    }
    CpAsyncRing<STAGES>::prologue(num_tiles, [&](int tile, int slot) { copy(tile, slot, first[tile]); });
    next_entry = first[STAGES - 1];
  }

  // The ring's refill of tile `next`. Decode tiles read the entry for the tile
  // after it BEFORE this tile's copies are issued (a load issued after them
  // returns after their data, a DRAM round trip later), and ask for the table
  // line of tile next + 4.
  __device__ __forceinline__ void refill(int next, int slot, int num_tiles) {
    [[maybe_unused]] int entry_after = 0;
    if constexpr (WARP_PRIVATE) {
      if (next + 1 < num_tiles) entry_after = entry_of(next + 1);
    }
    copy(next, slot, next_entry);
    if constexpr (WARP_PRIVATE) {
      next_entry = entry_after;
      const int ahead = keys.begin + (next + 4) * TILE_K + copy_row0;
      if (copier == 0 && ahead < keys.end) prefetch_l2(lookup.table + (ahead >> block_shift));
    }
  }
};

// Q as fp16 A fragments for 8-bit tiles. Q K^T runs in fp16, so Q is scaled into
// fp16's range by 2^-q_exp, exactly: q_exp puts the row warp's largest |q| in
// [2^14, 2^15), and every bf16 value from 2^-28 of that largest one up stays
// exact. The scores are scaled back by score_factor = 2^q_exp with the keys'
// scales. Fragments are read in qk_dim order (quantized_kv.cuh) and kept in
// registers when they fit; otherwise (head_dim 256, capped registers) they are
// rewritten once in shared memory in fragment order,
// [row warp][k-step][lane][a0..a3], one 16-byte load per k-step.
template <class T>
struct QuantQ {
  static constexpr int HEAD_DIM = T::HEAD_DIM, K_STEPS = HEAD_DIM / 16;
  static constexpr bool IN_REGISTERS = HEAD_DIM <= 128 && T::MIN_PROGRAMS_PER_SM == 1;

  uint32_t regs[IN_REGISTERS ? K_STEPS : 1][4];  // [k-step][a0..a3]
  bf16* q_s;                                     // [ROWS, HEAD_DIM] swizzled, then (not IN_REGISTERS) fragments
  int row_warp, lane;
  float score_factor;

  // Dims qk_dim(ks, t4) + 0..3 of rows g and g + 8: a0, a2 and a1, a3, as fp16 * q_mul.
  __device__ __forceinline__ void gather(uint32_t (&a)[4], int ks, float q_mul) const {
    const int g = lane / 4, d = qk_dim(ks, lane % 4);
    const uint2 lo = *reinterpret_cast<const uint2*>(q_s + swizzle<HEAD_DIM>(row_warp * 16 + g, d >> 3) + (d & 7));
    const uint2 hi = *reinterpret_cast<const uint2*>(q_s + swizzle<HEAD_DIM>(row_warp * 16 + g + 8, d >> 3) + (d & 7));
    a[0] = lo.x, a[1] = hi.x, a[2] = lo.y, a[3] = hi.y;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 v;
      memcpy(&v, &a[i], sizeof(v));
      const float2 f = __bfloat1622float2(v);
      a[i] = pack_half2(f.x * q_mul, f.y * q_mul);
    }
  }

  // After Q has landed in q_s. Every warp of the program calls it: the
  // shared-memory rewrite has barriers.
  __device__ __forceinline__ void prepare(bf16* q_s_, int row_warp_, int kv_warp, int lane_) {
    q_s = q_s_, row_warp = row_warp_, lane = lane_;
    float amax = 0.0f;
    for (int c = lane; c < 16 * T::CHUNKS; c += 32) {
      const uint4 x = *reinterpret_cast<const uint4*>(q_s + swizzle<HEAD_DIM>(row_warp * 16 + c / T::CHUNKS, c % T::CHUNKS));
      __nv_bfloat162 v[4];
      memcpy(v, &x, sizeof(v));  // (a pointer cast would break C++'s aliasing rules, and g++ -O2 acts on it)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(v[i]);
        amax = nan_max(amax, nan_max(fabsf(f.x), fabsf(f.y)));
      }
    }
    amax = warp_nan_max(amax);
    // 0 (no real row), NaN and inf keep q_exp 0: a NaN or inf query stays one in fp16.
    const int q_exp = amax > 0.0f && amax <= 3.4e38f ? ilogbf(amax) - 14 : 0;
    const float q_mul = ldexpf(1.0f, -q_exp);
    score_factor = ldexpf(1.0f, q_exp);
    if constexpr (IN_REGISTERS) {
#pragma unroll
      for (int ks = 0; ks < K_STEPS; ++ks) gather(regs[ks], ks, q_mul);
    } else {
      // The KV warps of a row warp share the k-steps of the rewrite.
      constexpr int PER_WARP = K_STEPS / T::KV_WARPS;
      static_assert(K_STEPS % T::KV_WARPS == 0, "the k-steps split evenly over the KV warps");
      uint32_t a[PER_WARP][4];
#pragma unroll
      for (int i = 0; i < PER_WARP; ++i) gather(a[i], kv_warp + T::KV_WARPS * i, q_mul);
      __syncthreads();  // every warp has read the dim-ordered tile
#pragma unroll
      for (int i = 0; i < PER_WARP; ++i) {
        const int ks = kv_warp + T::KV_WARPS * i;
        *reinterpret_cast<uint4*>(q_s + ((row_warp * K_STEPS + ks) * 32 + lane) * 8) = make_uint4(a[i][0], a[i][1], a[i][2], a[i][3]);
      }
      // Decode tiles publish the rewrite with a barrier of their own; prefill
      // tiles with the key loop's first barrier.
      if constexpr (T::ROW_WARPS == 1) __syncthreads();
    }
  }

  __device__ __forceinline__ void fragment(uint32_t (&a)[4], int ks) const {
    if constexpr (IN_REGISTERS) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = regs[ks][i];
    } else {
      const uint4 x = *reinterpret_cast<const uint4*>(q_s + ((row_warp * K_STEPS + ks) * 32 + lane) * 8);
      a[0] = x.x, a[1] = x.y, a[2] = x.z, a[3] = x.w;
    }
  }
};

// V operands with a bias (int8 codes become 1152 + code) add bias * sum_j p[row][j]
// to every output dim. It is taken off with the tensor cores: one more MMA per
// 16 keys, of P against an operand that is the bias everywhere, into p_bias,
// rescaled with o and subtracted at the end. Every product is exact in fp32, and
// the subtraction costs a few bits of o's fp32 accumulators (|bias * sum(p)| <=
// 1152 / 127 * l * max|v| in o's units), far below bf16's. For e4m3 (bias 0) all
// of it compiles away. (K operands carry no bias: quantized_kv.cuh's k_fragment.)
template <class Kv>
struct OperandBias {
  static constexpr float BIAS = Kv::V_BIAS;
  float p_bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // [c0..c3] of an MMA whose columns all hold bias * sum(p)
  uint32_t bias_b[2] = {0u, 0u};               // B fragment with every element fp16(BIAS)

  __device__ __forceinline__ void init() {
    if constexpr (BIAS != 0.0f) {
      const uint32_t h = half_bits(BIAS);
      bias_b[0] = bias_b[1] = h | (h << 16);
    }
  }
  __device__ __forceinline__ void rescale(const float (&alpha)[2]) {
    if constexpr (BIAS != 0.0f) {
      p_bias[0] *= alpha[0], p_bias[1] *= alpha[0];
      p_bias[2] *= alpha[1], p_bias[3] *= alpha[1];
    }
  }
  __device__ __forceinline__ void rescale(float r) {
    if constexpr (BIAS != 0.0f) p_bias[0] *= r, p_bias[1] *= r, p_bias[2] *= r, p_bias[3] *= r;
  }
  __device__ __forceinline__ void add_weights(const uint32_t (&pv)[4]) {
    if constexpr (BIAS != 0.0f) mma_m16n8k16_f16(p_bias, pv, bias_b, p_bias);
  }
  template <int O_TILES>
  __device__ __forceinline__ void remove(float (&o)[O_TILES][4]) const {
    if constexpr (BIAS != 0.0f) {
#pragma unroll
      for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] -= p_bias[e];
      }
    }
  }
};

// The unit of a warp's P operands and o: a power of two 2^e at or above the
// largest v scale of the keys it has read so far, raised like the softmax's
// running max. P's operand for key j is p_j * v_scale_j * v_mul with v_mul =
// 2^(14 - e), below 2^15 (p_j <= 1, v_scale_j < 2^(e + 1)), so it never
// overflows fp16, and a key's product leaves fp16's normal range only below
// 2^-29 of the largest weighted value: the output keeps its precision relative
// to V's magnitude, whatever that is. o (and the bias sum) is in units of
// 2^(e - 14); a tile that raises e multiplies both by 2^(e_old - e_new), exactly
// (rare past the first tiles, like the softmax's alpha). e is the same on every
// lane (the max runs over the warp's keys) and stays in [-112, 127], so that
// v_mul and the output's unit 2^(e - 14) are normal fp32 numbers: scales below
// 2^-112 (~2e-34) take e = -112, with less headroom in fp16 but no overflow.
template <int S_TILES>
struct ValueUnit {
  static constexpr int MIN_EXP = -112, MAX_EXP = 127;
  int e = MIN_EXP;
  float v_mul = 0x1p126f;  // 2^(14 - e)

  // v_scale: [WARP_K] the scales of the warp's keys of this tile (0 past the
  // end); this lane reads keys 16kk + 4t4 + 0..3, its quad the rest. A NaN
  // scale is left out of the max (fmaxf) and still poisons its key's weight.
  template <int O_TILES, class Bias>
  __device__ __forceinline__ void raise(const float* v_scale, int t4, float (&o)[O_TILES][4], Bias& bias) {
    float m = 0.0f;
#pragma unroll
    for (int kk = 0; kk < S_TILES / 2; ++kk) {
      const float4 vs = *reinterpret_cast<const float4*>(v_scale + 16 * kk + 4 * t4);
      m = fmaxf(m, fmaxf(fmaxf(vs.x, vs.y), fmaxf(vs.z, vs.w)));
    }
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    // m >= 0: its exponent field, unbiased (0 and subnormals -127, inf 128), clamped.
    const int e_tile = min(max((__float_as_int(m) >> 23) - 127, MIN_EXP), MAX_EXP);
    if (e_tile > e) {  // (warp-uniform)
      const float r = ldexpf(1.0f, e - e_tile);
#pragma unroll
      for (int j = 0; j < O_TILES; ++j) o[j][0] *= r, o[j][1] *= r, o[j][2] *= r, o[j][3] *= r;
      bias.rescale(r);
      e = e_tile;
      v_mul = ldexpf(1.0f, 14 - e);
    }
  }
};

// Where this lane's code loads fall in a tile, relative to the warp's first
// key row. The swizzles depend only on the row modulo 16 and the warp's rows
// start at a multiple of 16, so these hold for every tile.
template <int HEAD_DIM, int S_TILES>
struct LaneOffsets {
  static constexpr int V_LANE_BYTES = HEAD_DIM / 8;                      // a lane's run of one V row
  static constexpr int V_PIECE = V_LANE_BYTES < 16 ? V_LANE_BYTES : 16;  // bytes per load
  static constexpr int K_LOADS = HEAD_DIM / 64, V_LOADS = V_LANE_BYTES / V_PIECE;
  int k[S_TILES][K_LOADS];  // [8-key tile j][chunk t4 + 4c]
  int v[4][V_LOADS];        // [row 4t4 + e][piece]

  __device__ __forceinline__ explicit LaneOffsets(int lane) {
    const int g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
      for (int c = 0; c < K_LOADS; ++c) k[j][c] = k_code_offset<HEAD_DIM>(column_key(j, g), t4 + 4 * c);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
#pragma unroll
      for (int piece = 0; piece < V_LOADS; ++piece) {
        const int byte = V_LANE_BYTES * g + V_PIECE * piece;
        v[e][piece] = v_code_offset<HEAD_DIM>(4 * t4 + e, byte >> 4) + (byte & 15);
      }
    }
  }
};

// S = Q K^T for one warp's keys of a code tile (k_codes: the warp's first key
// row), scaled back to real scores. Lane (g, t4) reads column g's key row for
// each 8-key tile j, 16 codes per chunk t4 + 4c: word w of a chunk is k-step
// 4c + w's B fragment. The odd k-steps accumulate apart (s_odd) so that each
// MMA waits on half as many before it: a decode warp has only 2 column tiles
// to interleave.
template <class Kv, class QuantQT, int HEAD_DIM, int S_TILES>
__device__ __forceinline__ void scores_8bit(float (&s)[S_TILES][4], const uint8_t* k_codes, const float* k_scale,
                                            const QuantQT& q, const LaneOffsets<HEAD_DIM, S_TILES>& off, int t4) {
  float s_odd[S_TILES][4];
#pragma unroll
  for (int j = 0; j < S_TILES; ++j) {
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    s_odd[j][0] = s_odd[j][1] = s_odd[j][2] = s_odd[j][3] = 0.0f;
  }
#pragma unroll
  for (int c = 0; c < HEAD_DIM / 64; ++c) {
    uint4 codes[S_TILES];  // [8-key tile j]: 16 codes of column g's key
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) codes[j] = *reinterpret_cast<const uint4*>(k_codes + off.k[j][c]);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      uint32_t qa[4];
      q.fragment(qa, 4 * c + w);
#pragma unroll
      for (int j = 0; j < S_TILES; ++j) {
        const uint32_t word = w == 0 ? codes[j].x : w == 1 ? codes[j].y : w == 2 ? codes[j].z : codes[j].w;
        uint32_t kb[2];
        Kv::k_fragment(word, kb);
        float(&acc)[4] = w % 2 == 0 ? s[j] : s_odd[j];
        mma_m16n8k16_f16(acc, qa, kb, acc);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] += s_odd[j][e];
  }
  // The MMA multiplied Q * 2^-q_exp by the codes: each score still needs its key's k scale and 2^q_exp.
  Kv::scale_scores(s, k_scale, q.score_factor, t4);
}

// O += P V for one warp's keys of a code tile (v_codes: the warp's first key
// row; v_scale: their scales), P = the weights in S, O in units of 2^15 /
// v_mul (ValueUnit). O's n-tile i, column g is dim V_LANE_BYTES g + i (put
// back in order by finish_rows).
template <class Kv, class Bias, int HEAD_DIM, int S_TILES, int O_TILES>
__device__ __forceinline__ void accumulate_pv_8bit(float (&o)[O_TILES][4], const float (&s)[S_TILES][4],
                                                   const uint8_t* v_codes, const float* v_scale, float v_mul,
                                                   Bias& bias, const LaneOffsets<HEAD_DIM, S_TILES>& off, int t4) {
  using Off = LaneOffsets<HEAD_DIM, S_TILES>;
#pragma unroll
  for (int kk = 0; kk < S_TILES / 2; ++kk) {
    uint32_t pv[4];
    Kv::weights_fragment(s, kk, v_scale, v_mul, t4, pv);
    bias.add_weights(pv);
    // This lane's bytes of V rows 16kk + 4t4 + e (e = 0..3), V_PIECE bytes per row at a time.
    const uint8_t* v16 = v_codes + 16 * kk * HEAD_DIM;  // [16, HEAD_DIM]
#pragma unroll
    for (int piece = 0; piece < Off::V_LOADS; ++piece) {
      constexpr int PIECE = Off::V_PIECE;
      uint32_t words[4][PIECE / 4];  // [key e][4 dims each]
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint8_t* src = v16 + off.v[e][piece];
        if constexpr (PIECE == 16) {
          const uint4 x = *reinterpret_cast<const uint4*>(src);
          words[e][0] = x.x, words[e][1] = x.y, words[e][2] = x.z, words[e][3] = x.w;
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(src);
          words[e][0] = x.x, words[e][1] = x.y;
        }
      }
#pragma unroll
      for (int w = 0; w < PIECE / 4; ++w) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int i = PIECE * piece + 4 * w + b;  // n-tile i: column g is dim V_LANE_BYTES g + i, byte b of word w
          const uint32_t vb[2] = {Kv::v_fragment(words[0][w], words[1][w], b),
                                  Kv::v_fragment(words[2][w], words[3][w], b)};
          mma_m16n8k16_f16(o[i], pv, vb, o[i]);
        }
      }
    }
  }
}

// After the key loop (every warp past its last tile, so the ring and Q are
// free): each warp writes its state to shared memory with o in dim order, then
// the first KV warp of each row warp merges its row warp's KV_WARPS states with
// the shared state's merge, each o first moved from its warp's value unit
// 2^(e - 14) to the largest of them (an exact factor <= 1), whose exponent
// becomes v_exp. Returns false for the warps that are done.
template <class T, int O_TILES>
__device__ __forceinline__ bool finish_rows(FragSoftmax<O_TILES>& sm, int& v_exp, int warp, int kv_warp, int lane) {
  constexpr int O_STRIDE = CodeLayout<T>::O_STRIDE;
  const int g = lane / 4, t4 = lane % 4;
  __syncthreads();
  float* o_s = dynamic_smem<float>();            // [NUM_WARPS, 16, O_STRIDE]
  float* m_s = o_s + T::NUM_WARPS * 16 * O_STRIDE;  // [NUM_WARPS, 16]
  float* l_s = m_s + T::NUM_WARPS * 16;             // [NUM_WARPS, 16]
  int* e_s = reinterpret_cast<int*>(l_s + T::NUM_WARPS * 16);  // [NUM_WARPS]
#pragma unroll
  for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int dim = (T::HEAD_DIM / 8) * (2 * t4 + (e & 1)) + j;  // column 2t4 + (e & 1) of n-tile j
      o_s[(warp * 16 + g + 8 * (e >> 1)) * O_STRIDE + dim] = sm.o[j][e];
    }
  }
  if (t4 == 0) {
    m_s[warp * 16 + g] = sm.m[0], m_s[warp * 16 + g + 8] = sm.m[1];
    l_s[warp * 16 + g] = sm.l[0], l_s[warp * 16 + g + 8] = sm.l[1];
  }
  if (lane == 0) e_s[warp] = v_exp;
  __syncthreads();
  if (kv_warp != 0) return false;  // no barrier follows
  float unit_of[T::KV_WARPS];  // [kw]: that warp's o -> units of 2^(v_exp - 14)
  if constexpr (T::KV_WARPS == 1) {
    unit_of[0] = 1.0f;
  } else {
#pragma unroll
    for (int kw = 0; kw < T::KV_WARPS; ++kw) v_exp = max(v_exp, e_s[warp + kw]);
#pragma unroll
    for (int kw = 0; kw < T::KV_WARPS; ++kw) unit_of[kw] = ldexpf(1.0f, e_s[warp + kw] - v_exp);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = g + 8 * i;
#pragma unroll
    for (int kw = 0; kw < T::KV_WARPS; ++kw) {
      const int wr = (warp + kw) * 16 + row;  // that warp's state of this row
      auto o_at = [&](int j, int h) { return o_s[wr * O_STRIDE + 8 * j + 2 * t4 + h] * unit_of[kw]; };
      if (kw == 0) {
        sm.m[i] = m_s[wr], sm.l[i] = l_s[wr];
#pragma unroll
        for (int j = 0; j < O_TILES; ++j) sm.o[j][2 * i] = o_at(j, 0), sm.o[j][2 * i + 1] = o_at(j, 1);
      } else {
        sm.merge_row(i, m_s[wr], l_s[wr], o_at);
      }
    }
  }
  return true;
}

// Row i of o, in units of 2^(v_exp - 14) and not yet divided by l, -> the
// output divided by the returned factor 2^(v_exp - 14), for the Slice's store
// (which multiplies by it): o / l first (its magnitude about V's over the unit),
// then the unit, each product in fp32's range wherever the output is (a single
// factor 2^(v_exp - 14) / l would leave it for small units and long contexts).
template <int O_TILES>
__device__ __forceinline__ float to_output_units(FragSoftmax<O_TILES>& sm, int i, int v_exp) {
  const float inv_l = sm.inv_l(i);
#pragma unroll
  for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) sm.o[j][2 * i + h] *= inv_l;
  }
  return ldexpf(1.0f, v_exp - 14);
}

// Grid and Slice / Mask policies as stage 03's gqa_packing_kernel.
// Dynamic shared memory: CodeLayout<T>::SMEM_BYTES.
template <class T, class Kv, Slice S, Mask M>
__global__ void __launch_bounds__(T::NUM_THREADS, T::MIN_PROGRAMS_PER_SM)
    quantized_kernel(AttentionParams p, Packing pk, S slice) {
  constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K, WARP_K = T::WARP_K;
  constexpr int S_TILES = WARP_K / 8, O_TILES = HEAD_DIM / 8;
  using Ring = CpAsyncRing<T::STAGES>;
  using Tiles = CodeTiles<T>;
  bf16* q_s = dynamic_smem<bf16>();  // [ROWS, HEAD_DIM] swizzled
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  // This warp computes tile rows 16 row_warp.. for keys [key0, key0 + WARP_K) of every K/V tile.
  const int row_warp = warp / T::KV_WARPS, kv_warp = warp % T::KV_WARPS;
  const int key0 = kv_warp * WARP_K;

  stage03::QueryTile qt;
  if (!qt.init<T>(p, pk, slice.query_tile(), request_of(slice)) || !serves(slice, qt.q_len)) return;
  stage03::load_q_tile<T>(q_s, p, pk, qt);
  const stage03::WarpKeys wk = stage03::warp_keys(qt, pk, row_warp);
  const KeyRange keys = slice.key_range(M::first_key(p, pk, qt.pos0 + qt.tile_first), wk.tile_kv_end);

  Tiles ring(reinterpret_cast<uint8_t*>(q_s + T::Q_ELEMS), p, KvLookup(p, qt.r, qt.kv_head), pk.block_shift,
             keys, lane, key0);
  const int num_kv_tiles = (keys.end - keys.begin + TILE_K - 1) / TILE_K;
  ring.prologue(num_kv_tiles);
  Ring::wait_prologue();  // the Q group has landed
  __syncthreads();

  QuantQ<T> q;
  q.prepare(q_s, row_warp, kv_warp, lane);
  OperandBias<Kv> bias;
  bias.init();
  ValueUnit<S_TILES> unit;
  const LaneOffsets<HEAD_DIM, S_TILES> off(lane);
  FragSoftmax<O_TILES> sm;
  sm.init();
  int q_pos[2];
  stage03::row_positions(qt, pk, row_warp, g, q_pos);
  const typename M::Warp mask = M::for_warp(p, q_pos, wk, keys.end);

  for (int tile = 0; tile < num_kv_tiles; ++tile) {
    const int slot = Ring::template advance<Tiles::WARP_PRIVATE>(
        tile, num_kv_tiles, [&](int next, int next_slot) { ring.refill(next, next_slot, num_kv_tiles); });
    const int kv_start = keys.begin + tile * TILE_K + key0;  // this warp's first key
    if (kv_start >= wk.kv_end || mask.skip_tile(kv_start, WARP_K)) continue;

    float s[S_TILES][4];  // column c of tile j is key column_key(j, c)
    scores_8bit<Kv>(s, ring.k_codes + slot * T::KV_ELEMS + key0 * HEAD_DIM, ring.k_scale + slot * TILE_K + key0, q,
                    off, t4);
    stage03::apply_mask(s, mask, kv_start, WARP_K, t4, column_key);
    float alpha[2];
    if (sm.raise_max(s, pk.scale_log2, alpha)) bias.rescale(alpha);
    sm.weights(s, pk.scale_log2);
    const float* v_scale = ring.v_scale + slot * TILE_K + key0;  // [WARP_K]
    unit.raise(v_scale, t4, sm.o, bias);
    accumulate_pv_8bit<Kv>(sm.o, s, ring.v_codes + slot * T::KV_ELEMS + key0 * HEAD_DIM, v_scale, unit.v_mul, bias,
                           off, t4);
  }
  Ring::drain();
  bias.remove(sm.o);
  sm.sum_rows();
  int v_exp = unit.e;
  if (!finish_rows<T>(sm, v_exp, warp, kv_warp, lane)) return;

  // Only real rows are stored; padding heads and tokens past q_len never are.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const stage03::QueryTile::Row row = qt.row(pk, row_warp * 16 + g + 8 * i);
    if (!row.real) continue;
    const float unit = to_output_units(sm, i, v_exp);
    slice.store_row(p, qt.q_row(p, pk, row), sm.o, i, t4, unit, sm.lse(i));
  }
}

// The tile family of 8-bit caches of format F (stage 03's Bf16Tiles is the other).
template <KvFormat F>
struct QuantizedTiles {
  template <int HEAD_DIM>
  using Decode = Tiling<DecodeShape<HEAD_DIM>>;
  template <int HEAD_DIM>
  using Prefill = Tiling<stage03::PrefillShape<HEAD_DIM>>;

  template <class T>
  static constexpr size_t smem_bytes() {
    return CodeLayout<T>::SMEM_BYTES;
  }

  template <class T, Slice S, Mask M>
  static void launch_tile(const AttentionParams& p, const Packing& pk, const S& slice, dim3 grid,
                          cudaStream_t stream) {
    launch_for_slice<S>(quantized_kernel<T, QuantizedKv<F>, S, M>, grid, dim3(T::NUM_THREADS), smem_bytes<T>(),
                        stream, p, pk, slice);
  }
};
static_assert(TileFamily<QuantizedTiles<KvFormat::int8>> && TileFamily<QuantizedTiles<KvFormat::fp8_e4m3>>);
static_assert(stage04::fits_per_sm<QuantizedTiles<KvFormat::int8>, 64>() &&
                  stage04::fits_per_sm<QuantizedTiles<KvFormat::int8>, 128>() &&
                  stage04::fits_per_sm<QuantizedTiles<KvFormat::int8>, 256>(),
              "stage 04's PROGRAMS_PER_SM decode tiles must fit an H100/H200 SM");

}  // namespace
}  // namespace pa::stage05
