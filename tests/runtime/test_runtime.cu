// Tests of the CPU runtime (and, built with nvcc, of the same semantics on a GPU).
#include <gtest/gtest.h>

#include "common/launch.cuh"

namespace {

__global__ void fill_kernel(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x; }

TEST(Runtime, LaunchWritesEveryThread) {
  int* d = nullptr;
  PA_CHECK(cudaMalloc(&d, 4 * 32 * sizeof(int)));
  pa::launch(fill_kernel, dim3(4), dim3(32), 0, nullptr, d);
  int h[128];
  PA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 128; ++i) EXPECT_EQ(h[i], i / 32);
  PA_CHECK(cudaFree(d));
}

}  // namespace
