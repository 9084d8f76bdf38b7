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
// positions k_pos <= q_pos (causal) with q_pos - k_pos < window when window > 0,
// or k_pos < sink_tokens (with a window only: StreamingLLM's sink tokens);
// query head h reads KV head h / (Hq / Hkv); with sinks, exp(sink[h]) joins the
// denominator and contributes no value. K/V at positions before this step come
// from the cache through the block table, this step's from k_new / v_new.
// 8-bit caches (p.cfg.kv_format int8 / fp8_e4m3): on the DEQUANTIZED cache,
// which is what the kernels must match: history from p.k_codes / p.k_scale, and
// this step's k_new / v_new quantized with the write path's rule (common/quant.cuh).
OracleResult reference_attention(const Problem& p);

// Which K/V values the oracle reads.
enum class KvSource {
  stored,          // what the cache holds: bf16 values, or dequantized codes for 8-bit formats
  full_precision,  // the bf16 values before quantization (the same as `stored` for a bf16 cache)
};

OracleResult reference_attention(const Problem& p, KvSource source);
// On the bf16 values before quantization: reference_attention(p) minus this is
// the error an 8-bit cache adds to the attention output (stage 05 measures it).
inline OracleResult reference_attention_full_precision(const Problem& p) {
  return reference_attention(p, KvSource::full_precision);
}

// Logical K or V of one request as [seq_len, num_kv_heads, head_dim] floats.
std::vector<float> logical_kv(const Problem& p, int request, bool values);
std::vector<float> logical_kv(const Problem& p, int request, bool values, KvSource source);

}  // namespace pa
