// Tests of the CPU runtime's semantics: barriers, warp collectives, atomics,
// dynamic shared memory, the tensor-core / cp.async wrappers and the number
// formats. The same file builds with nvcc, so the semantic tests also run on a
// GPU and cross-check the emulation there. Error reports (the runtime's
// strictness) and the "stale before wait" checks exist only on the CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "tests/runtime/device_array.h"

namespace {

using ::testing::HasSubstr;

using pa::runtime_test::DeviceArray;
#if !defined(__CUDACC__)
using pa::runtime_test::launch_error;
using pa::runtime_test::ReverseOrder;
#endif

// ---------------------------------------------------------------- barriers

constexpr int kReduceThreads = 256;

// Tree reduction in shared memory: wrong without every one of its barriers.
__global__ void block_sum_kernel(const float* in /* [blocks * 256] */, float* out /* [blocks] */) {
  __shared__ float partial[kReduceThreads];
  const int tid = threadIdx.x;
  partial[tid] = in[blockIdx.x * kReduceThreads + tid];
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = partial[0];
}

void check_block_sum() {
  constexpr int kBlocks = 64;
  std::mt19937 gen(1234);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  std::vector<float> in(kBlocks * kReduceThreads);
  for (float& x : in) x = static_cast<float>(dist(gen));  // small integers: every sum is exact
  DeviceArray<float> d_in(in), d_out(kBlocks);
  pa::launch(block_sum_kernel, dim3(kBlocks), dim3(kReduceThreads), 0, nullptr, d_in.ptr, d_out.ptr);
  const std::vector<float> out = d_out.download();
  for (int b = 0; b < kBlocks; ++b) {
    float want = 0.0f;
    for (int t = 0; t < kReduceThreads; ++t) want += in[b * kReduceThreads + t];
    ASSERT_EQ(out[b], want) << "block " << b;
  }
}

TEST(Barrier, SharedMemoryReduction) { check_block_sum(); }

__global__ void syncthreads_vote_kernel(int* out /* [3] */) {
  const int t = threadIdx.x;
  const int count = __syncthreads_count(t % 4 == 0);
  const int all = __syncthreads_and(t < 1000);
  const int any = __syncthreads_or(t == 77);
  if (t == 0) {
    out[0] = count;
    out[1] = all;
    out[2] = any;
  }
}

TEST(Barrier, CountAndOr) {
  DeviceArray<int> out(3);
  pa::launch(syncthreads_vote_kernel, dim3(2), dim3(128), 0, nullptr, out.ptr);
  EXPECT_EQ(out.download(), (std::vector<int>{32, 1, 1}));
}

#if !defined(__CUDACC__)

TEST(Barrier, SharedMemoryReductionReversedOrder) {
  ReverseOrder reversed(true);
  check_block_sum();
}

// Reads the neighbour's shared value with no barrier in between: a race.
__global__ void missing_barrier_kernel(int* out /* [64] */) {
  __shared__ int value[64];
  const int t = threadIdx.x;
  value[t] = 0;
  __syncthreads();
  value[t] = t + 1;
  // (a __syncthreads() belongs here)
  out[t] = t == 0 ? 1 : value[t - 1] + 1;
}

TEST(Barrier, ReversedOrderExposesMissingBarrier) {
  DeviceArray<int> out(64);
  auto wrong_threads = [&](bool reverse) {
    ReverseOrder order(reverse);
    pa::launch(missing_barrier_kernel, dim3(1), dim3(64), 0, nullptr, out.ptr);
    const std::vector<int> got = out.download();
    int wrong = 0;
    for (int t = 1; t < 63; ++t) wrong += got[t] != t + 1;  // thread 63 finishes the barrier and runs first
    return wrong;
  };
  EXPECT_EQ(wrong_threads(false), 0) << "forward order runs thread t-1 to its end first, hiding the race";
  EXPECT_GE(wrong_threads(true), 60) << "reversed order must expose the missing barrier";
}
#endif

// ---------------------------------------------------------------- warp collectives

constexpr int kShuffleOutputs = 9;
constexpr unsigned kFull = 0xffffffffu;

__global__ void shuffle_kernel(int* out /* [64][kShuffleOutputs] */, int width) {
  const int tid = threadIdx.x, lane = tid % 32;
  const int v = tid * 10 + 1;
  int* o = out + tid * kShuffleOutputs;
  o[0] = __shfl_sync(kFull, v, lane * 3 + 1, width);
  o[1] = __shfl_up_sync(kFull, v, 3, width);
  o[2] = __shfl_down_sync(kFull, v, 5, width);
  o[3] = __shfl_xor_sync(kFull, v, 1, width);
  o[4] = __shfl_xor_sync(kFull, v, width / 2, width);
  o[5] = static_cast<int>(__ballot_sync(kFull, lane % 3 == 0));
  o[6] = __any_sync(kFull, lane == 7) + 2 * __all_sync(kFull, lane < 32) + 4 * __any_sync(kFull, false) +
         8 * __all_sync(kFull, lane != 5);
  const double dv = tid * 0.5;  // an 8-byte value
  o[7] = static_cast<int>(__shfl_xor_sync(kFull, dv, 2, width) * 2.0);
  // Two disjoint half-warp masks in flight at once.
  if (lane < 16) {
    o[8] = __shfl_down_sync(0x0000ffffu, v, 1, 16);
  } else {
    o[8] = __shfl_up_sync(0xffff0000u, v, 1, 16);
  }
}

class Shuffle : public ::testing::TestWithParam<int> {};

TEST_P(Shuffle, MatchesTheDocumentedLaneMapping) {
  const int width = GetParam();
  DeviceArray<int> out(64 * kShuffleOutputs);
  pa::launch(shuffle_kernel, dim3(1), dim3(64), 0, nullptr, out.ptr, width);
  const std::vector<int> got = out.download();
  for (int tid = 0; tid < 64; ++tid) {
    const int warp_base = tid - tid % 32, lane = tid % 32;
    const int seg = lane - lane % width, in_seg = lane % width;
    auto value = [&](int src_lane) { return (warp_base + src_lane) * 10 + 1; };
    const int* o = &got[tid * kShuffleOutputs];
    SCOPED_TRACE("thread " + std::to_string(tid) + ", width " + std::to_string(width));
    EXPECT_EQ(o[0], value(seg + (lane * 3 + 1) % width));
    EXPECT_EQ(o[1], value(in_seg >= 3 ? lane - 3 : lane));
    EXPECT_EQ(o[2], value(in_seg + 5 < width ? lane + 5 : lane));
    EXPECT_EQ(o[3], value(lane ^ 1));
    EXPECT_EQ(o[4], value(lane ^ (width / 2)));
    EXPECT_EQ(static_cast<unsigned>(o[5]), 0x49249249u);
    EXPECT_EQ(o[6], 1 + 2);
    EXPECT_EQ(o[7], warp_base + (lane ^ 2));
    EXPECT_EQ(o[8], value(lane < 16 ? (lane + 1 < 16 ? lane + 1 : lane) : (lane - 1 >= 16 ? lane - 1 : lane)));
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, Shuffle, ::testing::Values(32, 16, 8));

// ---------------------------------------------------------------- atomics

struct AtomicCounters {
  int count;
  float fsum;
  unsigned umax;
  int imin;
  unsigned long long ull_sum;
  int cas_count;
  unsigned bits;
  int exch;
};

__global__ void atomics_kernel(AtomicCounters* c) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&c->count, 1);
  atomicAdd(&c->fsum, 1.0f);
  atomicMax(&c->umax, static_cast<unsigned>(gid));
  atomicMin(&c->imin, -gid);
  atomicAdd(&c->ull_sum, static_cast<unsigned long long>(gid));
  int old = c->cas_count, assumed;
  do {  // the classic CAS loop: increments exactly once per thread
    assumed = old;
    old = atomicCAS(&c->cas_count, assumed, assumed + 1);
  } while (old != assumed);
  atomicOr(&c->bits, 1u << (gid % 32));
  atomicExch(&c->exch, 42);
}

