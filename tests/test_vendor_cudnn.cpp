// vendor_cudnn: cuDNN's fused attention over the course's paged cache
// (bench/vendor_cudnn.h), against the same fp64 oracle and tolerance table as
// the stages. Built in the GPU flavor where CMake finds cuDNN and cudnn-frontend.
#include <iostream>

#include "bench/vendor_cudnn.h"
#include "tests/harness.h"

namespace pa::test {
namespace {

void run_cudnn(const Problem& p, DeviceBatch& db) { vendor_cudnn::forward(p, db); }

AttentionConfig windowed(AttentionConfig c, int window) {
  c.window = window;
  return c;
}

TEST(VendorCudnn, Versions) {
  const std::string v = vendor_cudnn::versions();
  std::cout << "[vendor_cudnn] " << v << "\n";
  RecordProperty("versions", v);
  EXPECT_NE(v.find("cuDNN 9."), std::string::npos) << v;
}

class VendorCudnn : public testing::TestWithParam<Case> {};

TEST_P(VendorCudnn, MatchesOracle) {
  const Case& c = GetParam();
  const Problem p = make_problem(c.cfg, c.requests, c.opt);
  // Every case here is one the backend takes: a refusal is a failure, with cuDNN's reason.
  const std::string why = vendor_cudnn::unsupported(p);
  ASSERT_TRUE(why.empty()) << "vendor_cudnn refused " << c.name << " (" << c.cfg.describe() << "): " << why;
  expect_matches_oracle(c, run_cudnn);
}

std::vector<Case> vendor_cases() {
  std::vector<Case> cases = basic_cases();  // the stages' shared cases, full size on the GPU included
  const std::vector<Case> more = {
      // GQA groups 1..8 (3, 5, 6, 7 are not powers of two) on ragged decodes: dense decode graphs.
      {"Decodes_Group1_D128", config(4, 4, 128, 16), ragged_decodes()},
      {"Decodes_Group2_D128", config(4, 2, 128, 16), ragged_decodes()},
      {"Decodes_Group3_D128", config(6, 2, 128, 16), ragged_decodes()},
      {"Decodes_Group5_D128", config(10, 2, 128, 16), ragged_decodes()},
      {"Decodes_Group6_D128", config(12, 2, 128, 16), ragged_decodes()},
      {"Decodes_Group7_D128", config(7, 1, 128, 16), ragged_decodes()},
      {"Decodes_Group8_D128", config(16, 2, 128, 16), ragged_decodes()},
      // Head dims 64 and 256.
      {"Decodes_Group4_D64", config(8, 2, 64, 16), ragged_decodes()},
      {"Decodes_Group4_D256", config(8, 2, 256, 16), ragged_decodes()},
      {"Milestone_Group4_D256", config(8, 2, 256, 16), milestone_requests()},
      // Block sizes 1 and 256 (a page larger than most contexts).
      {"Decodes_Group4_D64_Block1", config(8, 2, 64, 1), ragged_decodes()},
      {"Mixed_Group3_D64_Block256", config(6, 2, 64, 256), {{1, 600}, {1, 7}, {40, 300}}},
      // A decode batch with an empty request: ragged offsets on a decode batch.
      {"Decodes_WithEmptyRequest", config(8, 2, 128, 16), {{1, 70}, {0, 0}, {1, 130}, {1, 1}}},
      // Prefill: a full prompt, a chunk at the end of a long context, several prompts.
      {"Prefill_FullPrompt300_Qwen3Shape", config(32, 8, 128, 16), {{300, 300}}},
      {"Prefill_Chunk128Of1000_Group4", config(8, 2, 128, 16), {{128, 1000}}},
      {"Prefill_ThreePrompts_Group3_D64", config(6, 2, 64, 16), {{17, 17}, {64, 64}, {5, 5}}},
      // Long contexts: the running max moves over many tiles.
      {"LongDecodes_Group4_D128", config(8, 2, 128, 16), {{1, 2000}, {1, 1500}}},
      // Sliding windows (kept: q_pos - k_pos < window) on decodes, prefill chunks and the milestone batch;
      // window 1 keeps only the query's own position; windows longer than the context change nothing.
      {"Window1_Milestone_Group4", windowed(config(8, 2, 128, 16), 1), milestone_requests()},
      {"Window8_Milestone_Group4", windowed(config(8, 2, 128, 16), 8), milestone_requests()},
      {"Window16_Decodes_Group4", windowed(config(8, 2, 128, 16), 16), ragged_decodes()},
      {"Window17_Decodes_Group3_D64", windowed(config(6, 2, 64, 16), 17), ragged_decodes()},
      {"Window15_PrefillChunk_Group4", windowed(config(8, 2, 128, 16), 15), {{64, 200}, {1, 90}}},
      {"Window128_LongDecodes_Group4", windowed(config(8, 2, 128, 16), 128), {{1, 2000}, {1, 1500}, {1, 100}}},
      {"Window128_RandomMixed_D64", windowed(config(8, 2, 64, 16), 128), random_mixed_requests(13, 6, 400),
       BuildOptions{.seed = 13}},
      {"Window4096_ShortContexts", windowed(config(8, 2, 64, 16), 4096), ragged_decodes()},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  if (kGpuBuild) {
    // The benchmark's shapes (Qwen3-8B attention).
    // (Host-side batch building dominates these: 64 x 4096 would take half a minute.)
    cases.push_back({"Gpu_Decode64x1024_Qwen3Shape", config(32, 8, 128, 16), decode_requests(64, 1024)});
    cases.push_back({"Gpu_Decode1x32768_Qwen3Shape", config(32, 8, 128, 16), decode_requests(1, 32768)});
    cases.push_back({"Gpu_Decode4x16384_Qwen3Shape", config(32, 8, 128, 16), decode_requests(4, 16384)});
    cases.push_back({"Gpu_MixedChunksAndDecodes_Qwen3Shape", config(32, 8, 128, 16), mixed_chunks_and_decodes(2)});
    // (The oracle runs one CPU thread per request: long single prompts cost seconds.)
    cases.push_back({"Gpu_Prefill1024_Qwen3Shape", config(32, 8, 128, 16), {{1024, 1024}}});
    cases.push_back({"Gpu_Prefill4x512_Qwen3Shape", config(32, 8, 128, 16), {{512, 512}, {512, 512}, {300, 512}, {512, 512}}});
    cases.push_back({"Gpu_Window4096_Decode2x16384", windowed(config(32, 8, 128, 16), 4096),
                     decode_requests(2, 16384)});
    cases.push_back({"Gpu_Window128_GptOssShape", windowed(config(64, 8, 64, 16), 128), decode_requests(8, 4096)});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, VendorCudnn, testing::ValuesIn(vendor_cases()), case_name);

// Padding rows (a CUDA-graph batch rounded up): cuDNN writes only the requests'
// rows, the backend zeroes the rest.
TEST(VendorCudnnPadding, ExactZerosMixed) {
  const Case c{"Padding", config(8, 2, 64, 16), {{0, 0}, {1, 40}, {0, 0}, {2, 9}}, BuildOptions{.padding_rows = 3}};
  const Problem p = make_problem(c.cfg, c.requests, c.opt);
  DeviceBatch db(p);
  vendor_cudnn::forward(p, db);
  expect_padding_rows_exact_zero(p, db);
}

TEST(VendorCudnnPadding, ExactZerosDecodes) {
  const Case c{"Padding", config(8, 2, 64, 16), ragged_decodes(), BuildOptions{.padding_rows = 5}};
  const Problem p = make_problem(c.cfg, c.requests, c.opt);
  DeviceBatch db(p);
  vendor_cudnn::forward(p, db);
  expect_padding_rows_exact_zero(p, db);
}

TEST(VendorCudnnReruns, BitIdenticalMixed) {
  expect_bit_identical_reruns({"RandomMixed", config(8, 2, 128, 16), random_mixed_requests(11, 6, 150)}, run_cudnn);
}

// Two batches of one shape share a graph; the second must still read its own metadata.
TEST(VendorCudnnCache, SameShapeDifferentLengths) {
  const AttentionConfig cfg = config(8, 2, 64, 16);
  expect_matches_oracle({"First", cfg, {{1, 70}, {1, 130}}}, run_cudnn);
  expect_matches_oracle({"Second", cfg, {{1, 130}, {1, 70}}}, run_cudnn);
}

// What the backend does not map onto cuDNN is refused with the reason, before any launch.
TEST(VendorCudnnUnsupported, EightBitCache) {
  AttentionConfig cfg = config(8, 2, 64, 16);
  cfg.kv_format = KvFormat::int8;
  const Problem p = make_problem(cfg, ragged_decodes());
  EXPECT_NE(vendor_cudnn::unsupported(p).find("bf16 caches"), std::string::npos);
  DeviceBatch db(p);
  expect_error([&] { vendor_cudnn::forward(p, db); }, "bf16 caches");
}

TEST(VendorCudnnUnsupported, LearnedSinks) {
  AttentionConfig cfg = config(8, 2, 64, 16);
  cfg.with_sinks = true;
  const Problem p = make_problem(cfg, ragged_decodes());
  EXPECT_NE(vendor_cudnn::unsupported(p).find("learned sinks"), std::string::npos);
}

TEST(VendorCudnnUnsupported, SinkTokens) {
  AttentionConfig cfg = windowed(config(8, 2, 64, 16), 16);
  cfg.sink_tokens = 4;
  const Problem p = make_problem(cfg, ragged_decodes());
  EXPECT_NE(vendor_cudnn::unsupported(p).find("sink tokens"), std::string::npos);
}

}  // namespace
}  // namespace pa::test
