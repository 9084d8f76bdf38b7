// Exercise 04: context-parallel decode, R ranks in one process. The sharding
// rules, the shards themselves, the empty state of a row with no key on a rank,
// the merge in rank order against the fp64 oracle, one rank against the engine
// bit for bit, and the same bits whatever order the ranks run in.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "context_parallel.h"
#include "engine/engine.h"
#include "tests/harness.h"

namespace pa::exercise04 {
namespace {

using test::config;
using test::expect_error;

constexpr Sharding kBoth[] = {Sharding::contiguous, Sharding::interleaved};

std::vector<uint16_t> bits_of(const std::vector<bf16>& x) {
  std::vector<uint16_t> b(x.size());
  std::memcpy(b.data(), x.data(), x.size() * sizeof(uint16_t));
  return b;
}
std::vector<uint32_t> bits_of(const std::vector<float>& x) {
  std::vector<uint32_t> b(x.size());
  std::memcpy(b.data(), x.data(), x.size() * sizeof(uint32_t));
  return b;
}

// ---- TODO 1: every block has one rank

TEST(Owner, EveryBlockHasOneRankAndTheRunsAreBalanced) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int n = 1; n <= 40; ++n) {
      std::vector<int> count(ranks, 0);
      int previous = 0;
      for (int b = 0; b < n; ++b) {
        const int o = owner(Sharding::contiguous, b, n, ranks);
        ASSERT_TRUE(o >= 0 && o < ranks) << "contiguous: block " << b << " of " << n << ", " << ranks << " ranks -> " << o;
        EXPECT_GE(o, previous) << "contiguous: each rank holds one run, in order (block " << b << " of " << n << ", "
                               << ranks << " ranks)";
        previous = o;
        ++count[o];
        EXPECT_EQ(owner(Sharding::interleaved, b, n, ranks), b % ranks)
            << "interleaved: block " << b << " of " << n << ", " << ranks << " ranks";
      }
      for (int r = 0; r < ranks; ++r) {
        // Rank r's run is [r n / R, (r + 1) n / R): n / R blocks, rounded down or up.
        EXPECT_EQ(count[r], (r + 1) * n / ranks - r * n / ranks)
            << "contiguous: rank " << r << " of " << ranks << " holds " << count[r] << " of " << n << " blocks";
      }
    }
  }
}

// ---- the shards (given code, with TODO 1's rule)

TEST(Shard, TheRanksHoldEveryKeyOnce) {
  const Problem whole = make_problem(config(8, 2, 64, 16), {{1, 70}, {1, 130}, {1, 1}, {1, 33}, {0, 20}},
                                     {.seed = 5, .padding_rows = 2});
  for (Sharding s : kBoth) {
    for (int ranks : {1, 2, 3, 5, 16}) {
      long long keys = 0;
      std::vector<int> rows_with_keys(whole.meta.num_tokens, 0);
      for (int r = 0; r < ranks; ++r) {
        const Shard sh = make_shard(whole, r, ranks, s);
        keys += sh.keys();
        ASSERT_EQ(static_cast<int>(sh.shard_row.size()), whole.meta.num_tokens);
        for (int t = 0; t < whole.meta.num_tokens; ++t) rows_with_keys[t] += sh.shard_row[t] >= 0;
        EXPECT_GE(static_cast<long long>(sh.problem.num_blocks) * whole.cfg.block_size, sh.keys());
      }
      long long want = 0;
      for (int r = 0; r < whole.meta.num_requests(); ++r) want += whole.meta.q_len(r) ? whole.meta.seq_lens[r] : 0;
      EXPECT_EQ(keys, want) << name(s) << ", " << ranks << " ranks: the shards' keys add up to the batch's";
      // A request of 1 key (one block) lives on one rank; the padding rows and
      // the request without a query on none.
      EXPECT_EQ(rows_with_keys[2], 1) << name(s) << ", " << ranks << " ranks";
      EXPECT_EQ(rows_with_keys[4], 0) << name(s) << ", " << ranks << " ranks: a padding row";
    }
  }
}

// ---- TODO 2: a row with no key on a rank

