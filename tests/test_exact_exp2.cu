// pa::exact_exp2 (common/cuda_compat.cuh), the bit-exact build's 2^x: the
// device computes the host's bits (on a GPU, the claim that makes the build
// bit-exact; on the CPU runtime, the same code twice), it is within 1 ulp of
// the correctly rounded 2^x wherever that is a normal float, and its edges
// are what the softmax needs: 2^-inf = 0 (a masked score), exact powers of two,
// +inf above 128, NaN kept.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/check.h"
#include "common/device_buffer.h"
#include "common/launch.cuh"
#include "common/online_softmax.cuh"

namespace pa::test {
namespace {

constexpr float INF = std::numeric_limits<float>::infinity();

__global__ void exact_exp2_kernel(const float* x, float* y, int n) {  // x, y: [n]
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = exact_exp2(x[i]);
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// Every input the tests use: a dense sweep of [-1, 1] (one reduction interval
// and its neighbours, every 64th float), integers and half-integers over the
// whole range, the subnormal results, and the special values.
std::vector<float> inputs() {
  std::vector<float> x;
  for (uint32_t u = bits(-0.0f); u <= bits(-1.0f); u += 64) {  // -0 down to -1
    float v;
    std::memcpy(&v, &u, 4);
    x.push_back(v);
  }
  for (uint32_t u = 0; u <= bits(1.0f); u += 64) {
    float v;
    std::memcpy(&v, &u, 4);
    x.push_back(v);
  }
  for (float v = -130.0f; v <= 130.0f; v += 0.125f) x.push_back(v);
  for (float v = -127.0f; v <= -125.0f; v += 1.0f / 1024) x.push_back(v);
  for (float v : {-INF, INF, std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f, -127.0f, -126.9999f, 127.5f,
                  127.99999f, 128.0f, 128.00002f, -1e30f, 1e30f}) {
    x.push_back(v);
  }
  return x;
}

TEST(ExactExp2, DeviceComputesTheHostsBits) {
  const std::vector<float> x = inputs();
  const int n = static_cast<int>(x.size());
  DeviceBuffer<float> dx(x), dy(x.size());
  launch(exact_exp2_kernel, dim3((n + 255) / 256), dim3(256), 0, nullptr, dx.data(), dy.data(), n);
  PA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download();
  int differ = 0;
  for (int i = 0; i < n; ++i) {
    const float host = exact_exp2(x[i]);
    const bool same = bits(host) == bits(y[i]) || (std::isnan(host) && std::isnan(y[i]));
    if (!same && differ++ < 5) {
      ADD_FAILURE() << "exact_exp2(" << x[i] << "): device " << y[i] << " (0x" << std::hex << bits(y[i])
                    << "), host " << host << " (0x" << bits(host) << std::dec << ")";
    }
  }
  EXPECT_EQ(differ, 0) << "of " << n << " inputs: the bit-exact build's CPU and GPU flavors would disagree";
}

TEST(ExactExp2, WithinOneUlpWhereTheResultIsNormal) {
  double worst = 0.0, worst_x = 0.0;
  for (float v : inputs()) {
    if (!(v >= -126.0f && v < 128.0f)) continue;
    const double exact = std::exp2(static_cast<double>(v));
    const float rounded = static_cast<float>(exact);
    const double ulp = std::nextafter(rounded, INF) - static_cast<double>(rounded);
    const double err = std::abs(static_cast<double>(exact_exp2(v)) - exact) / ulp;
    if (err > worst) worst = err, worst_x = v;
  }
  EXPECT_LE(worst, 1.0) << "worst at x = " << worst_x << " (the degree-6 polynomial's error grew?)";
}

TEST(ExactExp2, SubnormalResultsAreRoundedOnce) {
  // 2^-127..2^-126: below the normal range, where the last scaling rounds.
  for (float v = -127.0f; v < -126.0f; v += 1.0f / 1024) {
    const double exact = std::exp2(static_cast<double>(v));
    EXPECT_LE(std::abs(static_cast<double>(exact_exp2(v)) - exact), std::ldexp(1.0, -149)) << "x = " << v;
  }
}

TEST(ExactExp2, EdgesTheSoftmaxRelies) {
  EXPECT_EQ(exact_exp2(-INF), 0.0f) << "a masked score (-inf) must weigh exactly 0";
  EXPECT_EQ(exact_exp2(-1e30f), 0.0f);
  EXPECT_EQ(exact_exp2(-127.5f), 0.0f);
  EXPECT_EQ(exact_exp2(0.0f), 1.0f) << "the max key's weight is exactly 1";
  EXPECT_EQ(exact_exp2(-0.0f), 1.0f);
  for (int k = -126; k <= 127; ++k) {
    EXPECT_EQ(exact_exp2(static_cast<float>(k)), std::ldexp(1.0f, k)) << "2^" << k;
  }
  EXPECT_EQ(exact_exp2(128.0f), INF);
  EXPECT_EQ(exact_exp2(INF), INF);
  EXPECT_EQ(exact_exp2(1e30f), INF);
  EXPECT_TRUE(std::isnan(exact_exp2(std::numeric_limits<float>::quiet_NaN())));
}

TEST(ExactExp2, MonotonicAcrossTheReductionIntervals) {
  // The softmax's max key must keep the largest weight: 2^x may not dip where
  // rint(x) steps (f jumps from +1/2 to -1/2).
  float prev = exact_exp2(-126.0f);
  for (float v = -126.0f; v <= 127.0f; v = std::nextafter(v + 0.001f, INF)) {
    const float y = exact_exp2(v);
    ASSERT_GE(y, prev) << "x = " << v;
    prev = y;
  }
}

TEST(ExactExp2, SoftmaxUsesItInTheBitExactBuild) {
  for (float v : {-3.7f, -0.3f, 0.0f, 0.49f, 5.5f, -100.25f}) {
#if defined(PA_BIT_EXACT) && PA_BIT_EXACT
    EXPECT_EQ(bits(softmax_exp2(v)), bits(exact_exp2(v))) << v;
#else
    EXPECT_EQ(bits(softmax_exp2(v)), bits(exp2f(v))) << v;
#endif
  }
}

}  // namespace
}  // namespace pa::test
