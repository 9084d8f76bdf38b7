// The floor's bandwidth: a read-only streaming probe measured in the same run as
// the kernels it judges.
#pragma once

#include <cstddef>

#include "common/device_buffer.h"

namespace pa::bench {

struct ProbeResult {
  double gbps;        // bytes read / median time, in GB/s (1e9 bytes)
  size_t bytes;       // buffer size read per run
  double median_ms;
};

// Reads a `bytes`-sized buffer (far larger than L2 on a GPU) with 16-byte loads,
// several independent loads in flight per thread, `reps` times; median time.
ProbeResult measure_read_bandwidth(size_t bytes, int reps);

// Empties the L2 before a timed iteration, so the timed kernel's K/V come
// from HBM. By default it reads a buffer twice the L2's size (filled once):
// the L2 then holds only clean lines, as after the probe's own runs. Overwriting
// that buffer instead (memset, the common recipe) leaves up to an L2 full of
// dirty lines, and the timed kernel pays for writing them back to HBM as it
// evicts them. Nsight Compute on an H200, 8-bit 64 x 4096 decode: 25 MB more
// written and 11 us more (154.6 against 143.2 us), 7% of the step and no part
// of the kernel's own traffic. PA_BENCH_FLUSH=dirty selects the memset, to
// measure that difference.
class L2Flush {
 public:
  L2Flush();
  void operator()();   // on the default stream, before the timed start event
  // PA_BENCH_FLUSH: true for "dirty", false for "clean" or unset; anything else is an error.
  static bool dirty_from_env();
  static const char* mode_name(bool dirty) { return dirty ? "dirty (memset)" : "clean (read)"; }

 private:
  bool dirty_ = false;
  DeviceBuffer<unsigned char> buf_;  // [2 x L2 bytes], 16-byte aligned (cudaMalloc)
  DeviceBuffer<unsigned> sink_{1};   // the read kernel's never-taken store
  int rep_ = 0;
};

// What a plain streaming read of `bytes` achieves with the benchmark's own
// method (L2 flushed, event-timed, median of `reps`): the best any kernel that
// reads that many bytes can do, launch and ramp-up included.
double plain_read_ms(size_t bytes, int reps, L2Flush& flush);

}  // namespace pa::bench
