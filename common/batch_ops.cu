#include <algorithm>
#include <cstdint>

#include "cuda_compat.cuh"
#include "launch.cuh"
#include "batch_ops.h"
#include "quant.cuh"
#include "reduce.cuh"

namespace pa {
namespace {

// One program per new token; its threads copy K and V rows of all KV heads as
// 16-byte chunks (8 bf16), so the write is as coalesced as the read.
__global__ void write_kv_kernel(PagedKV kv, const bf16* __restrict__ k_new,  // [num_tokens, Hkv, D]
                                const bf16* __restrict__ v_new,              // [num_tokens, Hkv, D]
                                const int* __restrict__ slot_mapping) {      // [num_tokens]
  const int token = blockIdx.x;
  const int slot = slot_mapping[token];
  if (slot < 0) return;  // padding row: nothing to write
  const int chunks = kv.num_kv_heads * kv.head_dim / 8;  // uint4 per row
  const uint4* k_src = reinterpret_cast<const uint4*>(k_new + static_cast<size_t>(token) * kv.num_kv_heads * kv.head_dim);
  const uint4* v_src = reinterpret_cast<const uint4*>(v_new + static_cast<size_t>(token) * kv.num_kv_heads * kv.head_dim);
  uint4* k_dst = reinterpret_cast<uint4*>(kv.k_cache + static_cast<size_t>(slot) * kv.num_kv_heads * kv.head_dim);
  uint4* v_dst = reinterpret_cast<uint4*>(kv.v_cache + static_cast<size_t>(slot) * kv.num_kv_heads * kv.head_dim);
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    k_dst[c] = k_src[c];
    v_dst[c] = v_src[c];
  }
}

// One program per new token, one warp per head row: warp w quantizes rows
// w, w + WARPS, ... of the token's 2 x num_kv_heads rows (K rows, then V rows).
// A head row (<= 256 values) fits a warp's registers, 8 per lane at most, so
// max|x| is a warp butterfly with no shared memory and no block barrier, and
// each value is read once. Lane l owns dims l, l + 32, ...: every load and store
// of the warp covers 32 consecutive elements.
constexpr int QUANT_WARPS = 4;
constexpr int QUANT_MAX_PER_LANE = 256 / 32;  // head_dim <= 256

template <KvFormat F>
__global__ void write_kv_quantized_kernel(PagedKV kv, const bf16* __restrict__ k_new,  // [num_tokens, Hkv, D]
                                          const bf16* __restrict__ v_new,              // [num_tokens, Hkv, D]
                                          const int* __restrict__ slot_mapping) {      // [num_tokens]
  const int token = blockIdx.x;
  const int slot = slot_mapping[token];
  if (slot < 0) return;  // padding row: the whole block leaves, no warp is left waiting
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int Hkv = kv.num_kv_heads, D = kv.head_dim;
  for (int row = warp; row < 2 * Hkv; row += QUANT_WARPS) {  // warp-uniform: all lanes shuffle together
    const bool is_v = row >= Hkv;
    const int head = is_v ? row - Hkv : row;
    const bf16* src = (is_v ? v_new : k_new) + (static_cast<size_t>(token) * Hkv + head) * D;  // [D]
    uint8_t* codes = (is_v ? kv.v_codes : kv.k_codes) + (static_cast<size_t>(slot) * Hkv + head) * D;  // [D]
    float* scale_out = (is_v ? kv.v_scale : kv.k_scale) + static_cast<size_t>(slot) * Hkv + head;

    float x[QUANT_MAX_PER_LANE];  // this lane's dims lane + 32 i
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < QUANT_MAX_PER_LANE; ++i) {
      const int d = lane + 32 * i;
      x[i] = d < D ? __bfloat162float(src[d]) : 0.0f;
      amax = nan_max(amax, fabsf(x[i]));
    }
    amax = warp_nan_max(amax);
    const float scale = row_scale<F>(amax);  // every lane holds the same amax, so the same scale
#pragma unroll
    for (int i = 0; i < QUANT_MAX_PER_LANE; ++i) {
      const int d = lane + 32 * i;
      if (d < D) codes[d] = quantize<F>(x[i], scale);
    }
    if (lane == 0) *scale_out = scale;
  }
}

// One program per padding row.
__global__ void clear_rows_kernel(bf16* __restrict__ out,   // [num_tokens, Hq, D]
                                  float* __restrict__ lse,  // [num_tokens, Hq] or null
                                  int first_row, int row_elems, int num_q_heads) {
  const size_t row = static_cast<size_t>(first_row) + blockIdx.x;
  for (int e = threadIdx.x; e < row_elems; e += blockDim.x) out[row * row_elems + e] = __float2bfloat16(0.0f);
  if (lse) {
    for (int h = threadIdx.x; h < num_q_heads; h += blockDim.x) lse[row * num_q_heads + h] = -INFINITY;
  }
}

