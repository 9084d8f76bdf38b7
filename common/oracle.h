// The fp64 oracle: dense attention per request, in double on the CPU, from the
// same metadata the kernels get. Every stage is checked against it.
#pragma once

#include <vector>

#include "problem.h"

namespace pa {

struct OracleResult {
  std::vector<double> out;  // [num_tokens, num_q_heads, head_dim]; padding rows 0
  std::vector<double> lse;  // [num_tokens, num_q_heads]; natural log, incl. the sink term; padding -inf
};

// Rules: query i of request r is at q_pos = seq_len - q_len + i and sees keys at
// positions k_pos <= q_pos (causal) with q_pos - k_pos < window when window > 0;
// query head h reads KV head h / (Hq / Hkv); with sinks, exp(sink[h]) joins the
// denominator and contributes no value. K/V at positions before this step come
// from the cache through the block table, this step's from k_new / v_new.
OracleResult reference_attention(const Problem& p);

// Logical K or V of one request as [seq_len, num_kv_heads, head_dim] floats.
std::vector<float> logical_kv(const Problem& p, int request, bool values);

}  // namespace pa
