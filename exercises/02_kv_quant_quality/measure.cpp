#include "measure.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/quant.cuh"

namespace pa::exercise02 {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stage 05's write path on one head: each row goes to bf16 (what the model
// writes), then through the course's quantizer (common/quant.cuh), and back.
template <KvFormat F>
std::vector<float> through_8bit_rows(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> out(x.size());
  std::vector<bf16> row(cols);
  std::vector<uint8_t> codes(cols);
  for (int r = 0; r < rows; ++r) {
    const size_t base = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] = __float2bfloat16(x[base + c]);
    const float scale = quantize_row<F>(row.data(), cols, codes.data());
    for (int c = 0; c < cols; ++c) out[base + c] = dequantize<F>(codes[c], scale);
  }
  return out;
}

std::vector<float> through_bf16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(__float2bfloat16(x[i]));
  return out;
}

// K and V of one head as format f stores them, dequantized.
void store(const Format& f, const Workload& w, const std::vector<float>& k, const std::vector<float>& v,
           std::vector<float>& k_out, std::vector<float>& v_out) {
  const int n = w.num_keys, d = w.head_dim;
  switch (f.scheme) {
    case Scheme::full: k_out = k, v_out = v; return;
    case Scheme::bf16: k_out = through_bf16(k), v_out = through_bf16(v); return;
    case Scheme::int8_row:
      k_out = through_8bit_rows<KvFormat::int8>(k, n, d), v_out = through_8bit_rows<KvFormat::int8>(v, n, d);
      return;
    case Scheme::fp8_row:
      k_out = through_8bit_rows<KvFormat::fp8_e4m3>(k, n, d);
      v_out = through_8bit_rows<KvFormat::fp8_e4m3>(v, n, d);
      return;
    case Scheme::int_per_token:
    case Scheme::int_per_channel: {
      const Group kg = f.scheme == Scheme::int_per_token ? Group::per_token : Group::per_channel;
      k_out = fake_quantize(k, n, d, f.bits, kg, w.group_tokens);
      // Values per token in both: a token's value row is read as a whole,
      // weighted by its probability, so its error stays with its weight.
      v_out = fake_quantize(v, n, d, f.bits, Group::per_token, w.group_tokens);
      return;
    }
  }
  throw std::invalid_argument("unknown scheme");
}

// scores [nq, nk] = q k^T / sqrt(d) in fp64.
std::vector<double> logits(const std::vector<float>& q, const std::vector<float>& k, int nq, int nk, int d) {
  std::vector<double> s(static_cast<size_t>(nq) * nk);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  for (int i = 0; i < nq; ++i) {
    for (int j = 0; j < nk; ++j) {
      double dot = 0.0;
      for (int c = 0; c < d; ++c) dot += static_cast<double>(q[static_cast<size_t>(i) * d + c]) * k[static_cast<size_t>(j) * d + c];
      s[static_cast<size_t>(i) * nk + j] = dot * inv_sqrt_d;
    }
  }
  return s;
}

// out [d] = softmax(s) v for one query row whose log-sum-exp is lse.
void weighted_values(const double* s, double lse, const std::vector<float>& v, int nk, int d, double* out) {
  std::fill(out, out + d, 0.0);
  for (int j = 0; j < nk; ++j) {
    const double p = std::exp(s[j] - lse);
    for (int c = 0; c < d; ++c) out[c] += p * v[static_cast<size_t>(j) * d + c];
  }
}

}  // namespace