TEST(LocalAttention, ARowWithNoKeyHereIsTheEmptyState) {
  // 4 ranks, requests of 1, 2 and 9 blocks: ranks without any of a request's
  // blocks exist in both shardings.
  const Problem whole = make_problem(config(8, 2, 64, 16), {{1, 5}, {1, 20}, {1, 140}}, {.seed = 6});
  const int hq = whole.cfg.num_q_heads, d = whole.cfg.head_dim, rows = whole.meta.num_tokens;
  for (Sharding s : kBoth) {
    int empty_rows = 0;
    for (int r = 0; r < 4; ++r) {
      const Shard sh = make_shard(whole, r, 4, s);
      std::unique_ptr<DeviceBatch> db;
      if (sh.problem.meta.num_requests() > 0) db = std::make_unique<DeviceBatch>(sh.problem);
      DeviceBuffer<bf16> o(static_cast<size_t>(rows) * hq * d);
      DeviceBuffer<float> lse(static_cast<size_t>(rows) * hq);
      local_attention(sh, db.get(), o.data(), lse.data());
      check_todos();
      const std::vector<bf16> o_h = o.download();
      const std::vector<float> lse_h = lse.download();
      for (int t = 0; t < rows; ++t) {
        if (sh.shard_row[t] >= 0) continue;
        ++empty_rows;
        for (int h = 0; h < hq; ++h) {
          EXPECT_EQ(lse_h[t * hq + h], -INFINITY)
              << name(s) << ", rank " << r << ", row " << t << ", head " << h
              << ": no key of this request is here, so its lse is -inf (weight 0 in the merge), not a finite number";
          for (int i = 0; i < d; ++i) {
            ASSERT_EQ(__bfloat162float(o_h[(static_cast<size_t>(t) * hq + h) * d + i]), 0.0f)
                << name(s) << ", rank " << r << ", row " << t << ": the empty state's o is 0";
          }
        }
      }
    }
    EXPECT_GT(empty_rows, 0) << name(s) << ": the case must have rows with no key on some rank";
  }
}

// ---- TODO 3 and the whole exercise against the oracle

struct CpCase {
  std::string name;
  AttentionConfig cfg;
  std::vector<RequestShape> requests;
  int padding_rows = 0;
};

std::vector<CpCase> cases() {
  return {
      {"RaggedDecodes_Group4_D128_Block16", config(8, 2, 128, 16), {{1, 70}, {1, 130}, {1, 1}, {1, 33}}},
      {"LongAndShort_Group4_D64_Block16", config(8, 2, 64, 16), {{1, 1000}, {1, 17}, {1, 300}}, 3},
      {"NoQueryAndPadding_MHA_D64_Block1", config(4, 4, 64, 1), {{1, 40}, {0, 12}, {1, 9}}, 2},
      {"Group8_D256_Block64", config(8, 1, 256, 64), {{1, 500}, {1, 64}, {1, 65}}},
      {"Group16_D96_Block16", config(32, 2, 96, 16), {{1, 200}, {1, 31}}},
  };
}

void PrintTo(const CpCase& c, std::ostream* os) { *os << c.name << " (" << c.cfg.describe() << ")"; }

class ContextParallel : public testing::TestWithParam<CpCase> {};

TEST_P(ContextParallel, MergedRanksMatchTheOracle) {
  const CpCase& c = GetParam();
  const Problem whole = make_problem(c.cfg, c.requests, {.seed = 11, .padding_rows = c.padding_rows});
  const OracleResult want = reference_attention(whole);
  for (Sharding s : kBoth) {
    for (int ranks : {1, 2, 3, 4, 8}) {
      DeviceBatch db(whole);
      run_in_one_process(whole, db, ranks, s);
      test::expect_device_matches_oracle(whole, db, c.name + ", " + name(s) + ", " + std::to_string(ranks) + " ranks",
                                         want);
    }
  }
}

// The merge's order is the rank order, not the order the ranks finish in:
// every rank, and every run, gets the same bits.
TEST_P(ContextParallel, TheBitsDoNotDependOnTheOrderTheRanksRunIn) {
  const CpCase& c = GetParam();
  const Problem whole = make_problem(c.cfg, c.requests, {.seed = 12, .padding_rows = c.padding_rows});
  for (Sharding s : kBoth) {
    DeviceBatch forward(whole), reversed(whole);
    run_in_one_process(whole, forward, 4, s);
    run_in_one_process(whole, reversed, 4, s, {3, 2, 1, 0});
    EXPECT_EQ(bits_of(forward.out.download()), bits_of(reversed.out.download())) << c.name << ", " << name(s);
    EXPECT_EQ(bits_of(forward.lse.download()), bits_of(reversed.lse.download())) << c.name << ", " << name(s);
  }
}