TEST(Atomics, AcrossBlocks) {
  constexpr int kBlocks = 64, kThreads = 128, kTotal = kBlocks * kThreads;
  DeviceArray<AtomicCounters> c(1);
  pa::launch(atomics_kernel, dim3(kBlocks), dim3(kThreads), 0, nullptr, c.ptr);
  const AtomicCounters got = c.download()[0];
  EXPECT_EQ(got.count, kTotal);
  EXPECT_EQ(got.fsum, static_cast<float>(kTotal));  // integers below 2^24: exact in any order
  EXPECT_EQ(got.umax, static_cast<unsigned>(kTotal - 1));
  EXPECT_EQ(got.imin, -(kTotal - 1));
  EXPECT_EQ(got.ull_sum, static_cast<unsigned long long>(kTotal) * (kTotal - 1) / 2);
  EXPECT_EQ(got.cas_count, kTotal);
  EXPECT_EQ(got.bits, 0xffffffffu);
  EXPECT_EQ(got.exch, 42);
}

// ---------------------------------------------------------------- dynamic shared memory

__global__ void dynamic_smem_kernel(int* out /* [blocks * blockDim] */, int* misaligned, int words_per_thread) {
  int* s = pa::dynamic_smem<int>();
  const int n = blockDim.x, t = threadIdx.x;
  if (reinterpret_cast<uintptr_t>(s) % 16 != 0) atomicAdd(misaligned, 1);
  for (int i = 0; i < words_per_thread; ++i) s[i * n + t] = static_cast<int>(blockIdx.x) * 1000 + i;
  __syncthreads();
  int sum = 0;  // read what the mirror thread wrote
  for (int i = 0; i < words_per_thread; ++i) sum += s[i * n + (n - 1 - t)];
  out[blockIdx.x * n + t] = sum;
}

