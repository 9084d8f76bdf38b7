// Exercise 03: the tuner's choice on a recorded run, every configuration it can
// choose against the oracle, and the engine's plan reading a table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autotune.h"
#include "common/device_buffer.h"
#include "engine/engine.h"
#include "engine/json.h"
#include "engine/tuned_table.h"
#include "tests/harness.h"

#ifndef PA_EXERCISE03_DIR
#error "the build passes PA_EXERCISE03_DIR, the folder of recorded.json"
#endif

namespace pa::exercise03 {
namespace {

using test::expect_error;

const std::string kDir = PA_EXERCISE03_DIR;
const engine::TunedShape kQwen3{8, 128, 16, KvFormat::bf16};  // 32 q / 8 kv heads, D 128, block 16

// ---- TODO 1: pick_best --------------------------------------------------------------

KeyRows rows_of(int default_splits, std::vector<Measured> candidates) {
  return KeyRows{{1, 4096, 4}, default_splits, std::move(candidates)};
}

TEST(PickBest, TheFastestWhenNothingTies) {
  EXPECT_EQ(pick_best(rows_of(16, {{8, 0.030}, {16, 0.020}, {32, 0.013}, {64, 0.016}}), TIE_MARGIN), 32)
      << "32 splits is 35% faster than the default's 16: the table should take it";
}

TEST(PickBest, TheDefaultWhenItTiesWithTheFastest) {
  EXPECT_EQ(pick_best(rows_of(16, {{12, 0.0243}, {16, 0.0245}, {24, 0.0269}}), TIE_MARGIN), 16)
      << "16 splits (the default) is 0.8% slower than 12, inside the 2% margin: noise, so keep the rule";
}

TEST(PickBest, TheFewestSplitsAmongTheTiedWhenTheDefaultIsOutside) {
  EXPECT_EQ(pick_best(rows_of(8, {{8, 0.050}, {32, 0.0402}, {48, 0.0398}, {64, 0.0395}}), TIE_MARGIN), 32)
      << "64 is fastest, 48 and 32 are within 2% of it, the default (8) is not: take the fewest tied splits";
}

TEST(PickBest, WithoutADefaultRowTheFewestTied) {
  EXPECT_EQ(pick_best(rows_of(0, {{4, 0.1000}, {2, 0.1010}, {8, 0.1300}}), TIE_MARGIN), 2);
}

TEST(PickBest, ATieMarginOfZeroTakesTheFastest) {
  EXPECT_EQ(pick_best(rows_of(16, {{12, 0.0243}, {16, 0.0245}}), 0.0), 12);
}

TEST(PickBest, NoCandidatesIsAnError) { expect_error([] { (void)pick_best(rows_of(16, {}), TIE_MARGIN); }, "no candidates"); }

// ---- TODO 2: make_table -----------------------------------------------------------

TEST(MakeTable, StretchesOfOneSplitCountBecomeOneEntry) {
  const std::vector<Choice> choices = {{{1, 4096, 4}, 32}, {{4, 4096, 4}, 16}, {{2, 4096, 4}, 16},
                                       {{8, 4096, 4}, 8},  {{64, 4096, 4}, 1}, {{16, 4096, 4}, 1},
                                       {{1, 32768, 4}, 64}};
  const engine::TunedTable t = make_table(choices, kQwen3, "test");
  const std::vector<engine::TunedEntry> want = {
      {1, 4096, 4, 32}, {4, 4096, 4, 16}, {8, 4096, 4, 8}, {64, 4096, 4, 1}, {1, 32768, 4, 64}};
  EXPECT_EQ(t.entries(), want) << t.to_json();
  EXPECT_EQ(t.shape().head_dim, 128);
}

TEST(MakeTable, GroupsAndContextsStayApart) {
  const std::vector<Choice> choices = {{{1, 4096, 4}, 16}, {{1, 4096, 8}, 16}, {{2, 4096, 8}, 8}, {{2, 4096, 4}, 16}};
  const engine::TunedTable t = make_table(choices, kQwen3, "");
  const std::vector<engine::TunedEntry> want = {{2, 4096, 4, 16}, {1, 4096, 8, 16}, {2, 4096, 8, 8}};
  EXPECT_EQ(t.entries(), want) << t.to_json();
}

// ---- the whole choice on a recorded run ----------------------------------------------

TEST(RecordedRun, TheTunersTableIsTheExpectedOne) {
  const std::vector<KeyRows> rows = read_rows(engine::json::read_file(kDir + "/recorded.json"), "recorded.json");
  ASSERT_EQ(rows.size(), 12u) << "9 decode batches at 4096 and 3 at 32768";
  for (const KeyRows& r : rows) {
    EXPECT_EQ(r.candidates.size(), candidate_splits().size()) << "batch " << r.key.batch << " ctx " << r.key.context;
    EXPECT_GT(r.default_splits, 0) << "every key has its plan/default row";
  }
  const engine::TunedTable got = make_table(choose_all(rows), kQwen3, "synthetic");
  const engine::TunedTable want = engine::TunedTable::load(kDir + "/expected_table.json");
  EXPECT_EQ(got.entries(), want.entries()) << "got:\n" << got.to_json() << "want:\n" << want.to_json();
}

TEST(RecordedRun, FailedAndForeignRowsAreLeftOut) {
  const std::string text = R"({"benchmarks": [
    {"name": "sweep/engine/batch:2/ctx:128/group:4/splits:1", "run_type": "iteration", "ms_median": 2.0, "num_splits": 1},
    {"name": "sweep/engine/batch:2/ctx:128/group:4/splits:2", "run_type": "iteration", "error_occurred": true,
     "error_message": "unsupported"},
    {"name": "sweep/engine/batch:2/ctx:128/group:4/splits:4", "run_type": "aggregate", "ms_median": 0.1, "num_splits": 4},
    {"name": "decode/engine/batch:2/ctx:128", "run_type": "iteration", "ms_median": 0.1},
    {"name": "plan/default/batch:2/ctx:128/group:4", "run_type": "iteration", "ms_median": 2.0, "num_splits": 1}]})";
  const std::vector<KeyRows> rows = read_rows(text, "inline");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key, (Key{2, 128, 4}));
  EXPECT_EQ(rows[0].default_splits, 1);
  ASSERT_EQ(rows[0].candidates.size(), 1u);
  EXPECT_EQ(rows[0].candidates[0].num_splits, 1);
}

