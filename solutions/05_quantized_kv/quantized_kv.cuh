// Stage 05's operands: how 8-bit K/V codes and their per-key scales become
// MMA operands in registers. quantized_tile.cuh is the tile kernel that uses
// them.
//
// A lane reads the codes it needs straight from the shared-memory code tiles
// (16-byte loads) into registers and turns them into fp16 MMA operands
// (common/quant.cuh's decode4_half2 and decode_pair_half); the per-key fp32
// scales are applied in fp32 to S, and to P before it becomes an operand:
//     S[:, j] = (Q . codes_k[j]) * k_scale[j]                (scale_scores; Q in fp16, scaled: see the kernel)
//     O      += sum_j (p_j * v_scale[j] * v_mul) codes_v[j]  (weights_fragment: P's MMA operand; O in units of 1 / v_mul)
// Every int8 code and every e4m3 value is exact in fp16 (integers below 2048;
// 4-bit mantissas with exponents -9..8), so the kernel matches the oracle on the
// dequantized cache as tightly as stage 03 matches a bf16 cache. (int8 V
// operands are code + 1152, also exact; the kernel takes the 1152 off in fp32.
// int8 K operands are the codes themselves: see k_fragment.)
//
// Why fp16 operands: the codes are exact in fp16, and they become fp16 more
// cheaply than bf16 (an e4m3 pair is one hardware conversion). Q is bf16, so
// the kernel scales it by a power of two into fp16's range once per program.
// P V needs the weight times its key's v scale as the MMA's A operand, one
// rounding the bf16 path does not have (its p_j = 1 of a lone key is exact); in
// fp16 (11 significant bits) it costs at most 2^-12 of a value, below the
// output's own bf16 rounding. The v scales are fp32 and may be anything from
// 1e-38 to 1e38, far outside fp16's range (6e-8 .. 65504), so the weights are
// taken relative to a unit: the kernel passes v_mul = 2^(14 - e), the largest v
// scale its warp has seen in [2^e, 2^(e+1)), so p_j * v_scale_j * v_mul < 2^15
// fits fp16, with the keys that matter (above 2^-29 of the largest) in its
// normal range; O is kept in units of 2^(e - 14) and converted back at the end.
//
// The code tiles are read in an order of our choosing. Both MMAs sum over an
// index whose order is free, as long as both operands agree on it:
//  - S = Q K^T sums over dims. In k-step ks, lane (g, t4) supplies B's k = 2t4,
//    2t4+1, 2t4+8, 2t4+9 for key g. Let them be the 4 consecutive dims
//    qk_dim(ks, t4) + 0..3: one 32-bit word of key g's codes. Q's A fragment is
//    read in the same dim order, so S is unchanged.
//  - O += P V sums over keys. Lane (g, t4) supplies B's k = 2t4, 2t4+1, 2t4+8,
//    2t4+9 for dim n. Let them be keys 4t4 + 0..3 of the 16-key slice: the lane
//    reads those 4 key rows and pairs their bytes with byte permutes. P's A
//    fragment comes from S's accumulators, so S's columns must hold the keys in
//    that order: column_key(), which also decides which row each K load reads.
//  - O's dims are free too: V n-tile i, column n is dim (HEAD_DIM / 8) n + i, so
//    a lane's bytes of a V row are one contiguous run. The output is put back in
//    dim order through shared memory at the end.
// A named guard, shared by the learner's copy (see quantized_tile.cuh).
#ifndef PA_STAGE05_QUANTIZED_KV_CUH
#define PA_STAGE05_QUANTIZED_KV_CUH

#include <cstdint>

#include "common/attention_params.h"
#include "common/cuda_compat.cuh"
#include "common/mma_fragments.cuh"
#include "common/quant.cuh"
#include "common/todo.cuh"

