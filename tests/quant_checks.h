// Checks shared by the 8-bit tests (test_quant: the harness's write path;
// test_05_quantized_kv: the learner's stage05::write_kv).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/quant.cuh"
#include "tests/harness.h"

namespace pa::test {

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// After a write path ran on `db` (built from p): every new token's K/V codes and
// scale at its slot equal the host quantizer's (common/quant.cuh) bit for bit,
// and every other slot still holds what p had there. `scale_hint` and
// `codes_hint` are appended to the failure messages (e.g. the TODO to look at).
inline void expect_codes_match_host(const Problem& p, const DeviceBatch& db, const std::string& scale_hint = "",
                                    const std::string& codes_hint = "") {
  const std::vector<uint8_t> k_codes = db.k_codes.download(), v_codes = db.v_codes.download();
  const std::vector<float> k_scale = db.k_scale.download(), v_scale = db.v_scale.download();
  const int D = p.cfg.head_dim, Hkv = p.cfg.num_kv_heads;
  std::vector<bool> written(k_scale.size(), false);
  std::vector<uint8_t> want(D);
  for (int t = 0; t < p.meta.num_tokens; ++t) {
    const int slot = p.meta.slot_mapping[t];
    if (slot < 0) continue;
    for (int h = 0; h < Hkv; ++h) {
      const size_t row = static_cast<size_t>(slot) * Hkv + h, src = (static_cast<size_t>(t) * Hkv + h) * D;
      written[row] = true;
      for (bool is_v : {false, true}) {
        const float s = quantize_row(p.cfg.kv_format, &(is_v ? p.v_new : p.k_new)[src], D, want.data());
        const char* which = is_v ? "V" : "K";
        if (std::isnan(s)) {
          // A row holding a NaN: its scale is NaN, whose bits are the hardware's (a
          // GPU's max and abs return the canonical NaN, a CPU keeps the payload),
          // and any code times it dequantizes to NaN, so the codes carry nothing.
          ASSERT_TRUE(std::isnan((is_v ? v_scale : k_scale)[row]))
              << which << " scale, token " << t << " head " << h << ": a row holding a NaN has scale NaN"
              << scale_hint;
          continue;
        }
        ASSERT_EQ(bits(s), bits((is_v ? v_scale : k_scale)[row]))
            << which << " scale, token " << t << " head " << h << scale_hint;
        ASSERT_EQ(0, std::memcmp(want.data(), &(is_v ? v_codes : k_codes)[row * D], D))
            << which << " codes, token " << t << " head " << h << codes_hint;
      }
    }
  }
  for (size_t row = 0; row < written.size(); ++row) {
    if (written[row]) continue;
    ASSERT_EQ(bits(k_scale[row]), bits(p.k_scale[row])) << "row " << row << " was not this step's to write";
    ASSERT_EQ(0, std::memcmp(&k_codes[row * D], &p.k_codes[row * D], D)) << "row " << row;
    ASSERT_EQ(0, std::memcmp(&v_codes[row * D], &p.v_codes[row * D], D)) << "row " << row;
  }
}

// Multiplies K (values = false) or V by `factor`, in every channel or only in
// `channel` (>= 0): this step's tokens and the cached history (its full-precision
// values, then its codes and scales re-quantized with the host rule). Unused
// slots keep their poison (NaN scales). The oracle and the kernels both see the
// scaled problem.
inline void scale_kv(Problem& p, bool values, float factor, int channel = -1) {
  const size_t D = static_cast<size_t>(p.cfg.head_dim);
  auto scaled = [&](std::vector<bf16>& x, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (channel < 0 || i % D == static_cast<size_t>(channel)) x[i] = __float2bfloat16(__bfloat162float(x[i]) * factor);
    }
  };
  std::vector<bf16>& fresh = values ? p.v_new : p.k_new;
  scaled(fresh, 0, fresh.size());
  std::vector<bf16>& cache = values ? p.v_cache : p.k_cache;
  std::vector<uint8_t>& codes = values ? p.v_codes : p.k_codes;
  std::vector<float>& scale = values ? p.v_scale : p.k_scale;
  for (size_t row = 0; row < scale.size(); ++row) {
    if (std::isnan(scale[row])) continue;  // a slot no request has written
    scaled(cache, row * D, (row + 1) * D);
    scale[row] = quantize_row(p.cfg.kv_format, &cache[row * D], static_cast<int>(D), &codes[row * D]);
  }
}

}  // namespace pa::test