// splitmix64: a good 64-bit mix, so neighbouring indices give unrelated values.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fill_random_kernel(bf16* __restrict__ data, size_t n, uint64_t seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t bits = mix64(seed * 0x2545F4914F6CDD1Dull + i);
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1) from 24 bits
    data[i] = __float2bfloat16((2.0f * u - 1.0f) * 1.7320508f);
  }
}

// One thread per 4 codes (one 32-bit word).
template <KvFormat F>
__global__ void decode_codes_kernel(const uint32_t* __restrict__ words, int num_words, uint32_t* __restrict__ k_pairs,
                                    uint16_t* __restrict__ halves) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_words) return;
  uint32_t pair[2];
  decode4_half2<F>(words[i], pair);
  k_pairs[2 * i] = pair[0], k_pairs[2 * i + 1] = pair[1];
  // fp16: word i paired with a neighbour, once as the low and once as the high half.
  const uint32_t other = words[i ^ 1];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    halves[4 * i + b] = static_cast<uint16_t>(decode_pair_half<F>(words[i], other, b));
    halves[4 * num_words + 4 * i + b] = static_cast<uint16_t>(decode_pair_half<F>(other, words[i], b) >> 16);
  }
}

}  // namespace

void fill_random(bf16* data, size_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks = std::min<size_t>((n + 255) / 256, 65536);
  launch(fill_random_kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, data, n, seed);
}

void clear_padding_rows(const AttentionParams& p, cudaStream_t stream) {
  const int rows = p.batch.num_tokens - p.batch.first_padding_row;
  if (rows <= 0) return;
  launch(clear_rows_kernel, dim3(rows), dim3(128), 0, stream, p.out, p.lse, p.batch.first_padding_row,
         p.num_q_heads * p.kv.head_dim, p.num_q_heads);
}

void write_kv(const PagedKV& kv, const bf16* k_new, const bf16* v_new, const int* slot_mapping,
              int num_tokens, cudaStream_t stream) {
  PA_REQUIRE(!is_quantized(kv.format), std::string("write_kv: the cache format is ") + name(kv.format) +
                                           ", which stores codes and scales; use write_kv_quantized");
  PA_REQUIRE(num_tokens == 0 || (kv.k_cache && kv.v_cache), "write_kv: a bf16 cache needs k_cache and v_cache");
  launch(write_kv_kernel, dim3(num_tokens), dim3(128), 0, stream, kv, k_new, v_new, slot_mapping);
}

void write_kv_quantized(const PagedKV& kv, const bf16* k_new, const bf16* v_new, const int* slot_mapping,
                        int num_tokens, cudaStream_t stream) {
  PA_REQUIRE(is_quantized(kv.format), "write_kv_quantized: the cache format is bf16; use write_kv");
  PA_REQUIRE(kv.k_codes && kv.v_codes && kv.k_scale && kv.v_scale,
             std::string("write_kv_quantized: a ") + name(kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  PA_REQUIRE(supported_head_dim(kv.head_dim) && kv.head_dim <= 32 * QUANT_MAX_PER_LANE,
             "write_kv_quantized: head_dim " + std::to_string(kv.head_dim) + " is not a multiple of 16 from 16 to 256");
  const dim3 grid(num_tokens), block(32 * QUANT_WARPS);
  if (kv.format == KvFormat::int8) {
    launch(write_kv_quantized_kernel<KvFormat::int8>, grid, block, 0, stream, kv, k_new, v_new, slot_mapping);
  } else {
    launch(write_kv_quantized_kernel<KvFormat::fp8_e4m3>, grid, block, 0, stream, kv, k_new, v_new, slot_mapping);
  }
}

void decode_codes(KvFormat f, const uint8_t* codes, int n, uint16_t* k_bits, uint16_t* v_bits,
                  cudaStream_t stream) {
  PA_REQUIRE(is_quantized(f), "decode_codes: the cache format is bf16, which has no codes");
  PA_REQUIRE(n >= 0 && n % 8 == 0, "decode_codes: n must be a multiple of 8 (words are paired)");
  if (n == 0) return;
  const int words = n / 4;
  const dim3 grid((words + 127) / 128), block(128);
  // Little-endian: 4 consecutive codes are one word (code 0 low), 2 consecutive 16-bit values one pair.
  const auto* w = reinterpret_cast<const uint32_t*>(codes);
  auto* k = reinterpret_cast<uint32_t*>(k_bits);
  if (f == KvFormat::int8) {
    launch(decode_codes_kernel<KvFormat::int8>, grid, block, 0, stream, w, words, k, v_bits);
  } else {
    launch(decode_codes_kernel<KvFormat::fp8_e4m3>, grid, block, 0, stream, w, words, k, v_bits);
  }
}

}  // namespace pa