// One rank holds the whole context: its partial is the engine's output, and
// the merge of one partial gives it back bit for bit (weight 2^0 = 1, l = 1).
// The lse goes through log2 units and back, so it is compared by the table.
TEST_P(ContextParallel, OneRankIsTheEngineBitForBit) {
  const CpCase& c = GetParam();
  const Problem whole = make_problem(c.cfg, c.requests, {.seed = 13, .padding_rows = c.padding_rows});
  DeviceBatch engine_db(whole), cp_db(whole);
  engine::forward(engine_db.params());
  run_in_one_process(whole, cp_db, 1, Sharding::contiguous);
  EXPECT_EQ(bits_of(cp_db.out.download()), bits_of(engine_db.out.download())) << c.name;
  test::expect_same_as_backend(whole, cp_db.out_host(), cp_db.lse_host(), engine_db.out_host(), engine_db.lse_host(),
                               c.name + ": one rank against the engine");
}

INSTANTIATE_TEST_SUITE_P(Cases, ContextParallel, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<CpCase>& info) { return info.param.name; });

// FlashInfer #4051: merging empty states must give exact zeros and lse -inf,
// not NaN. Two ranks whose partials of row 0 are both empty.
TEST(Merge, TwoEmptyStatesGiveZerosAndMinusInf) {
  const Problem whole = make_problem(config(8, 2, 64, 16), {{1, 40}, {1, 50}}, {.seed = 14});
  DeviceBatch db(whole);
  const int hq = whole.cfg.num_q_heads, d = whole.cfg.head_dim, rows = whole.meta.num_tokens;
  const size_t per = static_cast<size_t>(rows) * hq;
  std::vector<bf16> o(2 * per * d, __float2bfloat16(0.25f));
  std::vector<float> lse(2 * per, 1.5f);
  for (int rank = 0; rank < 2; ++rank) {
    for (int h = 0; h < hq; ++h) {
      lse[rank * per + h] = -INFINITY;  // row 0: empty on both ranks
      for (int i = 0; i < d; ++i) o[(rank * per + h) * d + i] = __float2bfloat16(0.0f);
    }
  }
  const DeviceBuffer<bf16> o_d(o);
  const DeviceBuffer<float> lse_d(lse);
  merge_ranks(db.params(), o_d.data(), lse_d.data(), 2);
  PA_CHECK(cudaDeviceSynchronize());
  check_todos();
  const std::vector<float> out = db.out_host(), lse_out = db.lse_host();
  for (int h = 0; h < hq; ++h) {
    EXPECT_EQ(lse_out[h], -INFINITY) << "row 0, head " << h;
    for (int i = 0; i < d; ++i) ASSERT_EQ(out[h * d + i], 0.0f) << "row 0, head " << h << ", dim " << i;
  }
  // Row 1: two equal partials (0.25 at lse 1.5) merge to 0.25 at lse 1.5 + ln 2.
  for (int h = 0; h < hq; ++h) {
    EXPECT_NEAR(lse_out[hq + h], 1.5 + std::log(2.0), 1e-5) << "row 1, head " << h;
    EXPECT_EQ(out[(hq + h) * d], 0.25f) << "row 1, head " << h;
  }
}

TEST(Errors, WhatTheExerciseDoesNotShard) {
  const Problem prefill = make_problem(config(8, 2, 64, 16), {{4, 40}}, {.seed = 15});
  expect_error([&] { make_shard(prefill, 0, 2, Sharding::contiguous); }, "shards decode batches: request 0 has 4 queries");
  AttentionConfig int8 = config(8, 2, 64, 16);
  int8.kv_format = KvFormat::int8;
  expect_error([&] { make_shard(make_problem(int8, {{1, 40}}), 0, 2, Sharding::contiguous); }, "bf16 cache");
  AttentionConfig window = config(8, 2, 64, 16);
  window.window = 16;
  expect_error([&] { make_shard(make_problem(window, {{1, 40}}), 0, 2, Sharding::contiguous); }, "no window");
  const Problem decode = make_problem(config(8, 2, 64, 16), {{1, 40}}, {.seed = 16});
  expect_error([&] { make_shard(decode, 2, 2, Sharding::contiguous); }, "rank 2 of 2 ranks");
  expect_error([&] { make_shard(decode, 0, 0, Sharding::contiguous); }, "0 ranks; at least 1");
  DeviceBatch db(decode);
  expect_error([&] { run_in_one_process(decode, db, 2, Sharding::contiguous, {0, 0}); }, "each of the 2 ranks once");
}

}  // namespace
}  // namespace pa::exercise04
