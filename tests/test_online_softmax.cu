// The shared online-softmax state (common/online_softmax.cuh), tested once:
// FragSoftmax on one warp in the MMA accumulator layout, and SoftmaxState's
// merge of finished partials, against a double-precision softmax. The cases
// that every stage relies on without seeing them: a row with no key, tiles
// whose keys are all masked (-inf) before and after real ones, -inf and large
// sinks, merging empty partials. Exact zeros and lse -inf, never NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/check.h"
#include "common/device_buffer.h"
#include "common/launch.cuh"
#include "common/online_softmax.cuh"

namespace pa::test {
namespace {

constexpr int S_TILES = 2;   // 16 keys per tile
constexpr int O_TILES = 1;   // 8 dims
constexpr int KEYS = 8 * S_TILES;
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

// One warp runs num_tiles tiles of raw scores scores[tile][row][key] (16 rows x
// 16 keys) through FragSoftmax with o += p * v[key][dim] (8 dims, computed per
// lane in the accumulator layout, no MMA), then writes out[row][dim] = o / l
// and lse[row]. sinks[row] (natural-log units, as the kernels take them)
// start the state when sinks is not null.
__global__ void frag_softmax_kernel(const float* scores,  // [num_tiles, 16, KEYS]
                                    const float* v,       // [num_tiles, KEYS, 8]
                                    int num_tiles, float scale_log2,
                                    const float* sinks,   // [16] or null
                                    float* out,           // [16, 8]
                                    float* lse) {         // [16]
  const int lane = threadIdx.x, g = lane / 4, t4 = lane % 4;
  FragSoftmax<O_TILES> sm;
  if (sinks != nullptr) {
    const float sink_log2[2] = {sinks[g] * LOG2E, sinks[g + 8] * LOG2E};
    sm.init(sink_log2, t4 == 0);
  } else {
    sm.init();
  }
  for (int tile = 0; tile < num_tiles; ++tile) {
    float s[S_TILES][4];  // layout of an MMA accumulator: rows g, g + 8; keys 8j + 2t4 (+1)
    for (int j = 0; j < S_TILES; ++j) {
      for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), key = 8 * j + 2 * t4 + (e & 1);
        s[j][e] = scores[(tile * 16 + row) * KEYS + key];
      }
    }
    float alpha[2];
    sm.raise_max(s, scale_log2, alpha);
    sm.weights(s, scale_log2);
    // o[0][e] = row (e >> 1), dim 2t4 + (e & 1): sum over all 16 keys of the row's weights,
    // which live on the 4 lanes of the row's quad: gather them with shuffles.
    for (int e = 0; e < 4; ++e) {
      float acc = 0.0f;
      for (int src = 0; src < 4; ++src) {
        for (int j = 0; j < S_TILES; ++j) {
          for (int c = 0; c < 2; ++c) {
            const float w = __shfl_sync(0xffffffffu, s[j][(e & 2) + c], (lane & ~3) + src);
            const int key = 8 * j + 2 * src + c;
            acc += w * v[(tile * KEYS + key) * 8 + 2 * t4 + (e & 1)];
          }
        }
      }
      sm.o[0][e] += acc;
    }
  }
  sm.sum_rows();
  for (int i = 0; i < 2; ++i) {
    const int row = g + 8 * i;
    for (int h = 0; h < 2; ++h) out[row * 8 + 2 * t4 + h] = sm.o[0][2 * i + h] * sm.inv_l(i);
    if (t4 == 0) lse[row] = sm.lse(i);
  }
}

// SoftmaxState<4>: merges partials (lse[p], o[p][4]) in order into out[4], lse_out.
__global__ void merge_partials_kernel(const float* lse, const float* o, int num_parts, float* out, float* lse_out) {
  SoftmaxState<4> acc;
  acc.init();
  for (int p = 0; p < num_parts; ++p) {
    const float o_p[4] = {o[4 * p], o[4 * p + 1], o[4 * p + 2], o[4 * p + 3]};
    acc.merge(SoftmaxState<4>::partial(lse[p], o_p));
  }
  for (int i = 0; i < 4; ++i) out[i] = acc.o[i] * acc.inv_l();
  *lse_out = acc.lse();
}

