// Stage 04: split-KV (Flash-Decoding) for decode batches, merged by log-sum-exp.
#include <algorithm>
#include <string>
#include <utility>

#include "tests/harness.h"
#include "tests/split_request_checks.h"

namespace pa::test {
namespace {

Forward run_with_splits(int num_splits) {
  return [num_splits](const Problem&, DeviceBatch& db) { stage04::forward(db.params(), nullptr, num_splits); };
}

class Stage04 : public testing::TestWithParam<SplitCase> {};

TEST_P(Stage04, MatchesOracle) { expect_matches_oracle(GetParam().c, run_with_splits(GetParam().num_splits)); }

std::vector<SplitCase> stage04_cases() {
  std::vector<SplitCase> cases = {
      // Groups 1..8 (3, 5, 6, 7 are not powers of two), each with several splits.
      {{"Group1_D128_Block16_Splits3", config(4, 4, 128, 16), ragged_decodes()}, 3},
      {{"Group2_D128_Block16_Splits3", config(4, 2, 128, 16), ragged_decodes()}, 3},
      {{"Group3_D128_Block16_Splits3", config(6, 2, 128, 16), ragged_decodes()}, 3},
      {{"Group4_D128_Block16_Splits3", config(8, 2, 128, 16), ragged_decodes()}, 3},
      {{"Group5_D128_Block16_Splits3", config(10, 2, 128, 16), ragged_decodes()}, 3},
      {{"Group6_D128_Block16_Splits3", config(12, 2, 128, 16), ragged_decodes()}, 3},
      {{"Group7_D128_Block16_Splits3", config(7, 1, 128, 16), ragged_decodes()}, 3},
      {{"Group8_D128_Block16_Splits3", config(16, 2, 128, 16), ragged_decodes()}, 3},
      // Head dims: 8, 16 and 32 lanes per K/V row.
      {{"Group4_D64_Block16_Splits3", config(8, 2, 64, 16), ragged_decodes()}, 3},
      // Wider groups: 12 and 16 fit the 16-row decode tile, 32 and 64 take the 128-row tile.
      {{"Group12_D128_Block16_Splits3", config(24, 2, 128, 16), ragged_decodes()}, 3},
      {{"Group16_D64_Block16_Splits5", config(32, 2, 64, 16), ragged_decodes()}, 5},
      {{"Group32_D128_Block16_Splits3", config(64, 2, 128, 16), ragged_decodes()}, 3},
      {{"Group64_D64_Block16_Splits8", config(64, 1, 64, 16), ragged_decodes()}, 8},
      {{"Group64_D256_Block16_Splits1", config(128, 2, 256, 16), ragged_decodes()}, 1},
      {{"Group48_D128_Block16_SplitsAuto", config(48, 1, 128, 16), ragged_decodes()}, kAuto},
      {{"Group4_D256_Block16_Splits3", config(8, 2, 256, 16), ragged_decodes()}, 3},
      {{"Group8_D256_Block16_Splits8", config(16, 2, 256, 16), ragged_decodes()}, 8},
      {{"Group5_D64_Block16_Splits8", config(10, 2, 64, 16), ragged_decodes()}, 8},
      // Split counts: 1 (no merge, the kernel writes out), 3, 8, automatic.
      {{"Qwen3Shape_Splits1", config(32, 8, 128, 16), ragged_decodes()}, 1},
      {{"Qwen3Shape_Splits3", config(32, 8, 128, 16), ragged_decodes()}, 3},
      {{"Qwen3Shape_Splits8", config(32, 8, 128, 16), ragged_decodes()}, 8},
      {{"Qwen3Shape_SplitsAuto", config(32, 8, 128, 16), ragged_decodes()}, kAuto},
      {{"Group4_D64_Block16_Splits1", config(8, 2, 64, 16), ragged_decodes()}, 1},
      // The most splits allowed: one block each, most of them empty for every request.
      {{"Qwen3Shape_Splits64", config(32, 8, 128, 16), ragged_decodes()}, 64},
      // Long splits: many steps of the key loop per program, the running max moving.
      {{"Group4_D128_LongContexts_Splits3", config(8, 2, 128, 16), {{1, 2000}, {1, 1500}}}, 3},
      // Splits of 224 keys: 3.5 of the tile's 64-key steps, so a split starts and ends mid-tile.
      {{"Group3_D64_Block32_SplitsMidTile_Splits5", config(6, 2, 64, 32), {{1, 1000}, {1, 999}, {1, 450}}}, 5},
      // One request of one KV head: the automatic plan splits it even on a 2-core CPU.
      {{"OneLongRequest_MHA_SplitsAuto", config(1, 1, 64, 16), {{1, 1200}}}, kAuto},
      // Block sizes: one key per block (a table lookup per key), 64, and 256 (> a split's keys).
      {{"Group4_D64_Block1_Splits3", config(8, 2, 64, 1), ragged_decodes()}, 3},
      {{"Group4_D64_Block1_Splits8", config(8, 2, 64, 1), ragged_decodes()}, 8},
      {{"Group4_D128_Block64_Splits3", config(8, 2, 128, 64), ragged_decodes()}, 3},
      {{"Group4_D128_Block64_Splits8", config(8, 2, 128, 64), ragged_decodes()}, 8},
      {{"Group3_D64_Block256_Splits3", config(6, 2, 64, 256), {{1, 600}, {1, 7}}}, 3},
      // Some requests far shorter than the longest: most of their splits are empty
      // (lse -inf, weight 0) and must not disturb the merge.
      {{"ShortBesideLong_Splits8", config(8, 2, 64, 16), {{1, 500}, {1, 3}, {1, 17}, {1, 64}}}, 8},
      {{"ShortBesideLong_Block1_Splits8", config(8, 2, 64, 1), {{1, 300}, {1, 2}}}, 8},
      // Head sizes between the tile's (padded rows, gqa_shapes.cuh): the partials and the merge
      // carry head_dim values per row, the tile HEAD_DIM.
      {{"Group4_D96_Block16_Splits3", config(8, 2, 96, 16), ragged_decodes()}, 3},
      {{"Group8_D80_Block16_Splits8", config(16, 2, 80, 16), ragged_decodes()}, 8},
      {{"Group4_D192_Block16_Splits5", config(8, 2, 192, 16), ragged_decodes()}, 5},
      {{"Group16_D96_Block16_SplitsAuto", config(32, 2, 96, 16), ragged_decodes()}, kAuto},
      {{"Group32_D80_Block16_Splits3", config(64, 2, 80, 16), ragged_decodes()}, 3},
      {{"MHA_D96_Block1_Splits1", config(2, 2, 96, 1), ragged_decodes()}, 1},
      // Requests with no query (seq_len 0, q_len 0) and padding rows.
      {{"EmptyRequestsAndPaddingRows_Splits3", config(8, 2, 64, 16), {{0, 0}, {1, 40}, {0, 0}, {1, 9}},
        BuildOptions{.seed = 7, .padding_rows = 3}},
       3},
      {{"EmptyRequestsAndPaddingRows_Splits1", config(8, 2, 64, 16), {{0, 0}, {1, 40}, {0, 0}, {1, 9}},
        BuildOptions{.seed = 7, .padding_rows = 3}},
       1},
  };
  if (kGpuBuild) {
    // Full size on a GPU: the Qwen3-8B attention shape at the benchmark's lengths.
    cases.push_back({{"Gpu_Decode1x32768_Qwen3Shape_SplitsAuto", config(32, 8, 128, 16), decode_requests(1, 32768)},
                     kAuto});
    cases.push_back({{"Gpu_Decode4x16384_Qwen3Shape_SplitsAuto", config(32, 8, 128, 16), decode_requests(4, 16384)},
                     kAuto});
    cases.push_back({{"Gpu_Decode16x4096_Qwen3Shape_SplitsAuto", config(32, 8, 128, 16), decode_requests(16, 4096)},
                     kAuto});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, Stage04, testing::ValuesIn(stage04_cases()), split_case_name);

// Padding rows and requests without a query: rows past the last request must be
// exactly +0.0 (bit pattern 0) with lse -inf, whatever the split count.
void expect_exact_zero_padding(int num_splits) {
  const Case c{"Padding", config(8, 2, 64, 16), {{0, 0}, {1, 40}, {0, 0}, {1, 9}}, BuildOptions{.padding_rows = 3}};
  const Problem p = make_problem(c.cfg, c.requests, c.opt);
  DeviceBatch db(p);
  stage04::forward(db.params(), nullptr, num_splits);
  ASSERT_EQ(p.meta.query_start_loc.back() + 3, p.meta.num_tokens);
  expect_padding_rows_exact_zero(p, db);
}

TEST(Stage04Padding, ExactZerosOneSplit) { expect_exact_zero_padding(1); }
TEST(Stage04Padding, ExactZerosEightSplits) { expect_exact_zero_padding(8); }

TEST(Stage04Reruns, BitIdenticalThreeSplits) {
  expect_bit_identical_reruns({"Ragged", config(8, 2, 128, 16), ragged_decodes()}, run_with_splits(3));
}

TEST(Stage04Reruns, BitIdenticalAutomatic) {
  expect_bit_identical_reruns({"OneLong", config(1, 1, 64, 16), {{1, 1200}}}, run_with_splits(kAuto));
}

// ---- keys at any magnitude through the merge -------------------------------------
// Stage 03's magnitude cases, split: each split's lse is then far from the
// others' (a split that holds the max key dominates by exp2 of thousands), so a
// merge that rescales with the wrong base, forgets to subtract the max lse or
// weights by the unnormalised sums shows here while N(0, 1) keys hide it.
struct SplitMagnitudeCase {
  std::string name;
  float factor;
  int num_splits;
};
void PrintTo(const SplitMagnitudeCase& c, std::ostream* os) { *os << c.name; }

class Stage04Magnitude : public testing::TestWithParam<SplitMagnitudeCase> {};

TEST_P(Stage04Magnitude, LargeKeysThroughTheMerge) {
  const SplitMagnitudeCase& c = GetParam();
  Problem p = make_problem(config(8, 2, 128, 16), {{1, 700}, {1, 130}, {1, 33}});
  for (std::vector<bf16>* k : {&p.k_new, &p.k_cache}) {
    for (bf16& x : *k) x = __float2bfloat16(__bfloat162float(x) * c.factor);  // unused slots stay NaN
  }
  DeviceBatch db(p);
  stage04::forward(db.params(), nullptr, c.num_splits);
  expect_device_matches_oracle(p, db, c.name, reference_attention(p));
}

std::vector<SplitMagnitudeCase> split_magnitude_cases() {
  std::vector<SplitMagnitudeCase> cases;
  for (auto [name, factor] : {std::pair{"1e2", 1e2f}, {"1e4", 1e4f}, {"1e9", 1e9f}}) {
    for (int splits : {3, 8}) cases.push_back({std::string("x") + name + "_Splits" + std::to_string(splits), factor, splits});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Keys, Stage04Magnitude, testing::ValuesIn(split_magnitude_cases()),
                         [](const testing::TestParamInfo<SplitMagnitudeCase>& info) { return info.param.name; });

TEST(Stage04Errors, RejectsPrefillWithTheRequestNamed) {
  // Request 1 of this batch is a 16-token prompt.
  Problem p = make_problem(config(8, 2, 64, 16), {{1, 20}, {16, 16}, {1, 5}});
  DeviceBatch db(p);
  expect_error([&] { stage04::forward(db.params()); }, "request 1 has 16 queries");
}

TEST(Stage04Errors, RejectsEightBitCache) {
  AttentionConfig cfg = config(8, 2, 64, 16);
  cfg.kv_format = KvFormat::int8;
  Problem p = make_problem(cfg, ragged_decodes());
  DeviceBatch db(p);
  expect_error([&] { stage04::forward(db.params()); }, "stage 04 reads bf16 caches");
}

TEST(Stage04Errors, RejectsSlidingWindow) {
  expect_rejects_window({"RaggedDecodes", config(8, 2, 64, 16), ragged_decodes()},
                        [](const Problem&, const AttentionParams& params) { stage04::forward(params); });
}

// The dispatch rule, on an H200's 132 SMs, where 4 decode tiles share an SM
// (528 program slots). plan() reads only the sizes (decode_plan_sizes).
constexpr int kH200Sms = 132;
constexpr int kH200Slots = 4 * kH200Sms;  // decode tiles resident at once

// Every plan covers the longest context with whole blocks and no split that is
// always empty.
void expect_covers(const AttentionParams& p, const stage04::SplitPlan& sp) {
  const int blocks = (p.batch.max_seq_len + p.kv.block_size - 1) / p.kv.block_size;
  EXPECT_GE(sp.num_splits * sp.blocks_per_split, blocks) << "the splits must cover max_seq_len";
  EXPECT_LT((sp.num_splits - 1) * sp.blocks_per_split, std::max(blocks, 1)) << "the last split would always be empty";
}

TEST(Stage04Plan, ManyRequestsDoNotSplit) {
  const AttentionParams p = decode_plan_sizes(64, 4096);  // 512 programs: ~4 per SM already
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_EQ(sp.num_splits, 1) << "64 requests x 8 KV heads fill 132 SMs: splitting only adds merge work (TODO 4)";
  expect_covers(p, sp);
}

TEST(Stage04Plan, BatchBetweenOneAndTwoSlotsPerProgramDoesNotSplit) {
  const AttentionParams p = decode_plan_sizes(48, 4096);  // 384 programs; 2 splits would make 768 > 528 slots
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_EQ(sp.num_splits, 1) << "a second split would not fit in one wave of 4 programs per SM (TODO 4)";
}

TEST(Stage04Plan, OneLongRequestSplitsToTheCap) {
  const AttentionParams p = decode_plan_sizes(1, 32768);  // 8 programs without splitting
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_GE(8 * sp.num_splits, 2 * kH200Sms) << "1 x 32768 needs programs on every SM, several each (TODO 4)";
  EXPECT_EQ(sp.num_splits, 64) << "one wave would want 66 splits; at most 64 (TODO 4)";
  EXPECT_EQ(sp.blocks_per_split, 32) << "2048 blocks in 64 splits (TODO 4)";
  expect_covers(p, sp);
}

TEST(Stage04Plan, FourLongRequestsFillOneWave) {
  const AttentionParams p = decode_plan_sizes(4, 32768);  // 32 programs without splitting
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_LE(4 * 8 * sp.num_splits, kH200Slots) << "no more programs than the GPU holds at once (TODO 4)";
  EXPECT_GT(4 * 8 * (sp.num_splits + 1), kH200Slots) << "one more split would still fit (TODO 4)";
  EXPECT_EQ(sp.num_splits, 16) << "TODO 4";
  expect_covers(p, sp);
}

TEST(Stage04Plan, SixteenLongRequestsFillOneWave) {
  const AttentionParams p = decode_plan_sizes(16, 32768);  // 128 programs without splitting
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_EQ(sp.num_splits, 4) << "4 splits: 512 programs of 528 slots (TODO 4)";
  expect_covers(p, sp);
}

TEST(Stage04Plan, ShortContextDoesNotSplit) {
  const AttentionParams p = decode_plan_sizes(1, 200);  // fewer keys than one split's minimum
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_EQ(sp.num_splits, 1) << "a 200-token context is shorter than one split's minimum of 256 keys (TODO 4)";
  expect_covers(p, sp);
}

TEST(Stage04Plan, MediumContextSplitsOnlyToTheMinimumSize) {
  const AttentionParams p = decode_plan_sizes(1, 4096);  // one wave wants 66 splits, 256-key splits allow 16
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_EQ(sp.num_splits, 16) << "TODO 4";
  EXPECT_EQ(sp.blocks_per_split, 16) << "TODO 4";
}

TEST(Stage04Plan, VeryLongContextCapsTheSplitCount) {
  const AttentionParams p = decode_plan_sizes(1, 1 << 20, 1, 16);  // one KV head: one wave would want 528 splits
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_EQ(sp.num_splits, 64) << "TODO 4";
  expect_covers(p, sp);
}

TEST(Stage04Plan, BlockSizeOneCountsKeysNotBlocks) {
  const AttentionParams p = decode_plan_sizes(1, 4096, 8, 1);
  const stage04::SplitPlan sp = stage04::plan(p, kH200Sms);
  EXPECT_EQ(sp.num_splits, 16) << "TODO 4";
  EXPECT_EQ(sp.blocks_per_split, 256) << "block size 1: 256 blocks are the 256-key minimum (TODO 4)";
}

TEST(Stage04Plan, FixedSplitCount) {
  const AttentionParams p = decode_plan_sizes(2, 130);  // 9 blocks
  const stage04::SplitPlan sp = stage04::plan_fixed(p, 8);
  EXPECT_EQ(sp.num_splits, 8);
  EXPECT_EQ(sp.blocks_per_split, 2);
  expect_error([&] { stage04::plan_fixed(p, 65); }, "num_splits 65");
}


// ---- split counts: the same check as stages 05, 06 and 08 -----------------------------

void stage04_splits(const AttentionParams& p, int num_splits) { stage04::forward(p, nullptr, num_splits); }

TEST(Stage04SplitRequests, RefusesMinusOne) { expect_refuses_split_count(config(8, 2, 64, 16), stage04_splits, -1); }
TEST(Stage04SplitRequests, RefusesSixtyFive) { expect_refuses_split_count(config(8, 2, 64, 16), stage04_splits, 65); }
TEST(Stage04SplitRequests, ForcedSplitsRefusePrefill) {
  expect_forced_splits_refuse_prefill(config(8, 2, 64, 16), stage04_splits);
}
TEST(Stage04SplitRequests, LooseBoundsDecodesAutomatic) {
  expect_loose_bounds_decodes_match_oracle(config(8, 2, 64, 16), ragged_decodes(), stage04_splits, kAuto);
}
TEST(Stage04SplitRequests, LooseBoundsDecodesThreeSplits) {
  expect_loose_bounds_decodes_match_oracle(config(8, 2, 64, 16), ragged_decodes(), stage04_splits, 3);
}

}  // namespace
}  // namespace pa::test
