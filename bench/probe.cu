#include <algorithm>
#include <cstdlib>
#include <string>
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

// One read pass over data[n] with the probe's launch shape.
void read_all(const uint4* data, size_t n, unsigned* sink) {
  cudaDeviceProp prop{};
  PA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const dim3 grid(prop.multiProcessorCount * 8), block(512);
  launch(read_probe_kernel, grid, block, 0, nullptr, data, n, sink);
}

// Median time of `reps` reads of a fresh `bytes`-sized buffer; `before` runs
// ahead of each timed read.
template <class Before>
double time_reads(size_t bytes, int reps, Before before) {
  const size_t n = bytes / sizeof(uint4);
  DeviceBuffer<uint4> data(n);
  DeviceBuffer<unsigned> sink(1);
  data.fill_bytes(0x5A);
  read_all(data.data(), n, sink.data());  // warm-up
  EventTimer timer;
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    before();
    timer.start();
    read_all(data.data(), n, sink.data());
    times.push_back(timer.stop());
  }
  return median(times);
}

}  // namespace

ProbeResult measure_read_bandwidth(size_t bytes, int reps) {
  bytes -= bytes % sizeof(uint4);
  // Back-to-back reads of a buffer far larger than L2: no flush needed, and
  // nothing dirty is ever left behind.
  const double ms = time_reads(bytes, reps, [] {});
  return {bytes / (ms * 1e-3) / 1e9, bytes, ms};
}

L2Flush::L2Flush() : dirty_(dirty_from_env()) {
  cudaDeviceProp prop{};
  PA_CHECK(cudaGetDeviceProperties(&prop, 0));
#if defined(PA_GPU_BUILD)
  const size_t bytes = 2 * static_cast<size_t>(std::max(prop.l2CacheSize, 1));
#else
  const size_t bytes = sizeof(uint4);  // the CPU runtime has no L2 to empty; timings there mean nothing
#endif
  buf_.resize(bytes);
  buf_.fill_bytes(0x3C);
}

bool L2Flush::dirty_from_env() {
  const char* env = std::getenv("PA_BENCH_FLUSH");
  const std::string mode = env ? env : "clean";
  PA_REQUIRE(mode == "clean" || mode == "dirty", "PA_BENCH_FLUSH must be clean or dirty, not '" + mode + "'");
  return mode == "dirty";
}

void L2Flush::operator()() {
  if (dirty_) {
    buf_.fill_bytes(++rep_ & 0xFF);
  } else {
    read_all(reinterpret_cast<const uint4*>(buf_.data()), buf_.bytes() / sizeof(uint4), sink_.data());
  }
}

double plain_read_ms(size_t bytes, int reps, L2Flush& flush) {
  bytes -= bytes % sizeof(uint4);
  if (bytes == 0) return 0.0;
  return time_reads(bytes, reps, [&] { flush(); });
}

}  // namespace pa::bench
