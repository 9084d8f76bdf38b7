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

}  // namespace pa