TEST(RecordedRun, NamesRoundTrip) {
  EXPECT_EQ(sweep_name({64, 4096, 4}, 8), "sweep/engine/batch:64/ctx:4096/group:4/splits:8");
  EXPECT_EQ(plan_name({64, 4096, 4}, true), "plan/tuned/batch:64/ctx:4096/group:4");
}

// ---- every configuration the tuner can choose, against the oracle ----------------

engine::TunedTable one_entry(const Problem& p, int num_splits) {
  const int group = p.cfg.num_q_heads / p.cfg.num_kv_heads;
  return engine::TunedTable({p.cfg.num_kv_heads, p.cfg.head_dim, p.cfg.block_size, p.cfg.kv_format},
                            {{p.meta.num_requests(), p.meta.max_seq_len, group, num_splits}});
}

class EveryCandidate : public testing::TestWithParam<int> {};

// Group 4, head_dim 128, block 16 (Qwen3-8B's tile) on decodes up to 3072 keys:
// 192 blocks, which every candidate divides, so the plan runs each count as
// given; the short requests leave most splits empty (lse -inf, weight 0 in the merge).
TEST_P(EveryCandidate, MatchesTheOracle) {
  const int num_splits = GetParam();
  const Problem p = make_problem(test::config(8, 2, 128, 16), {{1, 3072}, {1, 130}, {1, 1}, {1, 33}},
                                 {.padding_rows = 1});
  DeviceBatch db(p);
  const engine::TunedTable table = one_entry(p, num_splits);
  const engine::Plan pl = engine::plan(db.params(), engine::bounds_of(db.params().batch), {.tuned = &table});
  EXPECT_TRUE(pl.tuned) << pl.describe();
  EXPECT_EQ(pl.num_splits, num_splits) << pl.describe();
  DeviceBuffer<unsigned char> ws(pl.workspace_bytes);
  engine::run(pl, db.params(), ws.data(), pl.workspace_bytes);
  test::expect_device_matches_oracle(p, db, "tuned " + pl.describe(), reference_attention(p));
  test::expect_padding_rows_exact_zero(p, db);
}

