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

// An 8-bit cache has no k_cache / v_cache: the gather would read a null
// pointer (it did, and crashed, until the property test found it).
TEST(Stage01Errors, RejectsEightBitCaches) {
  for (KvFormat f : {KvFormat::int8, KvFormat::fp8_e4m3}) {
    AttentionConfig cfg = config(8, 2, 64, 16);
    cfg.kv_format = f;
    const Problem p = make_problem(cfg, milestone_requests());
    DeviceBatch db(p);
    stage01::Workspace ws;
    expect_error([&] { stage01::forward(db.params(), p.meta, ws); }, "stage 01 gathers a bf16 cache");
  }
}

}  // namespace
}  // namespace pa::test
