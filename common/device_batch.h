// A Problem on the device: validated metadata, queries, the paged cache with
// this step's K/V written through slot_mapping, and poisoned outputs.
// 8-bit formats: the device cache is codes + scales only (k_cache / v_cache stay
// empty, params().kv.k_cache is null); new tokens go through write_kv_quantized.
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

  // The launchers' inputs. Checked launches (AttentionParams::checked) are on
  // for every batch built here, which is how the tests get them: a launcher
  // then re-validates the device copy of the metadata before its kernels.
  // Benchmarks turn them off (set_checked(false)), except the case that
  // measures their cost.
  AttentionParams params() const { return params_; }
  void set_checked(bool on) { params_.checked = on; }
  void set_batch_invariant(bool on) { params_.batch_invariant = on; }  // AttentionParams::batch_invariant
  void poison_outputs();                 // out, lse := NaN (every element must be written)
  std::vector<float> out_host() const;   // [num_tokens, num_q_heads, head_dim]
  std::vector<float> lse_host() const;   // [num_tokens, num_q_heads]

  DeviceBuffer<bf16> q, out, k_cache, v_cache, k_new, v_new;
  DeviceBuffer<float> lse, sinks;
  DeviceBuffer<int> query_start_loc, seq_lens, block_table, slot_mapping;
  DeviceBuffer<uint8_t> k_codes, v_codes;  // 8-bit formats: [num_blocks, block_size, num_kv_heads, head_dim]
  DeviceBuffer<float> k_scale, v_scale;    // 8-bit formats: [num_blocks, block_size, num_kv_heads]

 private:
  AttentionParams params_{};

  void fill_random_quantized(int num_slots, cudaStream_t stream);
};

std::vector<float> to_float(const std::vector<bf16>& x);

}  // namespace pa