INSTANTIATE_TEST_SUITE_P(TunerCandidates, EveryCandidate, testing::ValuesIn(candidate_splits()),
                         [](const testing::TestParamInfo<int>& i) { return "Splits" + std::to_string(i.param); });

// ---- the engine's plan with and without a table ----------------------------------------

const std::string kTable = R"({
  "tuned_plan_version": 1,
  "device": "test",
  "shape": {"num_kv_heads": 8, "head_dim": 128, "block_size": 16, "kv_format": "bf16"},
  "entries": [
    {"max_batch": 1, "max_context": 4096, "group": 4, "num_splits": 32},
    {"max_batch": 4, "max_context": 4096, "group": 4, "num_splits": 6},
    {"max_batch": 64, "max_context": 4096, "group": 4, "num_splits": 2},
    {"max_batch": 4, "max_context": 32768, "group": 4, "num_splits": 24}
  ]
})";

engine::Plan plan_at(int batch, int context, const engine::TunedTable* table) {
  const AttentionParams p = test::decode_plan_sizes(batch, context);  // Qwen3-8B's heads, block 16
  return engine::plan(p, engine::bounds_of(p.batch), {.num_sms = 132, .tuned = table});
}

TEST(TunedPlan, TakesTheTablesEntry) {
  const engine::TunedTable t = engine::TunedTable::parse(kTable);
  EXPECT_EQ(plan_at(1, 4096, &t).num_splits, 32);
  EXPECT_EQ(plan_at(4, 4096, &t).num_splits, 6);
  EXPECT_EQ(plan_at(3, 4096, &t).num_splits, 6) << "batch 3 is served by the entry up to 4";
  EXPECT_EQ(plan_at(64, 4096, &t).num_splits, 2);
  EXPECT_EQ(plan_at(64, 4096, &t).path, engine::Path::splits);
  EXPECT_EQ(plan_at(2, 20000, &t).num_splits, 24) << "a context above 4096 falls to the 32768 entries";
  EXPECT_TRUE(plan_at(1, 4096, &t).tuned);
  EXPECT_NE(plan_at(1, 4096, &t).describe().find("tuned"), std::string::npos);
}

TEST(TunedPlan, WithoutATableTheBuiltInRule) {
  // Stage 04's rule at 132 SMs, 4 decode programs per SM.
  EXPECT_EQ(plan_at(1, 4096, nullptr).num_splits, 16) << "8 programs; 4096 / 256 = 16 splits";
  EXPECT_EQ(plan_at(64, 4096, nullptr).num_splits, 1) << "512 programs fill the GPU";
  EXPECT_EQ(plan_at(64, 4096, nullptr).path, engine::Path::whole_tiles);
  EXPECT_EQ(plan_at(4, 32768, nullptr).num_splits, 16);
  EXPECT_FALSE(plan_at(1, 4096, nullptr).tuned);
}

TEST(TunedPlan, OutsideTheTableTheBuiltInRule) {
  const engine::TunedTable t = engine::TunedTable::parse(kTable);
  for (const auto& [batch, context] : std::vector<std::pair<int, int>>{{128, 4096}, {8, 32768}, {1, 65536}}) {
    const engine::Plan tuned = plan_at(batch, context, &t), rule = plan_at(batch, context, nullptr);
    EXPECT_FALSE(tuned.tuned) << batch << " x " << context << ": no entry serves it";
    EXPECT_EQ(tuned.num_splits, rule.num_splits) << batch << " x " << context;
  }
  // Another group (8 q heads per kv head): no entry of the table.
  AttentionParams p = test::decode_plan_sizes(1, 4096);
  p.num_q_heads = 64;
  const engine::Plan g8 = engine::plan(p, engine::bounds_of(p.batch), {.num_sms = 132, .tuned = &t});
  EXPECT_FALSE(g8.tuned);
}

TEST(TunedPlan, EmptySplitsAtAShorterSpanAreDropped) {
  const engine::TunedTable t = engine::TunedTable::parse(kTable);
  // 300 keys = 19 blocks: 32 splits would leave 13 of them empty.
  const engine::Plan pl = plan_at(1, 300, &t);
  EXPECT_EQ(pl.num_splits, 19) << pl.describe();
  EXPECT_EQ(pl.keys_per_split, 16);
}

