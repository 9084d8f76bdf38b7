// Exercise 02: what does a KV-cache format cost in attention quality, per bit?
// The learner's contract: the low-bit quantizer (TODO 1, 2) and the KL
// divergence (TODO 3). measure.h builds the formats of the table on them.
#pragma once

#include <cstddef>
#include <vector>

namespace pa::exercise02 {

// TODO 1. Asymmetric (min/max) fake quantization of one group of n values,
// x[i * stride] for i in [0, n), to `bits` bits (2..8), as KIVI does:
//   lo = min x, hi = max x, scale = (hi - lo) / (2^bits - 1)
//   code = rint((x - lo) / scale), clamped to [0, 2^bits - 1]
//   out[i * stride] = lo + code * scale          (the dequantized value)
// Asymmetric because a group need not be centred on zero: an outlier channel
// sits far from zero in every token, and a symmetric grid would spend half its
// codes on values the channel never takes. A constant group (hi == lo) has
// scale 0: every element dequantizes to lo exactly, never 0/0. x and out may
// be the same array.
void fake_quantize_group(const float* x, std::size_t stride, int n, int bits, float* out);

// Which elements of a head's [tokens, head_dim] matrix share a scale.
enum class Group {
  per_token,    // one (scale, zero point) per token: head_dim values
  per_channel,  // one per channel over each block of group_tokens tokens (KIVI's keys)
};

// TODO 2. Fake-quantizes x [rows = tokens, cols = channels] (row-major) with
// fake_quantize_group over the groups of `group`: every row, or for each block
// of rows [t0, min(t0 + group_tokens, rows)) every column of that block (the
// last block may be shorter). group_tokens is ignored per token. Returns the
// dequantized values, same shape.
std::vector<float> fake_quantize(const std::vector<float>& x, int rows, int cols, int bits, Group group,
                                 int group_tokens);

// TODO 3. KL(P || Q) in nats, where P = softmax(logits_p) and Q =
// softmax(logits_q) over n keys: sum_j P_j (log P_j - log Q_j). Work in log
// space (log P_j = logits_p[j] - log_sum_exp(logits_p)): a probability ratio
// underflows long before its log does. A key with P_j = 0 (logit -inf, a
// masked key) contributes 0. Identical logits give exactly 0.
double kl_divergence(const double* logits_p, const double* logits_q, int n);

// log(sum_j exp(x[j])), stable (given, not a TODO): -inf when every x[j] is -inf.
double log_sum_exp(const double* x, int n);

}  // namespace pa::exercise02
