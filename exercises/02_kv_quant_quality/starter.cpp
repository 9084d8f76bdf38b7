#include "common/check.h"
#include "quant_quality.h"

// Each unfinished TODO throws a TodoError that names it, so the test fails with
// that name instead of crashing on a placeholder's garbage.
#define EXERCISE02_TODO(n, what)                                                                          \
  throw ::pa::TodoError("exercises/02_kv_quant_quality: TODO " #n " (" what                             \
                        ") not done yet (see exercises/02_kv_quant_quality/README.md)")

namespace pa::exercise02 {

void fake_quantize_group(const float* x, std::size_t stride, int n, int bits, float* out) {
  (void)x, (void)stride, (void)n, (void)bits, (void)out;
  // TODO 1: the group's min and max, its scale (hi - lo) / (2^bits - 1), then
  // each element's code (rounded, clamped) and its dequantized value. A
  // constant group has scale 0 and gives lo.
  EXERCISE02_TODO(1, "fake_quantize_group");
}

std::vector<float> fake_quantize(const std::vector<float>& x, int rows, int cols, int bits, Group group,
                                 int group_tokens) {
  (void)x, (void)rows, (void)cols, (void)bits, (void)group, (void)group_tokens;
  // TODO 2: call fake_quantize_group on every group: each row (per token), or
  // each column of each block of group_tokens rows (per channel; stride cols).
  EXERCISE02_TODO(2, "fake_quantize");
}

double kl_divergence(const double* logits_p, const double* logits_q, int n) {
  (void)logits_p, (void)logits_q, (void)n;
  // TODO 3: KL(P || Q) from the logits, in log space (log_sum_exp is given);
  // keys with P_j = 0 add nothing.
  EXERCISE02_TODO(3, "kl_divergence");
}

}  // namespace pa::exercise02
