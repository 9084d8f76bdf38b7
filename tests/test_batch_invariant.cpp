// Batch-invariant mode (AttentionParams::batch_invariant,
// going_further/batch_invariant.cuh): a request's out and lse must be the same bits alone and inside any
// batch. Each test draws batches from a fixed seed, each holding a target
// request (a decode or a query block of several tokens) among other decodes,
// prefill chunks, empty requests and padding rows, with tight or loose host
// bounds; the target alone is the same request over the same cache (its own
// blocks), and both runs are compared with memcmp. The engine honours the mode
// for every format, window and sink; 01 and 02 are invariant as they stand;
// stages 03-08 refuse it, naming the engine, which composes it.
// Without the mode the same batches are also run, and the differences only
// printed: they are what the mode removes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/harness.h"

namespace pa::test {
namespace {

using StageForward = std::function<void(const Problem&, const AttentionParams&)>;

// The target's rows of out [q_len * Hq * D] and lse [q_len * Hq], as stored.
struct Rows {
  std::vector<bf16> out;
  std::vector<float> lse;
};

Rows rows_of(const Problem& p, const DeviceBatch& db, int t) {
  const std::vector<bf16> out = db.out.download();
  const std::vector<float> lse = db.lse.download();
  const size_t heads = p.cfg.num_q_heads, dims = p.cfg.head_dim;
  const size_t row0 = p.meta.query_start_loc[t], rows = p.meta.q_len(t);
  return {{out.begin() + row0 * heads * dims, out.begin() + (row0 + rows) * heads * dims},
          {lse.begin() + row0 * heads, lse.begin() + (row0 + rows) * heads}};
}

// Differing elements of out and lse between two runs; the largest |difference| of out.
struct Difference {
  size_t out_elems = 0, lse_elems = 0;
  double max_abs = 0.0;
  std::string first;  // the first differing element, for the failure message
  bool none() const { return out_elems == 0 && lse_elems == 0; }
};

Difference compare_bits(const Rows& a, const Rows& b, int heads, int dims) {
  Difference d;
  for (size_t i = 0; i < a.out.size(); ++i) {
    if (std::memcmp(&a.out[i], &b.out[i], sizeof(bf16)) == 0) continue;
    const double x = __bfloat162float(a.out[i]), y = __bfloat162float(b.out[i]);
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    if (d.out_elems++ == 0) {
      d.first = "out token " + std::to_string(i / (heads * dims)) + " head " + std::to_string(i / dims % heads) +
                " dim " + std::to_string(i % dims) + ": alone " + std::to_string(x) + ", in the batch " +
                std::to_string(y);
    }
  }
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (std::memcmp(&a.lse[i], &b.lse[i], sizeof(float)) == 0) continue;
    if (d.lse_elems++ == 0 && d.first.empty()) {
      d.first = "lse token " + std::to_string(i / heads) + " head " + std::to_string(i % heads) + ": alone " +
                std::to_string(a.lse[i]) + ", in the batch " + std::to_string(b.lse[i]);
    }
  }
  return d;
}

// What a test draws: the target, and the other requests' shapes.
struct Draw {
  RequestShape target;
  int others;                // 1..others requests beside it
  int max_context;           // the others' contexts: 1..max_context
  bool prefills;             // the others include prefill chunks and prompts (not for stage 04)
};

// A batch with the target at a random place, and whether the host bounds are loose.
struct Batch {
  std::vector<RequestShape> requests;
  int target;
  BuildOptions opt;
  bool loose_bounds;
};

Batch draw_batch(std::mt19937& gen, const Draw& d, uint64_t seed) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  Batch b;
  const int n = uniform(1, d.others);
  for (int i = 0; i < n; ++i) {
    const int kind = uniform(0, d.prefills ? 5 : 3);
    const int context = uniform(1, d.max_context);
    if (kind == 0) {
      b.requests.push_back({0, uniform(0, 1) ? 0 : context});  // no query this step
    } else if (kind <= 3) {
      b.requests.push_back({1, context});  // a decode
    } else {
      const int q_len = uniform(2, 48);
      b.requests.push_back({q_len, q_len + uniform(0, std::min(d.max_context, 600))});  // a chunk or a prompt
    }
  }
  b.target = uniform(0, n);
  b.requests.insert(b.requests.begin() + b.target, d.target);
  b.opt = BuildOptions{.seed = seed, .padding_rows = uniform(0, 3)};
  b.loose_bounds = uniform(0, 2) == 0;
  return b;
}

