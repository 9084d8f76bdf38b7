// Every backend the main job and the benchmarks run, in stage order. A backend
// says which batches it supports; the others are reported as skipped with the
// reason, never silently dropped.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/device_batch.h"
#include "common/problem.h"

namespace pa::bench {

struct Backend {
  std::string name;
  // Empty string: supported; otherwise why not.
  std::function<std::string(const Problem&)> unsupported;
  std::function<void(const Problem&, DeviceBatch&)> forward;
  // Adjusts the model configuration before the backend's Problem is built (e.g.
  // an 8-bit cache format, a sliding window); null = the shared Problem. The
  // benchmark's bytes (Problem::kv_bytes_read) come from that Problem, so the
  // floor is the backend's own: codes + scales, or only the window's keys.
  std::function<void(AttentionConfig&)> configure = nullptr;
};

const std::vector<Backend>& backends();

}  // namespace pa::bench
