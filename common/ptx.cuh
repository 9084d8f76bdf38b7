// Tensor-core and async-copy instructions as small device functions, one
// spelling for both flavors:
//   - compiled for a GPU (__CUDA_ARCH__): the inline PTX itself;
//   - compiled for the CPU runtime: a warp-collective emulation in which every
//     lane hands over its registers and the last lane to arrive computes all
//     lanes' results from the fragment layouts documented in the PTX ISA (see
//     common/runtime/fiber_runtime.cpp). Results match the hardware's layouts
//     exactly, and the mma sums with the tensor core's own alignment and
//     truncation, measured on an H200 (mma_dot16 in fiber_runtime.cpp).
// Like the instructions, mma and ldmatrix must be called by all 32 lanes of a
// warp, at the same call site.
#pragma once

#include <cstdint>

#include "cuda_compat.cuh"

#if !defined(__CUDACC__)
#include <source_location>
// The CPU emulation reports errors at the caller's line, so the wrappers take
// the call site as a defaulted last argument (invisible at the call).
#define PA_PTX_LOC_PARAM , std::source_location pa_loc_ = std::source_location::current()
#define PA_PTX_LOC pa_loc_.file_name(), static_cast<int>(pa_loc_.line())
#else
#define PA_PTX_LOC_PARAM
#endif

namespace pa {

// D (16x8 fp32) = A (16x16 bf16, row-major) * B (16x8 bf16, column-major) + C.
// Fragments per lane (g = lane / 4, t = lane % 4), two 16-bit values per register:
//   a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
//   b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..2t+9][g]
//   c/d  = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                  const float (&c)[4] PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#elif !defined(__CUDACC__)
  cpucuda::detail::mma_m16n8k16(0, d, a, b, c, PA_PTX_LOC);
#endif
}

// The same with fp16 inputs (same fragment layouts).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4] PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#elif !defined(__CUDACC__)
  cpucuda::detail::mma_m16n8k16(1, d, a, b, c, PA_PTX_LOC);
#endif
}

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// ldmatrix.m8n8.x{1,2,4}.b16: lanes 8j..8j+7 pass the addresses of the 8 rows
// (16 bytes each, 16-byte aligned, shared memory) of matrix j; r[j] of lane l
// receives row l/4, columns 2(l%4)..2(l%4)+1 of matrix j. The _trans versions
// deliver the transposed matrices: rows 2(l%4)..2(l%4)+1 of column l/4.
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* smem_row_ptr PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_u32(smem_row_ptr)));
#elif !defined(__CUDACC__)
  cpucuda::detail::ldmatrix(1, false, r, smem_row_ptr, PA_PTX_LOC);
#endif
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem_row_ptr PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(smem_row_ptr)));
#elif !defined(__CUDACC__)
  cpucuda::detail::ldmatrix(2, false, r, smem_row_ptr, PA_PTX_LOC);
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row_ptr PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem_row_ptr)));
#elif !defined(__CUDACC__)
  cpucuda::detail::ldmatrix(4, false, r, smem_row_ptr, PA_PTX_LOC);
#endif
}

__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* smem_row_ptr PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(smem_u32(smem_row_ptr)));
#elif !defined(__CUDACC__)
  cpucuda::detail::ldmatrix(1, true, r, smem_row_ptr, PA_PTX_LOC);
#endif
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem_row_ptr PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(smem_row_ptr)));
#elif !defined(__CUDACC__)
  cpucuda::detail::ldmatrix(2, true, r, smem_row_ptr, PA_PTX_LOC);
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row_ptr PA_PTX_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem_row_ptr)));
#elif !defined(__CUDACC__)
  cpucuda::detail::ldmatrix(4, true, r, smem_row_ptr, PA_PTX_LOC);
#endif
}

// cp.async.cg (16 bytes, global -> shared, bypassing L1). With pred == false
// nothing is read and the 16 destination bytes are zero-filled (src-size 0),
// which is how out-of-range rows of a tile are padded.
// The copy lands only once a later cp_async_wait<N>() retires its group.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool pred = true) {
#if defined(__CUDA_ARCH__)
  const int src_size = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem_dst)), "l"(gmem_src),
               "r"(src_size)
               : "memory");
#elif !defined(__CUDACC__)
  cpucuda::detail::cp_async_16(smem_dst, gmem_src, pred);
#endif
}

// cp.async.ca of 4 bytes (e.g. one fp32 scale, whose neighbours in global
// memory belong to other heads). pred == false zero-fills the 4 bytes.
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src, bool pred = true) {
#if defined(__CUDA_ARCH__)
  const int src_size = pred ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem_dst)), "l"(gmem_src),
               "r"(src_size)
               : "memory");
#elif !defined(__CUDACC__)
  cpucuda::detail::cp_async_4(smem_dst, gmem_src, pred);
#endif
}

// A hint: start bringing the line that holds gmem into L2, with no register
// written and nothing to wait for. (Nothing to do on the CPU runtime.)
__device__ __forceinline__ void prefetch_l2(const void* gmem) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
#else
  (void)gmem;
#endif
}

// Programmatic dependent launch (Hopper), the device half of launch_dependent()
// (launch.cuh). A kernel started that way may be running while the kernel
// before it in the stream finishes; wait_for_prior_grid() blocks until that
// kernel has completed and its writes are visible. allow_dependent_grid() lets
// the next kernel start early (its programs take free SM slots and wait there)
// instead of when this kernel's last program exits. On the CPU runtime grids
// run one after the other, so both are nothing.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Warp specialisation (sm_90a): a warpgroup gives up registers (dec) or takes
// them (inc), to REGS per thread, a multiple of 8 in 24..256; all 128 threads
// of the warpgroup call it together. A producer warpgroup that only issues
// copies needs few; the consumers' accumulators need many, and the kernel's
// launch bounds alone would give every warp the same share. (The CPU runtime
// has no register file: nothing to do.)
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}

// Closes the group of cp.async issued since the previous commit.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif !defined(__CUDACC__)
  cpucuda::detail::cp_async_commit();
#endif
}

// Waits until at most N committed groups are still in flight (this thread's
// copies only: other threads see them after a following __syncthreads()).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0, "cp_async_wait<N>: N counts pending groups");
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif !defined(__CUDACC__)
  cpucuda::detail::cp_async_wait(N);
#endif
}

}  // namespace pa

#undef PA_PTX_LOC_PARAM
#undef PA_PTX_LOC
