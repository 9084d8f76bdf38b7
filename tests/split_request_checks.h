// Checks shared by the tests of the stages that take a split count (04, 05, 06,
// 08): every one of them goes through stage 04's one check, so the same request
// gets the same answer everywhere. 0 is the stage's own plan, 1..64 forces that
// many splits on a decode batch (every q_len <= 1, judged from the requests,
// not from the batch's bounds), anything else is refused.
#pragma once

#include <functional>
#include <string>

#include "tests/harness.h"

namespace pa::test {

// A stage's launcher with an explicit split count.
using SplitForward = std::function<void(const AttentionParams&, int num_splits)>;

// The message every stage gives for a split count outside 0..64.
inline std::string split_count_refusal(int num_splits) {
  return "num_splits " + std::to_string(num_splits) + " is outside 0 (automatic) .. 64";
}

// Decodes of cfg's shape: `forward` with num_splits refuses before any launch.
inline void expect_refuses_split_count(const AttentionConfig& cfg, const SplitForward& forward, int num_splits) {
  const Problem p = make_problem(cfg, ragged_decodes());
  DeviceBatch db(p);
  expect_error([&] { forward(db.params(), num_splits); }, split_count_refusal(num_splits));
}

// A prefill batch (the milestone: request 0 is a 16-query chunk) with forced
// splits: refused, the request named.
inline void expect_forced_splits_refuse_prefill(const AttentionConfig& cfg, const SplitForward& forward) {
  const Problem p = make_problem(cfg, milestone_requests());
  DeviceBatch db(p);
  expect_error([&] { forward(db.params(), 3); }, "request 0 has 16 queries");
}

// A decode batch whose bounds are loose, as a scheduler that sizes them for
// the step's worst case builds it: every q_len is 0 or 1, but max_query_len
// says 8 and decode_only is not set. `requests` must all be decodes (or empty).
// num_splits 0 or forced, `forward`'s result is checked against the oracle.
inline void expect_loose_bounds_decodes_match_oracle(const AttentionConfig& cfg,
                                                     const std::vector<RequestShape>& requests,
                                                     const SplitForward& forward, int num_splits) {
  Problem p = make_problem(cfg, requests, {.seed = 21, .padding_rows = 2});
  p.meta.max_query_len = 8;
  p.meta.decode_only = false;
  DeviceBatch db(p);
  forward(db.params(), num_splits);
  expect_device_matches_oracle(p, db, "decodes with loose bounds, num_splits " + std::to_string(num_splits),
                               reference_attention(p));
  expect_padding_rows_exact_zero(p, db, "decodes with loose bounds: ");
}

}  // namespace pa::test
