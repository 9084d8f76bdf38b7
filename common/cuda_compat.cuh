// One include for every .cu file: the CUDA runtime and number formats on a GPU
// build, the course's CPU runtime otherwise (which the CPU build force-includes
// anyway; including it again here keeps editors and readers oriented).
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#else
#include "runtime/cpu_runtime.h"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pa {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// log2f as the GPU computes it, on both flavors: on the device, log2f itself
// (CUDA 13, without -use_fast_math: a degree-10 polynomial of fused multiply-adds,
// read from `nvcc -ptx`); elsewhere the same operations in the same order, so the
// CPU flavor's lse has the GPU's bits (the C library's log2f may differ in the
// last place).
__host__ __device__ __forceinline__ float gpu_log2f(float x) {
#if defined(__CUDA_ARCH__)
  return log2f(x);
#else
  const bool tiny = x < 1.17549435e-38f;  // below FLT_MIN: scale subnormals up by 2^23
  const float a = tiny ? x * 8388608.0f : x;
  const float bias = tiny ? -23.0f : 0.0f;
  uint32_t ia;
  std::memcpy(&ia, &a, 4);
  const int32_t e = static_cast<int32_t>((ia - 0x3f3504f3u) & 0xff800000u);  // exponent; mantissa in [sqrt(1/2), sqrt(2))
  const uint32_t im = ia - static_cast<uint32_t>(e);
  auto bits = [](uint32_t u) {
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  };
  const float m = bits(im);
  const float i = std::fma(static_cast<float>(e), bits(0x34000000u), bias);  // e * 2^-23 + bias
  const float f = m - 1.0f;
  float r = std::fma(bits(0x3DC6B27Fu), f, bits(0xBE2C7F30u));  // CUDA 13's coefficients, bit for bit
  r = std::fma(r, f, bits(0x3E2FCF2Au));                 
  r = std::fma(r, f, bits(0xBE374E43u));                
  r = std::fma(r, f, bits(0x3E520BF4u));                 
  r = std::fma(r, f, bits(0xBE763C8Bu));                
  r = std::fma(r, f, bits(0x3E93BF99u));                 
  r = std::fma(r, f, bits(0xBEB8AA49u));                
  r = std::fma(r, f, bits(0x3EF6384Au));                 
  r = std::fma(r, f, bits(0xBF38AA3Bu));                
  r = f * r;
  r = f * r;
  r = std::fma(f, bits(0x3FB8AA3Bu), r);  // + f * log2(e)
  float y = i + r;
  if (!(ia < 0x7f800000u)) y = std::fma(a, INFINITY, INFINITY);  // +inf -> inf; NaN and negatives -> NaN
  return a == 0.0f ? -INFINITY : y;
#endif
}

// 2^x from fused multiply-adds alone, the same operations in the same order on
// both flavors, so its bits do not depend on the machine (the bit-exact build,
// -DPA_BIT_EXACT=ON). The GPU's exp2f is ex2.approx, a hardware approximation with
// no published bit-exact definition; this is what the CPU can reproduce. x is
// split as j + f with j = rint(x) and f in [-1/2, 1/2] (exact); 2^f is a degree-6
// polynomial fitted to the relative error (at most 1 ulp, tests/test_exact_exp2.cpp
// checks it against the C library's exp2); 2^j is applied as two exact powers of
// two, so that 2^-127..2^128 neither overflow nor flush on the way. Below -127
// the result is 0 (as a masked score's -inf must give), above 128 +inf, NaN
// stays NaN.
__host__ __device__ __forceinline__ float exact_exp2(float x) {
  const float xc = x > 128.0f ? 128.0f : (x < -127.0f ? -127.0f : x);  // NaN passes through
  const float j = rintf(xc);
  const float f = xc - j;  // exact: |f| <= 1/2 and j is x's nearest integer
  float p = 0x1.41d332p-13f;
  p = fmaf(p, f, 0x1.5f456ap-10f);
  p = fmaf(p, f, 0x1.3b2dbcp-7f);
  p = fmaf(p, f, 0x1.c6aed4p-5f);
  p = fmaf(p, f, 0x1.ebfbdap-3f);
  p = fmaf(p, f, 0x1.62e430p-1f);
  p = fmaf(p, f, 1.0f);
  const int e = static_cast<int>(xc == xc ? j : 0.0f);  // (a NaN's conversion is undefined on the CPU)
  const int e1 = e >> 1, e2 = e - e1;                 // each in [-64, 64]: normal powers of two
  auto pow2 = [](int k) {  // 2^k for a normal k, from its exponent bits
    const uint32_t u = static_cast<uint32_t>(k + 127) << 23;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float v;
    std::memcpy(&v, &u, 4);
    return v;
#endif
  };
  const float r = p * pow2(e1) * pow2(e2);
  return x < -127.0f ? 0.0f : r;
}

// 2^x as the softmax takes its weights and rescales: the device's exp2f
// (ex2.approx on a GPU), or exact_exp2 in the bit-exact build, where the CPU
// and GPU flavors agree bit for bit (bench/crosscheck).
__host__ __device__ __forceinline__ float softmax_exp2(float x) {
#if defined(PA_BIT_EXACT) && PA_BIT_EXACT
  return exact_exp2(x);
#elif defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

}  // namespace pa