void check_dynamic_smem(int words_per_thread) {
  constexpr int kBlocks = 8, kThreads = 128;
  DeviceArray<int> out(kBlocks * kThreads), misaligned(1);
  const size_t bytes = static_cast<size_t>(words_per_thread) * kThreads * sizeof(int);
  pa::launch(dynamic_smem_kernel, dim3(kBlocks), dim3(kThreads), bytes, nullptr, out.ptr, misaligned.ptr,
             words_per_thread);
  const std::vector<int> got = out.download();
  for (int b = 0; b < kBlocks; ++b) {
    const int want = words_per_thread * b * 1000 + words_per_thread * (words_per_thread - 1) / 2;
    for (int t = 0; t < kThreads; ++t) ASSERT_EQ(got[b * kThreads + t], want) << "block " << b << " thread " << t;
  }
  EXPECT_EQ(misaligned.download()[0], 0);
}

TEST(DynamicSmem, Small) { check_dynamic_smem(3); }
TEST(DynamicSmem, AboveTheDefault48KiB) { check_dynamic_smem(400); }  // 200 KiB: needs the opt-in limit

// ---------------------------------------------------------------- mma.sync

__device__ __forceinline__ uint32_t pack_u16(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// One warp: builds the fragments from row-major A (16x16), B stored as [k][n]
// (16x8) and C (16x8) by the documented layouts, runs one mma, stores D.
__global__ void mma_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d, int use_fp16) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const uint32_t ra[4] = {pack_u16(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                          pack_u16(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                          pack_u16(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                          pack_u16(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
  const uint32_t rb[2] = {pack_u16(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
                          pack_u16(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
  const float rc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  float rd[4];
  if (use_fp16) {
    pa::mma_m16n8k16_f16(rd, ra, rb, rc);
  } else {
    pa::mma_m16n8k16_bf16(rd, ra, rb, rc);
  }
  d[g * 8 + 2 * t] = rd[0];
  d[g * 8 + 2 * t + 1] = rd[1];
  d[(g + 8) * 8 + 2 * t] = rd[2];
  d[(g + 8) * 8 + 2 * t + 1] = rd[3];
}

void check_mma(bool use_fp16) {
  std::mt19937 gen(use_fp16 ? 77 : 78);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  std::vector<float> af(a.size()), bf(b.size()), c(16 * 8);
  auto quantize = [&](float x, uint16_t& bits, float& back) {
    if (use_fp16) {
      const __half h = __float2half_rn(x);
      std::memcpy(&bits, &h, 2);
      back = __half2float(h);
    } else {
      const __nv_bfloat16 h = __float2bfloat16_rn(x);
      std::memcpy(&bits, &h, 2);
      back = __bfloat162float(h);
    }
  };
  for (size_t i = 0; i < a.size(); ++i) quantize(dist(gen), a[i], af[i]);
  for (size_t i = 0; i < b.size(); ++i) quantize(dist(gen), b[i], bf[i]);
  for (float& x : c) x = dist(gen);
  DeviceArray<uint16_t> d_a(a), d_b(b);
  DeviceArray<float> d_c(c), d_d(16 * 8);
  pa::launch(mma_kernel, dim3(1), dim3(32), 0, nullptr, d_a.ptr, d_b.ptr, d_c.ptr, d_d.ptr, use_fp16 ? 1 : 0);
  const std::vector<float> got = d_d.download();
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      // Naive fp32 reference on the same 16-bit inputs. Each product of two
      // 16-bit floats is exact in fp32 (8- or 11-bit significands), so the only
      // difference is the summation order of 17 terms: |error| <= 17 * 2^-24 *
      // sum|term| (fp32 rounding per addition, on either side). 1e-6 covers it.
      float want = c[m * 8 + n];
      float magnitude = std::fabs(want);
      for (int k = 0; k < 16; ++k) {
        want += af[m * 16 + k] * bf[k * 8 + n];
        magnitude += std::fabs(af[m * 16 + k] * bf[k * 8 + n]);
      }
      EXPECT_NEAR(got[m * 8 + n], want, 1e-6f * magnitude + 1e-30f) << "D[" << m << "][" << n << "]";
    }
  }
}

TEST(Mma, M16N8K16Bf16MatchesNaiveMatmul) { check_mma(false); }
TEST(Mma, M16N8K16F16MatchesNaiveMatmul) { check_mma(true); }

// ---------------------------------------------------------------- ldmatrix

constexpr int kLdmatrixVariants = 6;  // x1, x2, x4, then the .trans versions

__global__ void ldmatrix_kernel(const uint16_t* src /* [32][8] */, uint32_t* out /* [6][32][4] */) {
  __shared__ __align__(16) uint16_t tile[32][8];
  const int lane = threadIdx.x;
  for (int i = 0; i < 8; ++i) tile[lane][i] = src[lane * 8 + i];
  __syncthreads();
  const void* row = &tile[lane][0];  // lane 8j+r names row r of matrix j
  uint32_t r1[1], r2[2], r4[4];
  uint32_t* o = out + lane * 4;
  pa::ldmatrix_x1(r1, row);
  o[0 * 128] = r1[0];
  pa::ldmatrix_x2(r2, row);
  for (int j = 0; j < 2; ++j) o[1 * 128 + j] = r2[j];
  pa::ldmatrix_x4(r4, row);
  for (int j = 0; j < 4; ++j) o[2 * 128 + j] = r4[j];
  pa::ldmatrix_x1_trans(r1, row);
  o[3 * 128] = r1[0];
  pa::ldmatrix_x2_trans(r2, row);
  for (int j = 0; j < 2; ++j) o[4 * 128 + j] = r2[j];
  pa::ldmatrix_x4_trans(r4, row);
  for (int j = 0; j < 4; ++j) o[5 * 128 + j] = r4[j];
}

TEST(Ldmatrix, MatchesDirectIndexing) {
  std::vector<uint16_t> src(32 * 8);
  for (int i = 0; i < 32 * 8; ++i) src[i] = static_cast<uint16_t>(0x1000 + i);  // distinct
  DeviceArray<uint16_t> d_src(src);
  DeviceArray<uint32_t> d_out(kLdmatrixVariants * 32 * 4);
  pa::launch(ldmatrix_kernel, dim3(1), dim3(32), 0, nullptr, d_src.ptr, d_out.ptr);
  const std::vector<uint32_t> got = d_out.download();
  auto at = [&](int row, int col) { return static_cast<uint32_t>(src[row * 8 + col]); };
  const int counts[3] = {1, 2, 4};
  for (int variant = 0; variant < kLdmatrixVariants; ++variant) {
    const bool trans = variant >= 3;
    const int num = counts[variant % 3];
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < num; ++j) {
        const int r = lane / 4, c = 2 * (lane % 4);
        const uint32_t want = trans ? at(j * 8 + c, r) | (at(j * 8 + c + 1, r) << 16)
                                    : at(j * 8 + r, c) | (at(j * 8 + r, c + 1) << 16);
        EXPECT_EQ(got[(variant * 32 + lane) * 4 + j], want)
            << (trans ? "trans " : "") << "x" << num << " lane " << lane << " matrix " << j;
      }
    }
  }
}

// ---------------------------------------------------------------- cp.async

// Each thread copies 16 bytes (4 floats) into shared memory; after the wait and a
// barrier every thread reads its neighbour's copy. before_wait[t] records what
// the thread saw in its destination before waiting (meaningful only on the CPU).
__global__ void cp_async_kernel(const float* src /* [32*4] */, float* out /* [32*4] */,
                                float* before_wait /* [32] */) {
  __shared__ __align__(16) float buf[32 * 4];
  const int t = threadIdx.x;
  for (int i = 0; i < 4; ++i) buf[t * 4 + i] = -1.0f;
  __syncthreads();
  pa::cp_async_16(&buf[t * 4], &src[t * 4]);
  pa::cp_async_commit();
  before_wait[t] = buf[t * 4];
  pa::cp_async_wait<0>();
  __syncthreads();
  for (int i = 0; i < 4; ++i) out[t * 4 + i] = buf[((t + 1) % 32) * 4 + i];
}

TEST(CpAsync, DataVisibleAfterWait) {
  std::vector<float> src(32 * 4);
  for (int i = 0; i < 32 * 4; ++i) src[i] = static_cast<float>(i) + 0.25f;
  DeviceArray<float> d_src(src), d_out(32 * 4), d_before(32);
  pa::launch(cp_async_kernel, dim3(1), dim3(32), 0, nullptr, d_src.ptr, d_out.ptr, d_before.ptr);
  const std::vector<float> out = d_out.download();
  for (int t = 0; t < 32; ++t) {
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[t * 4 + i], src[((t + 1) % 32) * 4 + i]);
  }
#if !defined(__CUDACC__)
  // The CPU holds every copy until its group is retired, like the slowest possible GPU.
  const std::vector<float> before = d_before.download();
  for (int t = 0; t < 32; ++t) EXPECT_EQ(before[t], -1.0f) << "thread " << t << " saw its copy before the wait";
#endif
}

// Two groups in flight: wait<1> retires only the older one. Also pred=false zero-fills.
__global__ void cp_async_groups_kernel(const float* src /* [8] */, float* out /* [8] */) {
  __shared__ __align__(16) float buf[12];
  for (int i = 0; i < 12; ++i) buf[i] = 7.0f;
  pa::cp_async_16(&buf[0], &src[0]);
  pa::cp_async_commit();
  pa::cp_async_16(&buf[4], &src[4]);
  pa::cp_async_commit();
  pa::cp_async_16(&buf[8], &src[0], /*pred=*/false);
  pa::cp_async_commit();
  pa::cp_async_wait<2>();
  out[0] = buf[0];  // group 0 landed
  out[1] = buf[4];  // group 1 may still be in flight (stale 7 on the CPU)
  pa::cp_async_wait<0>();
  out[2] = buf[4];
  out[3] = buf[8];  // zero-filled
  out[4] = buf[11];
}

TEST(CpAsync, WaitGroupAndZeroFill) {
  const std::vector<float> src = {1, 2, 3, 4, 5, 6, 7, 8};
  DeviceArray<float> d_src(src), d_out(8);
  pa::launch(cp_async_groups_kernel, dim3(1), dim3(1), 0, nullptr, d_src.ptr, d_out.ptr);
  const std::vector<float> out = d_out.download();
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[2], 5.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 0.0f);
#if !defined(__CUDACC__)
  EXPECT_EQ(out[1], 7.0f) << "the CPU retires only as many groups as the wait asks for";
#endif
}

// ---------------------------------------------------------------- number formats

uint16_t bits_of(__nv_bfloat16 x) {
  uint16_t b;
  std::memcpy(&b, &x, 2);
  return b;
}
uint16_t bits_of(__half x) {
  uint16_t b;
  std::memcpy(&b, &x, 2);
  return b;
}
uint8_t bits_of(__nv_fp8_e4m3 x) {
  uint8_t b;
  std::memcpy(&b, &x, 1);
  return b;
}

TEST(Numbers, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bits_of(__float2bfloat16(1.0f)), 0x3f80);
  EXPECT_EQ(bits_of(__float2bfloat16(1.0f + 0x1p-8f)), 0x3f80);      // tie -> even (down)
  EXPECT_EQ(bits_of(__float2bfloat16(1.0f + 3 * 0x1p-8f)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bits_of(__float2bfloat16_rn(1.0f + 0x1p-8f + 0x1p-20f)), 0x3f81);  // above the tie
  EXPECT_EQ(bits_of(__float2bfloat16(-2.0f)), 0xc000);
  EXPECT_EQ(bits_of(__float2bfloat16(std::numeric_limits<float>::max())), 0x7f80);  // rounds up to inf
  EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16(std::nanf("")))));
  EXPECT_EQ(__bfloat162float(__float2bfloat16(INFINITY)), INFINITY);
  const __nv_bfloat162 pair = __floats2bfloat162_rn(1.5f, -3.0f);
  const float2 back = __bfloat1622float2(pair);
  EXPECT_EQ(back.x, 1.5f);
  EXPECT_EQ(back.y, -3.0f);
}

