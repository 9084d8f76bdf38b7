// Hopper's mbarrier: a barrier object of 8 bytes in shared memory that a set of
// threads and asynchronous copies complete together, one phase at a time. It is
// what guards the slots of a TMA / bulk-copy ring (bulk_copy.cuh): a "full"
// barrier per slot tells the consumers that the slot's bytes have landed, an
// "empty" barrier per slot tells the producer that the consumers let go of it.
//
// The object's state, as the PTX ISA defines it:
//   - the current phase (its parity, 0 or 1, is what a waiter names);
//   - pending arrivals: how many arrive() the phase still needs (init(count)
//     sets the count every phase starts from, 1 .. 2^20 - 1);
//   - the tx-count: bytes announced by arrive_expect_tx() minus bytes that
//     bulk copies delivered (their complete_tx), within -(2^20 - 1) .. 2^20 - 1.
// The phase completes when BOTH the pending arrivals and the tx-count are zero;
// then the parity flips, the arrivals start from the count again and the
// tx-count from zero. A copy may deliver its bytes before or after the
// matching expect_tx: only the sum over the phase matters.
//
// Waiting names a parity, never a phase number: wait(p) returns once the phase
// of parity p has completed, that is while the current phase's parity is not p.
// So on a fresh barrier (phase 0) wait(1) returns at once (phase "-1" counts as
// complete), which is how a producer's first pass over its empty barriers goes
// through. A waiter can only tell its phase from the one two phases later by
// the protocol itself: it must never fall two phases behind.
//
//   ring of S slots, tile t in slot t % S, round r = t / S:
//     producer:  empty[s].wait((r & 1) ^ 1);  full[s].arrive_expect_tx(bytes);
//                bulk_copy_g2s(slot, src, bytes, full[s]);
//     consumers: full[s].wait(r & 1);  ...read the slot...;  empty[s].arrive();
//
// One thread initializes a barrier, then fence_mbarrier_init() and a
// __syncthreads() make it visible to the other threads and to the copy engine,
// before anyone arrives, waits or copies.
//
// Two implementations of one spelling:
//   - compiled for the GPU: the PTX instructions (sm_90);
//   - compiled for the CPU runtime: an emulation of the same state in which a
//     waiting thread suspends its fiber until the phase completes (other
//     threads run meanwhile), bulk copies land as late as possible (when some
//     thread waits on their barrier, or when no thread can run), and a phase
//     that can never complete is reported as a deadlock naming the barrier and
//     what its phase still misses (arrivals, bytes), with block, thread and
//     source line. Misuse (an uninitialized barrier, more bytes delivered than
//     announced, more arrivals than the count in one phase) is an error there;
//     on a GPU it is undefined behaviour or a hang.
#pragma once

#include <cstdint>

#include "cuda_compat.cuh"
#include "ptx.cuh"

#if !defined(__CUDACC__)
#include <source_location>
// The CPU emulation reports errors at the caller's line (as ptx.cuh does).
#define PA_MBAR_LOC_PARAM , std::source_location pa_loc_ = std::source_location::current()
#define PA_MBAR_LOC_ONLY std::source_location pa_loc_ = std::source_location::current()
#define PA_MBAR_LOC pa_loc_.file_name(), static_cast<int>(pa_loc_.line())
#else
#define PA_MBAR_LOC_PARAM
#define PA_MBAR_LOC_ONLY
#endif

namespace pa {

// The largest arrival count of init() and the largest tx-count (bytes) one
// phase may have outstanding.
constexpr uint32_t kMbarrierMaxCount = (1u << 20) - 1;
constexpr uint32_t kMbarrierMaxTxBytes = (1u << 20) - 1;

// Declare it in shared memory (`__shared__ pa::Mbarrier full[STAGES];`, or 8-byte
// aligned dynamic shared memory). The 8 bytes are opaque: the hardware's
// encoding on a GPU, the runtime's handle on the CPU.
struct Mbarrier {
  uint64_t state;

