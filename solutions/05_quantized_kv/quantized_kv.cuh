// Stage 05's cache-format policy for stage 03's kernel: 8-bit K/V tiles.
//
// The kernel (solutions/03_gqa_packing/gqa_packing.cuh) copies a tile's codes
// (16 per cp.async) and its per-key fp32 scales into the ring, then calls this
// policy: decode16() turns 16 codes into 16 16-bit values in registers
// (common/quant.cuh's decode4_bf16x2 / decode4_half2, 4 codes at a time), which
// the kernel stores into the K/V tile its MMAs read (K bf16, V fp16), and the
// two scale hooks put each key's scale back in fp32:
//     S[:, j] = (Q . codes_k[j]) * k_scale[j]        (scale_scores)
//     O      += sum_j (p_j * v_scale[j]) codes_v[j]   (weights_fragment: P's MMA operand)
// Every int8 code and every e4m3 value is exact in bf16 and in fp16 (7-bit
// integers; 4-bit mantissas with exponents -9..8), so the kernel matches the
// oracle on the dequantized cache as tightly as stage 03 matches a bf16 cache.
// Stage 06 includes this header for its quantized sliding windows.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/attention_params.h"
#include "common/cuda_compat.cuh"
#include "common/quant.cuh"
#include "common/todo.cuh"
#include "solutions/03_gqa_packing/gqa_packing.cuh"

namespace pa::stage05 {
// Internal linkage, like the kernel it plugs into.
namespace {

// Two floats as an fp16x2 register (lo in the low half).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// The Kv policy of gqa_packing_kernel for an 8-bit cache of format F.
//
// Why V is fp16 and K bf16: S = Q K^T takes Q as it is (bf16) against the K
// codes, exact in bf16. P V needs p_j * v_scale_j as the MMA's A operand, one
// rounding the bf16 path does not have (its p_j = 1 of a lone key is exact);
// in bf16 (8 significant bits) that rounding alone can cost 2^-9 of a value,
// in fp16 (11 bits) 2^-12, below the output's own bf16 rounding. The codes are
// exact in fp16 too (|int8| <= 127, e4m3 spans 2^-9..448). p_j * v_scale_j <= v_scale
// must stay below fp16's 65504: |v| < 8.3e6 (int8), 2.9e7 (e4m3).
template <KvFormat F>
struct QuantizedKv {
  static_assert(F == KvFormat::int8 || F == KvFormat::fp8_e4m3, "8-bit formats only");
  static constexpr KvFormat FORMAT = F;

  // 16 codes (one 16-byte chunk of a K or V row, code 0 in the low byte) ->
  // their 16 values, exactly, as bf16 (K) or fp16 (V, TO_HALF): vals[0] =
  // values 0..7, vals[1] = values 8..15, two per register, the lower index in
  // the low half. No scale: the hooks below apply it in fp32.
  template <bool TO_HALF>
  __device__ __forceinline__ static void decode16(uint4 codes, uint4 (&vals)[2]) {
    //@ TODO 3: dequantize 16 codes exactly: one 32-bit word (4 codes) at a time, decode4_bf16x2 (K) or decode4_half2 (V)
    // common/quant.cuh's decode4_* turn 4 codes into 2 packed pairs with byte
    // permutes and 16-bit math: no per-element conversion instructions.
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
    uint32_t packed[8];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      uint32_t pair[2];
      if constexpr (TO_HALF) {
        decode4_half2<F>(words[w], pair);
      } else {
        decode4_bf16x2<F>(words[w], pair);
      }
      packed[2 * w] = pair[0];
      packed[2 * w + 1] = pair[1];
    }
    vals[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    vals[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    //@ skeleton
    //@ (void)codes;
    //@ vals[0] = vals[1] = make_uint4(0, 0, 0, 0);  // placeholder: every value 0
    //@ if (threadIdx.x == 0) PA_TODO(3);
    //@ end
  }

  // s: the MMA accumulators of one tile (gqa_packing_kernel's s[8-key tile][c0..c3]:
  // this lane holds columns 8j + 2 t4 and 8j + 2 t4 + 1 of rows g and g + 8).
  // k_scale, v_scale: [TILE_K] the tile's per-key scales (0 past the end).
  //  - scale_scores: S's column j times key j's k scale (s holds Q . codes).
  //  - weights_fragment: P's A fragment for keys 16kk..16kk+15 (layout of
  //    stage 03's TODO 5), each weight times its key's v scale, in fp16.
  template <int S_TILES>
  __device__ __forceinline__ static void scale_scores(float (&s)[S_TILES][4], const float* k_scale, int t4) {
    //@ TODO 4: the scales in fp32: column 8j + 2t4 (+1) of S times that key's k scale; of P times its v scale (then packed as fp16)
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
      const float2 ks = *reinterpret_cast<const float2*>(k_scale + 8 * j + 2 * t4);  // keys 8j + 2t4, +1
      s[j][0] *= ks.x, s[j][1] *= ks.y;  // row g
      s[j][2] *= ks.x, s[j][3] *= ks.y;  // row g + 8
    }
  }
  template <int S_TILES>
  __device__ __forceinline__ static void weights_fragment(const float (&s)[S_TILES][4], int kk, const float* v_scale,
                                                          int t4, uint32_t (&pa)[4]) {
    const float2 lo = *reinterpret_cast<const float2*>(v_scale + 16 * kk + 2 * t4);      // keys 16kk + 2t4, +1
    const float2 hi = *reinterpret_cast<const float2*>(v_scale + 16 * kk + 8 + 2 * t4);  // keys 16kk + 8 + 2t4, +1
    pa[0] = pack_half2(s[2 * kk][0] * lo.x, s[2 * kk][1] * lo.y);  // row g
    pa[1] = pack_half2(s[2 * kk][2] * lo.x, s[2 * kk][3] * lo.y);  // row g + 8
    pa[2] = pack_half2(s[2 * kk + 1][0] * hi.x, s[2 * kk + 1][1] * hi.y);
    pa[3] = pack_half2(s[2 * kk + 1][2] * hi.x, s[2 * kk + 1][3] * hi.y);
    //@ skeleton
    //@ (void)s, (void)k_scale, (void)t4;  // placeholder: S keeps the unscaled codes' dot products
    //@ if (threadIdx.x == 0) PA_TODO(4);
    //@ }
    //@ template <int S_TILES>
    //@ __device__ __forceinline__ static void weights_fragment(const float (&s)[S_TILES][4], int kk, const float* v_scale,
    //@                                                         int t4, uint32_t (&pa)[4]) {
    //@ (void)s, (void)kk, (void)v_scale, (void)t4;
    //@ pa[0] = pa[1] = pa[2] = pa[3] = 0;  // placeholder: P = 0
    //@ end
  }
};

}  // namespace
}  // namespace pa::stage05
