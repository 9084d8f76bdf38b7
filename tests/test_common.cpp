// The shared ground every stage stands on: metadata validation, batch
// builders, the fp64 oracle and the comparison.
#include <cmath>
#include <set>

#include "common/batch_ops.h"
#include "tests/harness.h"

namespace pa::test {
namespace {

Problem milestone() { return make_problem(config(8, 2, 64, 16), milestone_requests()); }

// --- validation: every broken rule gets a message that names it -------------

TEST(Validate, AcceptsBuiltBatches) {
  const Problem p = milestone();
  EXPECT_NO_THROW(validate(p.meta, p.cfg, p.num_blocks));
}

TEST(Validate, SeqLenShorterThanQueries) {
  Problem p = milestone();
  p.meta.seq_lens[1] = 10;  // request 1 has 16 queries
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "request 1: seq_len 10 < query length 16");
}

TEST(Validate, NegativeLength) {
  Problem p = milestone();
  p.meta.seq_lens[3] = -1;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "request 3: negative seq_len");
}

TEST(Validate, DecreasingQueryStartLoc) {
  Problem p = milestone();
  p.meta.query_start_loc[2] = p.meta.query_start_loc[1] - 1;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "request 1: negative query length -1");
}

TEST(Validate, BlockIdOutOfRange) {
  Problem p = milestone();
  p.meta.block_table[4 * p.meta.max_blocks_per_seq + 2] = p.num_blocks;  // request 4, block 2
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "block_table[4][2] = " + std::to_string(p.num_blocks) + " is out of range");
}

TEST(Validate, BlockTableTooShort) {
  Problem p = milestone();
  p.meta.seq_lens[4] = 16 * p.meta.max_blocks_per_seq + 1;
  p.meta.max_seq_len = p.meta.seq_lens[4];
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "request 4: block table too short");
}

TEST(Validate, SlotMappingDisagreesWithBlockTable) {
  Problem p = milestone();
  p.meta.slot_mapping[0] += 1;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "slot_mapping[0]");
}

TEST(Validate, MaximaSmallerThanData) {
  Problem p = milestone();
  p.meta.max_query_len = 8;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "exceeds max_query_len 8");
}

TEST(Validate, DecodeOnlyFlagWithPrefill) {
  Problem p = milestone();
  p.meta.decode_only = true;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "decode_only is set");
}

TEST(Validate, HeadsNotAMultiple) {
  AttentionConfig c = config(6, 4, 64, 16);
  expect_error([&] { validate_config(c); }, "must be a multiple of num_kv_heads");
}

TEST(Validate, UnsupportedHeadDim) {
  expect_error([&] { validate_config(config(8, 2, 96, 16)); }, "head_dim 96 is not supported");
}

TEST(Validate, BlockSizeNotAPowerOfTwo) {
  expect_error([&] { validate_config(config(8, 2, 64, 24)); }, "block_size 24 is not supported");
}

TEST(Validate, DeviceBatchRejectsBeforeTouchingTheDevice) {
  Problem p = milestone();
  p.meta.block_table[0] = -5;
  expect_error([&] { DeviceBatch db(p); }, "is out of range");
}

// --- builders -----------------------------------------------------------------

TEST(Builders, BlockTablesAreShuffled) {
  const Problem p = make_problem(config(8, 2, 64, 4), decode_requests(4, 64));
  std::vector<int> used;
  for (int r = 0; r < 4; ++r)
    for (int b = 0; b < 16; ++b) used.push_back(p.meta.block_id(r, b * 4, 4));
  std::set<int> distinct(used.begin(), used.end());
  EXPECT_EQ(distinct.size(), used.size()) << "two requests share a block";
  bool identity = true;
  for (size_t i = 0; i < used.size(); ++i) identity = identity && used[i] == static_cast<int>(i);
  EXPECT_FALSE(identity) << "block tables must not be the identity: it hides block-table bugs";
}

TEST(Builders, UnusedSlotsHoldNaN) {
  const Problem p = make_problem(config(8, 2, 64, 16), {{1, 33}});
  const int row = p.cfg.num_kv_heads * p.cfg.head_dim;
  // Position 33 (the last block's second slot) lies past seq_len: NaN.
  const int slot = p.meta.block_id(0, 33, 16) * 16 + 33 % 16;
  EXPECT_TRUE(std::isnan(__bfloat162float(p.k_cache[static_cast<size_t>(slot) * row])));
  // This step's own slot is NaN until the write path fills it.
  EXPECT_TRUE(std::isnan(__bfloat162float(p.k_cache[static_cast<size_t>(p.meta.slot_mapping[0]) * row])));
  // A padding entry of the block table points at a NaN-filled spare block.
  const int spare = p.meta.block_table[p.meta.max_blocks_per_seq - 1];
  EXPECT_TRUE(std::isnan(__bfloat162float(p.v_cache[static_cast<size_t>(spare) * 16 * row])));
}

TEST(Builders, SameSeedSameBatch) {
  const Problem a = make_problem(config(8, 2, 64, 16), milestone_requests(), {.seed = 3});
  const Problem b = make_problem(config(8, 2, 64, 16), milestone_requests(), {.seed = 3});
  EXPECT_EQ(a.meta.block_table, b.meta.block_table);
  EXPECT_EQ(0, std::memcmp(a.q.data(), b.q.data(), a.q.size() * sizeof(bf16)));
}