  // Phase 0 with `count` arrivals pending and a tx-count of zero. One thread.
  __device__ __forceinline__ void init(uint32_t count PA_MBAR_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(&state)), "r"(count) : "memory");
#elif !defined(__CUDACC__)
    cpucuda::detail::mbarrier_init(&state, count, PA_MBAR_LOC);
#else
    (void)count;
#endif
  }

  // One arrival on the current phase (release: the caller's earlier shared-memory
  // reads and writes happen before the phase completes for any waiter).
  __device__ __forceinline__ void arrive(PA_MBAR_LOC_ONLY) {
#if defined(__CUDA_ARCH__)
    asm volatile(
        "{\n"
        ".reg .b64 state;\n"
        "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
        "}\n" ::"r"(smem_u32(&state))
        : "memory");
#elif !defined(__CUDACC__)
    cpucuda::detail::mbarrier_arrive(&state, 0, PA_MBAR_LOC);
#endif
  }

  // One arrival on the current phase once every cp.async this thread has issued
  // so far has landed (cp.async.mbarrier.arrive.noinc: the arrival is one of
  // init's count, not an extra one). The thread goes on at once; its copies
  // complete on the barrier as a tensor copy's bytes do. Their writes are the
  // generic proxy's: a waiter that reads them through the async proxy (wgmma)
  // fences first (fence_async_smem).
  __device__ __forceinline__ void arrive_on_cp_async(PA_MBAR_LOC_ONLY) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(&state)) : "memory");
#elif !defined(__CUDACC__)
    cpucuda::detail::cp_async_arrive(&state, PA_MBAR_LOC);
#endif
  }

  // Announces `tx_bytes` that bulk copies will deliver to this phase, and
  // arrives: the producer's one call per slot and fill, before or after it
  // issues the copies.
  __device__ __forceinline__ void arrive_expect_tx(uint32_t tx_bytes PA_MBAR_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(&state)),
                 "r"(tx_bytes)
                 : "memory");
#elif !defined(__CUDACC__)
    cpucuda::detail::mbarrier_arrive(&state, tx_bytes, PA_MBAR_LOC);
#else
    (void)tx_bytes;
#endif
  }

  // True once the phase of parity `parity` (0 or 1) has completed; then the
  // bytes that copies delivered to it, and the shared-memory writes of the
  // threads that arrived on it, are visible to the caller (acquire). On a GPU
  // the instruction may suspend the thread for a while and returns false when
  // its time limit expires first; on the CPU runtime it suspends the fiber
  // until the phase completes, so there it returns true (or reports a deadlock).
  __device__ __forceinline__ bool try_wait(uint32_t parity PA_MBAR_LOC_PARAM) {
#if defined(__CUDA_ARCH__)
    uint32_t done;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_u32(&state)), "r"(parity)
        : "memory");
    return done != 0;
#elif !defined(__CUDACC__)
    return cpucuda::detail::mbarrier_try_wait(&state, parity, PA_MBAR_LOC);
#else
    (void)parity;
    return true;
#endif
  }

  // Blocks until the phase of parity `parity` has completed (see try_wait).
  __device__ __forceinline__ void wait(uint32_t parity PA_MBAR_LOC_PARAM) {
#if !defined(__CUDACC__)
    while (!cpucuda::detail::mbarrier_try_wait(&state, parity, PA_MBAR_LOC)) {
    }
#else
    while (!try_wait(parity)) {
    }
#endif
  }
};
static_assert(sizeof(Mbarrier) == 8 && alignof(Mbarrier) == 8, "an mbarrier is one 8-byte word");

// After init() and before the __syncthreads() that publishes the barriers: makes
// the initialization visible to the asynchronous proxy (the copy engine that
// performs complete_tx) and to the cluster. (Nothing to do on the CPU runtime.)
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Orders this thread's ordinary shared-memory writes before later asynchronous
// (bulk copy) accesses of the same bytes: ordinary stores and the copy engine
// are different proxies, and an mbarrier orders only within one. Needed where a
// thread writes a buffer with plain stores and a bulk copy then overwrites it,
// or reads it (a shared -> global copy). (Nothing to do on the CPU runtime.)
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

}  // namespace pa

#undef PA_MBAR_LOC_PARAM
#undef PA_MBAR_LOC_ONLY
#undef PA_MBAR_LOC
