// Device-event timing: time on the GPU's own clock (the host clock on the CPU runtime).
#pragma once

#include <algorithm>
#include <vector>

#include "check.h"

namespace pa {

class EventTimer {
 public:
  EventTimer() {
    PA_CHECK(cudaEventCreate(&start_));
    PA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(cudaStream_t s = nullptr) { PA_CHECK(cudaEventRecord(start_, s)); }
  // Milliseconds between start() and now on stream s.
  float stop(cudaStream_t s = nullptr) {
    PA_CHECK(cudaEventRecord(stop_, s));
    PA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    PA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace pa
