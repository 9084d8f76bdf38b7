// Exercise 02: the low-bit quantizer (TODO 1, 2), the KL divergence (TODO 3),
// and what the formats of the table cost in attention quality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "measure.h"

namespace pa::exercise02 {
namespace {

// ---- TODO 1: one group, asymmetric.

// Every element a code of the group's grid (lo + code * scale, code in
// [0, 2^bits - 1]) within half a step of its input.
void expect_on_grid(const std::vector<float>& x, const std::vector<float>& y, std::size_t stride, int n, int bits) {
  float lo = x[0], hi = x[0];
  for (int i = 0; i < n; ++i) lo = std::min(lo, x[i * stride]), hi = std::max(hi, x[i * stride]);
  const float max_code = static_cast<float>((1 << bits) - 1), scale = (hi - lo) / max_code;
  for (int i = 0; i < n; ++i) {
    const float xi = x[i * stride], yi = y[i * stride];
    ASSERT_LE(std::fabs(yi - xi), 0.5f * scale * (1.0f + 1e-4f) + 1e-6f)
        << "element " << i << " at " << bits << " bits: " << xi << " -> " << yi << " (step " << scale << ")";
    const float code = (yi - lo) / scale;
    ASSERT_NEAR(code, std::rint(code), 1e-3f) << "element " << i << " is not lo + code * scale";
    ASSERT_GE(code, -1e-3f);
    ASSERT_LE(code, max_code + 1e-3f) << "element " << i << ": code past 2^bits - 1";
  }
}

TEST(FakeQuantizeGroup, OnTheGridWithinHalfAStep) {
  const std::vector<float> x = normal(3 * 100, 11);
  for (int bits : {2, 3, 4, 8}) {
    std::vector<float> y(x.size(), NAN);
    fake_quantize_group(x.data(), 3, 100, bits, y.data());  // every third element
    expect_on_grid(x, y, 3, 100, bits);
  }
}

TEST(FakeQuantizeGroup, WritesOnlyItsStride) {
  const std::vector<float> x = normal(4 * 32, 12);
  std::vector<float> y(x.size(), 7.0f);
  fake_quantize_group(x.data() + 1, 4, 32, 4, y.data() + 1);
  for (size_t i = 0; i < y.size(); ++i) {
    if (i % 4 != 1) {
      EXPECT_EQ(y[i], 7.0f) << "element " << i << " is not in the group";
    }
  }
}

TEST(FakeQuantizeGroup, MinimumIsExactAndInPlaceAgrees) {
  const std::vector<float> x = normal(64, 13);
  std::vector<float> y(64), z = x;
  fake_quantize_group(x.data(), 1, 64, 3, y.data());
  fake_quantize_group(z.data(), 1, 64, 3, z.data());
  EXPECT_EQ(*std::min_element(y.begin(), y.end()), *std::min_element(x.begin(), x.end()))
      << "the group's minimum is code 0: lo + 0 * scale";
  EXPECT_EQ(y, z) << "x and out may be the same array";
}

TEST(FakeQuantizeGroup, ConstantGroupKeepsItsValue) {
  for (float c : {0.0f, -3.5f, 42.0f}) {
    std::vector<float> x(16, c), y(16, NAN);
    fake_quantize_group(x.data(), 1, 16, 2, y.data());
    for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], c) << "constant " << c << ": scale 0 gives lo, never 0/0";
  }
}

// ---- TODO 2: the groupings.

TEST(FakeQuantize, PerTokenIsOneGroupPerRow) {
  const int rows = 6, cols = 40;
  const std::vector<float> x = normal(rows * cols, 21);
  const std::vector<float> y = fake_quantize(x, rows, cols, 4, Group::per_token, 128);
  ASSERT_EQ(y.size(), x.size());
  for (int r = 0; r < rows; ++r) {
    std::vector<float> xr(x.begin() + r * cols, x.begin() + (r + 1) * cols), yr(cols);
    fake_quantize_group(xr.data(), 1, cols, 4, yr.data());
    for (int c = 0; c < cols; ++c) ASSERT_EQ(y[r * cols + c], yr[c]) << "row " << r << ", column " << c;
  }
}

// 200 tokens in blocks of 64: three full blocks and a last one of 8.
TEST(FakeQuantize, PerChannelOverBlocksOfTokens) {
  const int rows = 200, cols = 16, block = 64;
  const std::vector<float> x = normal(rows * cols, 22);
  const std::vector<float> y = fake_quantize(x, rows, cols, 3, Group::per_channel, block);
  ASSERT_EQ(y.size(), x.size());
  for (int t0 = 0; t0 < rows; t0 += block) {
    const int n = std::min(block, rows - t0);
    for (int c = 0; c < cols; ++c) {
      std::vector<float> xc(n), yc(n);
      for (int t = 0; t < n; ++t) xc[t] = x[(t0 + t) * cols + c];
      fake_quantize_group(xc.data(), 1, n, 3, yc.data());
      for (int t = 0; t < n; ++t) {
        ASSERT_EQ(y[(t0 + t) * cols + c], yc[t]) << "token " << t0 + t << ", channel " << c << " (block of " << n << ")";
      }
    }
  }
}

