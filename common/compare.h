// Checking kernel output against the fp64 oracle.
//
// One tolerance table, by the precision of the tensor being compared. An element
// passes when |got - want| <= atol + rtol * |want|. NaN never passes; -inf
// matches only -inf (the lse of padding rows). A failure reports the first
// mismatches as (request, token, head, dim): got, want; for the lse, which has
// no dim, as (request, token, head): got, want.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "oracle.h"
#include "problem.h"

namespace pa {

enum class Precision { fp32, bf16, fp16, fp8_e4m3, int8 };

struct Tolerance {
  double atol;
  double rtol;
};

// Why these numbers (unit roundoff u = 2^-p for p significant bits: the largest
// relative error of one rounding to nearest, reached just above a power of two):
//  fp32 (lse): u = 6e-8; an lse sums up to ~1e5 exp terms in fp32, relative error
//        ~1e-6 of |lse| <= ~20: atol 1e-4, rtol 1e-5.
//  bf16 (attention output): rounding the fp32 result to bf16 alone costs up to
//        u = 2^-8 of |o|; the math before it (P fed to tensor cores as bf16 or
//        fp16, fp32 sums in a kernel's own order) may cost as much again, so
//        rtol = 2u = 2^-7. Near o = 0 the rounding of P is relative to |v| ~ N(0,1),
//        not to |o|: atol = 2^-8 ~ 3.9e-3 (one bf16 ulp at magnitude 1).
//  fp16: u = 2^-11, same reasoning: 2^-10.
//  fp8/int8 caches (stage 05) are compared against the oracle run on the
//        dequantized cache, so the bf16 row applies; their error against full
//        precision is measured and documented by stage 05, not hidden here.
Tolerance tolerance(Precision p);
const char* name(Precision p);

struct CheckResult {
  bool ok = true;
  size_t num_checked = 0;
  size_t num_bad = 0;
  double max_abs_error = 0.0;  // NaN counts as +inf
  std::string report;          // empty when ok
};

// got/want are [num_tokens, num_heads, dim]; rows map to requests through
// meta.query_start_loc. dim = 1 means a [num_tokens, num_heads] tensor (the
// lse): its mismatches are reported without a dim.
CheckResult check_rows(const std::vector<float>& got, const std::vector<double>& want,
                       const BatchMeta& meta, int num_heads, int dim, Precision precision,
                       const std::string& what, int max_reported = 8);

// One backend's answer against the oracle, by the rule the tests and the main
// job share: out [num_tokens, num_q_heads, head_dim] (bf16 whatever the cache
// format: 8-bit caches are compared with the oracle on their dequantized
// values) against the bf16 row; lse [num_tokens, num_q_heads] against the fp32
// row, when the backend returns one (lse != nullptr).
struct AttentionCheck {
  CheckResult out;
  std::optional<CheckResult> lse;  // empty: no lse to check

  bool ok() const { return out.ok && (!lse || lse->ok); }
  std::string report() const;  // the failing parts' reports; empty when ok
};

AttentionCheck check_attention(const Problem& p, const OracleResult& want, const std::vector<float>& out,
                               const std::vector<float>* lse, int max_reported = 8);

// Largest |got - want| over all elements (NaN -> +inf; -inf == -inf -> 0).
double max_abs_error(const std::vector<float>& got, const std::vector<double>& want);

}  // namespace pa
