// Stage 09: the 128-row prefill tile on TMA, mbarriers and wgmma, with a
// producer warpgroup and two consumer warpgroups (192 rows, three at head_dim
// 64). The same batches as stage 03's
// prefill tile: every group size (padded ones too), every head_dim (16..256,
// padded to 64 / 128 / 256 by the copies' zero fill), block sizes 1..256 (one
// box a block, or a block longer than a tile), chunked prefill, decodes riding
// in the tile, empty requests and padding rows; unused cache slots hold
// NaN, so a copy that reads past a range's end shows.
#include "tests/harness.h"

namespace pa::test {
namespace {

void run_stage09(const Problem&, DeviceBatch& db) { stage09::forward(db.params()); }

class Stage09 : public testing::TestWithParam<Case> {};

TEST_P(Stage09, MatchesOracle) { expect_matches_oracle(GetParam(), run_stage09); }

AttentionConfig grouped(int group, int head_dim, int block_size) {
  return config(2 * group, 2, head_dim, block_size);
}

std::vector<Case> stage09_cases() {
  std::vector<Case> cases = basic_cases();
  // Group sizes: padded heads (3, 6, 12), a tile of 2 tokens (64), MHA.
  cases.push_back({"Milestone_Group1_D128_Block16", grouped(1, 128, 16), milestone_requests()});
  cases.push_back({"Milestone_Group6_D64_Block16", grouped(6, 64, 16), milestone_requests()});
  cases.push_back({"Milestone_Group8_D128_Block16", grouped(8, 128, 16), milestone_requests()});
  cases.push_back({"Milestone_Group12_D128_Block16", grouped(12, 128, 16), milestone_requests()});
  cases.push_back({"Milestone_Group16_D64_Block16", grouped(16, 64, 16), milestone_requests()});
  cases.push_back({"Milestone_Group64_D128_Block1", grouped(64, 128, 1), milestone_requests()});
  // Head_dim 64's 192-row tile: 3 tokens of a group of 64, 6 of 32.
  cases.push_back({"Milestone_Group64_D64_Block16", grouped(64, 64, 16), milestone_requests()});
  cases.push_back({"Decode_Group32_D64_Block16", grouped(32, 64, 16), decode_requests(3, 70)});
  // Head sizes: the three tiles, and sizes between them (the copies fill the padding dims with zeros).
  cases.push_back({"Milestone_Group4_D256_Block16", grouped(4, 256, 16), milestone_requests()});
  cases.push_back({"Milestone_Group3_D256_Block1", grouped(3, 256, 1), milestone_requests()});
  cases.push_back({"Milestone_Group4_D96_Block16", grouped(4, 96, 16), milestone_requests()});
  cases.push_back({"Milestone_Group3_D80_Block1", grouped(3, 80, 1), milestone_requests()});
  cases.push_back({"Milestone_Group2_D192_Block16", grouped(2, 192, 16), milestone_requests()});
  cases.push_back({"Milestone_Group4_D32_Block16", grouped(4, 32, 16), milestone_requests()});
  cases.push_back({"Milestone_Group2_D16_Block64", grouped(2, 16, 64), milestone_requests()});
  // Block sizes: one box per block (16, 64), a block as long as a tile (128)
  // and longer (256: a box is part of a block), one row per block (1).
  cases.push_back({"Milestone_Group4_D128_Block128", grouped(4, 128, 128), milestone_requests()});
  cases.push_back({"Milestone_Group4_D128_Block256", grouped(4, 128, 256), milestone_requests()});
  cases.push_back({"Milestone_Group4_D256_Block128", grouped(4, 256, 128), milestone_requests()});
  // One copy a fill (one slab, one box): three of the four producer warps
  // announce no bytes and issue nothing, and the fill still completes.
  cases.push_back({"LongChunk_Group4_D64_Block256", grouped(4, 64, 256), {{300, 600}, {1, 257}}});
  // The box that holds a range's end, in pieces of 64, 32, .., 1 rows: decodes
  // whose ranges end 1 .. 127 rows into a 128-row box, one, two, .., seven
  // binary digits before the end and after it.
  const auto end_boxes = [] {
    std::vector<RequestShape> r;
    for (int n : {1, 2, 3, 7, 42, 63, 64, 65, 85, 96, 127}) r.push_back({1, 128 + n});
    return r;
  }();
  cases.push_back({"EndBoxes_Group4_D128_Block128", grouped(4, 128, 128), end_boxes});
  cases.push_back({"EndBoxes_Group2_D64_Block256", grouped(2, 64, 256), end_boxes});
  // Long prompts: many query tiles (heaviest first) and many key tiles through
  // the ring (rounds of both parities), ends inside a block and on its edge.
  cases.push_back({"LongPromptWithDecodes_Group4_D128", grouped(4, 128, 16), {{150, 150}, {1, 90}, {1, 3}, {20, 180}}});
  cases.push_back({"LongChunk_Group4_D128_Block16", grouped(4, 128, 16), {{700, 900}, {1, 300}}});
  cases.push_back({"LongChunk_Group4_D64_Block64", grouped(4, 64, 64), {{300, 1024}, {64, 64}}});
  cases.push_back({"LongChunk_Group2_D256_Block16", grouped(2, 256, 16), {{200, 777}, {3, 129}}});
  cases.push_back({"LongPrompt_Group5_D64_Block1", grouped(5, 64, 1), {{150, 150}, {1, 3}}});
  cases.push_back({"LongPrompt_MHA_D64_Block64", grouped(1, 64, 64), {{150, 150}, {7, 200}}});
  // Decode-only batches ride in the prefill tile; verify blocks too.
  cases.push_back({"Decode_Group4_D128_Block16", grouped(4, 128, 16), decode_requests(3, 77)});
  cases.push_back({"Decode_Group32_D128_Block16", grouped(32, 128, 16), decode_requests(2, 90)});
  cases.push_back({"Verify4_Group4_D128_Block16", grouped(4, 128, 16), {{4, 50}, {1, 33}, {3, 3}}});
  // Padding rows, empty requests, random mixed batches.
  cases.push_back({"EmptyRequestsAndPaddingRows_Group6_D128", grouped(6, 128, 16), {{0, 0}, {9, 40}, {0, 0}, {1, 9}},
                   BuildOptions{.seed = 9, .padding_rows = 2}});
  cases.push_back({"RandomMixed_Group3_D64_Block16", grouped(3, 64, 16), random_mixed_requests(23, 7, 140),
                   BuildOptions{.seed = 23}});
  cases.push_back({"RandomMixed_Group8_D128_Block1", grouped(8, 128, 1), random_mixed_requests(29, 5, 90),
                   BuildOptions{.seed = 29, .padding_rows = 3}});
  if (kGpuBuild) {
    cases.push_back({"Gpu_Prompt4096_Qwen3Shape", config(32, 8, 128, 16), {{4096, 4096}}});
    cases.push_back({"Gpu_Chunks512AndDecodes_Qwen3Shape", config(32, 8, 128, 16),
                     {{512, 2048}, {512, 512}, {1, 3000}, {1, 4096}}});
    cases.push_back({"Gpu_Prompt2048_Group16_D64", config(32, 2, 64, 16), {{2048, 2048}}});
    cases.push_back({"Gpu_Prompt2048_Group4_D256", config(16, 4, 256, 16), {{2048, 2048}}});
    cases.push_back({"Gpu_Prompt2048_Qwen3Shape_Block64", config(32, 8, 128, 64), {{2048, 2048}, {100, 2100}}});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, Stage09, testing::ValuesIn(stage09_cases()), case_name);

TEST(Stage09Reruns, BitIdentical) {
  expect_bit_identical_reruns({"Milestone", config(8, 2, 128, 16), milestone_requests()}, run_stage09);
}

// Keys far from the usual size (stage 03's issue 29 cases): the weights keep
// the max key at exactly 1, so nothing overflows P's bf16 operand.
TEST(Stage09Magnitude, LargeKeysMatchTheOracle) {
  for (float factor : {1e9f, 1e20f, 1e34f}) {
    Problem p = make_problem(config(8, 2, 128, 16), milestone_requests());
    for (std::vector<bf16>* k : {&p.k_new, &p.k_cache}) {
      for (bf16& x : *k) x = __float2bfloat16(__bfloat162float(x) * factor);  // unused slots stay NaN
    }
    DeviceBatch db(p);
    stage09::forward(db.params());
    expect_device_matches_oracle(p, db, "keys x " + std::to_string(factor), reference_attention(p));
  }
}

TEST(Stage09Errors, RejectsSlidingWindow) {
  expect_rejects_window({"Milestone", config(8, 2, 64, 16), milestone_requests()},
                        [](const Problem&, const AttentionParams& params) { stage09::forward(params); });
}

TEST(Stage09Errors, RejectsEightBitCache) {
  AttentionConfig cfg = config(8, 2, 64, 16);
  cfg.kv_format = KvFormat::int8;
  Problem p = make_problem(cfg, milestone_requests());
  DeviceBatch db(p);
  expect_error([&] { stage09::forward(db.params()); }, "stage 09 reads bf16 caches");
}

TEST(Stage09Errors, RejectsSinks) {
  Problem p = make_problem(config(8, 2, 64, 16), milestone_requests());
  DeviceBatch db(p);
  AttentionParams params = db.params();
  const std::vector<float> sinks(8, 0.5f);
  DeviceBuffer<float> sinks_d(sinks);
  params.sinks = sinks_d.data();
  expect_error([&] { stage09::forward(params); }, "no sinks");
}

TEST(Stage09Errors, RejectsBatchInvariantMode) {
  Problem p = make_problem(config(8, 2, 64, 16), milestone_requests());
  DeviceBatch db(p);
  AttentionParams params = db.params();
  params.batch_invariant = true;
  expect_error([&] { stage09::forward(params); }, "no batch-invariant mode");
}

}  // namespace
}  // namespace pa::test
