// Hopper's warpgroup MMA (wgmma), as small device functions with one spelling
// for every target, for tiles whose K or V rows sit in shared memory in the
// 128-byte-swizzled layout below (stage 07's "going further" prefix pass).
//
// One instruction shape: D (64 x 64 fp32) += A (64 x 16 bf16) * B (16 x 64
// bf16), issued by the 128 threads of a warpgroup (4 consecutive warps). Warp w
// of the group owns rows 16w..16w+15, and the register layouts are exactly
// mma.sync m16n8k16's (ptx.cuh): A is one A fragment per warp, D is the C
// fragments of 8 n-tiles, d[j] = {D[g][8j+2t], D[g][8j+2t+1], D[g+8][8j+2t],
// D[g+8][8j+2t+1]}. B is read from shared memory by the tensor core itself,
// through a matrix descriptor; so is A when it sits in shared memory too
// (wgmma_ss_k_major: the warpgroup's 64 rows in one slab).
//
//   - compiled for sm_90a: wgmma.mma_async (A from registers or by descriptor,
//     B by descriptor), with its fence / commit / wait; the products run
//     asynchronously until a wait, so a loop can compute while they run;
//   - anywhere else (the CPU runtime, other GPUs): the same product as 8
//     mma.sync m16n8k16 per warp, B's fragments read from the same shared
//     layout. Same operands, same results up to the order of fp32 sums.
//
// The shared layout (Sw128): a slab of rows of 64 bf16 values (128 bytes),
// 8-row atoms of 1024 bytes, 1024-byte aligned; in row r the 16-byte chunk c
// is stored at chunk c ^ (r % 8). That is the hardware's 128-byte swizzle, so
// the descriptor names it (layout 1, 1024 bytes between 8-row groups), and 8
// lanes reading one chunk of 8 consecutive rows hit 8 different bank groups.
// A row longer than 64 values is stored as several slabs. A TMA tensor copy
// with TmaSwizzle::b128 (tma.cuh) writes exactly this layout.
//
// On the CPU runtime each product also checks the shared memory its
// descriptors name, as the tensor core would need it: no byte of it may still
// be in flight from a bulk or tensor copy (read before the copy's mbarrier
// phase completed), and bytes a tensor copy wrote must have the descriptor's
// swizzle (128B). Bytes written by ordinary stores or cp.async are not
// checked: nothing tells their layout.
#pragma once

#include <cstdint>
#include <cstring>

#include "attention_params.h"
#include "cuda_compat.cuh"
#include "ptx.cuh"

#if !defined(__CUDACC__)
#include <source_location>
#define PA_WGMMA_LOC_PARAM , std::source_location pa_loc_ = std::source_location::current()
#define PA_WGMMA_LOC pa_loc_.file_name(), static_cast<int>(pa_loc_.line())
#else
#define PA_WGMMA_LOC_PARAM
#endif

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PA_WGMMA 1
#else
#define PA_WGMMA 0
#endif

namespace pa {

// Element offset of (row, col) in an Sw128 slab (col < 64). (Host code too:
// tests lay out expected slabs with it.)
__host__ __device__ __forceinline__ int sw128(int row, int col) {
  return (row >> 3) * 512 + (row & 7) * 64 + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);
}

// Registers written by other instructions before a wgmma, and the wgmma's
// results read after its wait: the compiler must not move either across.
template <int N>
__device__ __forceinline__ void wgmma_pin(float (&d)[N][4]) {
#if PA_WGMMA
#pragma unroll
  for (int j = 0; j < N; ++j) {
    asm volatile("" : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])::"memory");
  }
#else
  (void)d;
#endif
}

// The same for A fragments held in registers (bf16 pairs).
template <int N>
__device__ __forceinline__ void wgmma_pin(uint32_t (&a)[N][4]) {
#if PA_WGMMA
#pragma unroll
  for (int j = 0; j < N; ++j) {
    asm volatile("" : "+r"(a[j][0]), "+r"(a[j][1]), "+r"(a[j][2]), "+r"(a[j][3])::"memory");
  }
#else
  (void)a;
#endif
}