TEST(Builders, AttendedPairsFollowCausalityAndWindow) {
  Problem p = make_problem(config(2, 1, 64, 16), {{4, 4}, {1, 10}}, {.fill_values = false});
  EXPECT_EQ(p.attended_pairs(), (1 + 2 + 3 + 4) + 10);
  p.cfg.window = 2;  // each query sees itself and one key before it
  EXPECT_EQ(p.attended_pairs(), (1 + 2 + 2 + 2) + 2);
}

TEST(WritePath, NewTokensLandInTheirSlots) {
  const Problem p = milestone();
  DeviceBatch db(p);
  const std::vector<float> cache = to_float(db.k_cache.download());
  const int row = p.cfg.num_kv_heads * p.cfg.head_dim;
  for (int t = 0; t < p.meta.num_tokens; ++t) {
    const int slot = p.meta.slot_mapping[t];
    for (int e = 0; e < row; ++e) {
      ASSERT_EQ(cache[static_cast<size_t>(slot) * row + e], __bfloat162float(p.k_new[static_cast<size_t>(t) * row + e]))
          << "token " << t << " element " << e;
    }
  }
}

// --- the oracle -----------------------------------------------------------------

TEST(Oracle, SingleKeyReturnsItsValue) {
  Problem p = make_problem(config(2, 1, 64, 16), {{1, 1}});
  const OracleResult o = reference_attention(p);
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 64; ++d) EXPECT_EQ(o.out[h * 64 + d], __bfloat162float(p.v_new[d]));
}

TEST(Oracle, EqualScoresAverageTheValues) {
  Problem p = make_problem(config(1, 1, 64, 16), {{1, 3}});
  for (auto& x : p.q) x = __float2bfloat16(0.0f);  // all scores 0: weights 1/3 each, lse = log 3
  const OracleResult o = reference_attention(p);
  const std::vector<float> k = logical_kv(p, 0, true);
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(o.out[d], (k[d] + k[64 + d] + k[128 + d]) / 3.0, 1e-12);
  EXPECT_NEAR(o.lse[0], std::log(3.0), 1e-12);
}

TEST(Oracle, CausalByPosition) {
  // The first query of a 2-token prompt sees only key 0: its output is v_0.
  Problem p = make_problem(config(1, 1, 64, 16), {{2, 2}});
  const OracleResult o = reference_attention(p);
  for (int d = 0; d < 64; ++d) EXPECT_EQ(o.out[d], __bfloat162float(p.v_new[d]));
}

TEST(Oracle, WindowAndSinks) {
  Problem p = make_problem(config(1, 1, 64, 16), {{1, 5}});
  p.cfg.window = 1;  // only the query's own position
  OracleResult o = reference_attention(p);
  for (int d = 0; d < 64; ++d) EXPECT_EQ(o.out[d], __bfloat162float(p.v_new[d]));
  p.cfg.with_sinks = true;
  p.sinks = {0.0f};
  for (auto& x : p.q) x = __float2bfloat16(0.0f);  // score 0 and sink 0: half the weight on the sink
  o = reference_attention(p);
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(o.out[d], 0.5 * __bfloat162float(p.v_new[d]), 1e-12);
  EXPECT_NEAR(o.lse[0], std::log(2.0), 1e-12);
}

TEST(Oracle, PaddingRowsAreZeroWithMinusInfLse) {
  const Problem p = make_problem(config(2, 1, 64, 16), {{1, 4}}, {.padding_rows = 2});
  const OracleResult o = reference_attention(p);
  for (size_t i = 2 * 64; i < o.out.size(); ++i) EXPECT_EQ(o.out[i], 0.0);
  EXPECT_TRUE(std::isinf(o.lse[2]) && o.lse[2] < 0);
}

// --- comparison -------------------------------------------------------------------

TEST(Compare, NaNAlwaysFails) {
  const Problem p = make_problem(config(1, 1, 64, 16), {{1, 1}});
  std::vector<double> want(64, 0.5);
  std::vector<float> got(64, 0.5f);
  got[7] = NAN;
  const CheckResult r = check_rows(got, want, p.meta, 1, 64, Precision::bf16, "out");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.report.find("(request 0, token 0 [row 0, position 0], head 0, dim 7): got nan"), std::string::npos)
      << r.report;
}

TEST(Compare, ToleranceIsAtolPlusRtol) {
  const Problem p = make_problem(config(1, 1, 64, 16), {{1, 1}});
  const Tolerance t = tolerance(Precision::bf16);
  std::vector<double> want(64, 2.0);
  std::vector<float> got(64, static_cast<float>(2.0 + 0.99 * (t.atol + 2.0 * t.rtol)));
  EXPECT_TRUE(check_rows(got, want, p.meta, 1, 64, Precision::bf16, "out").ok);
  got[0] = static_cast<float>(2.0 + 1.01 * (t.atol + 2.0 * t.rtol));
  EXPECT_FALSE(check_rows(got, want, p.meta, 1, 64, Precision::bf16, "out").ok);
}

TEST(Compare, MinusInfMatchesOnlyMinusInf) {
  const Problem p = make_problem(config(1, 1, 64, 16), {{1, 1}}, {.padding_rows = 1});
  std::vector<double> want = {0.0, -INFINITY};
  EXPECT_TRUE(check_rows({0.0f, -INFINITY}, want, p.meta, 1, 1, Precision::fp32, "lse").ok);
  EXPECT_FALSE(check_rows({0.0f, -1e30f}, want, p.meta, 1, 1, Precision::fp32, "lse").ok);
}

}  // namespace
}  // namespace pa::test
