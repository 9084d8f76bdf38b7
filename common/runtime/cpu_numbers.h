// Number formats and vector types of the CUDA headers (cuda_bf16.h, cuda_fp16.h,
// cuda_fp8.h, vector_types.h) for the CPU runtime, with the same names, sizes and
// rounding: a kernel that stores __nv_bfloat16 on the CPU writes the same bits an
// H200 would. Part of cpu_runtime.h; not included on its own.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// ---- vector types (alignment as in CUDA's vector_types.h: vectorized loads
// through reinterpret_cast<float4*> rely on it)
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) double2 { double x, y; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace cpucuda::detail {

// Rounds a finite, non-negative float to a narrower binary format with
// round-to-nearest-even. Returns the code without the sign bit; a result past the
// format's largest finite value is returned as is, for the caller to saturate or
// turn into infinity.
inline uint32_t round_to_narrow(float a, int man_bits, int bias) {
  const uint32_t u = std::bit_cast<uint32_t>(a);
  const int exp = static_cast<int>(u >> 23) - 127;
  if (exp < 1 - bias) {
    // Subnormal (or zero) in the target: count units of its smallest step. The
    // scaling by a power of two is exact, and nearbyint rounds half to even.
    return static_cast<uint32_t>(std::nearbyint(std::ldexp(a, man_bits + bias - 1)));
  }
  const int shift = 23 - man_bits;
  uint32_t r = u >> shift;
  const uint32_t rem = u & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // a carry moves into the exponent, as it should
  return r - (static_cast<uint32_t>(127 - bias) << man_bits);
}

inline float decode_narrow(uint32_t code, int exp_bits, int man_bits, int bias) {
  const uint32_t sign = code >> (exp_bits + man_bits);
  const uint32_t e = (code >> man_bits) & ((1u << exp_bits) - 1u);
  const uint32_t m = code & ((1u << man_bits) - 1u);
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - man_bits)
                           : std::ldexp(static_cast<float>((1u << man_bits) | m), static_cast<int>(e) - bias - man_bits);
  return sign ? -mag : mag;
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // RNE; overflow becomes inf
}

inline uint16_t float_to_half_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // what CUDA's host conversion returns for NaN
  if ((u & 0x7fffffffu) == 0x7f800000u) return sign | 0x7c00u;
  const uint32_t code = round_to_narrow(std::fabs(f), 10, 15);
  return static_cast<uint16_t>(sign | (code >= 0x7c00u ? 0x7c00u : code));
}

inline float half_bits_to_float(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u) {
    const float inf = std::bit_cast<float>(0x7f800000u);
    if (h & 0x03ffu) return std::bit_cast<float>(0x7fc00000u | (static_cast<uint32_t>(h & 0x8000u) << 16));
    return (h & 0x8000u) ? -inf : inf;
  }
  return decode_narrow(h, 5, 10, 15);
}

// fp8 e4m3 (OCP / NVIDIA): bias 7, no infinities, S.1111.111 is NaN, largest 448.
inline uint8_t float_to_e4m3_bits(float f, bool saturate) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7f;
  if ((u & 0x7fffffffu) == 0x7f800000u) return saturate ? (sign | 0x7e) : 0x7f;
  const uint32_t code = round_to_narrow(std::fabs(f), 3, 7);
  if (code > 0x7e) return saturate ? (sign | 0x7e) : 0x7f;  // past 448 (0x7f is NaN, not a number)
  return static_cast<uint8_t>(sign | code);
}

inline float e4m3_bits_to_float(uint8_t c) {
  if ((c & 0x7f) == 0x7f) return std::bit_cast<float>(0x7fc00000u);
  return decode_narrow(c, 4, 3, 7);
}

// fp8 e5m2: an IEEE-like format (bias 15, infinities), largest finite 57344.
inline uint8_t float_to_e5m2_bits(float f, bool saturate) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7f;
  const bool is_inf = (u & 0x7fffffffu) == 0x7f800000u;
  const uint32_t code = is_inf ? 0x7cu : round_to_narrow(std::fabs(f), 2, 15);
  if (code >= 0x7c) return sign | (saturate ? 0x7b : 0x7c);
  return static_cast<uint8_t>(sign | code);
}

