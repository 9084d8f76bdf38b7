// 8-bit KV-cache formats (stage 05): the quantization rule, written once for
// the host (batch builders, the oracle, tests) and the device (the write path,
// and the attention kernels that dequantize K/V tiles in registers).
//
// Symmetric, one fp32 scale per head row (one token, one KV head, head_dim values):
//   scale = max|x| / MAX_CODE          MAX_CODE = 127 (int8), 448 (largest finite e4m3)
//   code  = encode(x / scale)          int8: round half to even, clamp to [-127, 127]
//                                      e4m3: round to nearest even, saturate to +-448
//   value = decode(code) * scale       what every kernel and the oracle compute, in fp32
// Symmetric (no zero point) because K and V rows are roughly centred on zero, and
// it keeps dequantization one multiply. -128 is never produced, so int8 stays
// symmetric too.
//
// Special rows, chosen so bad data stays visible and good data never turns bad:
//  - all zeros (+0 or -0): max|x| = 0, scale = 0; x / scale would be 0/0 = NaN,
//    so a zero scale encodes every element as code 0. Dequantized: 0 * 0 = 0.
//  - a NaN anywhere in the row: max|x| is NaN (the maximum below propagates NaN,
//    fmaxf would drop it), so scale = NaN and the whole row dequantizes to NaN,
//    as a NaN in a bf16 cache would reach the output. An infinity gives scale
//    inf, and every element dequantizes to NaN or +-inf (0 * inf, +-127 * inf).
//  - unused cache slots (tests) hold scale NaN: any read of them poisons the output.
//
// Bit-exact between host and device: max is exact, scale and x / scale are single
// IEEE-rounded fp32 divisions (nvcc divides correctly rounded unless
// -use_fast_math / -prec-div=false, which this project does not use), rintf and
// the e4m3 conversion round to nearest even on both sides, and no expression has
// a multiply-add that a compiler could fuse. tests/test_quant.cpp checks it.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__) || defined(PA_HOST_CUDA_HEADERS)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

#include "attention_params.h"

namespace pa {

// The element type a cache of format F stores: the template switch that lets one
// kernel source read bf16 and 8-bit caches.
template <KvFormat F>
using kv_elem_t = std::conditional_t<F == KvFormat::bf16, bf16, uint8_t>;

// max(a, b) that returns NaN when either is NaN (fmaxf returns the other one).
// Order-independent for the values it sees (|x| >= +0), so a warp's butterfly
// and the host's loop agree bit for bit.
__host__ __device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

template <KvFormat F>
struct KvCodec;  // int8 and fp8_e4m3 below; bf16 has no codes

template <>
struct KvCodec<KvFormat::int8> {
  static constexpr float MAX_CODE = 127.0f;
  // x is already divided by the scale. Round half to even (rintf in the default
  // rounding mode; cvt.rni on the device), then clamp: the row's max element
  // lands at 127 +- a few ulps before rounding, never past 127.5.
  __host__ __device__ static uint8_t encode(float x) {
    const float r = fminf(fmaxf(rintf(x), -MAX_CODE), MAX_CODE);
    return static_cast<uint8_t>(static_cast<int8_t>(r));
  }
  __host__ __device__ static float decode(uint8_t code) { return static_cast<float>(static_cast<int8_t>(code)); }
};

template <>
struct KvCodec<KvFormat::fp8_e4m3> {
  static constexpr float MAX_CODE = 448.0f;  // S.1111.110; S.1111.111 is NaN, e4m3 has no infinity
  // Round to nearest even with saturation (satfinite): a value past 448 becomes
  // +-448, never NaN; NaN stays NaN (0x7f). 3 mantissa bits: relative error
  // <= 2^-4 for |x| >= 2^-6 (normal range), absolute <= 2^-10 below (subnormals).
  __host__ __device__ static uint8_t encode(float x) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
  }
  __host__ __device__ static float decode(uint8_t code) {
    __nv_fp8_e4m3 v;
    v.__x = code;
    return static_cast<float>(v);
  }
};

