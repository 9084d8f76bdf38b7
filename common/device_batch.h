// A Problem on the device: validated metadata, queries, the paged cache with
// this step's K/V written through slot_mapping, and poisoned outputs.
#pragma once

#include <vector>

#include "attention_params.h"
#include "device_buffer.h"
#include "problem.h"

namespace pa {

class DeviceBatch {
 public:
  // Validates p.meta (throws pa::Error before anything touches the device),
  // uploads, runs the write path and poisons out/lse with NaN.
  explicit DeviceBatch(const Problem& p, cudaStream_t stream = nullptr);

  AttentionParams params() const { return params_; }
  void poison_outputs();                 // out, lse := NaN (every element must be written)
  std::vector<float> out_host() const;   // [num_tokens, num_q_heads, head_dim]
  std::vector<float> lse_host() const;   // [num_tokens, num_q_heads]

  DeviceBuffer<bf16> q, out, k_cache, v_cache, k_new, v_new;
  DeviceBuffer<float> lse, sinks;
  DeviceBuffer<int> query_start_loc, seq_lens, block_table, slot_mapping;

 private:
  AttentionParams params_{};
};

std::vector<float> to_float(const std::vector<bf16>& x);

}  // namespace pa
