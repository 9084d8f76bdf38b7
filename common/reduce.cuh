// Warp and block reductions over the xor-shuffle butterfly: after the loop every
// lane holds the result, so no broadcast is needed.
#pragma once

#include "cuda_compat.cuh"
#include "quant.cuh"  // nan_max

namespace pa {

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// warp_max that propagates NaN (common/quant.cuh's nan_max; fmaxf would drop
// it): a NaN in any lane reaches every lane. The 8-bit paths use it so that a
// NaN row poisons its scale instead of being quietly ignored.
__device__ __forceinline__ float warp_nan_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = nan_max(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Block-wide reduction; scratch holds one float per warp. Every thread gets the
// result. Contains barriers: every thread of the block must call it.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float x, float* scratch /* [blockDim.x / 32] */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  x = IS_MAX ? warp_max(x) : warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < num_warps ? scratch[lane] : (IS_MAX ? -INFINITY : 0.0f);
  return IS_MAX ? warp_max(x) : warp_sum(x);
}

}  // namespace pa