TEST(Numbers, Bf16AndHalfRoundTripEveryValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    __nv_bfloat16 bf;
    std::memcpy(&bf, &bits, 2);
    const float f = __bfloat162float(bf);
    if (!std::isnan(f)) ASSERT_EQ(bits_of(__float2bfloat16(f)), bits) << std::hex << b;
    __half h;
    std::memcpy(&h, &bits, 2);
    const float g = __half2float(h);
    if (!std::isnan(g)) ASSERT_EQ(bits_of(__float2half(g)), bits) << std::hex << b;
  }
}

TEST(Numbers, HalfRoundsAndOverflows) {
  EXPECT_EQ(bits_of(__float2half_rn(1.0f + 0x1p-11f)), 0x3c00);      // tie -> even
  EXPECT_EQ(bits_of(__float2half_rn(1.0f + 3 * 0x1p-11f)), 0x3c02);  // tie -> even
  EXPECT_EQ(bits_of(__float2half(65504.0f)), 0x7bff);                // largest finite
  EXPECT_EQ(bits_of(__float2half(65520.0f)), 0x7c00);                // the tie above it: inf
  EXPECT_EQ(bits_of(__float2half(0x1p-25f)), 0x0000);                // half the smallest subnormal: even
  EXPECT_EQ(bits_of(__float2half(3 * 0x1p-25f)), 0x0002);
  EXPECT_TRUE(std::isnan(__half2float(__float2half(std::nanf("")))));
}