// Before the first wgmma of a batch: earlier register writes are visible to it.
__device__ __forceinline__ void wgmma_fence() {
#if PA_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// Closes the batch of wgmma issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() {
#if PA_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most PENDING of this warpgroup's committed groups are still
// running (groups finish in the order they were committed). Registers a
// running wgmma reads (A fragments) or writes (D) stay untouched until then;
// callers pin them after the wait (wgmma_pin) so that the compiler keeps them
// live and reads them only after it.
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
#if PA_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// Shared memory written by ordinary stores or cp.async, then read by wgmma
// (which reads through the async proxy): each writer calls this after its
// writes have landed and before the barrier that publishes them.
__device__ __forceinline__ void fence_async_smem() {
#if PA_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

namespace wgmma_detail {

#if PA_WGMMA
// Descriptor of an Sw128 operand starting at p: start address / 16, leading
// byte offset lbo_bytes (unused by a K-major operand: 16; for an N-major one
// the distance between its slabs of 64 n-values, common/wgmma_wide.cuh),
// 1024 bytes between 8-row groups, layout 1 = 128-byte swizzle.
__device__ __forceinline__ uint64_t sw128_descriptor(const void* p, uint32_t lbo_bytes = 16) {
  const uint64_t start = (smem_u32(p) & 0x3FFFF) >> 4;
  return start | (uint64_t{(lbo_bytes >> 4) & 0x3FFF} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

template <int TRANS_B>
__device__ __forceinline__ void issue(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1), "n"(TRANS_B));
}

// The same with A read from shared memory too, through descriptor a_desc (K-major).
template <int TRANS_B>
__device__ __forceinline__ void issue_ss(float (&d)[8][4], uint64_t a_desc, uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "%32, %33, p, 1, 1, 0, %35;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(a_desc), "l"(b_desc), "r"(1), "n"(TRANS_B));
}
#else
__device__ __forceinline__ uint32_t pair(const bf16& lo, const bf16& hi) {
  uint16_t l, h;
  memcpy(&l, &lo, 2);
  memcpy(&h, &hi, 2);
  return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

// The same product one warp at a time: B[k][n] = b_at(k, n), n = 8j + g.
template <class BAt>
__device__ __forceinline__ void emulate(float (&d)[8][4], const uint32_t (&a)[4], BAt b_at) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int n = 8 * j + g;
    const uint32_t b[2] = {pair(b_at(2 * t, n), b_at(2 * t + 1, n)), pair(b_at(2 * t + 8, n), b_at(2 * t + 9, n))};
    mma_m16n8k16_bf16(d[j], a, b, d[j]);
  }
}

#if !defined(__CUDACC__)
// The bytes of `rows` Sw128 rows from `first_row` of a slab, read through a
// 128B descriptor (a row's 128 bytes stay in its row whatever the swizzle).
inline void check_read(const bf16* slab, int first_row, int rows, const char* what, const char* file, int line) {
  cpucuda::detail::check_tensor_core_read(slab + first_row * 64, static_cast<size_t>(rows) * 128, 1, what, file,
                                          line);
}
#endif

// This warp's A fragment of an Sw128 slab holding the warpgroup's 64 rows of
// A: rows 16 (warp % 4) + g (+ 8), columns k_off + 2t (+ 1) (+ 8), as mma.sync
// m16n8k16 takes it.
__device__ __forceinline__ void a_fragment(uint32_t (&a)[4], const bf16* slab, int k_off) {
  const int lane = threadIdx.x % 32, r = 16 * (threadIdx.x / 32 % 4) + lane / 4, k = k_off + 2 * (lane % 4);
  a[0] = pair(slab[sw128(r, k)], slab[sw128(r, k + 1)]);
  a[1] = pair(slab[sw128(r + 8, k)], slab[sw128(r + 8, k + 1)]);
  a[2] = pair(slab[sw128(r, k + 8)], slab[sw128(r, k + 9)]);
  a[3] = pair(slab[sw128(r + 8, k + 8)], slab[sw128(r + 8, k + 9)]);
}
#endif

}  // namespace wgmma_detail

// d += A * B with B[k][n] = slab(row row_off + k, col n): 16 rows of a V tile
// (keys) against its 64 columns (dims), row_off a multiple of 16 (P V).
__device__ __forceinline__ void wgmma_mn_major(float (&d)[8][4], const uint32_t (&a)[4], const bf16* slab,
                                               int row_off PA_WGMMA_LOC_PARAM) {
#if PA_WGMMA
  wgmma_detail::issue<1>(d, a, wgmma_detail::sw128_descriptor(slab + row_off * 64));
#else
#if !defined(__CUDACC__)
  wgmma_detail::check_read(slab, row_off, 16, "wgmma_mn_major's B operand", PA_WGMMA_LOC);
#endif
  wgmma_detail::emulate(d, a, [&](int k, int n) -> const bf16& { return slab[sw128(row_off + k, n)]; });
#endif
}

// d += A * B with A[m][k] = a_slab(row m, col a_koff + k) (the warpgroup's 64
// rows, e.g. Q's) and B[k][n] = b_slab(row n, col b_koff + k) (64 rows of a K
// tile against 16 of its dims: Q K^T), k offsets multiples of 16 below 64. Both
// operands from shared memory, so no register of A stays in use while the
// product runs.
__device__ __forceinline__ void wgmma_ss_k_major(float (&d)[8][4], const bf16* a_slab, int a_koff, const bf16* b_slab,
                                                 int b_koff PA_WGMMA_LOC_PARAM) {
#if PA_WGMMA
  // Inside an atom the hardware swizzles the address it computes, so a k-step
  // is a plain 32-byte move of each start address.
  wgmma_detail::issue_ss<0>(d, wgmma_detail::sw128_descriptor(a_slab + a_koff),
                            wgmma_detail::sw128_descriptor(b_slab + b_koff));
#else
#if !defined(__CUDACC__)
  wgmma_detail::check_read(a_slab, 0, 64, "wgmma_ss_k_major's A operand", PA_WGMMA_LOC);
  wgmma_detail::check_read(b_slab, 0, 64, "wgmma_ss_k_major's B operand", PA_WGMMA_LOC);
#endif
  uint32_t a[4];
  wgmma_detail::a_fragment(a, a_slab, a_koff);
  wgmma_detail::emulate(d, a, [&](int k, int n) -> const bf16& { return b_slab[sw128(n, b_koff + k)]; });
#endif
}

}  // namespace pa

#undef PA_WGMMA_LOC_PARAM
#undef PA_WGMMA_LOC
