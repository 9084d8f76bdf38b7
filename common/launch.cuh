// launch(kernel, grid, block, smem_bytes, stream, args...): the one way kernels
// are started. On a GPU it is kernel<<<...>>> followed by a launch check; on the
// CPU runtime it runs the grid to completion (each CUDA thread a fiber) and
// rethrows any error the runtime detected (a divergent barrier, a deadlock, ...).
// g++ cannot parse <<<>>>, so this function is what keeps one .cu source for both.
#pragma once

#include <utility>
#include <vector>

#include "check.h"
#include "cuda_compat.cuh"
#include "tile_contract.cuh"

namespace pa {

#if defined(__CUDACC__)
// Dynamic shared memory above 48 KB needs an opt-in per kernel; it is made once
// per (device, kernel, size): the driver call costs host time that a decode
// step of a few tens of microseconds would notice.
template <class Kernel>
void allow_dynamic_smem(Kernel kernel, size_t smem_bytes) {
  if (smem_bytes <= 48 * 1024) return;
  struct OptIn {
    int device;
    const void* kernel;
    size_t bytes;
  };
  thread_local std::vector<OptIn> done;
  int device = 0;
  PA_CHECK(cudaGetDevice(&device));
  const void* key = reinterpret_cast<const void*>(kernel);
  for (const OptIn& o : done) {
    if (o.device == device && o.kernel == key && o.bytes >= smem_bytes) return;
  }
  PA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
  done.push_back({device, key, smem_bytes});
}
#endif

template <class... KernelArgs, class... Args>
void launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
            cudaStream_t stream, Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;  // nothing to do; CUDA would reject it
#if defined(__CUDACC__)
  allow_dynamic_smem(kernel, smem_bytes);
  kernel<<<grid, block, smem_bytes, stream>>>(std::forward<Args>(args)...);
  PA_CHECK(cudaGetLastError());
#else
  cpucuda::launch_kernel(kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...);
#endif
}

// launch() for a kernel that depends on the kernel launched just before it in
// `stream` and calls wait_for_prior_grid() (ptx.cuh) before it reads that
// kernel's results: on a GPU it may be scheduled while that kernel's last
// programs still run, which hides the few microseconds a dependent launch
// otherwise leaves the GPU idle (a split decode's merge after its splits). On the
// CPU runtime the grids run in order anyway.
template <class... KernelArgs, class... Args>
void launch_dependent(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                      Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
#if defined(__CUDACC__)
  allow_dynamic_smem(kernel, smem_bytes);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  PA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
#else
  cpucuda::launch_kernel(kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...);
#endif
}

// The tile kernels' launch (every family's launch_tile): a kernel whose Slice
// reads the results of the kernel just before it only after
// wait_for_prior_grid() (after_prior_grid, tile_contract.cuh) is started with
// launch_dependent(), so its programs may walk their own keys while that kernel
// finishes (stage 07's suffix pass after the engine's prefix pass on stage
// 09's tile, engine/compose_cascade.cuh). Every other Slice is started with launch().
template <Slice S, class... KernelArgs, class... Args>
void launch_for_slice(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                      Args&&... args) {
  if constexpr (after_prior_grid<S>) {
    launch_dependent(kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...);
  } else {
    launch(kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...);
  }
}

// Dynamic shared memory as a typed pointer. `extern __shared__` cannot bind to a
// per-block buffer on the CPU, so kernels ask for it through this function.
template <class T>
__device__ __forceinline__ T* dynamic_smem() {
#if defined(__CUDACC__)
  extern __shared__ __align__(16) unsigned char pa_dynamic_smem_[];
  return reinterpret_cast<T*>(pa_dynamic_smem_);
#else
  return cpucuda::dynamic_shared<T>();
#endif
}

}  // namespace pa
