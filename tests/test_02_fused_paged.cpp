// Stage 02: one fused launch for the flattened batch, K/V through the block table.
#include "tests/harness.h"

namespace pa::test {
namespace {

void run_stage02(const Problem&, DeviceBatch& db) { stage02::forward(db.params()); }

class Stage02 : public testing::TestWithParam<Case> {};

TEST_P(Stage02, MatchesOracle) { expect_matches_oracle(GetParam(), run_stage02); }

std::vector<Case> stage02_cases() {
  std::vector<Case> cases = basic_cases();
  cases.push_back({"Milestone_Group4_D256_Block16", config(8, 2, 256, 16), milestone_requests()});
  cases.push_back({"Milestone_Group4_D128_Block256", config(8, 2, 128, 256), milestone_requests()});
  // A long prefill: many query tiles, and the key loop of each must stop at its last query.
  cases.push_back({"LongPrompt", config(4, 2, 64, 16), {{150, 150}, {1, 3}}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, Stage02, testing::ValuesIn(stage02_cases()), case_name);

TEST(Stage02Reruns, BitIdentical) {
  expect_bit_identical_reruns({"Milestone", config(8, 2, 128, 16), milestone_requests()}, run_stage02);
}

TEST(Stage02Errors, RejectsSlidingWindow) {
  expect_rejects_window({"Milestone", config(8, 2, 64, 16), milestone_requests()},
                        [](const Problem&, const AttentionParams& params) { stage02::forward(params); });
}

}  // namespace
}  // namespace pa::test
