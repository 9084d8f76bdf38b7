// Exercise 01: count what a decode step costs, before timing anything.
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace pa::exercise01 {

struct Costs {
  uint64_t floor_bytes;      // K/V bytes a read-once kernel must load: every context token, once per KV head
  uint64_t reference_bytes;  // stage 01's memory traffic: gather read + gather write + attention reads
  uint64_t reference_launches;  // stage 01's kernel launches (gather + attention per request with queries)
  double floor_ms;           // floor_bytes at `gbps` GB/s
};

// Costs of one layer's attention for `meta` under `cfg` (bf16 cache), with the
// attention of stage 01 reading each KV head's keys and values once per query
// head of its group. `gbps` is a read bandwidth in GB/s (1e9 bytes per second).
Costs count(const BatchMeta& meta, const AttentionConfig& cfg, double gbps);

}  // namespace pa::exercise01
