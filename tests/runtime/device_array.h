// What the runtime's tests share: a device allocation of their own, so that
// they exercise the CUDA API the runtime emulates rather than common/'s helpers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/check.h"

namespace pa::runtime_test {

// A device allocation that frees itself; copies in and out are checked.
template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) {
    PA_CHECK(cudaMalloc(&ptr, n * sizeof(T)));
    PA_CHECK(cudaMemset(ptr, 0, n * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    PA_CHECK(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> download() const {
    std::vector<T> host(n);
    PA_CHECK(cudaDeviceSynchronize());
    PA_CHECK(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

#if !defined(__CUDACC__)
// Restores the CPU runtime's fiber order after a test that changes it.
struct ReverseOrder {
  explicit ReverseOrder(bool on) : saved(cpucuda::reverse_order()) { cpucuda::set_reverse_order(on); }
  ~ReverseOrder() { cpucuda::set_reverse_order(saved); }
  bool saved;
};

// The CPU runtime's report of the kernel error that `launch` provokes, or "(no error)".
template <class F>
std::string launch_error(F&& launch) {
  try {
    launch();
  } catch (const cpucuda::KernelError& e) {
    return e.what();
  }
  return "(no error)";
}
#endif

}  // namespace pa::runtime_test
