// cp.async.bulk: one thread asks the copy engine (TMA) to move a contiguous run
// of bytes from global to shared memory; the copy completes on an mbarrier
// (mbarrier.cuh) by subtracting its byte count from the barrier's tx-count
// (complete_tx). Whoever waits on that barrier's phase sees the bytes; nobody
// else may assume they have landed, the issuing thread included.
//
// Rules (the PTX ISA's; the CPU runtime checks each and names the rule it
// broke, a GPU does not check: it faults, corrupts or hangs):
//   - `bytes` is a positive multiple of 16, at most kMbarrierMaxTxBytes (the
//     tx-count's range: one phase cannot wait for more);
//   - `smem_dst` and `gmem_src` are 16-byte aligned;
//   - `bar` has been initialized, and its phase is announced the same bytes
//     (arrive_expect_tx): announcing more than the copies deliver never
//     completes the phase (the CPU runtime reports a deadlock naming the
//     barrier and the missing bytes); announcing less completes it early, with
//     bytes still in flight (the CPU runtime reports the surplus);
//   - plain shared-memory stores to the destination before the copy need a
//     fence_proxy_async_shared() between them and the copy.
//
// On the CPU runtime the copy lands as late as it may: when a thread waits on
// `bar` and its phase is not complete yet, or when no thread of the block can
// run. The source is read then, not at issue (a GPU reads it at some time in
// between), so a kernel that reads the slot before its wait sees the old bytes.
#pragma once

#include <cstdint>

#include "cuda_compat.cuh"
#include "mbarrier.cuh"
#include "ptx.cuh"

#if !defined(__CUDACC__)
#include <source_location>
#define PA_BULK_LOC_PARAM , std::source_location pa_loc_ = std::source_location::current()
#define PA_BULK_LOC pa_loc_.file_name(), static_cast<int>(pa_loc_.line())
#else
#define PA_BULK_LOC_PARAM
#endif

namespace pa {

// Copies [gmem_src, gmem_src + bytes) to [smem_dst, smem_dst + bytes); the copy
// completes `bytes` of bar's tx-count. Issued by one thread.
__device__ __forceinline__ void bulk_copy_g2s(void* smem_dst /* [bytes], 16-byte aligned */,
                                              const void* gmem_src /* [bytes], 16-byte aligned */, uint32_t bytes,
                                              Mbarrier& bar PA_BULK_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
  // A CTA's own shared::cta address is a valid shared::cluster address (a launch
  // without clusters is a cluster of one CTA).
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(smem_dst)),
               "l"(gmem_src), "r"(bytes), "r"(smem_u32(&bar.state))
               : "memory");
#elif !defined(__CUDACC__)
  cpucuda::detail::bulk_copy_g2s(smem_dst, gmem_src, bytes, &bar.state, PA_BULK_LOC);
#else
  (void)smem_dst;
  (void)gmem_src;
  (void)bytes;
  (void)bar;
#endif
}

}  // namespace pa

#undef PA_BULK_LOC_PARAM
#undef PA_BULK_LOC