struct Result {
  std::vector<float> out, lse;
};

Result run_frag(const std::vector<float>& scores, const std::vector<float>& v, int num_tiles, float scale,
                const std::vector<float>* sinks = nullptr) {
  DeviceBuffer<float> d_s(scores.empty() ? std::vector<float>{0.0f} : scores);
  DeviceBuffer<float> d_v(v.empty() ? std::vector<float>{0.0f} : v);
  DeviceBuffer<float> d_sinks(sinks ? *sinks : std::vector<float>{0.0f});
  DeviceBuffer<float> d_out(16 * 8), d_lse(16);
  launch(frag_softmax_kernel, dim3(1), dim3(32), 0, nullptr, d_s.data(), d_v.data(), num_tiles, scale * LOG2E,
         sinks ? d_sinks.data() : nullptr, d_out.data(), d_lse.data());
  PA_CHECK(cudaDeviceSynchronize());
  return {d_out.download(), d_lse.download()};
}

// The double-precision softmax of each row over all tiles, with an optional sink.
Result reference(const std::vector<float>& scores, const std::vector<float>& v, int num_tiles, float scale,
                 const std::vector<float>* sinks = nullptr) {
  Result r{std::vector<float>(16 * 8, 0.0f), std::vector<float>(16, NEG_INF)};
  for (int row = 0; row < 16; ++row) {
    double m = sinks ? (*sinks)[row] : -INFINITY;
    for (int t = 0; t < num_tiles; ++t) {
      for (int k = 0; k < KEYS; ++k) m = std::max(m, double(scale) * scores[(t * 16 + row) * KEYS + k]);
    }
    if (m == -INFINITY) continue;  // empty row: o = 0, lse = -inf
    double l = sinks ? std::exp((*sinks)[row] - m) : 0.0, o[8] = {};
    for (int t = 0; t < num_tiles; ++t) {
      for (int k = 0; k < KEYS; ++k) {
        const double w = std::exp(double(scale) * scores[(t * 16 + row) * KEYS + k] - m);
        l += w;
        for (int d = 0; d < 8; ++d) o[d] += w * v[(t * KEYS + k) * 8 + d];
      }
    }
    for (int d = 0; d < 8; ++d) r.out[row * 8 + d] = float(o[d] / l);
    r.lse[row] = float(m + std::log(l));
  }
  return r;
}

void expect_same(const Result& got, const Result& want, const char* what) {
  for (int row = 0; row < 16; ++row) {
    if (want.lse[row] == NEG_INF) {
      EXPECT_EQ(got.lse[row], NEG_INF) << what << ": row " << row << " saw no key, so its lse must be -inf";
    } else {
      EXPECT_NEAR(got.lse[row], want.lse[row], 1e-5f * (1.0f + std::fabs(want.lse[row]))) << what << ": row " << row;
    }
    for (int d = 0; d < 8; ++d) {
      const float g = got.out[row * 8 + d], w = want.out[row * 8 + d];
      ASSERT_FALSE(std::isnan(g)) << what << ": row " << row << " dim " << d << " is NaN";
      if (want.lse[row] == NEG_INF) {
        EXPECT_EQ(g, 0.0f) << what << ": an empty row must finish as exact 0 (row " << row << ", dim " << d << ")";
      } else {
        EXPECT_NEAR(g, w, 1e-5f + 1e-5f * std::fabs(w)) << what << ": row " << row << " dim " << d;
      }
    }
  }
}

std::vector<float> random_values(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& e : x) e = dist(gen);
  return x;
}

TEST(FragSoftmax, MatchesSoftmaxOverSeveralTiles) {
  const int tiles = 3;
  const auto s = random_values(tiles * 16 * KEYS, 1, -8.0f, 8.0f), v = random_values(tiles * KEYS * 8, 2, -1.0f, 1.0f);
  expect_same(run_frag(s, v, tiles, 0.3f), reference(s, v, tiles, 0.3f), "three tiles");
}

