// The benchmarks' timing method, written once: one warm-up step, then per
// Google Benchmark iteration the L2 emptied, the step timed by device events
// and reported as the iteration's manual time. Returns the median in ms.
#pragma once

#include <benchmark/benchmark.h>

#include <vector>

#include "common/timing.h"
#include "probe.h"

namespace pa::bench {

template <class Step>
double timed_median_ms(benchmark::State& state, L2Flush& flush, Step&& step) {
  EventTimer timer;
  std::vector<double> times;
  step();  // warm-up: workspaces, first-launch costs
  for (auto _ : state) {
    flush();
    timer.start();
    step();
    const float ms = timer.stop();
    times.push_back(ms);
    state.SetIterationTime(ms * 1e-3);
  }
  return median(times);
}

}  // namespace pa::bench
