// The floor's bandwidth: a read-only streaming probe measured in the same run as
// the kernels it judges.
#pragma once

#include <cstddef>

namespace pa::bench {

struct ProbeResult {
  double gbps;        // bytes read / median time, in GB/s (1e9 bytes)
  size_t bytes;       // buffer size read per run
  double median_ms;
};

// Reads a `bytes`-sized buffer (far larger than L2 on a GPU) with 16-byte loads,
// several independent loads in flight per thread, `reps` times; median time.
ProbeResult measure_read_bandwidth(size_t bytes, int reps);

}  // namespace pa::bench
