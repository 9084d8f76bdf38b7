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

// An 8-bit cache leaves k_cache / v_cache null: stage 02 must refuse it by
// name before its kernel reads them.
TEST(Stage02Errors, RefusesInt8Cache) {
  AttentionConfig c = config(8, 2, 64, 16);
  c.kv_format = KvFormat::int8;
  const Problem p = make_problem(c, milestone_requests());
  DeviceBatch db(p);
  expect_error([&] { stage02::forward(db.params()); }, "stage 02 reads bf16 caches; this one is int8");
}

TEST(Stage02Errors, RefusesFp8Cache) {
  AttentionConfig c = config(8, 2, 64, 16);
  c.kv_format = KvFormat::fp8_e4m3;
  const Problem p = make_problem(c, {{1, 20}});
  DeviceBatch db(p);
  expect_error([&] { stage02::forward(db.params()); }, "this one is fp8_e4m3");
}

// Shapes the launcher is handed directly (params that did not come through
// validate()): each is refused with its numbers before any launch.
class Stage02Shapes : public testing::Test {
 protected:
  Problem p = make_problem(config(8, 2, 64, 16), milestone_requests());
  DeviceBatch db{p};
  AttentionParams params = db.params();
};

TEST_F(Stage02Shapes, RefusesPartialGroup) {
  params.num_q_heads = 7;  // query head 6 would map to KV head 2 of 2
  expect_error([&] { stage02::forward(params); }, "num_q_heads (7) must be a positive multiple of num_kv_heads (2)");
}

TEST_F(Stage02Shapes, RefusesZeroKvHeads) {
  params.kv.num_kv_heads = 0;  // the group size would divide by zero
  expect_error([&] { stage02::forward(params); }, "num_kv_heads (0)");
}

TEST_F(Stage02Shapes, RefusesZeroQueryHeads) {
  params.num_q_heads = 0;
  expect_error([&] { stage02::forward(params); }, "num_q_heads (0) must be a positive multiple");
}

TEST_F(Stage02Shapes, RefusesZeroBlockSize) {
  params.kv.block_size = 0;  // positions are divided by it
  expect_error([&] { stage02::forward(params); }, "block_size 0 must be at least 1");
}

TEST_F(Stage02Shapes, RefusesUnsupportedHeadDim) {
  params.kv.head_dim = 96;
  expect_error([&] { stage02::forward(params); }, "head_dim 96 is not supported");
}

TEST_F(Stage02Shapes, RefusesMissingCache) {
  params.kv.v_cache = nullptr;
  expect_error([&] { stage02::forward(params); }, "needs k_cache and v_cache");
}

}  // namespace
}  // namespace pa::test