// The target's rows alone and in the batch, under batch_invariant = invariant.
Difference alone_vs_batch(const AttentionConfig& cfg, const Batch& b, const StageForward& forward, bool invariant) {
  Problem batch = make_problem(cfg, b.requests, b.opt);
  if (b.loose_bounds) {
    // Bounds a scheduler sized for its worst case: still bounds, no longer
    // tight, within what validation accepts (a table row, max_seq_len).
    const int row_keys = batch.meta.max_blocks_per_seq * cfg.block_size;
    batch.meta.max_seq_len = std::min(batch.meta.max_seq_len + 100, row_keys);
    batch.meta.max_query_len = std::min(batch.meta.max_query_len + 5, batch.meta.max_seq_len);
    batch.meta.decode_only = false;
  }
  const Problem single = alone(batch, b.target);
  DeviceBatch db_batch(batch), db_single(single);
  AttentionParams pb = db_batch.params(), ps = db_single.params();
  pb.batch_invariant = ps.batch_invariant = invariant;
  forward(batch, pb);
  forward(single, ps);
  return compare_bits(rows_of(single, db_single, 0), rows_of(batch, db_batch, b.target), cfg.num_q_heads,
                      cfg.head_dim);
}

std::string describe(const Batch& b) {
  std::string s = "batch {";
  for (size_t i = 0; i < b.requests.size(); ++i) {
    s += (i ? ", " : "") + std::string(static_cast<int>(i) == b.target ? "*" : "") + "(" +
         std::to_string(b.requests[i].q_len) + ", " + std::to_string(b.requests[i].seq_len) + ")";
  }
  return s + "} + " + std::to_string(b.opt.padding_rows) + " padding rows" + (b.loose_bounds ? ", loose bounds" : "") +
         " (* = the target)";
}

struct InvariantCase {
  std::string name;
  AttentionConfig cfg;
  StageForward forward;
  Draw draw;
  int num_batches;
  uint64_t seed;
};

void PrintTo(const InvariantCase& c, std::ostream* os) { *os << c.name << " (" << c.cfg.describe() << ")"; }

AttentionConfig with(AttentionConfig c, const std::function<void(AttentionConfig&)>& f) {
  f(c);
  return c;
}

const StageForward kStage01 = [](const Problem& p, const AttentionParams& a) {
  static stage01::Workspace ws;
  stage01::forward(a, p.meta, ws);
};
const StageForward kStage02 = [](const Problem&, const AttentionParams& a) { stage02::forward(a); };
// Sinks with the mode are composed by the engine (stage 08 runs sinks alone).
const StageForward kEngine = [](const Problem&, const AttentionParams& a) { engine::forward(a); };