namespace pa::stage05 {
// Internal linkage, like the kernel that uses it.
namespace {

// The key (of the warp's keys in a tile) whose score is column c (0..7) of S's
// 8-key tile j: keys 4t4 + 0..3 of each 16-key slice sit in columns 2t4, 2t4 + 1
// of tiles 2kk, 2kk + 1, ordered for P V as above.
__device__ __forceinline__ int column_key(int j, int c) { return 16 * (j >> 1) + 4 * (c >> 1) + 2 * (j & 1) + (c & 1); }

// The first of the 4 dims that k = 2t4, 2t4+1, 2t4+8, 2t4+9 of Q K^T's k-step
// ks stand for: word ks % 4 of 16-byte chunk t4 + 4 (ks / 4) of a key row.
__device__ __forceinline__ int qk_dim(int ks, int t4) { return 64 * (ks >> 2) + 16 * t4 + 4 * (ks & 3); }

// Byte offsets of (row, 16-byte chunk) in code tiles [rows, HEAD_DIM], swizzled
// for the reads above (a 16-byte shared load is served 8 lanes at a time; those
// 8 must hit 8 different 16-byte bank groups of a 128-byte line).
//  - K: 8 lanes read chunks t4 (+ 4c) of two keys of different parity: XOR
//    chunk bit 2 with the parity. 64-byte rows (head_dim 64) need nothing.
//  - V: 8 lanes read the chunk(s) of their g (two values of g) in rows 4t4 + e,
//    t4 = 0..3: XOR the chunk with a function of t4 that separates the 4 rows.
//    (At head_dim 64 each row is only half a bank line, so 2 lanes share a group.)
template <int HEAD_DIM>
__device__ __forceinline__ int k_code_offset(int row, int chunk) {
  const int x = HEAD_DIM >= 128 ? (row & 1) << 2 : 0;
  return row * HEAD_DIM + 16 * (chunk ^ x);
}
template <int HEAD_DIM>
__device__ __forceinline__ int v_code_offset(int row, int chunk) {
  const int t = (row >> 2) & 3;
  const int x = HEAD_DIM == 64 ? t : HEAD_DIM == 128 ? 2 * t : (t & 1) | ((t & 2) << 1);
  return row * HEAD_DIM + 16 * (chunk ^ x);
}

// An fp16 pair of operands (OPERAND_BIAS<int8> + code) -> the codes, exactly:
// one fp16 subtraction of 1152 (0x6480) from both halves.
__device__ __forceinline__ uint32_t minus_bias(uint32_t pair) {
#if defined(__CUDA_ARCH__)
  uint32_t x;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(x) : "r"(pair), "r"(0x64806480u));
  return x;
#else
  const float lo = __half2float(__ushort_as_half(static_cast<unsigned short>(pair & 0xFFFFu)));
  const float hi = __half2float(__ushort_as_half(static_cast<unsigned short>(pair >> 16)));
  return static_cast<uint32_t>(half_bits(lo - OPERAND_BIAS<KvFormat::int8>)) |
         (static_cast<uint32_t>(half_bits(hi - OPERAND_BIAS<KvFormat::int8>)) << 16);
#endif
}

// The operands of an 8-bit cache of format F.
template <KvFormat F>
struct QuantizedKv {
  static_assert(F == KvFormat::int8 || F == KvFormat::fp8_e4m3, "8-bit formats only");
  static constexpr KvFormat FORMAT = F;
  // What every V operand carries on top of its code's value (common/quant.cuh):
  // 1152 for int8, 0 for e4m3. The kernel takes it off in fp32 (OperandBias).
  // K operands carry none (k_fragment).
  static constexpr float V_BIAS = OPERAND_BIAS<F>;

  // K: one word of 4 codes of one key (code 0 in the low byte) -> the B
  // fragment of one k-step: kb[0] = values 0, 1 and kb[1] = values 2, 3 as
  // fp16 pairs (the kernel orders Q's dims so that 4 consecutive codes are one
  // k-step's b0, b1). The codes' values exactly, without the bias: with it, the
  // MMA would sum q * (1152 + code) in fp32 and the scores would lose
  // 2^-24 * 1152 * sum|q| * k_scale to rounding (of |q . k| ~ sum|q| * k_scale
  // * typical |code|), too much for the lse with large keys or an outlier
  // channel (whose other codes collapse to a few units). One fp16 subtraction
  // per pair (minus_bias) keeps them exact.
  __device__ __forceinline__ static void k_fragment(uint32_t word, uint32_t (&kb)[2]) {
    //@ TODO 3: a word of 4 K codes -> two exact fp16 pairs of the codes' values, without scales or bias (common/quant.cuh's decode4_half2: byte permutes, no per-element conversion, then minus_bias below for int8)
    decode4_half2<F>(word, kb);
    if constexpr (OPERAND_BIAS<F> != 0.0f) kb[0] = minus_bias(kb[0]), kb[1] = minus_bias(kb[1]);
    //@ skeleton
    //@ (void)word;
    //@ kb[0] = kb[1] = 0;  // placeholder: K = 0
    //@ if (threadIdx.x == 0) PA_TODO(3);
    //@ end
  }