std::vector<float> normal(std::size_t n, uint64_t seed) {
  std::vector<float> out(n);
  uint64_t s = seed;
  for (std::size_t i = 0; i < n; ++i) {
    const double u1 = (splitmix64(s) >> 11) * 0x1.0p-53 + 0x1.0p-54, u2 = (splitmix64(s) >> 11) * 0x1.0p-53;
    out[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return out;
}

double log_sum_exp(const double* x, int n) {
  double m = -INFINITY;
  for (int j = 0; j < n; ++j) m = std::max(m, x[j]);
  if (m == -INFINITY) return -INFINITY;
  double l = 0.0;
  for (int j = 0; j < n; ++j) l += std::exp(x[j] - m);
  return m + std::log(l);
}

std::vector<Format> standard_formats() {
  std::vector<Format> f = {
      {"bf16", "bf16", Scheme::bf16, 16},
      {"int8 per token (stage 05)", "int8 per token (stage 05)", Scheme::int8_row, 8},
      {"fp8 e4m3 per token (stage 05)", "fp8 e4m3 per token (stage 05)", Scheme::fp8_row, 8},
  };
  for (int bits : {8, 4, 3, 2}) {
    const std::string b = std::to_string(bits);
    f.push_back({"int" + b + " K per token, V per token", "K per token", Scheme::int_per_token, bits});
    f.push_back({"int" + b + " K per channel, V per token (KIVI)", "K per channel (KIVI)", Scheme::int_per_channel, bits});
  }
  return f;
}

double bits_per_value(const Format& f, const Workload& w) {
  const double d = w.head_dim, g = w.group_tokens;
  switch (f.scheme) {
    case Scheme::full: return 32.0;
    case Scheme::bf16: return 16.0;
    case Scheme::int8_row:
    case Scheme::fp8_row: return 8.0 + 32.0 / d;  // one fp32 scale per head row
    case Scheme::int_per_token: return f.bits + 64.0 / d;  // fp32 scale + zero point per row
    case Scheme::int_per_channel: return f.bits + 0.5 * (64.0 / g + 64.0 / d);  // K per (channel, block), V per row
  }
  throw std::invalid_argument("unknown scheme");
}

QualityBench::QualityBench(const Workload& w) : w_(w) {
  const int nk = w.num_keys, nq = w.num_queries, d = w.head_dim;
  if (nk < 1 || nq < 1 || d < 1 || w.group_tokens < 1 || w.num_kv_heads < 1) {
    throw std::invalid_argument("QualityBench: every size must be positive");
  }
  if (w.outlier_magnitudes.size() > static_cast<size_t>(d)) throw std::invalid_argument("more outliers than channels");
  heads_.resize(w.num_kv_heads);
  for (int h = 0; h < w.num_kv_heads; ++h) {
    Head& hd = heads_[h];
    const uint64_t seed = w.seed * 1000 + 10 * h;  // fixed: each head its own streams
    hd.k = normal(static_cast<size_t>(nk) * d, seed + 1);
    hd.v = normal(static_cast<size_t>(nk) * d, seed + 2);
    hd.q = normal(static_cast<size_t>(nq) * d, seed + 3);
    // Distinct outlier channels and signs, drawn from the head's seed.
    uint64_t s = seed + 4;
    std::vector<int> channels;
    while (channels.size() < w.outlier_magnitudes.size()) {
      const int c = static_cast<int>(splitmix64(s) % static_cast<uint64_t>(d));
      if (std::find(channels.begin(), channels.end(), c) == channels.end()) channels.push_back(c);
    }
    for (size_t o = 0; o < channels.size(); ++o) {
      const float mag = w.outlier_magnitudes[o], sign = (splitmix64(s) & 1) ? 1.0f : -1.0f;
      for (int j = 0; j < nk; ++j) {
        float& x = hd.k[static_cast<size_t>(j) * d + channels[o]];
        x = mag * (sign + 0.2f * x);
      }
    }
    hd.scores = logits(hd.q, hd.k, nq, nk, d);
    hd.lse.resize(nq);
    hd.out.resize(static_cast<size_t>(nq) * d);
    for (int i = 0; i < nq; ++i) {
      const double* s_i = &hd.scores[static_cast<size_t>(i) * nk];
      hd.lse[i] = log_sum_exp(s_i, nk);
      weighted_values(s_i, hd.lse[i], hd.v, nk, d, &hd.out[static_cast<size_t>(i) * d]);
    }
  }
}

Metrics QualityBench::measure(const Format& f) const {
  const int nk = w_.num_keys, nq = w_.num_queries, d = w_.head_dim;
  Metrics m{};
  m.bits_per_value = bits_per_value(f, w_);
  double err2 = 0.0, ref2 = 0.0;
  std::vector<float> kq, vq;
  std::vector<double> o(d);
  for (const Head& hd : heads_) {
    store(f, w_, hd.k, hd.v, kq, vq);
    const std::vector<double> s = logits(hd.q, kq, nq, nk, d);
    for (int i = 0; i < nq; ++i) {
      const double* s_ref = &hd.scores[static_cast<size_t>(i) * nk];
      const double* s_i = &s[static_cast<size_t>(i) * nk];
      const double lse = log_sum_exp(s_i, nk), lse_err = std::fabs(lse - hd.lse[i]);
      m.lse_abs_mean += lse_err;
      m.lse_abs_max = std::max(m.lse_abs_max, lse_err);
      const double kl = kl_divergence(s_ref, s_i, nk);
      m.kl_mean += kl;
      m.kl_max = std::max(m.kl_max, kl);
      weighted_values(s_i, lse, vq, nk, d, o.data());
      for (int c = 0; c < d; ++c) {
        const double ref = hd.out[static_cast<size_t>(i) * d + c];
        err2 += (o[c] - ref) * (o[c] - ref);
        ref2 += ref * ref;
      }
    }
  }
  const double rows = static_cast<double>(nq) * w_.num_kv_heads;
  m.lse_abs_mean /= rows;
  m.kl_mean /= rows;
  m.out_rel_l2 = std::sqrt(err2 / ref2);
  return m;
}

}  // namespace pa::exercise02