// Contexts past 2048 keys (the mode's split) for some targets, and others past
// them, so that the batch changes the split count of the automatic plan.
std::vector<InvariantCase> cases() {
  const AttentionConfig small = config(8, 2, 64, 16);  // group 4
  const auto int8 = [](AttentionConfig& c) { c.kv_format = KvFormat::int8; };
  const auto fp8 = [](AttentionConfig& c) { c.kv_format = KvFormat::fp8_e4m3; };
  return {
      // bf16 decode batches (the cases of stage 04's split plan).
      {"Engine_Bf16_Decode", small, kEngine, {{1, 300}, 6, 600, false}, 10, 101},
      {"Engine_Bf16_DecodeTwoSplits", small, kEngine, {{1, 2500}, 3, 4500, false}, 4, 102},
      {"Engine_Bf16_Group3_Block1", config(6, 2, 64, 1), kEngine, {{1, 200}, 4, 400, false}, 4, 103},
      {"Engine_Bf16_Group8_D128", config(16, 2, 128, 16), kEngine, {{1, 150}, 4, 300, false}, 4, 104},
      {"Engine_Bf16_Group32", config(32, 1, 64, 16), kEngine, {{1, 150}, 4, 300, false}, 4, 105},  // the 128-row tile
      {"Engine_Bf16_D96", config(8, 2, 96, 16), kEngine, {{1, 2200}, 3, 2600, false}, 4, 106},  // padded tile rows
      // Any batch, any format (the cases of stage 05's formats).
      {"Engine_Bf16_DecodeAmongPrefills", small, kEngine, {{1, 250}, 5, 500, true}, 8, 111},
      {"Engine_Bf16_PrefillAmongDecodes", small, kEngine, {{12, 200}, 5, 500, true}, 8, 112},
      {"Engine_Bf16_VerifyBlock", small, kEngine, {{3, 90}, 5, 300, true}, 8, 113},
      {"Engine_Int8_Decode", with(small, int8), kEngine, {{1, 250}, 5, 500, true}, 8, 114},
      {"Engine_Int8_Prefill", with(small, int8), kEngine, {{20, 140}, 5, 400, true}, 8, 115},
      {"Engine_Fp8_Decode", with(small, fp8), kEngine, {{1, 2100}, 3, 3000, true}, 4, 116},
      {"Engine_Fp8_Prefill", with(small, fp8), kEngine, {{7, 100}, 5, 300, true}, 8, 117},
      {"Engine_Int8_D96_Decode", with(config(8, 2, 96, 16), int8), kEngine, {{1, 250}, 5, 500, true}, 4, 118},
      // Windows with the mode (stage 06's mask), which the engine composes.
      {"Engine_Window64_Decode", with(small, [](AttentionConfig& c) { c.window = 64; }), kEngine,
       {{1, 400}, 5, 600, true}, 8, 121},
      {"Engine_Window64_Prefill", with(small, [](AttentionConfig& c) { c.window = 64; }), kEngine,
       {{30, 300}, 5, 600, true}, 8, 122},
      {"Engine_Window2100_DecodeTwoSplits", with(small, [](AttentionConfig& c) { c.window = 2100; }), kEngine,
       {{1, 2600}, 3, 3000, false}, 4, 123},
      {"Engine_Window100_Int8", with(small, [&](AttentionConfig& c) { c.window = 100, int8(c); }), kEngine,
       {{1, 300}, 5, 500, true}, 8, 124},
      {"Engine_NoWindow", small, kEngine, {{1, 250}, 5, 500, true}, 4, 125},
      // Stage 08: learned sinks, sink tokens with a window, 8-bit.
      {"Engine_Sinks_Decode", with(small, [](AttentionConfig& c) { c.with_sinks = true; }), kEngine,
       {{1, 300}, 5, 600, true}, 8, 131},
      {"Engine_Sinks_Prefill", with(small, [](AttentionConfig& c) { c.with_sinks = true; }), kEngine,
       {{9, 120}, 5, 400, true}, 8, 132},
      {"Engine_SinkTokensWindow_Decode",
       with(small, [](AttentionConfig& c) { c.with_sinks = true, c.window = 64, c.sink_tokens = 4; }), kEngine,
       {{1, 400}, 5, 600, true}, 8, 133},
      {"Engine_SinkTokensWindow_Prefill",
       with(small, [](AttentionConfig& c) { c.window = 48, c.sink_tokens = 4; }), kEngine,
       {{24, 200}, 5, 400, true}, 8, 134},
      {"Engine_SinkTokensWindow_Fp8_DecodeTwoSplits",
       with(small, [&](AttentionConfig& c) { c.with_sinks = true, c.window = 2060, c.sink_tokens = 4, fp8(c); }),
       kEngine, {{1, 2500}, 2, 3000, false}, 4, 135},
      // Stages 01 and 02: invariant as they stand (each program computes its own request's rows).
      {"Stage01_AsItStands", small, kStage01, {{5, 60}, 4, 200, true}, 4, 141},
      {"Stage02_Decode_AsItStands", small, kStage02, {{1, 200}, 5, 400, true}, 4, 142},
      {"Stage02_Prefill_AsItStands", small, kStage02, {{10, 90}, 5, 300, true}, 4, 143},
  };
}