TEST(TunedPlan, RefusesATableOfAnotherShapeOrAForcedCount) {
  const engine::TunedTable t = engine::TunedTable::parse(kTable);
  AttentionParams p = test::decode_plan_sizes(1, 4096);
  p.kv.head_dim = 64;
  expect_error([&] { (void)engine::plan(p, engine::bounds_of(p.batch), {.tuned = &t}); }, "head_dim 128");
  p = test::decode_plan_sizes(1, 4096, 8, 32);
  expect_error([&] { (void)engine::plan(p, engine::bounds_of(p.batch), {.tuned = &t}); }, "block_size 16");
  p = test::decode_plan_sizes(1, 4096);
  p.kv.format = KvFormat::int8;
  expect_error([&] { (void)engine::plan(p, engine::bounds_of(p.batch), {.tuned = &t}); }, "bf16 cache");
  p = test::decode_plan_sizes(1, 4096);
  expect_error([&] { (void)engine::plan(p, engine::bounds_of(p.batch), {.num_splits = 4, .tuned = &t}); },
               "give one of them");
}

// A table line by line, with one line replaced.
std::string table_with(const std::string& from, const std::string& to) {
  std::string s = kTable;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(BadTable, MissingFields) {
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"(, "num_splits": 32)", "")); },
               "entries[0]: the field \"num_splits\" is missing");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("head_dim": 128, )", "")); },
               "shape: the field \"head_dim\" is missing");
  expect_error([] { (void)engine::TunedTable::parse(R"({"tuned_plan_version": 1, "shape": {"num_kv_heads": 8,
      "head_dim": 128, "block_size": 16, "kv_format": "bf16"}})"); },
               "the field \"entries\" is missing");
}

TEST(BadTable, UnknownFields) {
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("num_splits": 32)", R"("splits": 32)")); },
               "unknown field \"splits\"");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("device": "test")", R"("warps": 2)")); },
               "unknown field \"warps\"");
}

TEST(BadTable, SplitCountsOutsideOneTo64) {
  for (const char* bad : {"0", "-1", "65"})
    expect_error([&] { (void)engine::TunedTable::parse(table_with(R"("num_splits": 32)", std::string("\"num_splits\": ") + bad)); },
                 "is outside 1..64");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("num_splits": 32)", R"("num_splits": 2.5)")); },
               "must be an integer");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("max_batch": 1,)", R"("max_batch": 0,)")); },
               "must be positive");
}

TEST(BadTable, DuplicateKeysVersionsFormatsAndSyntax) {
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("max_batch": 4, "max_context": 4096)",
                                                               R"("max_batch": 1, "max_context": 4096)")); },
               "appears twice");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("tuned_plan_version": 1)", R"("tuned_plan_version": 2)")); },
               "tuned_plan_version 2");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("bf16")", R"("bf15")")); }, "kv_format \"bf15\"");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"("num_splits": 24}
  ])", R"("num_splits": 24},
  ])")); },
               "line 10");
  expect_error([] { (void)engine::TunedTable::parse(table_with(R"([
    {"max_batch": 1, "max_context": 4096, "group": 4, "num_splits": 32},
    {"max_batch": 4, "max_context": 4096, "group": 4, "num_splits": 6},
    {"max_batch": 64, "max_context": 4096, "group": 4, "num_splits": 2},
    {"max_batch": 4, "max_context": 32768, "group": 4, "num_splits": 24}
  ])", "[]")); },
               "no entries");
  expect_error([] { (void)engine::TunedTable::load(kDir + "/no_such_table.json"); }, "no_such_table.json");
}

TEST(TunedTableFile, RoundTrips) {
  const engine::TunedTable t = engine::TunedTable::parse(kTable);
  const engine::TunedTable again = engine::TunedTable::parse(t.to_json());
  EXPECT_EQ(again.entries(), t.entries());
  EXPECT_EQ(again.device(), "test");
  EXPECT_EQ(again.shape().num_kv_heads, 8);
}

}  // namespace
}  // namespace pa::exercise03
