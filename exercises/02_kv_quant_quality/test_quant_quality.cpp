// Exercise 02: the error of fake-quantized K/V caches on the attention output,
// by how the quantizer groups its scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "quant_quality.h"

namespace pa::exercise02 {
namespace {

// Deterministic N(0, 1) values (splitmix64 + Box-Muller): the same on every
// compiler, unlike std::normal_distribution.
std::vector<float> normal(size_t n, uint64_t seed) {
  std::vector<float> out(n);
  uint64_t s = seed;
  auto next = [&s] {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((z ^ (z >> 31)) >> 11) * 0x1.0p-53;  // [0, 1)
  };
  for (size_t i = 0; i < n; ++i) {
    const double u1 = next() + 0x1.0p-54, u2 = next();
    out[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return out;
}

// Dense attention in fp64: out [nq, d] = softmax(q k^T / sqrt(d)) v, k and v [nk, d].
std::vector<double> attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                              int nq, int nk, int d) {
  std::vector<double> out(static_cast<size_t>(nq) * d, 0.0), s(nk);
  for (int i = 0; i < nq; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < nk; ++j) {
      double dot = 0.0;
      for (int c = 0; c < d; ++c) dot += static_cast<double>(q[i * d + c]) * k[static_cast<size_t>(j) * d + c];
      s[j] = dot / std::sqrt(static_cast<double>(d));
      m = std::max(m, s[j]);
    }
    double l = 0.0;
    for (int j = 0; j < nk; ++j) l += (s[j] = std::exp(s[j] - m));
    for (int j = 0; j < nk; ++j) {
      for (int c = 0; c < d; ++c) out[static_cast<size_t>(i) * d + c] += s[j] / l * v[static_cast<size_t>(j) * d + c];
    }
  }
  return out;
}

double mean_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::fabs(a[i] - b[i]);
  return sum / static_cast<double>(a.size());
}

// Every element within half a step of its group's scale, and on the grid.
void expect_round_trip(const std::vector<float>& x, int rows, int cols, int bits, Group group) {
  const std::vector<float> y = fake_quantize(x, rows, cols, bits, group);
  ASSERT_EQ(y.size(), x.size());
  const float max_code = static_cast<float>((1 << (bits - 1)) - 1);
  const bool by_row = group == Group::per_row;
  for (int g = 0; g < (by_row ? rows : cols); ++g) {
    float amax = 0.0f;
    for (int m = 0; m < (by_row ? cols : rows); ++m) amax = std::fmax(amax, std::fabs(x[by_row ? g * cols + m : m * cols + g]));
    const float scale = amax / max_code;
    for (int m = 0; m < (by_row ? cols : rows); ++m) {
      const size_t i = by_row ? static_cast<size_t>(g) * cols + m : static_cast<size_t>(m) * cols + g;
      ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * scale * (1.0f + 1e-5f)) << "element " << i << ", " << bits << " bits";
      const float code = y[i] / scale;
      ASSERT_NEAR(code, std::rint(code), 1e-3f) << "element " << i << " is not a code times its group's scale";
      ASSERT_LE(std::fabs(code), max_code + 1e-3f);
    }
  }
}

TEST(FakeQuantize, RoundTripWithinHalfAStep) {
  const std::vector<float> x = normal(16 * 64, 1);
  for (int bits : {2, 4, 8}) {
    expect_round_trip(x, 16, 64, bits, Group::per_row);
    expect_round_trip(x, 16, 64, bits, Group::per_column);
  }
}

TEST(FakeQuantize, ZeroGroupsGiveZerosNotNaN) {
  std::vector<float> x = normal(8 * 16, 2);
  for (int c = 0; c < 16; ++c) x[3 * 16 + c] = 0.0f;  // row 3
  for (int r = 0; r < 8; ++r) x[r * 16 + 5] = 0.0f;   // column 5
  const std::vector<float> rows = fake_quantize(x, 8, 16, 4, Group::per_row);
  const std::vector<float> cols = fake_quantize(x, 8, 16, 4, Group::per_column);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(rows[3 * 16 + c], 0.0f) << "per-row, zero row, column " << c;
  for (int r = 0; r < 8; ++r) EXPECT_EQ(cols[r * 16 + 5], 0.0f) << "per-column, zero column, row " << r;
}

TEST(FakeQuantize, PerColumnIsPerRowOfTheTranspose) {
  const int rows = 12, cols = 20;
  const std::vector<float> x = normal(rows * cols, 3);
  std::vector<float> xt(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  }
  const std::vector<float> a = fake_quantize(x, rows, cols, 4, Group::per_column);
  const std::vector<float> b = fake_quantize(xt, cols, rows, 4, Group::per_row);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) EXPECT_EQ(a[r * cols + c], b[c * rows + r]);
  }
}

// The attention-output error of 4-bit keys grouped per token or per channel
// (values per token), against full precision, with stage 05's 8-bit per-token
// scheme for scale. Real keys have a few channels that are large in every
// token; a per-token scale is set by those channels and the others collapse to
// a few codes.
struct Errors {
  double k_per_token, k_per_channel, int8_per_token;
};

Errors output_errors(const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& q, int nq,
                     int nk, int d) {
  const std::vector<double> full = attention(q, k, v, nq, nk, d);
  const std::vector<float> v4 = fake_quantize(v, nk, d, 4, Group::per_row);
  Errors e;
  e.k_per_token = mean_abs_diff(attention(q, fake_quantize(k, nk, d, 4, Group::per_row), v4, nq, nk, d), full);
  e.k_per_channel = mean_abs_diff(attention(q, fake_quantize(k, nk, d, 4, Group::per_column), v4, nq, nk, d), full);
  e.int8_per_token = mean_abs_diff(attention(q, fake_quantize(k, nk, d, 8, Group::per_row),
                                             fake_quantize(v, nk, d, 8, Group::per_row), nq, nk, d),
                                   full);
  return e;
}

constexpr int kQueries = 16, kKeys = 1024, kDim = 128;

TEST(KvQuantQuality, OutlierChannelsFavourPerChannelKeys) {
  std::vector<float> k = normal(static_cast<size_t>(kKeys) * kDim, 4);
  for (int j = 0; j < kKeys; ++j) {
    for (int c : {5, 77}) k[static_cast<size_t>(j) * kDim + c] *= 20.0f;  // two outlier channels
  }
  const std::vector<float> v = normal(static_cast<size_t>(kKeys) * kDim, 5), q = normal(kQueries * kDim, 6);
  const Errors e = output_errors(k, v, q, kQueries, kKeys, kDim);
  std::printf("outlier channels: mean |error| with 4-bit keys per token %.4g, per channel %.4g; int8 per token %.4g\n",
              e.k_per_token, e.k_per_channel, e.int8_per_token);
  EXPECT_LT(e.k_per_channel, 0.5 * e.k_per_token) << "per-channel key scales should win on outlier channels";
  EXPECT_LT(e.int8_per_token, e.k_per_channel) << "8 bits per token should still beat 4 bits";
}

}  // namespace
}  // namespace pa::exercise02
