// The course's CPU runtime: lets g++ compile and run the SAME .cu kernel source
// that nvcc compiles for a GPU. The CPU build force-includes this header
// (-include common/runtime/cpu_runtime.h) before anything else in every
// translation unit, so .cu files need no #ifdef to use CUDA names.
//
// How a launch runs (see fiber_runtime.cpp for the details):
//   - every CUDA thread is a fiber (its own mmap'd stack with a guard page);
//   - every block runs all its fibers on one worker OS thread, round robin: a
//     fiber runs until it waits at __syncthreads, at a warp collective, or
//     returns, then the next ready fiber runs;
//   - blocks are spread over a pool of worker threads (one per core);
//   - launch_kernel() returns when the whole grid has finished, or throws
//     cpucuda::KernelError describing the first error (no further blocks run).
//
// It is STRICTER than a GPU on purpose, because it teaches: a thread that
// returns while the rest of its block waits at a barrier, threads of one block
// waiting at different __syncthreads call sites, a warp collective whose mask
// names an exited lane or whose lanes wait at different call sites, misuse of
// an mbarrier, a bulk or tensor copy (or of the bytes a copy still writes),
// and a deadlock (an mbarrier phase that can never complete included) are
// reported with block, thread and source line.
//
// Environment:
//   CPUCUDA_WORKERS=n        worker threads (default: hardware concurrency)
//   CPUCUDA_SMS=n            the multiProcessorCount the device reports (default: the workers)
//   CPUCUDA_STACK_KB=n       stack per CUDA thread in KiB (default 256)
//   CPUCUDA_REVERSE_ORDER=1  run a block's fibers in reversed order, which exposes
//                            missing barriers that the forward order hides
//                            (also cpucuda::set_reverse_order(bool))
//
// Known limits (the course kernels need none of these):
//   - A spin-wait on a flag that another thread sets never yields: a fiber only
//     gives up the core at a barrier, a warp collective, an mbarrier wait
//     (common/mbarrier.cuh: the way to wait for another thread of the block) or
//     its return, so the spinning fiber runs forever. Waiting for another BLOCK
//     likewise hangs or deadlocks (blocks of a worker run one after another, to
//     completion).
//   - __shared__ is thread_local: one copy per worker OS thread, shared by the
//     block that runs on it. So a __shared__ variable keeps its value from the
//     previous block (like a GPU, it is uninitialized; do not rely on it).
//   - extern __shared__ arrays do not exist; use pa::dynamic_smem<T>().
//   - Objects with destructors that live on a fiber's stack are not destroyed
//     when a launch is aborted by an error (their fiber is abandoned).
//   - Warp lanes past the end of a partial warp are ignored in masks.
//   - No streams concurrency: every call is synchronous; events read a host clock.
//   - A stack overflow in a kernel (deep recursion, huge local arrays) hits the
//     guard page and crashes: raise CPUCUDA_STACK_KB.
#pragma once

// ---- qualifiers: defined before any other header (crt/host_defines.h and friends
// only define them when they are not defined yet). __noinline__ stays undefined:
// libstdc++ uses it as an attribute name.
#ifndef __global__
#define __global__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif
// Each worker OS thread runs its blocks one after another and the fibers of a
// block share the OS thread, so thread_local storage is exactly "per block".
// (At block scope thread_local implies static.)
#ifndef __shared__
#define __shared__ thread_local
#endif
#ifndef __constant__
#define __constant__
#endif
#ifndef __managed__
#define __managed__
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
// A kernel parameter the threads read in place (its address is the
// parameter's own, e.g. a TMA map's, common/tma.cuh). Every CPU thread gets
// its own copy of the parameters, which is as good.
#ifndef __grid_constant__
#define __grid_constant__
#endif
// A GNU attribute, not alignas: CUDA code writes `__shared__ __align__(16) T x`,
// and a standard attribute may not follow thread_local.
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- built-in vector types used by launches and kernels
struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#include "cpu_numbers.h"
#include "cpu_api.h"