// ---- Codes -> 16-bit MMA operands (the attention kernels' inner loop).
//
// Both MMAs of the kernels take fp16 operands from 8-bit caches (the kernels
// scale Q into fp16's range by a power of two, exactly). No scale here: the
// kernels apply it in fp32. An operand is the code's value plus a constant
// OPERAND_BIAS<F>, exactly: every int8 code + 1152 and every e4m3 value is
// exact in fp16 (integers below 2048; e4m3 has 4 significant bits and exponents
// -9..8), so any exact method gives the same bits.
//  - K: decode4_half2, four codes (one 32-bit word, code 0 in the low byte) ->
//    out[0] = operands 0, 1 and out[1] = operands 2, 3, the lower index in the low half.
//  - V: decode_pair_half below, the same byte of two words -> one pair.
//
// Why bit tricks: every code of every tile a decode step reads becomes an MMA
// operand, and on the GPU the general conversion instructions (int -> float,
// float -> fp16 pack) issue at a quarter of the ALU rate or less, enough to make
// them, not memory, bound the kernel. The device paths below use byte permutes
// and logic ops (or the hardware's paired e4m3 -> fp16 conversion); the host
// path is the plain per-element rule. tests/test_quant.cpp checks both against
// KvCodec::decode for all 256 codes.
//
// Why a bias: an int8 code becomes fp16 in two logic steps as 1152 + code (the
// sign bit flipped gives u = code + 128 in 0..255, and fp16 0x64uu is 1024 + u:
// exponent 2^10, the mantissa counts ones). Taking the 1152 off would cost one
// more instruction per pair, for every code of every tile. The kernels take it
// off once instead, where it is linear: Q (1152 + k) = Q k + 1152 sum(Q) per
// row, and P (1152 + v) = P v + 1152 sum(P), each sum one extra MMA against a
// constant operand (see gqa_packing.cuh).
template <KvFormat F>
inline constexpr float OPERAND_BIAS = F == KvFormat::int8 ? 1152.0f : 0.0f;
// A code's operand value (e4m3's -0 stays -0: -0 + 0 would be +0).
template <KvFormat F>
__host__ __device__ __forceinline__ float operand_value(uint8_t code) {
  const float v = KvCodec<F>::decode(code);
  return OPERAND_BIAS<F> == 0.0f ? v : v + OPERAND_BIAS<F>;
}

__host__ __device__ __forceinline__ uint16_t half_bits(float f) { return __half_as_ushort(__float2half(f)); }

template <KvFormat F>
__host__ __device__ __forceinline__ void decode4_half2(uint32_t w, uint32_t (&out)[2]) {
#if defined(__CUDA_ARCH__)
  if constexpr (F == KvFormat::int8) {
    // u = code + 128 in 0..255 (each byte's sign bit flipped) under a high byte
    // 0x64: fp16 1024 + u = 1152 + code.
    const uint32_t u = w ^ 0x80808080u;
#pragma unroll
    for (int h = 0; h < 2; ++h) out[h] = __byte_perm(u, 0x64u, h == 0 ? 0x4140 : 0x4342);  // u[2h], 0x64, u[2h+1], 0x64
  } else {
    // One hardware conversion per pair, straight into the fp16 operand.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw v = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> (16 * h)), __NV_E4M3);
      out[h] = static_cast<uint32_t>(v.x) | (static_cast<uint32_t>(v.y) << 16);
    }
  }
#else
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = half_bits(operand_value<F>(static_cast<uint8_t>(w >> (16 * h))));
    const uint32_t hi = half_bits(operand_value<F>(static_cast<uint8_t>(w >> (16 * h + 8))));
    out[h] = lo | (hi << 16);
  }
#endif
}

