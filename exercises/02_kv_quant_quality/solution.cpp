#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "quant_quality.h"

namespace pa::exercise02 {

void fake_quantize_group(const float* x, std::size_t stride, int n, int bits, float* out) {
  if (bits < 2 || bits > 8) throw std::invalid_argument("fake_quantize_group: bits must be 2..8");
  if (n <= 0) return;
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) lo = std::min(lo, x[i * stride]), hi = std::max(hi, x[i * stride]);
  const float max_code = static_cast<float>((1 << bits) - 1);
  const float scale = (hi - lo) / max_code;
  for (int i = 0; i < n; ++i) {
    // rint rounds half to even in the default rounding mode; the clamp only
    // catches the ulp by which (hi - lo) / scale may pass max_code.
    const float code = scale == 0.0f ? 0.0f : std::clamp(std::rint((x[i * stride] - lo) / scale), 0.0f, max_code);
    out[i * stride] = lo + code * scale;
  }
}

std::vector<float> fake_quantize(const std::vector<float>& x, int rows, int cols, int bits, Group group,
                                 int group_tokens) {
  if (static_cast<long long>(rows) * cols != static_cast<long long>(x.size())) {
    throw std::invalid_argument("fake_quantize: x.size() != rows * cols");
  }
  std::vector<float> out(x.size());
  if (group == Group::per_token) {
    for (int r = 0; r < rows; ++r) fake_quantize_group(&x[static_cast<size_t>(r) * cols], 1, cols, bits, &out[static_cast<size_t>(r) * cols]);
    return out;
  }
  if (group_tokens < 1) throw std::invalid_argument("fake_quantize: group_tokens must be >= 1");
  for (int t0 = 0; t0 < rows; t0 += group_tokens) {
    const int n = std::min(group_tokens, rows - t0);
    for (int c = 0; c < cols; ++c) {
      const size_t first = static_cast<size_t>(t0) * cols + c;
      fake_quantize_group(&x[first], cols, n, bits, &out[first]);
    }
  }
  return out;
}

double kl_divergence(const double* logits_p, const double* logits_q, int n) {
  const double lse_p = log_sum_exp(logits_p, n), lse_q = log_sum_exp(logits_q, n);
  double kl = 0.0;
  for (int j = 0; j < n; ++j) {
    const double log_p = logits_p[j] - lse_p;
    if (log_p == -INFINITY) continue;  // P_j = 0: the term is 0, not 0 * (-inf - -inf)
    kl += std::exp(log_p) * (log_p - (logits_q[j] - lse_q));
  }
  return kl;
}

}  // namespace pa::exercise02