namespace cpucuda {

// Thrown by launch_kernel (on the calling thread) for a bad launch configuration
// or any error the runtime found while the grid ran.
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs the fibers of every block in reversed order (true) or forward (false).
// Starts from the environment variable CPUCUDA_REVERSE_ORDER; affects later launches.
void set_reverse_order(bool reverse);
bool reverse_order();

// Number of worker OS threads blocks are spread over (also multiProcessorCount,
// unless CPUCUDA_SMS says otherwise).
int num_workers();

namespace detail {

// What the built-in variables read. The scheduler points these at the running
// fiber / block; they are constant-initialized inline thread_locals, so reading
// them is one TLS load, with no wrapper call.
struct FiberInfo {
  uint3 thread_idx;
};
struct BlockInfo {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned char* dynamic_smem;
  size_t dynamic_smem_bytes;
};
inline constinit thread_local const FiberInfo* tl_fiber = nullptr;
inline constinit thread_local const BlockInfo* tl_block = nullptr;

// A type-erased kernel launch: invoke(params) calls the kernel once with a copy
// of the arguments (CUDA passes kernel arguments by value to every thread).
using Invoker = void (*)(const void* params);
void run_grid(Invoker invoke, const void* params, dim3 grid, dim3 block, size_t smem_bytes);

// Block barrier and warp collectives (fiber_runtime.cpp). file/line come first
// so the macros can forward optional arguments (mask, width) with __VA_ARGS__.
void syncthreads(const char* file, int line);
int syncthreads_reduce(const char* file, int line, int op /*0 count, 1 and, 2 or*/, int pred);
void syncwarp(const char* file, int line, unsigned mask = 0xffffffffu);
enum ShflMode : int { kShflIdx = 0, kShflUp = 1, kShflDown = 2, kShflXor = 3 };
uint64_t shfl(const char* file, int line, int mode, unsigned mask, uint64_t bits, int b, int width);
// op 0: ballot (the mask of lanes whose pred is true), 1: any, 2: all.
unsigned vote(const char* file, int line, int op, unsigned mask, bool pred);
unsigned activemask();

template <class T>
T shfl_t(const char* file, int line, int mode, unsigned mask, T value, int b, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "__shfl_*_sync moves trivially copyable values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = shfl(file, line, mode, mask, bits, b, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// Tensor-core and async-copy emulation behind common/ptx.cuh (warp collectives
// where each lane hands over its registers and the last lane computes for all).
void mma_m16n8k16(int dtype /*0 bf16, 1 f16*/, float* d, const uint32_t* a, const uint32_t* b,
                  const float* c, const char* file, int line);
void ldmatrix(int num, bool trans, uint32_t* r, const void* smem_row, const char* file, int line);
void cp_async_16(void* smem_dst, const void* gmem_src, bool pred);
void cp_async_4(void* smem_dst, const void* gmem_src, bool pred);
void cp_async_commit();
void cp_async_wait(int max_pending);

// Named barriers behind common/named_barrier.cuh (bar.sync / bar.arrive): barrier
// `id` (1..15; 0 is __syncthreads') completes once `threads` threads of the
// block have arrived; a sync waits for that, an arrive does not.
void named_barrier(int id, int threads, bool wait, const char* file, int line);

// mbarrier and cp.async.bulk emulation behind common/mbarrier.cuh and
// common/bulk_copy.cuh. `bar` is the barrier's 8 bytes in shared memory, which
// hold the runtime's handle; a wait suspends the fiber until the phase of
// `parity` completes. tx_bytes 0 is a plain arrive.
void mbarrier_init(uint64_t* bar, uint32_t count, const char* file, int line);
void mbarrier_arrive(uint64_t* bar, uint32_t tx_bytes, const char* file, int line);
bool mbarrier_try_wait(uint64_t* bar, uint32_t parity, const char* file, int line);
// cp.async.mbarrier.arrive.noinc: the calling thread's cp.async copies, committed
// or not, land now (a schedule the hardware may take), then it arrives on `bar`.
void cp_async_arrive(uint64_t* bar, const char* file, int line);
void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar, const char* file, int line);

// TMA tensor copies behind common/tma.cuh. A map is kTmaMapBytes of the
// runtime's own description (tma_encode_3d writes it, on the host, from
// arguments the caller has validated); a tensor copy is a bulk copy of its
// box, queued and landed like one. swizzle: 0 none, 1 the 128-byte swizzle.
constexpr size_t kTmaMapBytes = 128;
void tma_encode_3d(void* map, const void* base, const uint64_t* dims, const uint64_t* strides_bytes,
                   const uint32_t* box, int swizzle);
void tma_load_3d(void* smem_dst, const void* map, int c0, int c1, int c2, uint64_t* bar, const char* file, int line);
// The tensor core's reads (common/wgmma.cuh's emulation), of `bytes` of shared
// memory from `smem` through a descriptor of swizzle `swizzle`: an error if a
// bulk or tensor copy still writes any of them, or if a tensor copy of another
// swizzle wrote them. `what` names the operand. Bytes last written by ordinary
// stores or cp.async are not checked.
void check_tensor_core_read(const void* smem, size_t bytes, int swizzle, const char* what, const char* file,
                            int line);

// Stream capture (cpu_api.h): record_work() returns false when `stream` is not
// capturing, and the caller runs the work now; true when it was recorded into
// the stream's graph. It throws KernelError for work on the legacy stream while
// a capture is active (CUDA fails such a launch too).
bool record_work(cudaStream_t stream, std::function<void()> work);

}  // namespace detail

// Runs the whole grid before returning. Arguments are converted to the kernel's
// parameter types once, then every CUDA thread gets its own copy.
template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                   cudaStream_t stream /*synchronous, unless it captures a graph*/, Args&&... args) {
  static_assert(sizeof...(KernelArgs) == sizeof...(Args), "wrong number of kernel arguments");
  struct Params {
    void (*kernel)(KernelArgs...);
    std::tuple<std::decay_t<KernelArgs>...> args;
  };
  constexpr detail::Invoker invoke = [](const void* p) {
    const Params& ps = *static_cast<const Params*>(p);
    std::apply(ps.kernel, ps.args);
  };
  auto params = std::make_shared<const Params>(
      Params{kernel, std::tuple<std::decay_t<KernelArgs>...>(std::forward<Args>(args)...)});
  // Captured into a graph: the arguments are kept, as a GPU graph's kernel node keeps them.
  if (detail::record_work(stream, [params, grid, block, smem_bytes] {
        detail::run_grid(invoke, params.get(), grid, block, smem_bytes);
      })) {
    return;
  }
  detail::run_grid(invoke, params.get(), grid, block, smem_bytes);
}