TEST(FragSoftmax, LaterLargerScoresRescaleEarlierOnes) {
  // Each tile's scores exceed the previous tile's: the max moves every time.
  const int tiles = 4;
  auto s = random_values(tiles * 16 * KEYS, 3, 0.0f, 1.0f);
  for (int t = 0; t < tiles; ++t)
    for (int i = 0; i < 16 * KEYS; ++i) s[t * 16 * KEYS + i] += 20.0f * t;
  const auto v = random_values(tiles * KEYS * 8, 4, -1.0f, 1.0f);
  expect_same(run_frag(s, v, tiles, 1.0f), reference(s, v, tiles, 1.0f), "rising maxima");
}

// Scores far from 0 (keys ~1e12 or 1e30 times the usual size; issue #29): the
// max key's weight must be exactly 1. Taken as 2^(fmaf(s, c, -m)) with m the
// rounded product s_max * c it was 2^(m's rounding error), up to 2^(ulp(m) / 2):
// inf (then NaN) or 0 (then an output of 0) once ulp(m) passes a few hundred.
TEST(FragSoftmax, LargeScoresGiveTheMaxKeyWeightOne) {
  const int tiles = 2;
  const auto v = random_values(tiles * KEYS * 8, 9, -1.0f, 1.0f);
  for (const float factor : {1e12f, 1e30f}) {
    auto s = random_values(tiles * 16 * KEYS, 8, -8.0f, 8.0f);
    for (float& x : s) x *= factor;
    const char* what = factor == 1e12f ? "scores x1e12" : "scores x1e30";
    expect_same(run_frag(s, v, tiles, 0.3f), reference(s, v, tiles, 0.3f), what);
  }
}

TEST(FragSoftmax, NoTileIsTheEmptyRow) {
  // A row that has seen no key (an empty split, a padding row): o = 0 exactly, lse = -inf.
  expect_same(run_frag({}, {}, 0, 1.0f), reference({}, {}, 0, 1.0f), "no tile");
}

TEST(FragSoftmax, AllMaskedTilesGiveTheEmptyRow) {
  // Every key masked: 2^(-inf - reference) = 0 with the reference 0, never -inf - -inf.
  const int tiles = 2;
  const std::vector<float> s(tiles * 16 * KEYS, NEG_INF);
  const auto v = random_values(tiles * KEYS * 8, 5, -1.0f, 1.0f);
  expect_same(run_frag(s, v, tiles, 1.0f), reference(s, v, tiles, 1.0f), "all keys masked");
}

TEST(FragSoftmax, MaskedTileBeforeAndAfterRealKeys) {
  // Tile 0 all masked (the row's max is still -inf when tile 1 arrives), tile 1
  // real, tile 2 all masked, and some rows masked everywhere.
  const int tiles = 3;
  auto s = random_values(tiles * 16 * KEYS, 6, -4.0f, 4.0f);
  for (int i = 0; i < 16 * KEYS; ++i) s[i] = s[2 * 16 * KEYS + i] = NEG_INF;
  for (int t = 0; t < tiles; ++t)
    for (int k = 0; k < KEYS; ++k) s[(t * 16 + 5) * KEYS + k] = s[(t * 16 + 12) * KEYS + k] = NEG_INF;
  // A few -inf keys inside the real tile too.
  for (int row = 0; row < 16; row += 3) s[(16 + row) * KEYS + row % KEYS] = NEG_INF;
  const auto v = random_values(tiles * KEYS * 8, 7, -1.0f, 1.0f);
  expect_same(run_frag(s, v, tiles, 0.5f), reference(s, v, tiles, 0.5f), "masked tiles around a real one");
}