class BatchInvariant : public testing::TestWithParam<InvariantCase> {};

TEST_P(BatchInvariant, TargetBitsAloneEqualInBatch) {
  const InvariantCase& c = GetParam();
  std::mt19937 gen(static_cast<uint32_t>(c.seed));
  int differ_without = 0;
  double max_without = 0.0;
  for (int i = 0; i < c.num_batches; ++i) {
    const Batch b = draw_batch(gen, c.draw, c.seed * 100 + i);
    const Difference d = alone_vs_batch(c.cfg, b, c.forward, /*invariant=*/true);
    EXPECT_TRUE(d.none()) << c.name << ", " << describe(b) << ": with batch_invariant the target's "
                          << d.out_elems << " out and " << d.lse_elems
                          << " lse elements differ between alone and in the batch; first: " << d.first;
    const Difference w = alone_vs_batch(c.cfg, b, c.forward, /*invariant=*/false);
    differ_without += w.none() ? 0 : 1;
    max_without = std::max(max_without, w.max_abs);
  }
  // Information, not a rule: what the mode removes here.
  std::printf("[ info ] %s without batch_invariant: %d of %d batches change the target's bits (max |out diff| %.3g)\n",
              c.name.c_str(), differ_without, c.num_batches, max_without);
}

INSTANTIATE_TEST_SUITE_P(Stages, BatchInvariant, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<InvariantCase>& info) { return info.param.name; });

// The plans report the mode's splits: fixed in keys, whatever the batch.
TEST(BatchInvariantPlan, SplitsAreFixedInKeys) {
  const auto plan = [](const AttentionParams& p) {
    return engine::plan(p, engine::bounds_of(p.batch), engine::Options{.num_sms = 132});
  };
  for (const int requests : {1, 4, 64}) {
    AttentionParams p = decode_plan_sizes(requests, 4096);
    p.batch_invariant = true;
    const engine::Plan sp = plan(p);
    EXPECT_EQ(sp.num_splits, 2) << requests << " requests x 4096 keys";
    EXPECT_EQ(sp.keys_per_split, 2048);
    p.batch.max_seq_len = 32768;
    EXPECT_EQ(plan(p).num_splits, 16);
    p.batch.max_seq_len = 1 << 20;  // past MAX_SPLITS x 2048 keys: the mode has no such limit
    EXPECT_EQ(plan(p).num_splits, 512);
    p.window = 4096;
    EXPECT_EQ(plan(p).num_splits, 3) << "the window's span: 4096 + 15 keys";
  }
}

// A context longer than 64 splits of 2048 keys (stage 04's MAX_SPLITS) runs in
// this mode, and matches the oracle.
TEST(BatchInvariantPlan, MoreThanMaxSplitsOfTheAutomaticPlan) {
  // Block size 256 keeps the table short; the decode reads 64 x 2048 + 300 keys.
  const Problem p = make_problem(config(2, 1, 64, 256), {{1, 64 * 2048 + 300}, {1, 50}}, {.seed = 9});
  DeviceBatch db(p);
  AttentionParams a = db.params();
  a.batch_invariant = true;
  engine::forward(a);
  expect_device_matches_oracle(p, db, "engine, batch-invariant, 65 splits", reference_attention(p));
}

