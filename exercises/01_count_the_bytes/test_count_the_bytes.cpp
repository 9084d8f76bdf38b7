// Exercise 01: the napkin math of stage 01's README, as code.
#include <gtest/gtest.h>

#include "bytes.h"

namespace pa::exercise01 {
namespace {

TEST(CountTheBytes, Qwen3Decode64x4096) {
  AttentionConfig cfg;  // Qwen3-8B: Hq 32, Hkv 8, D 128, bf16
  const Problem p = make_problem(cfg, decode_requests(64, 4096), {.fill_values = false});
  const Costs c = count(p.meta, cfg, 4400.0);
  EXPECT_EQ(c.floor_bytes, 1073741824ull) << "64 x 4096 tokens x 4 KiB per token per layer";
  EXPECT_EQ(c.reference_bytes, 6ull * 1073741824ull) << "gather read + write, then 4 query heads read each KV head";
  EXPECT_EQ(c.reference_launches, 128u) << "a gather and an attention launch per request";
  EXPECT_NEAR(c.floor_ms, 0.244, 0.001) << "1.07 GB at 4.4 TB/s";
}

TEST(CountTheBytes, MixedBatchAndEmptyRequests) {
  AttentionConfig cfg;
  cfg.num_q_heads = 8;
  cfg.num_kv_heads = 8;  // MHA: each KV head is read once by the reference too
  cfg.head_dim = 64;
  const Problem p = make_problem(cfg, {{16, 40}, {0, 0}, {1, 70}}, {.fill_values = false});
  const Costs c = count(p.meta, cfg, 1000.0);
  const uint64_t token = 2 * 8 * 64 * 2;
  EXPECT_EQ(c.floor_bytes, 110 * token);
  EXPECT_EQ(c.reference_bytes, 3 * 110 * token);
  EXPECT_EQ(c.reference_launches, 4u) << "a request with no queries launches nothing";
}

}  // namespace
}  // namespace pa::exercise01