inline float e5m2_bits_to_float(uint8_t c) {
  return half_bits_to_float(static_cast<uint16_t>(c) << 8);  // e5m2 is the top byte of a half
}

}  // namespace cpucuda::detail

// ---- bfloat16
struct __nv_bfloat16_raw {
  unsigned short x;
};

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;  // trivial, so __shared__ arrays of it need no initialization guard
  __nv_bfloat16(float f) : __x(cpucuda::detail::float_to_bf16_bits(f)) {}
  __nv_bfloat16(double f) : __nv_bfloat16(static_cast<float>(f)) {}
  __nv_bfloat16(int i) : __nv_bfloat16(static_cast<float>(i)) {}
  __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
  operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(__x) << 16); }
  operator __nv_bfloat16_raw() const { return {__x}; }
};

struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return {__nv_bfloat16(a), __nv_bfloat16(a)}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {static_cast<float>(v.x), static_cast<float>(v.y)}; }
inline float __low2float(__nv_bfloat162 v) { return static_cast<float>(v.x); }
inline float __high2float(__nv_bfloat162 v) { return static_cast<float>(v.y); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }

// ---- half
struct __half_raw {
  unsigned short x;
};

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(cpucuda::detail::float_to_half_bits(f)) {}
  __half(double f) : __half(static_cast<float>(f)) {}
  __half(int i) : __half(static_cast<float>(i)) {}
  __half(__half_raw r) : __x(r.x) {}
  operator float() const { return cpucuda::detail::half_bits_to_float(__x); }
  operator __half_raw() const { return {__x}; }
};

struct alignas(4) __half2 {
  __half x, y;
};
using half = __half;
using half2 = __half2;

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline float2 __half22float2(__half2 v) { return {static_cast<float>(v.x), static_cast<float>(v.y)}; }
inline float __low2float(__half2 v) { return static_cast<float>(v.x); }
inline float __high2float(__half2 v) { return static_cast<float>(v.y); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }

// Arithmetic on the 16-bit types computes in float and rounds once, which is what
// the hardware's single-instruction add/mul/fma do.
#define CPUCUDA_NARROW_OPS_(T)                                                                  \
  inline T operator+(T a, T b) { return T(static_cast<float>(a) + static_cast<float>(b)); }     \
  inline T operator-(T a, T b) { return T(static_cast<float>(a) - static_cast<float>(b)); }     \
  inline T operator*(T a, T b) { return T(static_cast<float>(a) * static_cast<float>(b)); }     \
  inline T operator/(T a, T b) { return T(static_cast<float>(a) / static_cast<float>(b)); }     \
  inline T operator-(T a) { T r = a; r.__x ^= 0x8000u; return r; }                              \
  inline T& operator+=(T& a, T b) { return a = a + b; }                                         \
  inline T& operator-=(T& a, T b) { return a = a - b; }                                         \
  inline T& operator*=(T& a, T b) { return a = a * b; }                                         \
  inline T& operator/=(T& a, T b) { return a = a / b; }                                         \
  inline bool operator==(T a, T b) { return static_cast<float>(a) == static_cast<float>(b); }   \
  inline bool operator!=(T a, T b) { return static_cast<float>(a) != static_cast<float>(b); }   \
  inline bool operator<(T a, T b) { return static_cast<float>(a) < static_cast<float>(b); }     \
  inline bool operator<=(T a, T b) { return static_cast<float>(a) <= static_cast<float>(b); }   \
  inline bool operator>(T a, T b) { return static_cast<float>(a) > static_cast<float>(b); }     \
  inline bool operator>=(T a, T b) { return static_cast<float>(a) >= static_cast<float>(b); }   \
  inline T __hadd(T a, T b) { return a + b; }                                                   \
  inline T __hsub(T a, T b) { return a - b; }                                                   \
  inline T __hmul(T a, T b) { return a * b; }                                                   \
  inline T __hdiv(T a, T b) { return a / b; }                                                   \
  inline T __hneg(T a) { return -a; }                                                           \
  inline T __hfma(T a, T b, T c) {                                                              \
    return T(std::fma(static_cast<float>(a), static_cast<float>(b), static_cast<float>(c)));    \
  }                                                                                             \
  inline T __hmax(T a, T b) { return T(std::fmax(static_cast<float>(a), static_cast<float>(b))); } \
  inline T __hmin(T a, T b) { return T(std::fmin(static_cast<float>(a), static_cast<float>(b))); } \
  inline bool __hisnan(T a) { return std::isnan(static_cast<float>(a)); }