TEST(Numbers, Fp8E4m3SaturatesAndRounds) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    __nv_fp8_e4m3 x;
    const uint8_t c = static_cast<uint8_t>(code);
    std::memcpy(&x, &c, 1);
    ASSERT_EQ(bits_of(__nv_fp8_e4m3(float(x))), c) << "code " << code;
  }
  EXPECT_EQ(float(__nv_fp8_e4m3(448.0f)), 448.0f);
  EXPECT_EQ(float(__nv_fp8_e4m3(464.0f)), 448.0f);  // would round to 480: saturates
  EXPECT_EQ(float(__nv_fp8_e4m3(1e6f)), 448.0f);
  EXPECT_EQ(float(__nv_fp8_e4m3(-1e6f)), -448.0f);
  EXPECT_EQ(float(__nv_fp8_e4m3(INFINITY)), 448.0f);
  EXPECT_TRUE(std::isnan(float(__nv_fp8_e4m3(std::nanf("")))));
  EXPECT_EQ(float(__nv_fp8_e4m3(1.0625f)), 1.0f);   // tie -> even
  EXPECT_EQ(float(__nv_fp8_e4m3(1.1875f)), 1.25f);  // tie -> even
  EXPECT_EQ(float(__nv_fp8_e4m3(0x1p-10f)), 0.0f);  // half the smallest subnormal 2^-9
  EXPECT_EQ(float(__nv_fp8_e4m3(3 * 0x1p-10f)), 0x1p-8f);
  EXPECT_EQ(float(__nv_fp8_e4m3(-0.0f)), 0.0f);
}

