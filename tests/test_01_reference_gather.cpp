// Stage 01, the reference backend: gather + naive attention, per request.
#include "tests/harness.h"

namespace pa::test {
namespace {

void run_stage01(const Problem& p, DeviceBatch& db) {
  stage01::Workspace ws;
  stage01::forward(db.params(), p.meta, ws);
}

class Stage01 : public testing::TestWithParam<Case> {};

TEST_P(Stage01, MatchesOracle) { expect_matches_oracle(GetParam(), run_stage01); }

INSTANTIATE_TEST_SUITE_P(Cases, Stage01, testing::ValuesIn(basic_cases()), case_name);

TEST(Stage01Reruns, BitIdentical) {
  expect_bit_identical_reruns({"Milestone", config(8, 2, 128, 16), milestone_requests()}, run_stage01);
}

TEST(Stage01Errors, RejectsSlidingWindow) {
  expect_rejects_window({"Milestone", config(8, 2, 64, 16), milestone_requests()},
                        [](const Problem& p, const AttentionParams& params) {
                          stage01::Workspace ws;
                          stage01::forward(params, p.meta, ws);
                        });
}

}  // namespace
}  // namespace pa::test