CPUCUDA_NARROW_OPS_(__nv_bfloat16)
CPUCUDA_NARROW_OPS_(__half)
#undef CPUCUDA_NARROW_OPS_

// ---- fp8 (cuda_fp8.h)
typedef unsigned char __nv_fp8_storage_t;
enum __nv_saturation_t { __NV_NOSAT = 0, __NV_SATFINITE = 1 };
enum __nv_fp8_interpretation_t { __NV_E4M3 = 0, __NV_E5M2 = 1 };

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
  return fmt == __NV_E4M3 ? cpucuda::detail::float_to_e4m3_bits(x, sat == __NV_SATFINITE)
                          : cpucuda::detail::float_to_e5m2_bits(x, sat == __NV_SATFINITE);
}

// The constructors saturate to the largest finite value (satfinite), as CUDA's do.
struct __nv_fp8_e4m3 {
  __nv_fp8_storage_t __x;
  __nv_fp8_e4m3() = default;
  explicit __nv_fp8_e4m3(float f) : __x(cpucuda::detail::float_to_e4m3_bits(f, true)) {}
  explicit __nv_fp8_e4m3(double f) : __nv_fp8_e4m3(static_cast<float>(f)) {}
  explicit __nv_fp8_e4m3(__half h) : __nv_fp8_e4m3(static_cast<float>(h)) {}
  explicit __nv_fp8_e4m3(__nv_bfloat16 b) : __nv_fp8_e4m3(static_cast<float>(b)) {}
  explicit operator float() const { return cpucuda::detail::e4m3_bits_to_float(__x); }
  explicit operator __half() const { return __half(static_cast<float>(*this)); }
  explicit operator __nv_bfloat16() const { return __nv_bfloat16(static_cast<float>(*this)); }
};

struct __nv_fp8_e5m2 {
  __nv_fp8_storage_t __x;
  __nv_fp8_e5m2() = default;
  explicit __nv_fp8_e5m2(float f) : __x(cpucuda::detail::float_to_e5m2_bits(f, true)) {}
  explicit __nv_fp8_e5m2(double f) : __nv_fp8_e5m2(static_cast<float>(f)) {}
  explicit __nv_fp8_e5m2(__half h) : __nv_fp8_e5m2(static_cast<float>(h)) {}
  explicit __nv_fp8_e5m2(__nv_bfloat16 b) : __nv_fp8_e5m2(static_cast<float>(b)) {}
  explicit operator float() const { return cpucuda::detail::e5m2_bits_to_float(__x); }
  explicit operator __half() const { return __half(static_cast<float>(*this)); }
  explicit operator __nv_bfloat16() const { return __nv_bfloat16(static_cast<float>(*this)); }
};

static_assert(sizeof(__nv_bfloat16) == 2 && std::is_trivially_copyable_v<__nv_bfloat16>);
static_assert(sizeof(__half) == 2 && std::is_trivially_copyable_v<__half>);
static_assert(sizeof(__nv_bfloat162) == 4 && sizeof(__half2) == 4);
static_assert(sizeof(__nv_fp8_e4m3) == 1 && std::is_trivially_copyable_v<__nv_fp8_e4m3>);
