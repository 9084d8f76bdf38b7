// Stage 06: sliding-window attention. A query at q_pos sees keys k_pos <= q_pos
// with q_pos - k_pos < window; the key loop starts at the window's first block,
// split-KV splits only the window. The fp64 oracle applies the same rule.
// bf16 caches: the engine (tests/test_engine.cpp) runs the same cases over 8-bit ones.
#include "tests/split_request_checks.h"
#include "tests/window_cases.h"

namespace pa::test {
namespace {

Forward run_stage06(int num_splits) {
  return [num_splits](const Problem&, DeviceBatch& db) { stage06::forward(db.params(), nullptr, num_splits); };
}

class Stage06 : public testing::TestWithParam<SplitCase> {};

TEST_P(Stage06, MatchesOracle) { expect_matches_oracle(GetParam().c, run_stage06(GetParam().num_splits)); }

// This stage's bf16 cases (tests/window_cases.h); the engine's tests run all of them, 8-bit ones too.
std::vector<SplitCase> bf16_window_cases() {
  std::vector<SplitCase> out;
  for (const SplitCase& s : window_cases()) {
    if (s.c.cfg.kv_format == KvFormat::bf16) out.push_back(s);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, Stage06, testing::ValuesIn(bf16_window_cases()), split_case_name);

void expect_exact_zero_padding(int num_splits) {
  const Problem p = make_problem(wconfig(8, 2, 64, 16, 9), {{0, 0}, {1, 40}, {0, 0}, {2, 9}},
                                 BuildOptions{.padding_rows = 3});
  DeviceBatch db(p);
  stage06::forward(db.params(), nullptr, num_splits);
  expect_padding_rows_exact_zero(p, db);
}
TEST(Stage06Padding, ExactZerosPrefillTile) { expect_exact_zero_padding(kAuto); }

TEST(Stage06Reruns, BitIdenticalWindowedSplits) {
  expect_bit_identical_reruns({"Window40", wconfig(8, 2, 128, 16, 40), ragged_decodes()}, run_stage06(3));
}

// The bytes a windowed decode must read: min(seq_len, window) keys per request.
// A 4096 window on 32768-token contexts is 1/8 of the whole contexts' bytes
// (here scaled down 16x: 256 of 2048).
TEST(Stage06Bytes, WindowedDecodeReadsOneEighth) {
  const Problem whole = make_problem(wconfig(8, 2, 64, 16, 0), decode_requests(4, 2048), {.fill_values = false});
  const Problem windowed = make_problem(wconfig(8, 2, 64, 16, 256), decode_requests(4, 2048), {.fill_values = false});
  EXPECT_EQ(windowed.kv_bytes_read() * 8, whole.kv_bytes_read());
  // A prompt of q_len queries needs the window of its oldest query too: q_len + window - 1 keys.
  const Problem prompt = make_problem(wconfig(8, 2, 64, 16, 100), {{50, 1000}}, {.fill_values = false});
  EXPECT_EQ(prompt.kv_bytes_read(), static_cast<size_t>(149) * prompt.kv_token_bytes());
}

// The split plan over the window: 1 x 32768 with a 4096 window on 132 SMs splits
// the window's 257 blocks (4096 + 15 keys), not the context's 2048.
TEST(Stage06Plan, SplitsOnlyTheWindow) {
  AttentionParams p = decode_plan_sizes(1, 32768);  // 8 KV heads, 32 query heads, block 16, head_dim 128
  p.window = 4096;
  const stage04::SplitPlan sp = stage06::plan(p, 132);
  EXPECT_GE(sp.num_splits * sp.blocks_per_split * 16, 4096 + 15) << "the splits must cover the window's span";
  EXPECT_LT((sp.num_splits - 1) * sp.blocks_per_split * 16, 4096 + 15) << "no split always empty";
  EXPECT_EQ(sp.num_splits, 16) << "4111 keys / 256 keys per split at least";
}

// What this stage leaves to the engine, refused with a message that says where it is.
TEST(Stage06Errors, RefusesEightBitCachesAndBatchInvariantMode) {
  for (KvFormat f : {KvFormat::int8, KvFormat::fp8_e4m3}) {
    const Problem p = make_problem(wconfig(8, 2, 64, 16, 20, f), ragged_decodes());
    DeviceBatch db(p);
    expect_error([&] { stage06::forward(db.params()); }, "engine");
  }
  const Problem p = make_problem(wconfig(8, 2, 64, 16, 20), ragged_decodes());
  DeviceBatch db(p);
  db.set_batch_invariant(true);
  expect_error([&] { stage06::forward(db.params()); }, "batch-invariant");
}

TEST(Stage06Errors, RejectsNegativeWindow) {
  const Problem p = make_problem(wconfig(8, 2, 64, 16, 0), ragged_decodes());
  DeviceBatch db(p);
  AttentionParams params = db.params();
  params.window = -3;
  expect_error([&] { stage06::forward(params); }, "negative");
}


// ---- split counts: the same check as stages 04, 05 and 08 -----------------------------

void stage06_splits(const AttentionParams& p, int num_splits) { stage06::forward(p, nullptr, num_splits); }

TEST(Stage06SplitRequests, RefusesMinusOne) { expect_refuses_split_count(wconfig(8, 2, 64, 16, 40), stage06_splits, -1); }
TEST(Stage06SplitRequests, RefusesSixtyFive) {
  expect_refuses_split_count(wconfig(8, 2, 64, 16, 40), stage06_splits, 65);
}
TEST(Stage06SplitRequests, ForcedSplitsRefusePrefill) {
  expect_forced_splits_refuse_prefill(wconfig(8, 2, 64, 16, 40), stage06_splits);
}
TEST(Stage06SplitRequests, LooseBoundsDecodesAutomatic) {
  expect_loose_bounds_decodes_match_oracle(wconfig(8, 2, 64, 16, 40), ragged_decodes(), stage06_splits, kAuto);
}
TEST(Stage06SplitRequests, LooseBoundsDecodesThreeSplits) {
  expect_loose_bounds_decodes_match_oracle(wconfig(8, 2, 64, 16, 40), ragged_decodes(), stage06_splits, 3);
}

}  // namespace
}  // namespace pa::test
