#include "compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace pa {

Tolerance tolerance(Precision p) {
  switch (p) {
    case Precision::fp32: return {1e-4, 1e-5};
    case Precision::bf16: return {0x1p-8, 0x1p-7};
    case Precision::fp16: return {0x1p-10, 0x1p-10};
    case Precision::fp8_e4m3: return {0x1p-8, 0x1p-7};
    case Precision::int8: return {0x1p-8, 0x1p-7};
  }
  return {0, 0};
}

const char* name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp8_e4m3: return "fp8_e4m3";
    case Precision::int8: return "int8";
  }
  return "?";
}

namespace {

// |got - want| with the -inf rule; NaN -> +inf.
double abs_diff(float got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::numeric_limits<double>::infinity();
  if (std::isinf(got) || std::isinf(want)) {
    return (static_cast<double>(got) == want) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return std::fabs(static_cast<double>(got) - want);
}

}  // namespace

double max_abs_error(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, abs_diff(got[i], want[i]));
  return worst;
}

CheckResult check_rows(const std::vector<float>& got, const std::vector<double>& want,
                       const BatchMeta& meta, int num_heads, int dim, Precision precision,
                       const std::string& what, int max_reported) {
  CheckResult res;
  const Tolerance tol = tolerance(precision);
  const size_t row = static_cast<size_t>(num_heads) * dim;
  if (got.size() != want.size() || want.size() != static_cast<size_t>(meta.num_tokens) * row) {
    res.ok = false;
    res.report = what + ": size mismatch: got " + std::to_string(got.size()) + " elements, want " +
                 std::to_string(want.size()) + " (num_tokens " + std::to_string(meta.num_tokens) +
                 " x " + std::to_string(row) + ")";
    res.max_abs_error = std::numeric_limits<double>::infinity();
    return res;
  }
  std::ostringstream detail;
  const int R = meta.num_requests();
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = abs_diff(got[i], want[i]);
    res.max_abs_error = std::max(res.max_abs_error, diff);
    const double limit = std::isinf(want[i]) ? 0.0 : tol.atol + tol.rtol * std::fabs(want[i]);
    if (diff <= limit) continue;
    if (res.num_bad++ >= static_cast<size_t>(max_reported)) continue;
    const int t = static_cast<int>(i / row);
    const int h = static_cast<int>(i % row) / dim;
    const int d = static_cast<int>(i % dim);
    const int r = static_cast<int>(std::upper_bound(meta.query_start_loc.begin(),
                                                    meta.query_start_loc.end(), t) -
                                   meta.query_start_loc.begin()) - 1;
    // A [num_tokens, num_heads] tensor (dim 1, the lse) has no dim to name.
    char dim_part[32] = "";
    if (dim > 1) std::snprintf(dim_part, sizeof dim_part, ", dim %d", d);
    char buf[256];
    if (r >= R) {
      std::snprintf(buf, sizeof buf, "  (padding row %d, head %d%s): got %.6g, want %.6g\n", t, h, dim_part,
                    got[i], want[i]);
    } else {
      const int token = t - meta.query_start_loc[r];
      std::snprintf(buf, sizeof buf, "  (request %d, token %d [row %d, position %d], head %d%s): got %.6g, want %.6g\n",
                    r, token, t, meta.seq_lens[r] - meta.q_len(r) + token, h, dim_part, got[i], want[i]);
    }
    detail << buf;
  }
  res.num_checked = got.size();
  res.ok = res.num_bad == 0;
  if (!res.ok) {
    char head[256];
    std::snprintf(head, sizeof head,
                  "%s: %zu of %zu elements differ from the fp64 oracle by more than %.3g + %.3g*|want| (%s); "
                  "max |got - want| = %.4g. First mismatches:\n",
                  what.c_str(), res.num_bad, res.num_checked, tol.atol, tol.rtol, name(precision),
                  res.max_abs_error);
    res.report = head + detail.str();
  }
  return res;
}

std::string AttentionCheck::report() const {
  std::string r = out.ok ? "" : out.report;
  if (lse && !lse->ok) r += lse->report;
  return r;
}

AttentionCheck check_attention(const Problem& p, const OracleResult& want, const std::vector<float>& out,
                               const std::vector<float>* lse, int max_reported) {
  AttentionCheck c;
  c.out = check_rows(out, want.out, p.meta, p.cfg.num_q_heads, p.cfg.head_dim, Precision::bf16, "out", max_reported);
  if (lse) c.lse = check_rows(*lse, want.lse, p.meta, p.cfg.num_q_heads, 1, Precision::fp32, "lse", max_reported);
  return c;
}

}  // namespace pa
