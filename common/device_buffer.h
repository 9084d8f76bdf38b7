// DeviceBuffer<T>: an owning, typed cudaMalloc allocation (host memory on the
// CPU runtime). Every call is checked.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "check.h"

namespace pa {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  explicit DeviceBuffer(const std::vector<T>& host) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }

  // Reallocates only when growing; contents are not preserved.
  void resize(size_t count) {
    if (count <= count_ && ptr_) {
      count_ = count;
      return;
    }
    if (ptr_) PA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    count_ = 0;
    if (count) PA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
    count_ = count;
  }
  void upload(const std::vector<T>& host) {
    resize(host.size());
    if (!host.empty()) PA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_) PA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fill with a byte pattern, e.g. 0xFF to poison bf16/fp32 outputs with NaN.
  void fill_bytes(int byte) {
    if (count_) PA_CHECK(cudaMemset(ptr_, byte, count_ * sizeof(T)));
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace pa
