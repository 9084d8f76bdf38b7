// The engine (engine/engine.h): every cache format x mask x sinks x path that
// the stages compose, behind one plan/run API.
//  - Against the fp64 oracle (8-bit caches: on the dequantized cache), for each
//    format on the stages' shared cases, with windows, sink tokens, learned
//    sinks, forced split counts and batch-invariant mode.
//  - The plan: bounds looser than the batch serve it; a step outside them, a
//    layer of another shape or a short workspace are refused before any launch.
//  - Stage 08's cases (tests/sink_cases.h) in every cache format, its split
//    counts against one split, and the cascade with sinks (the sink in each
//    row's own suffix partial only) against the oracle and the plain path.
//  - A CUDA graph: one decode step (the cache write and the attention) captured
//    once and replayed while every context grows inside the plan's bounds, each
//    replay against the oracle. On the CPU runtime the capture is its stream
//    emulation, which also refuses any allocation or synchronisation inside it.
#include <algorithm>
#include <climits>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/batch_ops.h"
#include "engine/engine.h"
#include "tests/cascade_cases.h"
#include "tests/harness.h"
#include "tests/sink_cases.h"
#include "tests/window_cases.h"

namespace pa::test {
namespace {

struct EngineCase {
  Case c;
  int num_splits = kAuto;
  bool batch_invariant = false;
  bool work_list = false;  // Options::work_list
  int num_sms = 0;         // Options::num_sms (0: the device's)
  engine::PrefillTiles prefill = engine::PrefillTiles::automatic;  // Options::prefill_tiles
  engine::PrefillCopies copies = engine::PrefillCopies::tma;        // Options::prefill_copies
  int chunk_programs = 0;  // Options::chunk_programs (0: the plan's count from the bounds)
};

std::string prefill_name(engine::PrefillTiles t, engine::PrefillCopies copies) {
  const std::string c = copies == engine::PrefillCopies::cp_async ? " (cp.async copies)" : "";
  return t == engine::PrefillTiles::hopper ? ", Hopper prefill tiles" + c
         : t == engine::PrefillTiles::mma_sync ? ", mma.sync prefill tiles"
                                               : c;
}

std::string engine_case_name(const testing::TestParamInfo<EngineCase>& info) { return info.param.c.name; }
void PrintTo(const EngineCase& k, std::ostream* os) {
  *os << k.c.name << " (" << k.c.cfg.describe() << ", num_splits " << k.num_splits
      << (k.batch_invariant ? ", batch-invariant" : "") << (k.work_list ? ", work list" : "")
      << (k.num_sms ? ", " + std::to_string(k.num_sms) + " SMs" : "") << prefill_name(k.prefill, k.copies) << ")";
}

AttentionConfig with(AttentionConfig c, KvFormat f, int window = 0, int sink_tokens = 0, bool sinks = false) {
  c.kv_format = f;
  c.window = window;
  c.sink_tokens = sink_tokens;
  c.with_sinks = sinks;
  return c;
}

const char* prefix(KvFormat f) { return f == KvFormat::bf16 ? "Bf16_" : f == KvFormat::int8 ? "Int8_" : "Fp8_"; }

std::vector<EngineCase> engine_cases() {
  std::vector<EngineCase> cases;
  for (KvFormat f : {KvFormat::bf16, KvFormat::int8, KvFormat::fp8_e4m3}) {
    const std::string n = prefix(f);
    // The cases every attention stage faces, on the engine's automatic plan.
    for (const Case& c : basic_cases()) cases.push_back({{n + c.name, with(c.cfg, f), c.requests, c.opt}});
    const AttentionConfig g4 = config(8, 2, 128, 16);
    // Decodes through the splits and the merge, and the whole decode tile.
    for (int s : {1, 3, 8}) {
      cases.push_back({{n + "Decodes_Group4_D128_Splits" + std::to_string(s), with(g4, f), ragged_decodes()}, s});
    }
    cases.push_back({{n + "Decodes_Group3_D64_Block1_Splits5", with(config(6, 2, 64, 1), f), ragged_decodes()}, 5});
    cases.push_back({{n + "Decodes_Group16_D96_Splits3", with(config(32, 2, 96, 16), f), ragged_decodes()}, 3});
    // Windows (stage 06), learned sinks and sink tokens (stage 08), on tiles and splits.
    cases.push_back({{n + "Window20_Milestone", with(g4, f, 20), milestone_requests()}});
    cases.push_back({{n + "Window40_Decodes_Splits3", with(g4, f, 40), ragged_decodes()}, 3});
    cases.push_back({{n + "Sinks_Milestone", with(g4, f, 0, 0, true), milestone_requests()}});
    cases.push_back({{n + "Sinks_Decodes_Splits3", with(g4, f, 0, 0, true), ragged_decodes()}, 3});
    cases.push_back({{n + "Sinks_SinkTokens4_Window16_Decodes_Splits3", with(config(8, 2, 64, 16), f, 16, 4, true),
                      {{1, 10}, {1, 16}, {1, 17}, {1, 31}, {1, 200}}},
                     3});
    cases.push_back({{n + "SinkTokens4_Window16_Decodes_Auto", with(config(8, 2, 64, 16), f, 16, 4),
                      {{1, 3}, {1, 20}, {1, 21}, {1, 300}}}});
    cases.push_back({{n + "Sinks_SinkTokens4_Window17_Prefill", with(config(8, 2, 64, 16), f, 17, 4, true),
                      {{5, 57}, {24, 107}, {37, 37}, {1, 20}, {0, 0}}}});
    cases.push_back({{n + "SinkTokens4_NoWindow_Milestone", with(g4, f, 0, 4), milestone_requests()}});
    // Chunks beside decodes with forced split counts (the mixed path), with a
    // window, learned sinks and sink tokens, and padding rows.
    cases.push_back({{n + "Mixed_Splits3", with(g4, f), random_mixed_requests(5, 8, 300),
                      BuildOptions{.seed = 5, .padding_rows = 2}},
                     3});
    cases.push_back({{n + "Mixed_Group16_D96_Splits5", with(config(32, 2, 96, 16), f),
                      {{1, 70}, {9, 200}, {1, 1}, {33, 33}, {1, 333}, {0, 12}}},
                     5});
    cases.push_back({{n + "Mixed_Sinks_SinkTokens4_Window16_Splits3", with(config(8, 2, 64, 16), f, 16, 4, true),
                      {{1, 10}, {7, 57}, {1, 17}, {24, 24}, {1, 300}}},
                     3});
    // The work list: each decode cut by its own length. A long context beside
    // short ones (many items against one), heads and group sizes of every
    // tile (the 128-row tile for groups above 16), block size 1, requests
    // without queries, padding rows; with one SM the item count, not the
    // minimum item length, bounds the cut.
    auto wl = [&](const std::string& name, AttentionConfig cfg, std::vector<RequestShape> req, int sms = 0,
                  int window = 0, bool sinks = false, int sink_tokens = 0) {
      EngineCase e{{n + "WorkList_" + name, with(cfg, f, window, sink_tokens, sinks), std::move(req),
                    BuildOptions{.seed = 9, .padding_rows = 2}}};
      e.work_list = true;
      e.num_sms = sms;
      cases.push_back(e);
    };
    wl("Ragged_LongBesideShort", g4, {{1, 70}, {1, 3000}, {1, 1}, {1, 33}, {1, 130}});
    wl("Group3_D64_Block1_Skewed", config(6, 2, 64, 1), {{1, 2500}, {1, 20}, {1, 21}, {0, 0}, {1, 1}, {1, 300}});
    wl("Group16_D96", config(32, 2, 96, 16), {{1, 700}, {1, 5000}, {1, 16}});
    wl("Group24_D128_PrefillTile", config(48, 2, 128, 16), {{1, 1200}, {1, 40}});
    wl("D256", config(8, 2, 256, 16), {{1, 1500}, {1, 1}, {1, 257}});
    wl("OneSm_ItemBound", g4, {{1, 3000}, {1, 900}, {1, 33}, {1, 2}}, 1);
    // More requests than a warp's lanes: the walk over the batch takes three
    // rounds of 32, and items land in each (a long context in the last one).
    std::vector<RequestShape> many;
    for (int i = 0; i < 70; ++i) many.push_back(i % 17 == 5 ? RequestShape{0, 0} : RequestShape{1, 1 + 37 * i % 401});
    many[66] = {1, 3500};
    wl("SeventyRequests_LongInTheThirdWarpRound", g4, many);
    // With a window, a context is cut over the keys its decode reads: from the
    // block that holds the window's first key (here not on a block boundary)
    // to its end; contexts shorter than the window read all of theirs.
    wl("Window100_Ragged", g4, {{1, 70}, {1, 3000}, {1, 1}, {1, 33}, {1, 130}}, 0, 100);
    wl("Window1000_OneSm_ManyItemsInTheWindow", g4, {{1, 5003}, {1, 900}, {1, 1030}, {0, 0}, {1, 2}}, 1, 1000);
    wl("Window77_Group3_D64_Block1", config(6, 2, 64, 1), {{1, 2500}, {1, 20}, {1, 78}, {1, 300}}, 0, 77);
    // Learned sinks: once a row, however many items its context was cut into
    // (the long context into many on one SM), with and without a window.
    wl("Sinks_OneSm_ManyItems", g4, {{1, 3000}, {1, 900}, {1, 33}, {0, 0}, {1, 2}}, 1, 0, true);
    wl("Sinks_Window200_Ragged", g4, {{1, 70}, {1, 3000}, {1, 1}, {1, 130}}, 0, 200, true);
    // Sink tokens: an item of their own after the window's, of the tokens the
    // window leaves out: none where the window reaches back to them (70, 1),
    // part of them where its first block holds some (block 16: 81 keys, window
    // 64 from key 17, its items from 16: 16 of the 20 sink tokens in the sink
    // item), all of them further on; with learned sinks too, and on one SM.
    wl("SinkTokens4_Window100_Ragged", g4, {{1, 70}, {1, 3000}, {1, 1}, {1, 33}, {1, 130}}, 0, 100, false, 4);
    wl("SinkTokens20_Window64_OneSm", g4, {{1, 81}, {1, 50}, {1, 3000}, {0, 0}, {1, 97}}, 1, 64, false, 20);
    wl("Sinks_SinkTokens4_Window200_Block1", config(6, 2, 64, 1), {{1, 2500}, {1, 20}, {1, 203}, {1, 300}}, 0, 200,
       true, 4);
    // Batch-invariant mode (stage 04, going further), also with sinks and sink tokens.
    cases.push_back({{n + "Invariant_Milestone", with(g4, f), milestone_requests()}, kAuto, true});
    cases.push_back({{n + "Invariant_Sinks_Window40_Mixed", with(g4, f, 40, 0, true), random_mixed_requests(3, 6, 150),
                      BuildOptions{.seed = 3, .padding_rows = 2}},
                     kAuto,
                     true});
    cases.push_back({{n + "Invariant_SinkTokens4_Window16_Decodes", with(config(8, 2, 64, 16), f, 16, 4, true),
                      {{1, 10}, {1, 17}, {1, 300}}},
                     kAuto,
                     true});
  }
  // Prefill tiles on both tiles whatever the device picks by default (the CPU
  // runtime runs stage 09's too): prompts, chunks beside decodes on the mixed
  // path (stage 09's programs skip the decodes, which the decode tile serves),
  // padded heads and head sizes, and a batch small enough for the decode tile;
  // stage 09's ring filled by its tensor copies and by cp.async, on pages of 1
  // to 256 slots (a tile of many boxes, of one, and inside one block).
  const AttentionConfig g4 = config(8, 2, 128, 16);
  using engine::PrefillCopies;
  using engine::PrefillTiles;
  for (const auto& [t, copies, n] : {std::tuple{PrefillTiles::hopper, PrefillCopies::tma, "Bf16_HopperPrefill_"},
                                     std::tuple{PrefillTiles::hopper, PrefillCopies::cp_async, "Bf16_HopperCpAsync_"},
                                     std::tuple{PrefillTiles::mma_sync, PrefillCopies::tma, "Bf16_MmaSyncPrefill_"}}) {
    auto add = [&](EngineCase e) {
      e.c.name = n + e.c.name;
      e.prefill = t;
      e.copies = copies;
      // Stage 09's own grid, one program per query tile (the chunk programs have cases of their own below).
      if (t == PrefillTiles::hopper) e.chunk_programs = engine::Options::one_program_per_tile;
      cases.push_back(std::move(e));
    };
    add({{"Milestone", g4, milestone_requests()}});
    add({{"Mixed_Splits3", g4, random_mixed_requests(5, 8, 300), BuildOptions{.seed = 5, .padding_rows = 2}}, 3});
    add({{"Mixed_Group16_D96_Splits5", config(32, 2, 96, 16), {{1, 70}, {9, 200}, {1, 1}, {33, 33}, {1, 333}, {0, 12}}},
         5});
    add({{"Mixed_Auto_Group6_D64_Block1", config(12, 2, 64, 1), {{1, 90}, {40, 160}, {1, 7}, {0, 0}, {65, 65}},
          BuildOptions{.seed = 11, .padding_rows = 1}}});
    add({{"Prompts_Group2_D256_Block64", config(4, 2, 256, 64), {{150, 300}, {129, 129}}}});
    add({{"Verify4_Group4_D128", g4, {{4, 50}, {1, 33}, {3, 3}}}});
    add({{"Prompts_Group4_D128_Block256", config(8, 2, 128, 256), {{300, 300}, {77, 600}, {0, 0}},
          BuildOptions{.seed = 13, .padding_rows = 1}}});
    add({{"Prompt_Group1_D80_Block32", config(2, 2, 80, 32), {{260, 260}, {5, 133}}}});
  }
  // The mixed path's chunks on a few programs of stage 09's tile per KV head, each running many query tiles through
  // one ring and one ring of turns (ragged tiles, tiles of one key tile,
  // decodes between the chunks, three consumers at head_dim 64, 64 keys a tile
  // at head_dim 256, programs left without a tile), and cp.async copies on the
  // same walk.
  auto chunks = [&](std::string name, EngineCase e, int programs, PrefillCopies copies = PrefillCopies::tma) {
    e.c.name = "Bf16_HopperChunks" + std::to_string(programs) + "_" + name +
               (copies == PrefillCopies::cp_async ? "_CpAsync" : "");
    e.prefill = PrefillTiles::hopper;
    e.copies = copies;
    e.chunk_programs = programs;
    e.num_sms = 64;  // room for the programs asked (the CPU runtime reports its cores)
    cases.push_back(std::move(e));
  };
  const EngineCase mixed{{"", g4, random_mixed_requests(5, 8, 300), BuildOptions{.seed = 5, .padding_rows = 2}}, 3};
  chunks("Mixed_Splits3", mixed, 1);
  chunks("Mixed_Splits3", mixed, 3);  // rounds of 3 in snake order
  {  // 68 requests: the walk reads them 32 a round. Chunks at 0, 31, 62 and 67, decodes between: program 0
     // of 2 seeks item 3 (request 62) from request 0, through a round that ends on a chunk it has passed.
    std::vector<RequestShape> many = {{20, 60}};
    for (int i = 0; i < 30; ++i) many.push_back({1, 50 + 3 * i});
    many.push_back({50, 100});
    for (int i = 0; i < 30; ++i) many.push_back({1, 30 + 5 * i});
    many.push_back({10, 40});
    for (int i = 0; i < 4; ++i) many.push_back({i == 1 ? 0 : 1, 20 + i});
    many.push_back({70, 70});
    chunks("Mixed_68Requests", {{"", g4, many, BuildOptions{.seed = 9, .padding_rows = 1}}}, 2);
  }
  chunks("Milestone", {{"", g4, milestone_requests()}}, 7);  // more programs than query tiles: most run none
  chunks("Mixed_Splits3", mixed, 2, PrefillCopies::cp_async);
  chunks("Mixed_Group16_D96",
         {{"", config(32, 2, 96, 16), {{1, 70}, {9, 200}, {1, 1}, {33, 33}, {1, 333}, {0, 12}}}}, 1);
  chunks("Mixed_Group6_D64_Block1",
         {{"", config(12, 2, 64, 1), {{1, 90}, {40, 160}, {1, 7}, {0, 0}, {65, 65}, {1, 20}, {30, 30}},
           BuildOptions{.seed = 11, .padding_rows = 1}}},
         2);
  chunks("Mixed_Group2_D256_Block64", {{"", config(4, 2, 256, 64), {{150, 300}, {1, 129}, {40, 80}, {1, 64}}}}, 1);
  {  // The count the plan chooses (Options::chunk_programs 0) on 64 SMs.
    EngineCase e{{"Bf16_HopperBalanced_Mixed_Splits3", g4, random_mixed_requests(5, 8, 300),
                  BuildOptions{.seed = 5, .padding_rows = 2}},
                 3};
    e.prefill = PrefillTiles::hopper;
    e.num_sms = 64;
    cases.push_back(std::move(e));
  }
  return cases;
}

class Engine : public testing::TestWithParam<EngineCase> {};

TEST_P(Engine, MatchesOracle) {
  const EngineCase& k = GetParam();
  const Problem p = make_problem(k.c.cfg, k.c.requests, k.c.opt);
  DeviceBatch db(p);
  db.set_batch_invariant(k.batch_invariant);
  engine::forward(db.params(), nullptr,
                  engine::Options{.num_splits = k.num_splits,
                                  .num_sms = k.num_sms,
                                  .work_list = k.work_list,
                                  .prefill_tiles = k.prefill,
                                  .prefill_copies = k.copies,
                                  .chunk_programs = k.chunk_programs});
  expect_device_matches_oracle(p, db, "case " + k.c.name, reference_attention(p));
  if (k.c.opt.padding_rows > 0) expect_padding_rows_exact_zero(p, db, "case " + k.c.name + ": ");
}

INSTANTIATE_TEST_SUITE_P(Cases, Engine, testing::ValuesIn(engine_cases()), engine_case_name);

// ---- windows in every format (stage 06's cases) ----------------------------------

class EngineWindows : public testing::TestWithParam<SplitCase> {};

TEST_P(EngineWindows, MatchesOracle) {
  const SplitCase& s = GetParam();
  expect_matches_oracle(s.c, [&](const Problem&, DeviceBatch& db) {
    engine::forward(db.params(), nullptr, engine::Options{.num_splits = s.num_splits});
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineWindows, testing::ValuesIn(window_cases()), split_case_name);

// ---- learned sinks and sink tokens in every format (stage 08's cases) --------------

class EngineSinks : public testing::TestWithParam<SinkCase> {};

TEST_P(EngineSinks, MatchesOracle) {
  const SinkCase& k = GetParam();
  const Problem p = build(k.c, k.sinks);
  DeviceBatch db(p);
  engine::forward(db.params(), nullptr, engine::Options{.num_splits = k.num_splits});
  expect_device_matches_oracle(p, db, label_of(k), reference_attention(p));
  if (k.sinks == SinkValues::minus_inf) {
    expect_device_matches_oracle(p, db, label_of(k) + ": a -inf sink is no sink", oracle_without_sinks(p));
  }
  if (k.c.opt.padding_rows > 0) expect_padding_rows_exact_zero(p, db, label_of(k) + ": ");
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineSinks, testing::ValuesIn(sink_cases()), sink_case_name);

// 1, 2, 7 and 64 splits of the same decodes: each against the oracle and against one split.
class EngineSinkSplitCounts : public testing::TestWithParam<SinkCase> {};

TEST_P(EngineSinkSplitCounts, AgreeWithOneSplit) {
  const SinkCase& k = GetParam();
  const Problem p = build(k.c, k.sinks);
  DeviceBatch db(p);
  const OracleResult want = reference_attention(p);
  engine::forward(db.params(), nullptr, engine::Options{.num_splits = 1});
  expect_device_matches_oracle(p, db, label_of(k) + " with 1 split", want);
  const std::vector<float> one_out = db.out_host(), one_lse = db.lse_host();
  for (const int n : {2, 7, 64}) {
    db.poison_outputs();
    engine::forward(db.params(), nullptr, engine::Options{.num_splits = n});
    const std::string label = label_of(k) + " with " + std::to_string(n) + " splits";
    expect_device_matches_oracle(p, db, label, want);
    expect_same_as_backend(p, db.out_host(), db.lse_host(), one_out, one_lse, label + " against 1 split");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineSinkSplitCounts, testing::ValuesIn(split_count_cases()), sink_case_name);

// ---- cascade with sinks: the sink joins each row's own partial, never the prefix's ---

class EngineCascade : public testing::TestWithParam<CascadeSinkCase> {};

TEST_P(EngineCascade, MatchesOracleAndPlainPath) {
  const CascadeSinkCase& k = GetParam();
  Problem p = build(k.c, k.sinks);
  const std::vector<PrefixGroup> groups = share_prefixes(p, k.groups);
  DeviceBatch db(p);
  const stage07::Cascade plan = engine::plan_cascade(db.params(), p.meta, groups, k.force);
  if (k.force == kCascade) {
    int with_queries = 0;
    for (const PrefixGroup& g : groups) {
      int queries = 0;
      for (const int r : g.members) queries += p.meta.q_len(r);
      with_queries += queries > 0;
    }
    ASSERT_EQ(plan.num_groups, with_queries) << "force 1 cascades every group that has queries";
  }
  const std::string label =
      "case " + k.c.name + " (sinks " + sink_name(k.sinks) + ", cascade force " + std::to_string(k.force) + ")";
  engine::run_cascade(plan, db.params());
  expect_device_matches_oracle(p, db, label, reference_attention(p));
  if (k.sinks == SinkValues::minus_inf) {
    expect_device_matches_oracle(p, db, label + ": a -inf sink is no sink", oracle_without_sinks(p));
  }
  if (k.c.opt.padding_rows > 0) expect_padding_rows_exact_zero(p, db, label + ": ");
  const std::vector<float> out = db.out_host(), lse = db.lse_host();

  db.poison_outputs();
  engine::forward(db.params());
  expect_same_as_backend(p, out, lse, db.out_host(), db.lse_host(), label + ": against the engine without groups");
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineCascade, testing::ValuesIn(cascade_cases()), cascade_case_name);

// Runs the engine's cascade plan on k's batch and checks it against the oracle
// (and its padding rows against exact zeros), then, where both plans were
// forced the same way, against stage 07's own passes (bf16) or stage 05's
// plain path (stage 07 runs bf16 caches only).
void expect_engine_cascade_matches(const CascadeCase& k, const Problem& p, DeviceBatch& db,
                                   const std::vector<PrefixGroup>& groups, const stage07::Cascade& plan,
                                   const std::string& label) {
  engine::run_cascade(plan, db.params());
  expect_device_matches_oracle(p, db, label, reference_attention(p));
  if (k.c.opt.padding_rows > 0) expect_padding_rows_exact_zero(p, db, label + ": ");
  if (k.force == kModel) return;  // the two models may choose differently
  const std::vector<float> out = db.out_host(), lse = db.lse_host();
  db.poison_outputs();
  if (p.cfg.kv_format == KvFormat::bf16) {
    stage07::forward(db.params(), stage07::plan(db.params(), p.meta, groups, k.force));
    expect_same_as_backend(p, out, lse, db.out_host(), db.lse_host(), label + ": against stage 07's own passes");
  } else {
    run_plain(p, db);
    expect_same_as_backend(p, out, lse, db.out_host(), db.lse_host(), label + ": against the plain path (stage 05)");
  }
}

// Stage 07's cases through the engine's cascade: stage 09's tile as the prefix
// pass where it serves (bf16 caches, on the CPU runtime or an sm_90 GPU), the
// two-warp suffix tile.
class EngineStage07Cases : public testing::TestWithParam<CascadeCase> {};

TEST_P(EngineStage07Cases, MatchesOracleAndStage07) {
  const CascadeCase& k = GetParam();
  Problem p = make_problem(k.c.cfg, k.c.requests, k.c.opt);
  const std::vector<PrefixGroup> groups = share_prefixes(p, k.groups);
  DeviceBatch db(p);
  const stage07::Cascade plan = engine::plan_cascade(db.params(), p.meta, groups, k.force);
  const bool hopper_serves = p.cfg.kv_format == KvFormat::bf16;
  EXPECT_EQ(plan.warpgroup_prefix, hopper_serves)
      << "the engine plans stage 09's tile for the prefix pass where it serves: bf16 caches, any head_dim";
  const std::string label = "case " + k.c.name + " (engine cascade, force " + std::to_string(k.force) +
                            (plan.warpgroup_prefix ? ", stage 09's prefix pass)" : ", stage 03's prefix tiles)");
  expect_engine_cascade_matches(k, p, db, groups, plan, label);
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineStage07Cases, testing::ValuesIn(stage07_cases()), stage07_case_name);

// Stage 09's tile as the prefix pass (PrefillTiles::hopper; on the CPU, the
// runtime's emulation of TMA, mbarriers and wgmma): stage 07's bf16 cases, and
// prefix splits that start inside a block of 256 keys, against the oracle and
// stage 07's own passes.
std::vector<CascadeCase> hopper_prefix_cases() {
  std::vector<CascadeCase> cases = stage07_bf16_cases();
  // One KV head and one query tile: with two or more "SMs" the prefix is split,
  // the second split from key 128 (D 128) or 384 (D 256), inside a block.
  cases.push_back({{"Prefix200_Block256_SplitInsideABlock_Group4_D128", config(4, 1, 128, 256),
                    decodes(3, 200, 60, 256)},
                   {{{0, 1, 2}, 200}},
                   kCascade});
  cases.push_back({{"LongPrefix700_Block256_SplitInsideABlock_PrefillChunks_Group4_D256", config(4, 1, 256, 256),
                    chunks(2, 700, 80, 9, 256)},
                   {{{0, 1}, 700}},
                   kCascade});
  return cases;
}

class EngineHopperPrefix : public testing::TestWithParam<CascadeCase> {};

TEST_P(EngineHopperPrefix, MatchesOracleAndStage07) {
  const CascadeCase& k = GetParam();
  Problem p = make_problem(k.c.cfg, k.c.requests, k.c.opt);
  const std::vector<PrefixGroup> groups = share_prefixes(p, k.groups);
  DeviceBatch db(p);
  const stage07::Cascade plan =
      engine::plan_cascade(db.params(), p.meta, groups, k.force, engine::PrefillTiles::hopper);
  ASSERT_TRUE(plan.warpgroup_prefix) << "PrefillTiles::hopper plans stage 09's tile for the prefix pass";
  if (plan.num_groups > 0) {
    ASSERT_EQ(plan.prefix_keys_per_split % 128, 0)
        << "stage 09's key ranges begin at whole 128-key tiles: the prefix splits are multiples of 128";
  }
  const std::string label = "case " + k.c.name + " (engine cascade, stage 09's prefix pass, " +
                            std::to_string(plan.num_prefix_splits) + " prefix split(s))";
  expect_engine_cascade_matches(k, p, db, groups, plan, label);
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineHopperPrefix, testing::ValuesIn(hopper_prefix_cases()), stage07_case_name);

TEST(EngineCascadeErrors, HopperPrefixRefusesEightBitCaches) {
  Problem p = make_problem(cfg_of(8, 2, 128, 16, KvFormat::int8), decodes(2, 32, 1), {});
  const std::vector<PrefixGroup> groups = share_prefixes(p, {{{0, 1}, 32}});
  DeviceBatch db(p);
  expect_error([&] { engine::plan_cascade(db.params(), p.meta, groups, kCascade, engine::PrefillTiles::hopper); },
               "bf16 caches");
}

TEST(EngineCascadeLimits, PrefixNearIntMaxIsSplitIn64Bits) {
  const IntMaxDecodes b;
  const int prefix_len = INT_MAX - 10;
  const stage07::Cascade c = engine::plan_cascade(b.params, b.meta, {b.group(prefix_len)}, kCascade);
  EXPECT_TRUE(c.warpgroup_prefix) << "bf16, head_dim 64: stage 09's prefix pass";
  expect_prefix_split_in_64_bits(c, b, prefix_len);
}

// A cascade has no window, so sink tokens there would be a request the plan
// never saw: refused, not ignored.
TEST(EngineCascadeErrors, RefusesSinkTokens) {
  Problem p = build({"Prefix32", config(8, 2, 64, 16), decodes(2, 32, 1)}, SinkValues::randn);
  const std::vector<PrefixGroup> groups = share_prefixes(p, {{{0, 1}, 32}});
  DeviceBatch db(p);
  const stage07::Cascade plan = engine::plan_cascade(db.params(), p.meta, groups, kCascade);
  AttentionParams params = db.params();
  params.sink_tokens = 4;
  expect_error([&] { engine::run_cascade(plan, params); }, "sink tokens");
}

// ---- the plan --------------------------------------------------------------------

engine::Plan plan_for(const DeviceBatch& db, engine::Bounds b, int num_splits = kAuto) {
  return engine::plan(db.params(), b, engine::Options{.num_splits = num_splits});
}

// One plan for bounds far above the batch (4x the context, queries up to 64)
// serves it: the grids are sized from the bounds, the kernels stop at each
// request's own lengths.
TEST(EnginePlan, LooseBoundsServeTheBatch) {
  for (KvFormat f : {KvFormat::bf16, KvFormat::int8}) {
    const Problem p = make_problem(with(config(8, 2, 64, 16), f, 0, 0, true), milestone_requests());
    DeviceBatch db(p);
    engine::Bounds b = engine::bounds_of(db.params().batch);
    b.max_query_len = 64;
    b.max_seq_len *= 4;
    const engine::Plan pl = plan_for(db, b);
    DeviceBuffer<unsigned char> ws(pl.workspace_bytes);
    engine::run(pl, db.params(), ws.data(), pl.workspace_bytes);
    expect_device_matches_oracle(p, db, std::string(prefix(f)) + "milestone under loose bounds", reference_attention(p));
  }
}

TEST(EnginePlan, DecodeBoundsSplitAndSizeTheWorkspace) {
  const Problem p = make_problem(config(8, 2, 128, 16), ragged_decodes());
  DeviceBatch db(p);
  const engine::Plan pl = plan_for(db, engine::bounds_of(db.params().batch), 5);
  EXPECT_EQ(pl.path, engine::Path::splits) << pl.describe();
  EXPECT_EQ(pl.num_splits, 5);
  // Partials: 5 splits x num_tokens rows x 8 heads x 128 dims, and one lse per (split, row, head).
  EXPECT_EQ(pl.part_lse_floats, size_t{5} * p.meta.num_tokens * 8);
  EXPECT_EQ(pl.part_o_floats, pl.part_lse_floats * 128);
  EXPECT_GE(pl.workspace_bytes, (pl.part_o_floats + pl.part_lse_floats) * sizeof(float));
  // A plan that needs no partials asks for no workspace, and runs with none:
  // decodes on a GPU of one SM get one split, the decode tile over each context.
  const engine::Plan whole = engine::plan(db.params(), engine::bounds_of(db.params().batch), {.num_sms = 1});
  EXPECT_EQ(whole.path, engine::Path::whole_tiles) << whole.describe();
  EXPECT_EQ(whole.workspace_bytes, 0u);
  engine::run(whole, db.params(), nullptr, 0);
  expect_device_matches_oracle(p, db, "decodes with no workspace", reference_attention(p));
}

// Chunks and decodes in one batch: the chunks on 128-row tiles, the decodes on
// the decode tile over splits, their partials by request (a chunk's tokens take
// no room), whatever the split count.
TEST(EnginePlan, MixedBoundsSplitTheDecodesOnly) {
  const Problem m = make_problem(config(8, 2, 128, 16), milestone_requests(), {.padding_rows = 3});
  DeviceBatch dm(m);
  for (int splits : {kAuto, 1, 4}) {
    const engine::Plan pl = plan_for(dm, engine::bounds_of(dm.params().batch), splits);
    EXPECT_EQ(pl.path, engine::Path::mixed) << pl.describe();
    if (splits != kAuto) EXPECT_EQ(pl.num_splits, splits) << pl.describe();
    // num_splits x 5 requests x 8 heads, however many tokens the chunks have.
    EXPECT_EQ(pl.part_lse_floats, size_t(pl.num_splits) * 5 * 8) << pl.describe();
    EXPECT_EQ(pl.part_o_floats, pl.part_lse_floats * 128);
    DeviceBuffer<unsigned char> ws(pl.workspace_bytes);
    engine::run(pl, dm.params(), ws.data(), pl.workspace_bytes);
    const std::string label = "milestone, " + pl.describe();
    expect_device_matches_oracle(m, dm, label, reference_attention(m));
    expect_padding_rows_exact_zero(m, dm, label + ": ");
  }
}

TEST(EnginePlan, RefusesWhatItWasNotMadeFor) {
  const Problem p = make_problem(config(8, 2, 64, 16), ragged_decodes());
  DeviceBatch db(p);
  const engine::Plan pl = plan_for(db, engine::bounds_of(db.params().batch), 3);
  DeviceBuffer<unsigned char> ws(pl.workspace_bytes);
  auto run_with = [&](AttentionParams q, size_t bytes) { engine::run(pl, q, ws.data(), bytes); };
  AttentionParams longer = db.params();
  longer.batch.max_seq_len += 1;
  expect_error([&] { run_with(longer, pl.workspace_bytes); }, "plan again for longer contexts");
  AttentionParams prefill = db.params();
  prefill.batch.max_query_len = 2;
  expect_error([&] { run_with(prefill, pl.workspace_bytes); }, "max_query_len 2 is outside the plan's bounds");
  AttentionParams windowed = db.params();
  windowed.window = 8;
  expect_error([&] { run_with(windowed, pl.workspace_bytes); }, "window is 8, the plan was made for 0");
  AttentionParams int8 = db.params();
  int8.kv.format = KvFormat::int8;
  expect_error([&] { run_with(int8, pl.workspace_bytes); }, "kv.format");
  expect_error([&] { run_with(db.params(), pl.workspace_bytes - 1); }, "needs a workspace of");
  AttentionParams more = db.params();
  more.batch.num_requests -= 1;
  expect_error([&] { run_with(more, pl.workspace_bytes); }, "batch.num_requests");
}

TEST(EnginePlan, RefusesBadOptionsAndBounds) {
  const Problem p = make_problem(config(8, 2, 64, 16), milestone_requests());
  DeviceBatch db(p);
  const engine::Bounds b = engine::bounds_of(db.params().batch);
  expect_error([&] { plan_for(db, b, 65); }, "num_splits 65 is outside");
  engine::Bounds bad = b;
  bad.max_seq_len = b.max_query_len - 1;
  expect_error([&] { plan_for(db, bad); }, "below max_query_len");
  AttentionParams zero_heads = db.params();
  zero_heads.kv.num_kv_heads = 0;
  expect_error([&] { engine::plan(zero_heads, b); }, "multiple of num_kv_heads");
  const Problem d = make_problem(config(8, 2, 64, 16), ragged_decodes());
  DeviceBatch dd(d);
  AttentionParams dinv = dd.params();
  dinv.batch_invariant = true;
  expect_error([&] { engine::plan(dinv, engine::bounds_of(dinv.batch), engine::Options{.num_splits = 2}); },
               "num_splits must be 0");
}

// Which tile runs prefill query tiles: stage 09's only where it serves the
// layer and a path runs such tiles, on an sm_90 GPU unless asked for (the CPU
// runtime runs it when asked); a request it cannot serve is refused.
TEST(EnginePlan, ChoosesThePrefillTile) {
  using engine::PrefillTiles;
  const Problem p = make_problem(config(8, 2, 128, 16), milestone_requests());
  DeviceBatch db(p);
  const engine::Bounds b = engine::bounds_of(db.params().batch);
  const engine::Plan hopper = engine::plan(db.params(), b, {.prefill_tiles = PrefillTiles::hopper});
  EXPECT_TRUE(hopper.hopper_prefill) << hopper.describe();
  EXPECT_NE(hopper.describe().find("Hopper prefill tiles"), std::string::npos) << hopper.describe();
  EXPECT_FALSE(engine::plan(db.params(), b, {.prefill_tiles = PrefillTiles::mma_sync}).hopper_prefill);
  int device = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
  EXPECT_EQ(engine::plan(db.params(), b).hopper_prefill, major == 9 && minor == 0)
      << "automatic: stage 09's tile exactly on an sm_90 device (the CPU runtime reports " << major << "." << minor
      << ")";
  // A decode batch runs no prefill tile, whatever was asked.
  const Problem d = make_problem(config(8, 2, 128, 16), ragged_decodes());
  DeviceBatch dd(d);
  EXPECT_FALSE(engine::plan(dd.params(), engine::bounds_of(dd.params().batch), {.prefill_tiles = PrefillTiles::hopper})
                   .hopper_prefill);
  // Layers stage 09 does not serve: automatic falls back, hopper is refused.
  const std::string refusal = "stage 09's prefill tile (PrefillTiles::hopper) serves bf16 caches with causal";
  AttentionParams windowed = db.params();
  windowed.window = 64;
  EXPECT_FALSE(engine::plan(windowed, b).hopper_prefill);
  expect_error([&] { engine::plan(windowed, b, {.prefill_tiles = PrefillTiles::hopper}); }, refusal);
  AttentionParams invariant = db.params();
  invariant.batch_invariant = true;
  expect_error([&] { engine::plan(invariant, b, {.prefill_tiles = PrefillTiles::hopper}); }, refusal);
  AttentionConfig int8 = config(8, 2, 128, 16);
  int8.kv_format = KvFormat::int8;
  const Problem q = make_problem(int8, milestone_requests());
  DeviceBatch dq(q);
  EXPECT_FALSE(engine::plan(dq.params(), b).hopper_prefill);
  expect_error([&] { engine::plan(dq.params(), b, {.prefill_tiles = PrefillTiles::hopper}); }, refusal);
}

// The mixed path runs its chunks on a few programs of stage 09's tile per KV
// head: as many as asked, or, left to the plan, the share of the SMs at which
// the chunks and the decodes finish together; one program per query tile when
// asked, or when the bounds hold no decode. Counts a device cannot hold at
// once, ones below -1, or ones beside stage 03's tile are refused.
TEST(EnginePlan, RunsTheMixedChunksOnAFewProgramsPerKvHead) {
  using engine::PrefillTiles;
  const Problem p = make_problem(config(8, 2, 128, 16), milestone_requests());
  DeviceBatch db(p);
  const engine::Bounds b = engine::bounds_of(db.params().batch);
  const engine::Plan grid = engine::plan(
      db.params(), b,
      {.num_sms = 40, .prefill_tiles = PrefillTiles::hopper, .chunk_programs = engine::Options::one_program_per_tile});
  ASSERT_EQ(grid.path, engine::Path::mixed) << grid.describe();
  EXPECT_EQ(grid.chunk_programs, 0) << grid.describe();
  const engine::Plan asked =
      engine::plan(db.params(), b, {.num_sms = 40, .prefill_tiles = PrefillTiles::hopper, .chunk_programs = 20});
  EXPECT_EQ(asked.chunk_programs, 20) << "20 x 2 KV heads fill 40 SMs: " << asked.describe();
  EXPECT_NE(asked.describe().find("20 chunk programs per KV head"), std::string::npos) << asked.describe();
  EXPECT_EQ(engine::plan(db.params(), b, {.num_sms = 40, .chunk_programs = 3}).chunk_programs,
            engine::plan(db.params(), b, {.num_sms = 40}).hopper_prefill ? 3 : 0)
      << "automatic tiles: the count applies where stage 09's tile runs the chunks";
  const Problem d = make_problem(config(8, 2, 128, 16), ragged_decodes());
  DeviceBatch dd(d);
  EXPECT_EQ(engine::plan(dd.params(), engine::bounds_of(dd.params().batch),
                         {.num_sms = 40, .prefill_tiles = PrefillTiles::hopper, .chunk_programs = 3})
                .chunk_programs,
            0)
      << "a decode batch has no chunks";
  expect_error([&] { engine::plan(db.params(), b, {.prefill_tiles = PrefillTiles::hopper, .chunk_programs = -2}); },
               "chunk_programs -2 is below -1");
  expect_error(
      [&] {
        engine::plan(db.params(), b, {.num_sms = 8, .prefill_tiles = PrefillTiles::hopper, .chunk_programs = 5});
      },
      "chunk_programs 5 x 2 KV heads is more programs than the device's 8 SMs");
  expect_error(
      [&] {
        engine::plan(db.params(), b, {.num_sms = 40, .prefill_tiles = PrefillTiles::mma_sync, .chunk_programs = 2});
      },
      "prefill_tiles = mma_sync runs no stage 09 tile");
}

// Left to the plan (Options::chunk_programs 0), the count follows the share of
// the step that is tensor-core work. Qwen3-8B's shape (group 4, 8 KV heads) on
// 132 SMs: the chunks' rows x 4 / the decodes / 88 is their work over the
// decodes' (r), and they get r / (1 + r) of the SMs. Only the bounds count:
// the plan is made once for them and replayed as the contexts grow.
TEST(EnginePlan, BalancesTheChunkProgramsAgainstTheDecodes) {
  using engine::PrefillTiles;
  const Problem p = make_problem(config(32, 8, 128, 16), {{8, 40}, {1, 20}});
  DeviceBatch db(p);
  auto count = [&](engine::Bounds b, int sms = 132) {
    return engine::plan(db.params(), b, {.num_sms = sms, .prefill_tiles = PrefillTiles::hopper}).chunk_programs;
  };
  // bench_attention's mixed batch: 2 chunks of 512 rows + 30 decodes. r = 1024 x 4 / 30 / 88 = 1.55, so
  // 0.61 of 132 SMs: 10 per KV head, the sweep's fastest on the H100.
  EXPECT_EQ(count({.num_requests = 32, .num_tokens = 1054, .max_query_len = 512, .max_seq_len = 4736}), 10);
  // One chunk beside 62 decodes: r = 0.375, 0.27 of the SMs, 4.5 -> 5 per KV head.
  EXPECT_EQ(count({.num_requests = 63, .num_tokens = 574, .max_query_len = 512, .max_seq_len = 4096}), 5);
  // Four chunks beside 12 decodes: r = 7.8, 0.89 of the SMs: 15 per KV head (at most 16: 16 x 8 of 132 SMs).
  EXPECT_EQ(count({.num_requests = 16, .num_tokens = 2060, .max_query_len = 512, .max_seq_len = 4096}), 15);
  // Padding rows count as chunk rows (the bounds cannot tell them apart): 2 x 512 rows + 30 decodes + 200
  // padding rows read as 3 chunks beside 29 decodes.
  EXPECT_EQ(count({.num_requests = 32, .num_tokens = 1254, .max_query_len = 512, .max_seq_len = 4736}), 11);
  // 8 chunks beside one decode: never more programs than the SMs hold.
  EXPECT_EQ(count({.num_requests = 9, .num_tokens = 4097, .max_query_len = 512, .max_seq_len = 4096}), 16);
  // A device of fewer SMs than KV heads, and bounds with no decode: one program per query tile.
  EXPECT_EQ(count({.num_requests = 32, .num_tokens = 1054, .max_query_len = 512, .max_seq_len = 4736}, 6), 0);
  EXPECT_EQ(count({.num_requests = 2, .num_tokens = 1024, .max_query_len = 512, .max_seq_len = 4096}), 0);
  // Many decodes beside a short chunk: at least one program per KV head.
  EXPECT_EQ(count({.num_requests = 257, .num_tokens = 272, .max_query_len = 16, .max_seq_len = 4096}), 1);
}

// Options::prefill_copies fills stage 09's ring where a plan runs it; asked
// beside stage 03's tile (which has no ring) it is refused.
TEST(EnginePlan, FillsStage09sRingByCpAsyncWhenAsked) {
  using engine::PrefillCopies;
  using engine::PrefillTiles;
  const Problem p = make_problem(config(8, 2, 128, 16), milestone_requests());
  DeviceBatch db(p);
  const engine::Bounds b = engine::bounds_of(db.params().batch);
  const engine::Plan tma = engine::plan(db.params(), b, {.prefill_tiles = PrefillTiles::hopper});
  EXPECT_FALSE(tma.cp_async_copies) << tma.describe();
  const engine::Plan cp =
      engine::plan(db.params(), b, {.prefill_tiles = PrefillTiles::hopper, .prefill_copies = PrefillCopies::cp_async});
  EXPECT_TRUE(cp.hopper_prefill && cp.cp_async_copies) << cp.describe();
  EXPECT_NE(cp.describe().find("cp.async copies"), std::string::npos) << cp.describe();
  expect_error(
      [&] {
        engine::plan(db.params(), b, {.prefill_tiles = PrefillTiles::mma_sync, .prefill_copies = PrefillCopies::cp_async});
      },
      "prefill_tiles = mma_sync runs no stage 09 tile");
  // A decode batch runs no prefill tile: nothing to fill.
  const Problem d = make_problem(config(8, 2, 128, 16), ragged_decodes());
  DeviceBatch dd(d);
  EXPECT_FALSE(engine::plan(dd.params(), engine::bounds_of(dd.params().batch),
                            {.prefill_tiles = PrefillTiles::hopper, .prefill_copies = PrefillCopies::cp_async})
                   .cp_async_copies);
}

// The work list's grid is sized from the bounds alone: at most T + R items per
// KV head (T = the items a wave holds), partials by item; and it serves only
// what it is made for.
TEST(EnginePlan, WorkListSizesItsGridFromTheBounds) {
  const Problem p = make_problem(config(8, 2, 128, 16), ragged_decodes());
  DeviceBatch db(p);
  const engine::Bounds b = engine::bounds_of(db.params().batch);
  const engine::Plan pl = engine::plan(db.params(), b, {.num_sms = 10, .work_list = true});
  EXPECT_EQ(pl.path, engine::Path::work_list) << pl.describe();
  EXPECT_EQ(pl.items_per_wave, 4 * 10 / 2) << "4 decode programs an SM, 10 SMs, 2 KV heads";
  EXPECT_EQ(pl.num_splits, pl.items_per_wave + 4) << pl.describe();
  EXPECT_EQ(pl.part_lse_floats, size_t(pl.num_splits) * 8);
  EXPECT_EQ(pl.part_o_floats, pl.part_lse_floats * 128);
  const engine::Options wl{.work_list = true};
  const Problem m = make_problem(config(8, 2, 64, 16), milestone_requests());
  DeviceBatch dm(m);
  expect_error([&] { engine::plan(dm.params(), engine::bounds_of(dm.params().batch), wl); },
               "the work list serves decode batches (every q_len <= 1)");
  AttentionParams windowed = db.params();
  windowed.window = 64;
  EXPECT_EQ(engine::plan(windowed, b, wl).path, engine::Path::work_list) << "a window is cut like a context";
  windowed.sink_tokens = 4;
  const engine::Plan with_sink_tokens = engine::plan(windowed, b, {.num_sms = 10, .work_list = true});
  EXPECT_EQ(with_sink_tokens.path, engine::Path::work_list) << "sink tokens are one more item a request";
  EXPECT_EQ(with_sink_tokens.num_splits, with_sink_tokens.items_per_wave + 2 * 4) << with_sink_tokens.describe();
  AttentionParams invariant = db.params();
  invariant.batch_invariant = true;
  expect_error([&] { engine::plan(invariant, b, wl); }, "outside batch-invariant mode");
  expect_error([&] { engine::plan(db.params(), b, {.num_splits = 3, .work_list = true}); }, "num_splits must be 0");
}

// ---- a decode step in a CUDA graph -----------------------------------------------

// `full` with every request's context cut to lens[r] (its q_len queries at the
// last q_len positions of lens[r]): the same queries, new K/V and tables; the
// cache as the device holds it after the previous steps wrote their tokens.
Problem at_lengths(const Problem& full, const std::vector<int>& lens) {
  Problem p = full;
  BatchMeta& m = p.meta;
  const int bs = p.cfg.block_size;
  m.max_seq_len = 0;
  for (int r = 0; r < m.num_requests(); ++r) {
    m.seq_lens[r] = lens[r];
    m.max_seq_len = std::max(m.max_seq_len, lens[r]);
    const int q_len = m.query_start_loc[r + 1] - m.query_start_loc[r];
    for (int i = 0; i < q_len; ++i) {
      const int pos = lens[r] - q_len + i;
      m.slot_mapping[m.query_start_loc[r] + i] = m.block_id(r, pos, bs) * bs + pos % bs;
    }
  }
  return p;
}

// What the step's cache write leaves in the host copy: row t's new K/V at its slot.
void write_new_tokens(Problem& p) {
  const size_t row = static_cast<size_t>(p.cfg.num_kv_heads) * p.cfg.head_dim;
  for (int t = 0; t < p.meta.num_tokens; ++t) {
    const int slot = p.meta.slot_mapping[t];
    if (slot < 0) continue;
    std::copy_n(p.k_new.begin() + t * row, row, p.k_cache.begin() + slot * row);
    std::copy_n(p.v_new.begin() + t * row, row, p.v_cache.begin() + slot * row);
  }
}

// q_lens: each request's queries per step (1: a decode; more: a prefill chunk,
// which makes the plan's bounds those of a mixed batch).
// chunk_programs > 0: the chunks on that many programs of stage 09's tile per
// KV head (Options::chunk_programs; on the CPU runtime, which emulates the tile).
void expect_graph_replays_match(const AttentionConfig& cfg, int num_splits,
                                const std::vector<int>& q_lens = {1, 1, 1, 1}, bool work_list = false,
                                int chunk_programs = 0) {
  // The last step's lengths; the earlier steps are shorter by `back` positions,
  // crossing block boundaries (16) and split boundaries on the way.
  // (The work list's items are >= 256 keys: longer contexts, so that they cut into several.)
  const std::vector<int> final_lens = work_list ? std::vector<int>{1300, 70, 530, 33} : std::vector<int>{300, 70, 130, 33};
  const std::vector<int> back = {30, 17, 16, 1, 0};
  std::vector<RequestShape> shapes;
  for (size_t r = 0; r < final_lens.size(); ++r) shapes.push_back({q_lens[r], final_lens[r]});
  const Problem full = make_problem(cfg, shapes, BuildOptions{.seed = 21, .padding_rows = 2});
  DeviceBatch db(full);
  db.set_checked(false);  // a checked launch synchronises: it cannot be captured
  const AttentionParams params = db.params();
  const engine::Plan pl = engine::plan(
      params, engine::bounds_of(params.batch),
      engine::Options{.num_splits = num_splits,
                      .num_sms = chunk_programs > 0 ? 64 : 0,
                      .work_list = work_list,
                      .prefill_tiles = chunk_programs > 0 ? engine::PrefillTiles::hopper : engine::PrefillTiles::automatic,
                      .chunk_programs = chunk_programs});
  if (chunk_programs > 0) ASSERT_EQ(pl.chunk_programs, chunk_programs) << pl.describe();
  DeviceBuffer<unsigned char> ws(pl.workspace_bytes);
  cudaStream_t stream;
  PA_CHECK(cudaStreamCreate(&stream));

  // The step: write this step's K/V through slot_mapping, then attention. The
  // device metadata it reads (seq_lens, slot_mapping) changes between replays.
  auto step = [&] {
    write_kv(params.kv, db.k_new.data(), db.v_new.data(), db.slot_mapping.data(), params.batch.num_tokens, stream);
    engine::run(pl, params, ws.data(), pl.workspace_bytes, stream);
  };
  // One run outside the capture first, as a serving engine warms up: on a GPU
  // it makes the kernels' one-time shared-memory opt-ins.
  engine::run(pl, params, ws.data(), pl.workspace_bytes, stream);
  PA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  PA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  step();
  PA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  PA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  Problem host = full;  // the cache as the device holds it
  for (int b : back) {
    std::vector<int> lens;
    for (int len : final_lens) lens.push_back(len - b);
    Problem now = at_lengths(host, lens);
    db.seq_lens.upload(now.meta.seq_lens);
    db.slot_mapping.upload(now.meta.slot_mapping);
    db.poison_outputs();
    PA_CHECK(cudaGraphLaunch(exec, stream));
    PA_CHECK(cudaStreamSynchronize(stream));
    expect_device_matches_oracle(now, db, "graph replay at contexts " + std::to_string(lens[0]) + ", " +
                                              std::to_string(lens[1]) + ", ... (" + pl.describe() + ")",
                                 reference_attention(now));
    expect_padding_rows_exact_zero(now, db, "graph replay: ");
    write_new_tokens(now);
    host.k_cache = now.k_cache;
    host.v_cache = now.v_cache;
  }
  PA_CHECK(cudaGraphExecDestroy(exec));
  PA_CHECK(cudaGraphDestroy(graph));
  PA_CHECK(cudaStreamDestroy(stream));
}

// A cascade decode step captured once and replayed: everything it needs (the
// gathered rows, the prefix and suffix partials, the second stream of a suffix
// pass that runs beside the prefix pass) is the plan's, so the capture sees
// launches, events and nothing else (the CPU emulation refuses an allocation
// or a synchronisation in it, and a forked stream that is never joined back).
void expect_cascade_graph_replays_match(int members, int prefix_len, int suffix_len, bool beside) {
  Problem p = make_problem(config(8, 2, 64, 16), shared_prefix_decodes(members, prefix_len, suffix_len, 16),
                           BuildOptions{.seed = 23, .padding_rows = 2});
  std::vector<int> all(members);
  for (int r = 0; r < members; ++r) all[r] = r;
  const std::vector<PrefixGroup> groups = share_prefixes(p, {{all, prefix_len}});
  DeviceBatch db(p);
  db.set_checked(false);
  const AttentionParams params = db.params();
  const stage07::Cascade plan = engine::plan_cascade(params, p.meta, groups, kCascade);
  ASSERT_TRUE(plan.warpgroup_prefix) << "bf16, head_dim 64: the engine's prefix pass on stage 09's tile";
  ASSERT_EQ(plan.side != nullptr, beside)
      << members << " decodes, suffix " << suffix_len << ": the suffix pass " << (beside ? "beside" : "after")
      << " the prefix pass (" << plan.suffix_splits << " suffix splits, " << plan.num_prefix_splits
      << " prefix splits, " << plan.num_sms << " SMs)";
  cudaStream_t stream;
  PA_CHECK(cudaStreamCreate(&stream));
  engine::run_cascade(plan, params, stream);  // the kernels' one-time opt-ins, outside the capture
  PA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  PA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  engine::run_cascade(plan, params, stream);
  PA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  PA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const OracleResult want = reference_attention(p);
  for (int replay = 0; replay < 2; ++replay) {
    db.poison_outputs();
    PA_CHECK(cudaGraphLaunch(exec, stream));
    PA_CHECK(cudaStreamSynchronize(stream));
    const std::string label = "cascade graph replay " + std::to_string(replay) + (beside ? " (suffix beside" : " (suffix after") + " the prefix pass)";
    expect_device_matches_oracle(p, db, label, want);
    expect_padding_rows_exact_zero(p, db, label + ": ");
  }
  PA_CHECK(cudaGraphExecDestroy(exec));
  PA_CHECK(cudaGraphDestroy(graph));
  PA_CHECK(cudaStreamDestroy(stream));
}

// Few programs, a short suffix: the suffix pass follows the prefix pass and merges in its epilogue.
TEST(EngineGraph, CascadeStepReplays_SuffixAfterPrefix) { expect_cascade_graph_replays_match(2, 64, 5, false); }
// A long suffix splits (on any SM count): the suffix pass runs on the plan's second stream.
TEST(EngineGraph, CascadeStepReplays_SuffixBesidePrefix) { expect_cascade_graph_replays_match(2, 64, 1000, true); }

TEST(EngineGraph, DecodeStepReplaysAsContextsGrow_Splits3) { expect_graph_replays_match(config(8, 2, 128, 16), 3); }
TEST(EngineGraph, DecodeStepReplaysAsContextsGrow_Auto) { expect_graph_replays_match(config(32, 8, 128, 16), kAuto); }
// A chunk beside the decodes: the mixed path's dependent launch and merge in the graph.
// The work list's cut follows the lengths the device holds at each replay.
TEST(EngineGraph, DecodeStepReplaysAsContextsGrow_WorkList) {
  expect_graph_replays_match(config(8, 2, 128, 16), kAuto, {1, 1, 1, 1}, true);
}
TEST(EngineGraph, MixedStepReplaysAsContextsGrow_Splits3) {
  expect_graph_replays_match(config(8, 2, 128, 16), 3, {1, 9, 1, 2});
}
TEST(EngineGraph, MixedStepReplaysAsContextsGrow_HopperChunks2) {
  expect_graph_replays_match(config(8, 2, 128, 16), 3, {1, 40, 1, 9}, false, 2);
}
TEST(EngineGraph, MixedStepReplaysAsContextsGrow_Group3_D64_Auto) {
  expect_graph_replays_match(config(6, 2, 64, 16), kAuto, {1, 1, 17, 1});
}
TEST(EngineGraph, DecodeStepReplaysAsContextsGrow_SinksWindow) {
  expect_graph_replays_match(with(config(8, 2, 64, 16), KvFormat::bf16, 40, 4, true), 2);
}

// A checked launch copies its verdict to the host: inside a capture that is a
// synchronisation, and the capture fails (on a GPU as on the CPU runtime).
TEST(EngineGraph, CheckedRunCannotBeCaptured) {
  const Problem p = make_problem(config(8, 2, 64, 16), ragged_decodes());
  DeviceBatch db(p);  // checked launches on
  const engine::Plan pl = plan_for(db, engine::bounds_of(db.params().batch), 2);
  DeviceBuffer<unsigned char> ws(pl.workspace_bytes);
  cudaStream_t stream;
  PA_CHECK(cudaStreamCreate(&stream));
  PA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  bool threw = false;
  try {
    engine::run(pl, db.params(), ws.data(), pl.workspace_bytes, stream);
  } catch (const std::exception&) {
    threw = true;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  EXPECT_TRUE(threw) << "a checked run synchronises; inside a capture it must fail";
  EXPECT_NE(end, cudaSuccess) << "the capture should be invalidated by the checked run's host copy";
  if (graph) PA_CHECK(cudaGraphDestroy(graph));
  (void)cudaGetLastError();
  PA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace pa::test