// The block's dynamic shared memory (smem_bytes of the launch, 16-byte aligned).
template <class T>
inline T* dynamic_shared() {
  return reinterpret_cast<T*>(detail::tl_block->dynamic_smem);
}

}  // namespace cpucuda

// ---- built-in variables
#define threadIdx (static_cast<const ::uint3&>(::cpucuda::detail::tl_fiber->thread_idx))
#define blockIdx (static_cast<const ::uint3&>(::cpucuda::detail::tl_block->block_idx))
#define blockDim (static_cast<const ::dim3&>(::cpucuda::detail::tl_block->block_dim))
#define gridDim (static_cast<const ::dim3&>(::cpucuda::detail::tl_block->grid_dim))
constexpr int warpSize = 32;

// ---- barriers and warp collectives: macros so that error reports name the
// kernel's source line rather than this header.
#define __syncthreads() ::cpucuda::detail::syncthreads(__FILE__, __LINE__)
#define __syncthreads_count(pred) ::cpucuda::detail::syncthreads_reduce(__FILE__, __LINE__, 0, (pred))
#define __syncthreads_and(pred) ::cpucuda::detail::syncthreads_reduce(__FILE__, __LINE__, 1, (pred))
#define __syncthreads_or(pred) ::cpucuda::detail::syncthreads_reduce(__FILE__, __LINE__, 2, (pred))
#define __syncwarp(...) ::cpucuda::detail::syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(...) ::cpucuda::detail::shfl_t(__FILE__, __LINE__, ::cpucuda::detail::kShflIdx, __VA_ARGS__)
#define __shfl_up_sync(...) ::cpucuda::detail::shfl_t(__FILE__, __LINE__, ::cpucuda::detail::kShflUp, __VA_ARGS__)
#define __shfl_down_sync(...) \
  ::cpucuda::detail::shfl_t(__FILE__, __LINE__, ::cpucuda::detail::kShflDown, __VA_ARGS__)