TEST(FakeQuantize, OneBlockPerChannelIsPerTokenOfTheTranspose) {
  const int rows = 12, cols = 20;
  const std::vector<float> x = normal(rows * cols, 23);
  std::vector<float> xt(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  }
  const std::vector<float> a = fake_quantize(x, rows, cols, 4, Group::per_channel, rows);
  const std::vector<float> b = fake_quantize(xt, cols, rows, 4, Group::per_token, rows);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) EXPECT_EQ(a[r * cols + c], b[c * rows + r]) << "token " << r << ", channel " << c;
  }
}

TEST(FakeQuantize, AnOutlierTokenMovesOnlyItsOwnBlock) {
  const int rows = 96, cols = 8, block = 32;
  std::vector<float> x = normal(rows * cols, 24);
  const std::vector<float> before = fake_quantize(x, rows, cols, 4, Group::per_channel, block);
  x[70 * cols + 3] = 100.0f;  // block 2
  const std::vector<float> after = fake_quantize(x, rows, cols, 4, Group::per_channel, block);
  for (int t = 0; t < rows; ++t) {
    for (int c = 0; c < cols; ++c) {
      if (t / block != 2 || c != 3) {
        EXPECT_EQ(after[t * cols + c], before[t * cols + c]) << "token " << t << ", channel " << c;
      }
    }
  }
}

// ---- TODO 3: KL(P || Q) from logits.

TEST(KlDivergence, ZeroForIdenticalDistributions) {
  const std::vector<float> f = normal(500, 31);
  std::vector<double> s(f.begin(), f.end()), shifted(s);
  for (double& x : s) x *= 3.0;
  EXPECT_EQ(kl_divergence(s.data(), s.data(), 500), 0.0) << "identical logits must give exactly 0";
  for (size_t j = 0; j < s.size(); ++j) shifted[j] = s[j] + 17.0;  // the same distribution
  EXPECT_NEAR(kl_divergence(s.data(), shifted.data(), 500), 0.0, 1e-12) << "softmax ignores a constant shift";
}

TEST(KlDivergence, NonNegative) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> a = normal(64, 100 + seed), b = normal(64, 200 + seed);
    std::vector<double> p(64), q(64);
    for (int j = 0; j < 64; ++j) p[j] = a[j] * (seed % 4 + 1), q[j] = p[j] + 0.01 * (seed + 1) * b[j];
    EXPECT_GE(kl_divergence(p.data(), q.data(), 64), 0.0) << "seed " << seed;
  }
}

TEST(KlDivergence, MatchesTheTwoPointFormula) {
  const double p = 0.8, q = 0.3;
  const double lp[2] = {std::log(p), std::log(1 - p)}, lq[2] = {std::log(q), std::log(1 - q)};
  const double want = p * std::log(p / q) + (1 - p) * std::log((1 - p) / (1 - q));
  EXPECT_NEAR(kl_divergence(lp, lq, 2), want, 1e-14);
  EXPECT_NEAR(kl_divergence(lq, lp, 2), q * std::log(q / p) + (1 - q) * std::log((1 - q) / (1 - p)), 1e-14)
      << "KL is not symmetric: the arguments are (P, Q)";
}

TEST(KlDivergence, MaskedKeysAddNothing) {
  const double p[4] = {0.5, -INFINITY, 1.5, -1.0}, q[4] = {0.2, -INFINITY, 1.0, -0.5};
  const double p3[3] = {0.5, 1.5, -1.0}, q3[3] = {0.2, 1.0, -0.5};
  const double kl = kl_divergence(p, q, 4);
  EXPECT_TRUE(std::isfinite(kl)) << "a key masked in both (-inf) gave " << kl;
  EXPECT_NEAR(kl, kl_divergence(p3, q3, 3), 1e-15);
}

// exp(-800) underflows to 0 in double; its log does not. A ratio of
// probabilities gives 0/0 or inf here, the log-space sum gives 800.
TEST(KlDivergence, FarApartLogitsStayFinite) {
  const double p[2] = {0.0, -800.0}, q[2] = {-800.0, 0.0};
  EXPECT_NEAR(kl_divergence(p, q, 2), 800.0, 1e-9);
}

// ---- The formats of the table, on keys with outlier channels.

struct Row {
  Format format;
  Metrics m;
};

// Measured once for every test below (about 0.3 s); a TODO's TodoError
// propagates to each test that asks.
const std::vector<Row>& table() {
  static const std::vector<Row> rows = [] {
    const QualityBench bench{Workload{}};
    std::vector<Row> out;
    for (const Format& f : standard_formats()) out.push_back({f, bench.measure(f)});
    std::printf("%-42s %6s %10s %10s %10s\n", "format", "bits", "out relL2", "lse |err|", "KL nats");
    for (const Row& r : out) {
      std::printf("%-42s %6.3g %10.3g %10.3g %10.3g\n", r.format.name.c_str(), r.m.bits_per_value, r.m.out_rel_l2,
                  r.m.lse_abs_mean, r.m.kl_mean);
    }
    return out;
  }();
  return rows;
}

