// Exercise 02's harness (not a TODO): the cache formats of the table, the
// synthetic K/V/Q with outlier key channels, and the quality metrics of one
// format against full precision. The test and the report both use it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant_quality.h"

namespace pa::exercise02 {

// How a cache stores K and V.
enum class Scheme {
  full,             // the fp32 values as drawn: the reference itself
  bf16,             // every value rounded to bf16 (nearest even), no scale
  int8_row,         // stage 05's INT8: symmetric, one fp32 scale per (token, head) row, of the bf16 values
  fp8_row,          // stage 05's FP8 (E4M3): the same rule with e4m3 codes
  int_per_token,    // TODO 1-2 with `bits`: K and V per token
  int_per_channel,  // KIVI: K per channel over group_tokens tokens, V per token, both with `bits`
};

struct Format {
  std::string name;    // the table's label
  std::string family;  // the line a plot draws it on
  Scheme scheme;
  int bits;  // code bits (int_per_*); 8 for int8_row / fp8_row, 16 for bf16, 32 for full
};

// The table's rows, in order: bf16, stage 05's two 8-bit formats, then K per
// token and K per channel (KIVI) at 8, 4, 3 and 2 bits.
std::vector<Format> standard_formats();

struct Workload {
  int num_kv_heads = 4;  // independent heads, each with its own outlier channels
  int num_queries = 8;   // query rows per KV head (e.g. a GQA group of 4 heads x 2 decode tokens)
  int num_keys = 2048;   // cached tokens per head
  int head_dim = 128;
  int group_tokens = 128;  // tokens that share a per-channel key scale (KIVI's group size)
  // Outlier key channels per head: channel c holds mag * (sign + 0.2 n) for
  // n ~ N(0, 1), every other channel N(0, 1). Large in every token with a
  // modest spread, as the keys of real models (KIVI's Figure 2); the spread,
  // not the offset, moves the softmax.
  std::vector<float> outlier_magnitudes = {10.0f, 20.0f, 35.0f, 50.0f};
  uint64_t seed = 2;
};

// Cached bits per K or V value: the codes plus every group's fp32 metadata
// (a scale; a scale and a zero point for the asymmetric formats), averaged
// over K and V.
double bits_per_value(const Format& format, const Workload& workload);

struct Metrics {
  double bits_per_value;
  double out_rel_l2;    // ||o_q - o||_2 / ||o||_2 over every output row (fp64 attention on both)
  double lse_abs_mean;  // mean |lse_q - lse| over query rows (natural log)
  double lse_abs_max;
  double kl_mean;  // mean over query rows of KL(P || P_q) (TODO 3), nats
  double kl_max;
};

// The workload's K/V/Q and the full-precision reference, made once; measure()
// quantizes K and V in a format and compares its attention with the reference.
class QualityBench {
 public:
  explicit QualityBench(const Workload& workload);
  Metrics measure(const Format& format) const;
  const Workload& workload() const { return w_; }

 private:
  struct Head {
    std::vector<float> k, v, q;  // [num_keys, head_dim], [num_keys, head_dim], [num_queries, head_dim]
    std::vector<double> lse;     // [num_queries] the reference's
    std::vector<double> scores;  // [num_queries, num_keys] the reference's logits q.k / sqrt(d)
    std::vector<double> out;     // [num_queries, head_dim] the reference's output
  };
  Workload w_;
  std::vector<Head> heads_;  // [num_kv_heads]
};

// Deterministic N(0, 1) values (splitmix64 + Box-Muller): the same on every
// compiler, unlike std::normal_distribution.
std::vector<float> normal(std::size_t n, uint64_t seed);

}  // namespace pa::exercise02