#define __shfl_xor_sync(...) ::cpucuda::detail::shfl_t(__FILE__, __LINE__, ::cpucuda::detail::kShflXor, __VA_ARGS__)
#define __ballot_sync(mask, pred) ::cpucuda::detail::vote(__FILE__, __LINE__, 0, (mask), (pred))
#define __any_sync(mask, pred) static_cast<int>(::cpucuda::detail::vote(__FILE__, __LINE__, 1, (mask), (pred)))
#define __all_sync(mask, pred) static_cast<int>(::cpucuda::detail::vote(__FILE__, __LINE__, 2, (mask), (pred)))
#define __activemask() ::cpucuda::detail::activemask()

// Memory fences: fibers of a block share one OS thread; blocks on different
// workers see each other's writes through these.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) {}

// ---- atomics: blocks run on several OS threads, so these are real atomics.
#define CPUCUDA_ATOMIC_INT_(T)                                                                        \
  inline T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }                       \
  inline T atomicSub(T* p, T v) { return std::atomic_ref<T>(*p).fetch_sub(v); }                       \
  inline T atomicOr(T* p, T v) { return std::atomic_ref<T>(*p).fetch_or(v); }                         \
  inline T atomicAnd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_and(v); }                       \
  inline T atomicXor(T* p, T v) { return std::atomic_ref<T>(*p).fetch_xor(v); }                       \
  inline T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }                       \
  inline T atomicCAS(T* p, T expected, T desired) {                                                   \
    std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);                                \
    return expected; /* the old value, whether or not the swap happened */                           \
  }                                                                                                   \
  inline T atomicMax(T* p, T v) {                                                                     \
    std::atomic_ref<T> r(*p);                                                                         \
    T old = r.load();                                                                                 \
    while (old < v && !r.compare_exchange_weak(old, v)) {                                             \
    }                                                                                                 \
    return old;                                                                                       \
  }                                                                                                   \
  inline T atomicMin(T* p, T v) {                                                                     \
    std::atomic_ref<T> r(*p);                                                                         \
    T old = r.load();                                                                                 \
    while (v < old && !r.compare_exchange_weak(old, v)) {                                             \
    }                                                                                                 \
    return old;                                                                                       \
  }
CPUCUDA_ATOMIC_INT_(int)
CPUCUDA_ATOMIC_INT_(unsigned int)
CPUCUDA_ATOMIC_INT_(unsigned long long)
CPUCUDA_ATOMIC_INT_(long long)
#undef CPUCUDA_ATOMIC_INT_
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double* p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }
inline float atomicExch(float* p, float v) { return std::atomic_ref<float>(*p).exchange(v); }
// CUDA's wrap-around increment/decrement, used by ticket counters.
inline unsigned atomicInc(unsigned* p, unsigned limit) {
  std::atomic_ref<unsigned> r(*p);
  unsigned old = r.load();
  while (!r.compare_exchange_weak(old, old >= limit ? 0u : old + 1u)) {
  }
  return old;
}
inline unsigned atomicDec(unsigned* p, unsigned limit) {
  std::atomic_ref<unsigned> r(*p);
  unsigned old = r.load();
  while (!r.compare_exchange_weak(old, (old == 0u || old > limit) ? limit : old - 1u)) {
  }
  return old;
}

// ---- math and bit intrinsics that CUDA device code has and the host lacks.
// min/max: CUDA provides them for mixed integer and float arguments in device
// code; one constrained template gives the usual arithmetic conversions.
template <class A, class B>
  requires(std::is_arithmetic_v<A> && std::is_arithmetic_v<B>)
constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B>
  requires(std::is_arithmetic_v<A> && std::is_arithmetic_v<B>)
constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanhf(float x) { return std::tanh(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline unsigned __float2uint_rn(float x) { return static_cast<unsigned>(std::nearbyint(x)); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(unsigned x) { return std::countl_zero(x); }
inline int __clzll(unsigned long long x) { return std::countl_zero(x); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
inline int __ffsll(long long x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(x)) + 1;
}
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
// A host clock in nanoseconds stands in for the SM cycle counter.
inline long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