const Metrics& metrics(Scheme scheme, int bits) {
  for (const Row& r : table()) {
    if (r.format.scheme == scheme && r.format.bits == bits) return r.m;
  }
  throw std::invalid_argument("no such format in the table");
}

TEST(KvQuantQuality, FullPrecisionHasNoError) {
  const QualityBench bench{Workload{}};
  const Metrics m = bench.measure({"fp32", "fp32", Scheme::full, 32});
  EXPECT_EQ(m.kl_mean, 0.0);
  EXPECT_EQ(m.kl_max, 0.0);
  EXPECT_EQ(m.out_rel_l2, 0.0);
  EXPECT_EQ(m.lse_abs_max, 0.0);
}

TEST(KvQuantQuality, BitsPerValueCountTheMetadata) {
  const Workload w;  // head_dim 128, groups of 128 tokens, fp32 scales and zero points
  EXPECT_EQ(bits_per_value({"", "", Scheme::bf16, 16}, w), 16.0);
  EXPECT_EQ(bits_per_value({"", "", Scheme::int8_row, 8}, w), 8.25);
  EXPECT_EQ(bits_per_value({"", "", Scheme::int_per_token, 4}, w), 4.5);
  EXPECT_EQ(bits_per_value({"", "", Scheme::int_per_channel, 2}, w), 2.5);
  Workload small_groups = w;
  small_groups.group_tokens = 32;  // K: 2 + 64/32, V: 2 + 64/128
  EXPECT_EQ(bits_per_value({"", "", Scheme::int_per_channel, 2}, small_groups), 3.25);
}

TEST(KvQuantQuality, KlIsNonNegativeForEveryFormat) {
  for (const Row& r : table()) {
    EXPECT_GE(r.m.kl_mean, 0.0) << r.format.name;
    EXPECT_GE(r.m.kl_max, r.m.kl_mean) << r.format.name;
    EXPECT_TRUE(std::isfinite(r.m.out_rel_l2) && std::isfinite(r.m.kl_max)) << r.format.name;
  }
}

// The outlier channels set a per-token group's range, and the other channels
// collapse to a code or two; a per-channel group is set by its own channel.
TEST(KvQuantQuality, PerChannelKeysBeatPerTokenKeys) {
  for (int bits : {4, 3, 2}) {
    const Metrics& tok = metrics(Scheme::int_per_token, bits);
    const Metrics& chan = metrics(Scheme::int_per_channel, bits);
    EXPECT_LT(chan.kl_mean, 0.1 * tok.kl_mean) << bits << "-bit keys: per channel should cut the KL tenfold";
    EXPECT_LT(chan.out_rel_l2, 0.5 * tok.out_rel_l2) << bits << "-bit keys: per channel should halve the output error";
  }
}

TEST(KvQuantQuality, EightBitFormatsAreFarBelowFourBit) {
  const Metrics& tok4 = metrics(Scheme::int_per_token, 4);
  const Metrics& chan4 = metrics(Scheme::int_per_channel, 4);
  for (Scheme s : {Scheme::int8_row, Scheme::fp8_row}) {
    const Metrics& m = metrics(s, 8);
    const char* name = s == Scheme::int8_row ? "int8" : "fp8";
    EXPECT_LT(m.out_rel_l2, 0.1 * tok4.out_rel_l2) << name << " vs 4-bit per token";
    EXPECT_LT(m.kl_mean, 0.01 * tok4.kl_mean) << name << " vs 4-bit per token";
    // Also below KIVI's 4 bits, though by far less: with outlier channels a
    // per-token 8-bit row spends its range (int8) or its relative precision
    // (fp8) on them.
    EXPECT_LT(m.out_rel_l2, chan4.out_rel_l2) << name << " vs 4-bit per channel";
    EXPECT_LT(m.kl_mean, chan4.kl_mean) << name << " vs 4-bit per channel";
  }
  EXPECT_LT(metrics(Scheme::bf16, 16).kl_mean, 0.1 * metrics(Scheme::int8_row, 8).kl_mean);
}

TEST(KvQuantQuality, ErrorFallsWithBitsWithinAFamily) {
  for (Scheme s : {Scheme::int_per_token, Scheme::int_per_channel}) {
    const char* family = s == Scheme::int_per_token ? "K per token" : "K per channel";
    const int bits[] = {2, 3, 4, 8};
    for (int i = 0; i + 1 < 4; ++i) {
      const Metrics& lo = metrics(s, bits[i]);
      const Metrics& hi = metrics(s, bits[i + 1]);
      EXPECT_LT(hi.out_rel_l2, lo.out_rel_l2) << family << ": " << bits[i + 1] << " vs " << bits[i] << " bits";
      EXPECT_LT(hi.kl_mean, lo.kl_mean) << family << ": " << bits[i + 1] << " vs " << bits[i] << " bits";
      EXPECT_LT(hi.lse_abs_mean, lo.lse_abs_mean) << family << ": " << bits[i + 1] << " vs " << bits[i] << " bits";
    }
  }
}

}  // namespace
}  // namespace pa::exercise02
