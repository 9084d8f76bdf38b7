#include <cmath>
#include <stdexcept>

#include "quant_quality.h"

namespace pa::exercise02 {

std::vector<float> fake_quantize(const std::vector<float>& x, int rows, int cols, int bits, Group group) {
  if (bits < 2 || bits > 8) throw std::invalid_argument("fake_quantize: bits must be 2..8");
  if (static_cast<long long>(rows) * cols != static_cast<long long>(x.size())) {
    throw std::invalid_argument("fake_quantize: x.size() != rows * cols");
  }
  const float max_code = static_cast<float>((1 << (bits - 1)) - 1);
  const bool by_row = group == Group::per_row;
  const int groups = by_row ? rows : cols, members = by_row ? cols : rows;
  auto at = [&](int g, int m) { return by_row ? static_cast<size_t>(g) * cols + m : static_cast<size_t>(m) * cols + g; };
  std::vector<float> out(x.size());
  for (int g = 0; g < groups; ++g) {
    float amax = 0.0f;
    for (int m = 0; m < members; ++m) amax = std::fmax(amax, std::fabs(x[at(g, m)]));
    const float scale = amax / max_code;
    for (int m = 0; m < members; ++m) {
      // rintf rounds half to even in the default rounding mode; a zero scale
      // (all-zero group) gives code 0 instead of 0/0.
      const float code = scale == 0.0f ? 0.0f : std::fmin(std::fmax(std::rint(x[at(g, m)] / scale), -max_code), max_code);
      out[at(g, m)] = code * scale;
    }
  }
  return out;
}

}  // namespace pa::exercise02
