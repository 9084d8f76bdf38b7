// Exercise 02: how much attention-output error does a KV-cache quantizer cost,
// and does the grouping of its scales matter? (KIVI: keys per channel, values
// per token.)
#pragma once

#include <vector>

namespace pa::exercise02 {

// Which elements share one scale in a [rows, cols] matrix (rows = tokens,
// cols = channels of one head).
enum class Group {
  per_row,     // one scale per token (stage 05's layout)
  per_column,  // one scale per channel, over all the rows given
};

// Symmetric fake quantization of x [rows, cols] (row-major) to `bits` bits
// (2..8): for each group, scale = max|x| / (2^(bits-1) - 1), code = x / scale
// rounded to nearest (half to even) and clamped to +-(2^(bits-1) - 1); returns
// the dequantized values code * scale, same shape. A group of zeros has scale 0
// and dequantizes to zeros (never 0/0).
std::vector<float> fake_quantize(const std::vector<float>& x, int rows, int cols, int bits, Group group);

}  // namespace pa::exercise02
