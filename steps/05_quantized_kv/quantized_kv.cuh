// Stage 05's cache-format policy for stage 03's kernel: 8-bit K/V tiles.
//
// The kernel (solutions/03_gqa_packing/gqa_packing.cuh) copies a tile's codes
// (16 per cp.async) and its per-key fp32 scales into the ring; its lanes read
// the codes they need straight into registers and call this policy to turn them
// into fp16 MMA operands (common/quant.cuh's decode4_half2 and
// decode_pair_half), and the two scale hooks put each key's scale back in fp32:
//     S[:, j] = (Q . codes_k[j]) * k_scale[j]        (scale_scores; Q in fp16, scaled: see the kernel)
//     O      += sum_j (p_j * v_scale[j]) codes_v[j]   (weights_fragment: P's MMA operand)
// Every int8 code and every e4m3 value is exact in fp16 (integers below 2048;
// 4-bit mantissas with exponents -9..8), so the kernel matches the oracle on the
// dequantized cache as tightly as stage 03 matches a bf16 cache. (int8 operands
// are code + 1152, also exact; the kernel takes the 1152 off in fp32.)
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
// Why fp16 operands: the codes are exact in fp16, and they become fp16 more
// cheaply than bf16 (an e4m3 pair is one hardware conversion). Q is bf16, so
// the kernel scales it by a power of two into fp16's range once per program.
// P V needs p_j * v_scale_j as the MMA's A operand, one rounding the bf16 path
// does not have (its p_j = 1 of a lone key is exact); in fp16 (11 significant
// bits) it costs at most 2^-12 of a value, below the output's own bf16
// rounding. p_j * v_scale_j <= v_scale must stay below fp16's 65504:
// |v| < 8.3e6 (int8), 2.9e7 (e4m3).
template <KvFormat F>
struct QuantizedKv {
  static_assert(F == KvFormat::int8 || F == KvFormat::fp8_e4m3, "8-bit formats only");
  static constexpr KvFormat FORMAT = F;

  // K: one word of 4 codes of one key (code 0 in the low byte) -> the B
  // fragment of one k-step: kb[0] = values 0, 1 and kb[1] = values 2, 3 as fp16
  // pairs (the kernel orders Q's dims so that 4 consecutive codes are one
  // k-step's b0, b1).
  __device__ __forceinline__ static void k_fragment(uint32_t word, uint32_t (&kb)[2]) {
    // TODO 3: codes -> exact fp16 operands, without scales: a word of 4 K codes -> two fp16 pairs (decode4_half2); byte `byte` of two keys' V words -> one fp16 pair (decode_pair_half)
    (void)word;
    kb[0] = kb[1] = 0;  // placeholder: K = 0
    if (threadIdx.x == 0) PA_TODO(3);
    }
    __device__ __forceinline__ static uint32_t v_fragment(uint32_t a, uint32_t b, int byte) {
    (void)a, (void)b, (void)byte;
    return 0;  // placeholder: V = 0
  }

  // s: the MMA accumulators of one warp's keys (gqa_packing_kernel's s[8-key
  // tile][c0..c3]); with 8-bit caches this lane's columns of tiles 2kk and
  // 2kk + 1 are keys 16kk + 4t4 + 0, 1 and 16kk + 4t4 + 2, 3, for rows g (c0, c1)
  // and g + 8 (c2, c3). k_scale, v_scale: [WARP_K] those keys' scales (0 past the end).
  //  - scale_scores: each score times its key's k scale and score_factor (s
  //    holds (Q / score_factor) . codes: the kernel's fp16 Q is scaled).
  //  - weights_fragment: P's A fragment for keys 16kk..16kk+15 (k = 2t4, 2t4+1
  //    from tile 2kk, k = 2t4+8, 2t4+9 from tile 2kk + 1, as in stage 03's TODO 5),
  //    each weight times its key's v scale, in fp16.
  template <int S_TILES>
  __device__ __forceinline__ static void scale_scores(float (&s)[S_TILES][4], const float* k_scale, float score_factor,
                                                      int t4) {
    // TODO 4: the scales in fp32: each score times its key's k scale (and score_factor); each weight of P times its key's v scale (then packed as fp16)
    (void)s, (void)k_scale, (void)score_factor, (void)t4;  // placeholder: S keeps the unscaled codes' dot products
    if (threadIdx.x == 0) PA_TODO(4);
    }
    template <int S_TILES>
    __device__ __forceinline__ static void weights_fragment(const float (&s)[S_TILES][4], int kk, const float* v_scale,
                                                            int t4, uint32_t (&pa)[4]) {
    (void)s, (void)kk, (void)v_scale, (void)t4;
    pa[0] = pa[1] = pa[2] = pa[3] = 0;  // placeholder: P = 0
  }
};

}  // namespace
}  // namespace pa::stage05