  // V: one dim (byte `byte` of two words, each 4 dims of one key) of two keys
  // -> an fp16 pair, key a in the low half: half of a B fragment of P V.
  __device__ __forceinline__ static uint32_t v_fragment(uint32_t a, uint32_t b, int byte) {
    //@ TODO 4: byte `byte` of two keys' V words -> one exact fp16 pair, key a low (common/quant.cuh's decode_pair_half)
    return decode_pair_half<F>(a, b, byte);
    //@ skeleton
    //@ (void)a, (void)b, (void)byte;
    //@ if (threadIdx.x == 0) PA_TODO(4);
    //@ return 0;  // placeholder: V = 0
    //@ end
  }

  // s: the MMA accumulators of one warp's keys (s[8-key tile][c0..c3]); this
  // lane's columns of tiles 2kk and 2kk + 1 are keys 16kk + 4t4 + 0, 1 and
  // 16kk + 4t4 + 2, 3, for rows g (c0, c1) and g + 8 (c2, c3). k_scale: [WARP_K]
  // those keys' scales (0 past the end). Each score gets its key's k scale and
  // score_factor (s holds (Q / score_factor) . codes: the kernel's fp16 Q is scaled).
  template <int S_TILES>
  __device__ __forceinline__ static void scale_scores(float (&s)[S_TILES][4], const float* k_scale, float score_factor,
                                                      int t4) {
    //@ TODO 5: each score times its key's k scale and score_factor, in fp32 (this lane's keys 16kk + 4t4 + 0..3: one float4 of scales)
#pragma unroll
    for (int kk = 0; kk < S_TILES / 2; ++kk) {
      float4 ks = *reinterpret_cast<const float4*>(k_scale + 16 * kk + 4 * t4);  // keys 16kk + 4t4 + 0..3
      ks.x *= score_factor, ks.y *= score_factor, ks.z *= score_factor, ks.w *= score_factor;
      s[2 * kk][0] *= ks.x, s[2 * kk][1] *= ks.y;  // row g
      s[2 * kk][2] *= ks.x, s[2 * kk][3] *= ks.y;  // row g + 8
      s[2 * kk + 1][0] *= ks.z, s[2 * kk + 1][1] *= ks.w;
      s[2 * kk + 1][2] *= ks.z, s[2 * kk + 1][3] *= ks.w;
    }
    //@ skeleton
    //@ (void)s, (void)k_scale, (void)score_factor, (void)t4;  // placeholder: S keeps the unscaled codes' dot products
    //@ if (threadIdx.x == 0) PA_TODO(5);
    //@ end
  }

  // P's A fragment for keys 16kk..16kk+15 (k = 2t4, 2t4+1 from tile 2kk,
  // k = 2t4+8, 2t4+9 from tile 2kk + 1, as in stage 03's TODO 5), each weight
  // times its key's v scale and v_mul (a power of two that brings the warp's
  // largest v scale into [2^14, 2^15), so that every product fits fp16 whatever
  // the scales' magnitude), packed as fp16.
  // v_scale: [WARP_K].
  template <int S_TILES>
  __device__ __forceinline__ static void weights_fragment(const float (&s)[S_TILES][4], int kk, const float* v_scale,
                                                          float v_mul, int t4, uint32_t (&pa)[4]) {
    //@ TODO 6: P's A fragment for keys 16kk..16kk+15: each weight times its key's v scale and v_mul (in fp32), packed as fp16 pairs
    float4 vs = *reinterpret_cast<const float4*>(v_scale + 16 * kk + 4 * t4);  // keys 16kk + 4t4 + 0..3
    vs.x *= v_mul, vs.y *= v_mul, vs.z *= v_mul, vs.w *= v_mul;
    pa[0] = pack_half2(s[2 * kk][0] * vs.x, s[2 * kk][1] * vs.y);  // row g
    pa[1] = pack_half2(s[2 * kk][2] * vs.x, s[2 * kk][3] * vs.y);  // row g + 8
    pa[2] = pack_half2(s[2 * kk + 1][0] * vs.z, s[2 * kk + 1][1] * vs.w);
    pa[3] = pack_half2(s[2 * kk + 1][2] * vs.z, s[2 * kk + 1][3] * vs.w);
    //@ skeleton
    //@ (void)s, (void)kk, (void)v_scale, (void)v_mul, (void)t4;
    //@ pa[0] = pa[1] = pa[2] = pa[3] = 0;  // placeholder: P = 0
    //@ if (threadIdx.x == 0) PA_TODO(6);
    //@ end
  }
};

}  // namespace
}  // namespace pa::stage05

#endif  // PA_STAGE05_QUANTIZED_KV_CUH