// A forced split count would cut the contexts by the batch again: refused.
TEST(BatchInvariantPlan, ForcedSplitCountsAreRefused) {
  const Problem p = make_problem(config(8, 2, 64, 16), ragged_decodes());
  DeviceBatch db(p);
  AttentionParams a = db.params();
  a.batch_invariant = true;
  const std::string why = "batch-invariant mode cuts every context into splits of 2048 keys";
  expect_error([&] { engine::forward(a, nullptr, engine::Options{.num_splits = 3}); }, why);
  a.window = 32;
  a.sink_tokens = 4;
  expect_error([&] { engine::forward(a, nullptr, engine::Options{.num_splits = 3}); }, why);
}

// Stage 03's tile follows the batch, and stage 07's prefix pass the group;
// stages 04-06, 08 and 09 teach their own idea and leave the mode to the engine.
TEST(BatchInvariantRefused, StagesNameTheEngine) {
  const Problem p = make_problem(config(8, 2, 64, 16), milestone_requests(), {.seed = 2});
  DeviceBatch db(p);
  AttentionParams a = db.params();
  a.batch_invariant = true;
  expect_error([&] { stage03::forward(a); }, "stage 03 has no batch-invariant mode");
  expect_error([&] { stage04::forward(a); }, "stage 04 has no batch-invariant mode of its own; the engine");
  expect_error([&] { stage06::forward(a); }, "stage 06 has no batch-invariant mode of its own; the engine");
  expect_error([&] { stage08::forward(a); }, "the engine");
  expect_error([&] { stage09::forward(a); }, "stage 09 has no batch-invariant mode; the engine");
  {
    AttentionConfig int8 = config(8, 2, 64, 16);
    int8.kv_format = KvFormat::int8;
    const Problem q = make_problem(int8, milestone_requests(), {.seed = 2});
    DeviceBatch dq(q);
    AttentionParams b = dq.params();
    b.batch_invariant = true;
    expect_error([&] { stage05::forward(b); }, "stage 05 has no batch-invariant mode of its own; the engine");
  }
  a.batch_invariant = false;
  const stage07::Cascade c = stage07::plan(a, p.meta, {}, -1);
  a.batch_invariant = true;
  expect_error([&] { stage07::plan(a, p.meta, {}, -1); }, "stage 07: cascade has no batch-invariant mode");
  expect_error([&] { stage07::forward(a, c); }, "stage 07: cascade has no batch-invariant mode");
  expect_error([&] { engine::run_cascade(c, a); }, "engine::run_cascade: a cascade has no batch-invariant mode");
}

// The mode's outputs are right, not only stable: mixed batches against the oracle.
TEST(BatchInvariantOracle, MixedBatchesMatchTheOracle) {
  const AttentionConfig small = config(8, 2, 64, 16);
  AttentionConfig sinks = small;
  sinks.with_sinks = true;
  sinks.window = 40;
  sinks.sink_tokens = 4;
  AttentionConfig int8 = small;
  int8.kv_format = KvFormat::int8;
  const std::vector<RequestShape> mixed = {{0, 0}, {1, 2300}, {17, 60}, {1, 1}, {3, 3}, {1, 130}};
  const std::vector<std::pair<std::string, StageForward>> stages = {
      {"engine", kEngine}};
  for (const AttentionConfig& cfg : {small, int8, sinks}) {
    const Problem p = make_problem(cfg, mixed, {.seed = 13, .padding_rows = 2});
    for (const auto& [name, forward] : stages) {
      if (cfg.with_sinks && name != "engine") continue;  // sinks with the mode: the engine's
      DeviceBatch db(p);
      AttentionParams a = db.params();
      a.batch_invariant = true;
      forward(p, a);
      expect_device_matches_oracle(p, db, name + ", batch-invariant", reference_attention(p));
      expect_padding_rows_exact_zero(p, db, name + ": ");
    }
  }
}

}  // namespace
}  // namespace pa::test