TEST(FragSoftmax, SinksJoinTheDenominator) {
  const int tiles = 2;
  const auto s = random_values(tiles * 16 * KEYS, 8, -3.0f, 3.0f), v = random_values(tiles * KEYS * 8, 9, -1.0f, 1.0f);
  std::vector<float> sinks = random_values(16, 10, -2.0f, 2.0f);
  sinks[0] = 30.0f, sinks[1] = 100.0f;  // large sinks must not overflow
  sinks[2] = NEG_INF;                   // -inf is no sink
  expect_same(run_frag(s, v, tiles, 0.7f, &sinks), reference(s, v, tiles, 0.7f, &sinks), "sinks");
  // A sink alone (no key): o = 0 exactly, lse = the sink.
  const Result alone = run_frag({}, {}, 0, 1.0f, &sinks);
  for (int row = 0; row < 16; ++row) {
    EXPECT_EQ(alone.lse[row], sinks[row] == NEG_INF ? NEG_INF : alone.lse[row]);
    if (sinks[row] != NEG_INF) EXPECT_NEAR(alone.lse[row], sinks[row], 1e-5f * (1.0f + std::fabs(sinks[row])));
    for (int d = 0; d < 8; ++d) EXPECT_EQ(alone.out[row * 8 + d], 0.0f);
  }
}

Result run_merge(const std::vector<float>& lse, const std::vector<float>& o) {
  DeviceBuffer<float> d_lse(lse.empty() ? std::vector<float>{0.0f} : lse), d_o(o.empty() ? std::vector<float>{0.0f} : o);
  DeviceBuffer<float> d_out(4), d_lse_out(1);
  launch(merge_partials_kernel, dim3(1), dim3(1), 0, nullptr, d_lse.data(), d_o.data(), static_cast<int>(lse.size()),
         d_out.data(), d_lse_out.data());
  PA_CHECK(cudaDeviceSynchronize());
  return {d_out.download(), d_lse_out.download()};
}

TEST(SoftmaxStateMerge, PartialsCombineByLogSumExp) {
  const std::vector<float> lse = {1.5f, -2.0f, 40.0f, 39.0f};
  const std::vector<float> o = random_values(4 * 4, 11, -1.0f, 1.0f);
  const Result r = run_merge(lse, o);
  double m = 40.0, l = 0.0, want[4] = {};
  for (int p = 0; p < 4; ++p) {
    const double w = std::exp(lse[p] - m);
    l += w;
    for (int d = 0; d < 4; ++d) want[d] += w * o[4 * p + d];
  }
  for (int d = 0; d < 4; ++d) EXPECT_NEAR(r.out[d], want[d] / l, 1e-5);
  EXPECT_NEAR(r.lse[0], m + std::log(l), 1e-5);
}

TEST(SoftmaxStateMerge, EmptyPartialsHaveNoWeight) {
  // An empty split writes (o = 0, lse = -inf); merged with a real one it changes nothing.
  const Result r = run_merge({NEG_INF, 0.25f, NEG_INF}, {0, 0, 0, 0, 0.5f, -1.0f, 2.0f, 3.0f, 0, 0, 0, 0});
  EXPECT_FLOAT_EQ(r.out[0], 0.5f);
  EXPECT_FLOAT_EQ(r.out[3], 3.0f);
  EXPECT_NEAR(r.lse[0], 0.25f, 1e-6);
}

TEST(SoftmaxStateMerge, TwoEmptyPartialsGiveExactZerosAndMinusInf) {
  const Result r = run_merge({NEG_INF, NEG_INF}, std::vector<float>(8, 0.0f));
  for (int d = 0; d < 4; ++d) {
    ASSERT_FALSE(std::isnan(r.out[d])) << "merging two empty states must not make NaN";
    EXPECT_EQ(r.out[d], 0.0f);
  }
  EXPECT_EQ(r.lse[0], NEG_INF);
  const Result none = run_merge({}, {});
  EXPECT_EQ(none.lse[0], NEG_INF);
  EXPECT_EQ(none.out[0], 0.0f);
}

}  // namespace
}  // namespace pa::test