// ---------------------------------------------------------------- error reports (CPU only)
// ---------------------------------------------------------------- CUDA graphs

__global__ void add_kernel(int* x /* [n] */, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += v;
}

// Work given to a capturing stream runs only when the graph is launched, in
// stream order, with the arguments it was captured with; every launch replays it.
TEST(Graph, CaptureRecordsAndReplaysInOrder) {
  constexpr int n = 300;
  DeviceArray<int> x(n);
  cudaStream_t stream;
  PA_CHECK(cudaStreamCreate(&stream));
  PA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status;
  PA_CHECK(cudaStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  PA_CHECK(cudaMemsetAsync(x.ptr, 0, n * sizeof(int), stream));
  pa::launch(add_kernel, dim3(3), dim3(128), 0, stream, x.ptr, n, 5);
  pa::launch(add_kernel, dim3(3), dim3(128), 0, stream, x.ptr, n, 2);
  cudaGraph_t graph;
  PA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  PA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
#if !defined(__CUDACC__)
  EXPECT_EQ(x.download(), std::vector<int>(n, 0)) << "captured work must not run before the graph is launched";
#endif
  for (int replay = 0; replay < 2; ++replay) {
    PA_CHECK(cudaGraphLaunch(exec, stream));
    PA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(x.download(), std::vector<int>(n, 7)) << "replay " << replay;
  }
  PA_CHECK(cudaGraphExecDestroy(exec));
  PA_CHECK(cudaGraphDestroy(graph));
  PA_CHECK(cudaStreamDestroy(stream));
}

// As on a GPU in the global capture mode: an allocation or a synchronous copy
// inside a capture fails and invalidates it, so code meant for graphs is
// checked on the CPU too.
TEST(Graph, AllocationOrSyncCopyInvalidatesTheCapture) {
  for (int which = 0; which < 2; ++which) {
    DeviceArray<int> x(4);
    cudaStream_t stream;
    PA_CHECK(cudaStreamCreate(&stream));
    PA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    int host[4] = {};
    void* extra = nullptr;
    const cudaError_t err = which == 0 ? cudaMalloc(&extra, 64)
                                       : cudaMemcpy(host, x.ptr, sizeof(host), cudaMemcpyDeviceToHost);
    EXPECT_NE(err, cudaSuccess) << (which == 0 ? "cudaMalloc" : "cudaMemcpy") << " inside a capture";
    cudaGraph_t graph = nullptr;
    EXPECT_NE(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    EXPECT_EQ(graph, nullptr);
    (void)cudaGetLastError();
    if (extra) cudaFree(extra);
    PA_CHECK(cudaStreamDestroy(stream));
  }
}

// Fork and join inside a capture, as a second stream is used beside a
// pass: the side stream waits on an event recorded in the capture and so joins
// it; its work is recorded, not run, and replays between the fork and the join.
TEST(Graph, ForkedStreamJoinsTheCapture) {
  constexpr int n = 200;
  DeviceArray<int> x(n), y(n);
  cudaStream_t stream, side;
  cudaEvent_t fork, join;
  PA_CHECK(cudaStreamCreate(&stream));
  PA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  PA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  PA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  PA_CHECK(cudaMemset(x.ptr, 0, n * sizeof(int)));
  PA_CHECK(cudaMemset(y.ptr, 0, n * sizeof(int)));
  PA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  PA_CHECK(cudaEventRecord(fork, stream));
  PA_CHECK(cudaStreamWaitEvent(side, fork, 0));
  cudaStreamCaptureStatus status;
  PA_CHECK(cudaStreamIsCapturing(side, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusActive) << "a stream that waits on a captured event joins the capture";
  pa::launch(add_kernel, dim3(2), dim3(128), 0, stream, x.ptr, n, 3);
  pa::launch(add_kernel, dim3(2), dim3(128), 0, side, y.ptr, n, 4);
  PA_CHECK(cudaEventRecord(join, side));
  PA_CHECK(cudaStreamWaitEvent(stream, join, 0));
  pa::launch(add_kernel, dim3(2), dim3(128), 0, stream, y.ptr, n, 1);  // after the join: sees the side's work
  cudaGraph_t graph;
  PA_CHECK(cudaStreamEndCapture(stream, &graph));
  PA_CHECK(cudaStreamIsCapturing(side, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "the capture's end releases the joined stream";
  cudaGraphExec_t exec;
  PA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
#if !defined(__CUDACC__)
  EXPECT_EQ(y.download(), std::vector<int>(n, 0)) << "the side stream's captured work must not run at capture";
#endif
  PA_CHECK(cudaGraphLaunch(exec, stream));
  PA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(x.download(), std::vector<int>(n, 3));
  EXPECT_EQ(y.download(), std::vector<int>(n, 5)) << "the side stream's work replays with the graph";
  PA_CHECK(cudaGraphExecDestroy(exec));
  PA_CHECK(cudaGraphDestroy(graph));
  PA_CHECK(cudaEventDestroy(join));
  PA_CHECK(cudaEventDestroy(fork));
  PA_CHECK(cudaStreamDestroy(side));
  PA_CHECK(cudaStreamDestroy(stream));
}

// A joined stream whose last work the origin never waits for leaves the graph
// unjoined: ending the capture fails, as on a GPU.
TEST(Graph, ForkWithoutJoinFailsAtTheEnd) {
  DeviceArray<int> y(8);
  cudaStream_t stream, side;
  cudaEvent_t fork;
  PA_CHECK(cudaStreamCreate(&stream));
  PA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  PA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  PA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  PA_CHECK(cudaEventRecord(fork, stream));
  PA_CHECK(cudaStreamWaitEvent(side, fork, 0));
  pa::launch(add_kernel, dim3(1), dim3(32), 0, side, y.ptr, 8, 1);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(graph, nullptr);
  (void)cudaGetLastError();
  PA_CHECK(cudaEventDestroy(fork));
  PA_CHECK(cudaStreamDestroy(side));
  PA_CHECK(cudaStreamDestroy(stream));
}

#if !defined(__CUDACC__)

std::string at_line(int line) { return "test_runtime.cu:" + std::to_string(line); }

// Which thread reports an error depends on the fiber order: pin it to forward.
class Errors : public ::testing::Test {
  ReverseOrder forward_{false};
};

constexpr int kEarlyReturnBarrierLine = __LINE__ + 3;
__global__ void early_return_kernel() {
  if (blockIdx.x == 2 && threadIdx.x == 5) return;
  __syncthreads();
}

TEST_F(Errors, EarlyReturnBeforeBarrier) {
  const std::string msg = launch_error([] { pa::launch(early_return_kernel, dim3(3), dim3(8), 0, nullptr); });
  EXPECT_THAT(msg, HasSubstr("block (2,0,0) thread (5,0,0)"));
  EXPECT_THAT(msg, HasSubstr("returned from the kernel"));
  EXPECT_THAT(msg, HasSubstr(at_line(kEarlyReturnBarrierLine)));
}

constexpr int kDivergentFirstLine = __LINE__ + 4;
constexpr int kDivergentSecondLine = __LINE__ + 5;
__global__ void divergent_barrier_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

TEST_F(Errors, DivergentBarriers) {
  const std::string msg = launch_error([] { pa::launch(divergent_barrier_kernel, dim3(1), dim3(32), 0, nullptr); });
  EXPECT_THAT(msg, HasSubstr("block (0,0,0) thread (16,0,0)"));
  EXPECT_THAT(msg, HasSubstr(at_line(kDivergentSecondLine)));
  EXPECT_THAT(msg, HasSubstr(at_line(kDivergentFirstLine)));
}

constexpr int kExitedLaneShuffleLine = __LINE__ + 4;
__global__ void exited_lane_kernel(int* out, int exiting_lane) {
  int v = threadIdx.x;
  if (static_cast<int>(threadIdx.x) == exiting_lane) return;
  v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

TEST_F(Errors, WarpOpWithLaneThatReturnsWhileOthersWait) {
  DeviceArray<int> out(32);
  const std::string msg =
      launch_error([&] { pa::launch(exited_lane_kernel, dim3(1), dim3(32), 0, nullptr, out.ptr, 3); });
  EXPECT_THAT(msg, HasSubstr("block (0,0,0) thread (3,0,0)"));
  EXPECT_THAT(msg, HasSubstr("__shfl_xor_sync"));
  EXPECT_THAT(msg, HasSubstr(at_line(kExitedLaneShuffleLine)));
}

TEST_F(Errors, WarpOpWhoseMaskNamesAnExitedLane) {
  DeviceArray<int> out(32);
  const std::string msg =
      launch_error([&] { pa::launch(exited_lane_kernel, dim3(1), dim3(32), 0, nullptr, out.ptr, 0); });
  EXPECT_THAT(msg, HasSubstr("block (0,0,0) thread (1,0,0)"));
  EXPECT_THAT(msg, HasSubstr("lane 0 (thread (0,0,0)) has already returned"));
  EXPECT_THAT(msg, HasSubstr(at_line(kExitedLaneShuffleLine)));
}

constexpr int kDivergentShuffleLine = __LINE__ + 6;
__global__ void divergent_shuffle_kernel(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 8) {
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  } else {
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  }
  out[threadIdx.x] = v;
}

TEST_F(Errors, LanesAtDifferentWarpOps) {
  DeviceArray<int> out(32);
  const std::string msg =
      launch_error([&] { pa::launch(divergent_shuffle_kernel, dim3(1), dim3(32), 0, nullptr, out.ptr); });
  EXPECT_THAT(msg, HasSubstr("block (0,0,0) thread (8,0,0)"));
  EXPECT_THAT(msg, HasSubstr(at_line(kDivergentShuffleLine)));
  EXPECT_THAT(msg, HasSubstr(at_line(kDivergentShuffleLine - 2)));
}

constexpr int kDeadlockShuffleLine = __LINE__ + 4;
__global__ void deadlock_kernel(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x == 0) {
    v = __shfl_sync(0xffffffffu, v, 1);  // waits for lanes 1..31, which wait at the barrier
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = v;
}

TEST_F(Errors, DeadlockIsReported) {
  DeviceArray<int> out(64);
  const std::string msg = launch_error([&] { pa::launch(deadlock_kernel, dim3(1), dim3(64), 0, nullptr, out.ptr); });
  EXPECT_THAT(msg, HasSubstr("deadlock in block (0,0,0)"));
  EXPECT_THAT(msg, HasSubstr("thread (0,0,0) at __shfl_sync ("));
  EXPECT_THAT(msg, HasSubstr(at_line(kDeadlockShuffleLine)));
  EXPECT_THAT(msg, HasSubstr("thread (1,0,0) at __syncthreads"));
}

__global__ void throwing_kernel() {
  __syncthreads();
  if (blockIdx.x == 1 && threadIdx.x == 7) throw std::runtime_error("boom from the kernel");
}

TEST_F(Errors, ExceptionInKernel) {
  const std::string msg = launch_error([] { pa::launch(throwing_kernel, dim3(2), dim3(16), 0, nullptr); });
  EXPECT_THAT(msg, HasSubstr("block (1,0,0) thread (7,0,0)"));
  EXPECT_THAT(msg, HasSubstr("boom from the kernel"));
}

__global__ void empty_kernel() {}

TEST_F(Errors, BadLaunchConfigurations) {
  EXPECT_THAT(launch_error([] { pa::launch(empty_kernel, dim3(1), dim3(32, 33), 0, nullptr); }),
              HasSubstr("more than 1024 threads"));
  EXPECT_THAT(launch_error([] { pa::launch(empty_kernel, dim3(1), dim3(1025), 0, nullptr); }),
              HasSubstr("at most (1024,1024,64)"));
  EXPECT_THAT(launch_error([] { pa::launch(empty_kernel, dim3(1), dim3(32, 1, 0), 0, nullptr); }),
              HasSubstr("block dimensions must be at least 1"));
  EXPECT_THAT(launch_error([] { pa::launch(empty_kernel, dim3(1), dim3(32), 228 * 1024, nullptr); }),
              HasSubstr("dynamic shared memory"));
}

TEST_F(Errors, RuntimeKeepsWorkingAfterAnError) {
  launch_error([] { pa::launch(divergent_barrier_kernel, dim3(4), dim3(32), 0, nullptr); });
  check_block_sum();
}

#endif  // !defined(__CUDACC__)

}  // namespace
