// Stage 08: attention sinks, in two kinds.
//  (a) Learned sink logits (gpt-oss): one logit per query head joins every
//      softmax denominator and adds no value. It goes in exactly once per row,
//      whatever the path: whole-context tiles, split-KV (split 0's partial, also
//      when split 0 saw no key). The lse includes it.
//  (b) Sink tokens (StreamingLLM): with a window, the first sink_tokens
//      positions stay visible to every query; without a window they change nothing.
// Every case runs stage 08 on poisoned (NaN) outputs and checks out and lse
// against the fp64 oracle. A sink counted twice moves the lse by log 2 when the
// sink dominates (the +30 cases), and the output by half. Split counts are also
// checked against each other. The stage's cases live in tests/sink_cases.h:
// this stage runs its bf16 ones; the engine (tests/test_engine.cpp) runs all of
// them in every cache format, and the cascade with sinks.
#include "tests/sink_cases.h"
#include "tests/split_request_checks.h"

namespace pa::test {
namespace {

class Stage08 : public testing::TestWithParam<SinkCase> {};

TEST_P(Stage08, MatchesOracle) {
  const SinkCase& k = GetParam();
  const Problem p = build(k.c, k.sinks);
  DeviceBatch db(p);
  stage08::forward(db.params(), nullptr, k.num_splits);
  expect_device_matches_oracle(p, db, label_of(k), reference_attention(p));
  if (k.sinks == SinkValues::minus_inf) {
    expect_device_matches_oracle(p, db, label_of(k) + ": a -inf sink is no sink", oracle_without_sinks(p));
  }
  if (k.c.opt.padding_rows > 0) expect_padding_rows_exact_zero(p, db, label_of(k) + ": ");
}

INSTANTIATE_TEST_SUITE_P(Cases, Stage08, testing::ValuesIn(in_cache_format(sink_cases(), KvFormat::bf16)),
                         sink_case_name);

// ---- split counts: 1, 2 and many give the same answer -----------------------

// One batch of decodes run with 1, 2, 7 and 64 splits: each against the oracle,
// and each against the single split element by element.
class Stage08SplitCounts : public testing::TestWithParam<SinkCase> {};

TEST_P(Stage08SplitCounts, AgreeWithOneSplit) {
  const SinkCase& k = GetParam();
  const Problem p = build(k.c, k.sinks);
  DeviceBatch db(p);
  const OracleResult want = reference_attention(p);
  stage08::forward(db.params(), nullptr, 1);
  expect_device_matches_oracle(p, db, label_of(k) + " with 1 split", want);
  const std::vector<float> one_out = db.out_host(), one_lse = db.lse_host();
  for (const int n : {2, 7, 64}) {
    db.poison_outputs();
    stage08::forward(db.params(), nullptr, n);
    const std::string label = label_of(k) + " with " + std::to_string(n) + " splits";
    expect_device_matches_oracle(p, db, label, want);
    expect_same_as_backend(p, db.out_host(), db.lse_host(), one_out, one_lse, label + " against 1 split");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Stage08SplitCounts,
                         testing::ValuesIn(in_cache_format(split_count_cases(), KvFormat::bf16)), sink_case_name);

// ---- reruns ---------------------------------------------------------------------

TEST(Stage08Reruns, BitIdenticalSplitsWithSinksAndSinkTokens) {
  AttentionConfig cfg = windowed(8, 2, 64, 16, 16, 4);
  cfg.with_sinks = true;
  expect_bit_identical_reruns({"SinkTokens4_Window16", cfg, sink_token_decodes(16, 4)},
                              [](const Problem&, DeviceBatch& db) { stage08::forward(db.params(), nullptr, 3); });
}

// ---- errors -------------------------------------------------------------------------

TEST(Stage08Errors, RejectsNegativeSinkTokens) {
  const Problem p = build({"Decodes", windowed(8, 2, 64, 16, 16), ragged_decodes()}, SinkValues::randn);
  DeviceBatch db(p);
  AttentionParams params = db.params();
  params.sink_tokens = -1;
  expect_error([&] { stage08::forward(params); }, "sink_tokens");
  expect_error([&] { stage08::forward(params, nullptr, 3); }, "sink_tokens");
}

// What this stage leaves to the engine, refused with a message that says where it is.
TEST(Stage08Errors, RefusesEightBitCaches) {
  for (KvFormat f : {KvFormat::int8, KvFormat::fp8_e4m3}) {
    const Problem p = build({"Decodes", in_format(config(8, 2, 64, 16), f), ragged_decodes()}, SinkValues::randn);
    DeviceBatch db(p);
    expect_error([&] { stage08::forward(db.params()); }, "engine");
  }
}
TEST(Stage08Errors, RefusesBatchInvariantMode) {
  const Problem p = build({"Decodes", config(8, 2, 64, 16), ragged_decodes()}, SinkValues::randn);
  DeviceBatch db(p);
  db.set_batch_invariant(true);
  expect_error([&] { stage08::forward(db.params()); }, "batch-invariant");
}

// ---- split counts: the same check as stages 04, 05 and 06 -----------------------------

void stage08_splits(const AttentionParams& p, int num_splits) { stage08::forward(p, nullptr, num_splits); }

// Learned sinks, a window of 32 and 4 sink tokens: decodes at 130 and 70 see
// the sink tokens' block, then a gap, then the window.
AttentionConfig sinks_and_window() {
  AttentionConfig c = windowed(8, 2, 64, 16, 32, 4);
  c.with_sinks = true;
  return c;
}

TEST(Stage08SplitRequests, RefusesMinusOne) { expect_refuses_split_count(sinks_and_window(), stage08_splits, -1); }
TEST(Stage08SplitRequests, RefusesSixtyFive) { expect_refuses_split_count(sinks_and_window(), stage08_splits, 65); }
TEST(Stage08SplitRequests, ForcedSplitsRefusePrefill) {
  expect_forced_splits_refuse_prefill(sinks_and_window(), stage08_splits);
}
TEST(Stage08SplitRequests, LooseBoundsDecodesAutomatic) {
  expect_loose_bounds_decodes_match_oracle(sinks_and_window(), ragged_decodes(), stage08_splits, kAuto);
}
// Forced splits on decodes with sink tokens take the sink tokens' own split,
// whatever the bounds say.
TEST(Stage08SplitRequests, LooseBoundsDecodesThreeSplits) {
  expect_loose_bounds_decodes_match_oracle(sinks_and_window(), ragged_decodes(), stage08_splits, 3);
}
TEST(Stage08SplitRequests, LooseBoundsDecodesThreeSplitsWithoutSinkTokens) {
  AttentionConfig c = sinks_and_window();
  c.sink_tokens = 0;
  expect_loose_bounds_decodes_match_oracle(c, ragged_decodes(), stage08_splits, 3);
}

}  // namespace
}  // namespace pa::test
