// Named barriers: the block's hardware barriers 1..15 (0 is __syncthreads'),
// each for a subset of its warps. Barrier `id` completes once `threads` threads
// have arrived; `sync` arrives and waits for that, `arrive` arrives and goes on.
// A sync by one group of warps and an arrive by another is a one-way signal
// with no memory in shared memory: the group that arrives hands something over
// (stage 09's consumers hand the tensor core's turn to each other this way).
//
// Both are .aligned: every thread of a warp executes them, at the same site.
// The count is in threads, a multiple of 32: a warp arrives once all of its
// threads that have not returned are in, and counts as 32 (a block's partial
// last warp too). Every arrival of one completion names the same count.
//
// On the CPU runtime a sync suspends the fiber until the completion; a wrong
// id or count, a count that changes mid-completion, a sync that can never
// complete (a deadlock) and arrivals still pending when the block ends (an
// unbalanced hand-over) are reported with block, thread and source line.
#pragma once

#include "cuda_compat.cuh"

#if !defined(__CUDACC__)
#include <source_location>
#define PA_NBAR_LOC_PARAM , std::source_location pa_loc_ = std::source_location::current()
#define PA_NBAR_LOC pa_loc_.file_name(), static_cast<int>(pa_loc_.line())
#else
#define PA_NBAR_LOC_PARAM
#endif

namespace pa {

// Arrives at barrier `id` and waits until `threads` threads have arrived
// (bar.sync; its participants' earlier shared-memory writes are visible to
// each other after it).
__device__ __forceinline__ void named_barrier_sync(int id, int threads PA_NBAR_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#elif !defined(__CUDACC__)
  cpucuda::detail::named_barrier(id, threads, true, PA_NBAR_LOC);
#else
  (void)id, (void)threads;
#endif
}

// Arrives at barrier `id`, whose completion takes `threads` threads, and goes on (bar.arrive).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads PA_NBAR_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#elif !defined(__CUDACC__)
  cpucuda::detail::named_barrier(id, threads, false, PA_NBAR_LOC);
#else
  (void)id, (void)threads;
#endif
}

}  // namespace pa

#undef PA_NBAR_LOC_PARAM
#undef PA_NBAR_LOC
