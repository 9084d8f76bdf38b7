#include <vector>

#include "common/cuda_compat.cuh"
#include "common/device_buffer.h"
#include "common/launch.cuh"
#include "common/timing.h"
#include "probe.h"

namespace pa::bench {
namespace {

constexpr int UNROLL = 4;  // independent 16-byte loads in flight per thread per step

// Grid-stride read of n uint4 values. The xor of everything read goes to `sink`
// only when it equals a value it practically never has, so the loads cannot be
// optimized away while the kernel writes (almost) nothing.
__global__ void read_probe_kernel(const uint4* __restrict__ data,  // [n]
                                  size_t n, unsigned* __restrict__ sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = data[i + u * stride];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= data[i].x ^ data[i].y ^ data[i].z ^ data[i].w;
  if (acc == 0x9E3779B9u) *sink = acc;
}

}  // namespace

ProbeResult measure_read_bandwidth(size_t bytes, int reps) {
  const size_t n = bytes / sizeof(uint4);
  DeviceBuffer<uint4> data(n);
  DeviceBuffer<unsigned> sink(1);
  data.fill_bytes(0x5A);
  cudaDeviceProp prop{};
  PA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const dim3 grid(prop.multiProcessorCount * 8), block(512);
  launch(read_probe_kernel, grid, block, 0, nullptr, data.data(), n, sink.data());  // warm-up
  EventTimer timer;
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    timer.start();
    launch(read_probe_kernel, grid, block, 0, nullptr, data.data(), n, sink.data());
    times.push_back(timer.stop());
  }
  const double ms = median(times);
  return {n * sizeof(uint4) / (ms * 1e-3) / 1e9, n * sizeof(uint4), ms};
}

}  // namespace pa::bench