// Byte `byte` (0..3) of two words of codes -> their two operands (value +
// OPERAND_BIAS), exactly, as one fp16 pair: a's in the low half, b's in the
// high half. This is how V operands are built: a and b hold 4 consecutive dims
// of two keys, and the MMA wants the keys of one dim paired in a register (P V
// sums over keys). With the byte index a compile-time constant (unrolled loops)
// each pair costs a byte permute and one more instruction.
template <KvFormat F>
__host__ __device__ __forceinline__ uint32_t decode_pair_half(uint32_t a, uint32_t b, int byte) {
#if defined(__CUDA_ARCH__)
  if constexpr (F == KvFormat::int8) {
    // t = a.byte in byte 0, b.byte in byte 2. Keep those bytes, flip their sign
    // bits (u = code + 128) and put 0x64 above each: fp16 1024 + u = 1152 + code.
    // The mask, the flip and the 0x64 are one logic instruction (lop3 table
    // 0x6A = (a & b) ^ c); written as C++ the compiler splits it in two to keep
    // both constants immediate.
    const uint32_t t = __byte_perm(a, b, byte | (byte << 4) | ((4 + byte) << 8) | ((4 + byte) << 12));
    uint32_t x;
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x) : "r"(t), "n"(0x00FF00FF), "r"(0x64806480u));
    return x;
  } else {
    // The two codes side by side, then one hardware conversion of the pair.
    const uint32_t t = __byte_perm(a, b, byte | ((4 + byte) << 4));
    const __half2_raw v = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(t & 0xFFFFu), __NV_E4M3);
    return static_cast<uint32_t>(v.x) | (static_cast<uint32_t>(v.y) << 16);
  }
#else
  const uint32_t lo = half_bits(operand_value<F>(static_cast<uint8_t>(a >> (8 * byte))));
  const uint32_t hi = half_bits(operand_value<F>(static_cast<uint8_t>(b >> (8 * byte))));
  return lo | (hi << 16);
#endif
}

// scale of a row whose largest magnitude is amax (NaN-propagating, see above).
template <KvFormat F>
__host__ __device__ __forceinline__ float row_scale(float amax) {
  return amax / KvCodec<F>::MAX_CODE;
}

// One element: a zero scale (all-zero row) gives code 0 instead of encode(0/0).
template <KvFormat F>
__host__ __device__ __forceinline__ uint8_t quantize(float x, float scale) {
  return scale == 0.0f ? uint8_t{0} : KvCodec<F>::encode(x / scale);
}

template <KvFormat F>
__host__ __device__ __forceinline__ float dequantize(uint8_t code, float scale) {
  return KvCodec<F>::decode(code) * scale;
}

// One head row, sequentially: x[n] -> codes[n], returns the scale. The host's
// reference for what the device write path (common/batch_ops.cu) stores.
template <KvFormat F>
__host__ __device__ inline float quantize_row(const bf16* x, int n, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = nan_max(amax, fabsf(__bfloat162float(x[i])));
  const float scale = row_scale<F>(amax);
  for (int i = 0; i < n; ++i) codes[i] = quantize<F>(__bfloat162float(x[i]), scale);
  return scale;
}

// ---- runtime-format versions for host code (builders, oracle, tests).

inline const char* name(KvFormat f) {
  switch (f) {
    case KvFormat::bf16: return "bf16";
    case KvFormat::int8: return "int8";
    case KvFormat::fp8_e4m3: return "fp8_e4m3";
  }
  return "?";
}

inline bool is_quantized(KvFormat f) { return f != KvFormat::bf16; }

// Requires an 8-bit format (the bf16 cache has no codes).
inline float quantize_row(KvFormat f, const bf16* x, int n, uint8_t* codes) {
  return f == KvFormat::int8 ? quantize_row<KvFormat::int8>(x, n, codes)
                             : quantize_row<KvFormat::fp8_e4m3>(x, n, codes);
}

inline float dequantize(KvFormat f, uint8_t code, float scale) {
  return f == KvFormat::int8 ? dequantize<KvFormat::int8>(code, scale)
                             : dequantize<KvFormat::fp8_e4m3>(code, scale);
}

}  // namespace pa
