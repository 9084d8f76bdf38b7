// The cases of learned sinks and sink tokens (stage 08), shared by the stage's
// tests (its bf16 cases) and the engine's (every format, and the cascade):
// the sink values a case runs with, the batches around the window and the sink
// tokens, and the shared-prefix groups of the cascade cases.
#pragma once

#include <climits>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/harness.h"

namespace pa::test {

// The learned sink logits a case runs with. make_problem fills N(0, 1) when
// cfg.with_sinks; the others overwrite them after it.
enum class SinkValues {
  none,      // no learned sinks (cfg.with_sinks false)
  randn,     // the builder's N(0, 1)
  randn5,    // 5 N(0, 1): some sinks dominate their row, some vanish
  rand5,     // U[0, 5)
  plus30,    // e^30 dwarfs every score: out ~ 0, lse ~ 30; counted twice, lse moves by log 2
  plus100,   // e^100 overflows fp32: the sink must enter through differences of logits
  minus_inf, // e^-inf = 0: the same as no sink
};

inline const char* sink_name(SinkValues s) {
  switch (s) {
    case SinkValues::none: return "none";
    case SinkValues::randn: return "randn";
    case SinkValues::randn5: return "5 randn";
    case SinkValues::rand5: return "5 rand";
    case SinkValues::plus30: return "+30";
    case SinkValues::plus100: return "+100";
    case SinkValues::minus_inf: return "-inf";
  }
  return "?";
}

// The case's batch: the builder's, then the sinks the case asks for.
inline Problem build(const Case& c, SinkValues s) {
  AttentionConfig cfg = c.cfg;
  cfg.with_sinks = s != SinkValues::none;
  Problem p = make_problem(cfg, c.requests, c.opt);
  std::mt19937 gen(static_cast<uint32_t>(c.opt.seed) + 100);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 5.0f);
  for (float& x : p.sinks) {
    switch (s) {
      case SinkValues::randn5: x = 5.0f * normal(gen); break;
      case SinkValues::rand5: x = uniform(gen); break;
      case SinkValues::plus30: x = 30.0f; break;
      case SinkValues::plus100: x = 100.0f; break;
      case SinkValues::minus_inf: x = -std::numeric_limits<float>::infinity(); break;
      default: break;
    }
  }
  return p;
}

// config() with a window and sink tokens.
inline AttentionConfig windowed(int num_q_heads, int num_kv_heads, int head_dim, int block_size, int window,
                         int sink_tokens = 0, KvFormat f = KvFormat::bf16) {
  AttentionConfig c = config(num_q_heads, num_kv_heads, head_dim, block_size);
  c.window = window;
  c.sink_tokens = sink_tokens;
  c.kv_format = f;
  return c;
}

inline AttentionConfig in_format(AttentionConfig c, KvFormat f) {
  c.kv_format = f;
  return c;
}

// The oracle of p without its learned sinks.
inline OracleResult oracle_without_sinks(Problem p) {
  p.cfg.with_sinks = false;
  p.sinks.clear();
  return reference_attention(p);
}

struct SinkCase {
  Case c;
  SinkValues sinks;
  int num_splits;  // kAuto: the stage's own dispatch; 1..64 forces the split path (decode batches)
};

inline std::string sink_case_name(const testing::TestParamInfo<SinkCase>& info) { return info.param.c.name; }
inline void PrintTo(const SinkCase& k, std::ostream* os) {
  *os << k.c.name << " (" << k.c.cfg.describe() << ", sinks " << sink_name(k.sinks) << ", num_splits " << k.num_splits
      << ")";
}

inline std::string label_of(const SinkCase& k) {
  return "case " + k.c.name + " (sinks " + sink_name(k.sinks) + ", num_splits " + std::to_string(k.num_splits) + ")";
}


// Decodes around the window and the sink tokens: a context shorter than the
// sink tokens, the window reaching back to them, starting right after them,
// and far past them.
inline std::vector<RequestShape> sink_token_decodes(int window, int sink_tokens) {
  const int w = window, s = sink_tokens;
  return {{1, 1},         {1, s},         {1, s + 1},         {1, w},      {1, w + 1},  {1, w + s - 1},
          {1, w + s},     {1, w + s + 1}, {1, w + 16},        {1, w + 40}, {1, 300}};
}
// Prefill chunks and a prompt longer than the window, a decode, an empty request.
inline std::vector<RequestShape> sink_token_prefill(int window) {
  return {{5, window + 40}, {24, window + 90}, {window + 20, window + 20}, {1, window + 3}, {0, 0}};
}

inline std::vector<SinkCase> sink_cases() {
  using F = KvFormat;
  using S = SinkValues;
  const AttentionConfig g4 = config(8, 2, 128, 16);
  const std::vector<RequestShape> empty_and_padding = {{0, 0}, {2, 40}, {0, 0}, {1, 9}};
  const std::vector<RequestShape> empty_and_padding_decodes = {{0, 0}, {1, 40}, {0, 0}, {1, 9}};
  const BuildOptions padded{.seed = 7, .padding_rows = 3};
  std::vector<SinkCase> cases = {
      // Learned sinks on the milestone batch (prefill chunk, prompts, decodes), whole-context tiles.
      {{"Randn_Milestone_Group4_D128", g4, milestone_requests()}, S::randn, kAuto},
      {{"Randn5_Milestone_Group4_D128", g4, milestone_requests()}, S::randn5, kAuto},
      {{"Rand5_Milestone_Group4_D128", g4, milestone_requests()}, S::rand5, kAuto},
      {{"Plus30_Milestone_Group4_D128", g4, milestone_requests()}, S::plus30, kAuto},
      {{"Plus100_Milestone_Group4_D128", g4, milestone_requests()}, S::plus100, kAuto},
      {{"MinusInf_Milestone_Group4_D128", g4, milestone_requests()}, S::minus_inf, kAuto},
      {{"NoSinks_Milestone_Group4_D128", g4, milestone_requests()}, S::none, kAuto},
      // GQA groups 1, 3 (padded to 4), 4, 8; head dims 64, 128.
      {{"Randn_Milestone_MHA_D64", config(4, 4, 64, 16), milestone_requests()}, S::randn, kAuto},
      {{"Randn_Milestone_MHA_D128", config(4, 4, 128, 16), milestone_requests()}, S::randn, kAuto},
      {{"Randn_Milestone_Group3_D64", config(6, 2, 64, 16), milestone_requests()}, S::randn, kAuto},
      {{"Randn_Milestone_Group4_D64", config(8, 2, 64, 16), milestone_requests()}, S::randn, kAuto},
      {{"Randn_Milestone_Group8_D64", config(16, 2, 64, 16), milestone_requests()}, S::randn, kAuto},
      {{"Randn_Milestone_Group8_D128", config(16, 2, 128, 16), milestone_requests()}, S::randn, kAuto},
      // Page sizes 1 and 64 (16 elsewhere); every table is a shuffled permutation.
      {{"Randn_Milestone_Group4_D64_Block1", config(8, 2, 64, 1), milestone_requests()}, S::randn, kAuto},
      {{"Randn_Milestone_Group4_D128_Block64", config(8, 2, 128, 64), milestone_requests()}, S::randn, kAuto},
      {{"Randn5_Decodes_Group4_D64_Block1_Splits8", config(8, 2, 64, 1), ragged_decodes()}, S::randn5, 8},
      // Mixed batches: prefill chunks, prompts and decodes with padding rows.
      {{"Randn_RandomMixed_Padding_Group4_D128", g4, random_mixed_requests(11, 6, 150),
        BuildOptions{.seed = 11, .padding_rows = 2}},
       S::randn, kAuto},
      {{"Rand5_RandomMixed_Group8_D64", config(16, 2, 64, 16), random_mixed_requests(12, 6, 150),
        BuildOptions{.seed = 12}},
       S::rand5, kAuto},
      // Decodes through the split path: the sink in split 0's partial only.
      {{"Randn_Decodes_Group4_D128_Splits1", g4, ragged_decodes()}, S::randn, 1},
      {{"Randn_Decodes_Group4_D128_Splits3", g4, ragged_decodes()}, S::randn, 3},
      {{"Randn_Decodes_Group4_D128_SplitsAuto", g4, ragged_decodes()}, S::randn, kAuto},
      {{"Randn_Decodes_MHA_D128_Splits3", config(4, 4, 128, 16), ragged_decodes()}, S::randn, 3},
      {{"Randn_Decodes_Group8_D64_Splits3", config(16, 2, 64, 16), ragged_decodes()}, S::randn, 3},
      // Groups wider than 8: the sink is indexed by query head in the 128-row tile too.
      {{"Randn_Decodes_Group16_D64_Splits3", config(32, 2, 64, 16), ragged_decodes()}, S::randn, 3},
      {{"Plus30_Decodes_Group32_D128_Splits5", config(64, 2, 128, 16), ragged_decodes()}, S::plus30, 5},
      {{"Randn5_Milestone_Group64_D64", config(64, 1, 64, 16), milestone_requests()}, S::randn5, kAuto},
      {{"Int8_Randn_Decodes_Group64_D128_Splits3", in_format(config(64, 1, 128, 16), F::int8), ragged_decodes()},
       S::randn, 3},
      {{"Randn5_Decodes_Group3_D64_Splits64", config(6, 2, 64, 16), ragged_decodes()}, S::randn5, 64},
      {{"Plus30_Decodes_Group4_D128_Splits3", g4, ragged_decodes()}, S::plus30, 3},
      {{"Plus100_Decodes_Group4_D128_Splits3", g4, ragged_decodes()}, S::plus100, 3},
      {{"MinusInf_Decodes_Group4_D128_Splits3", g4, ragged_decodes()}, S::minus_inf, 3},
      {{"Randn_OneLongDecode_MHA_SplitsAuto", config(1, 1, 64, 16), {{1, 1200}}}, S::randn, kAuto},
      // Short requests beside a long one: their later splits are empty (lse -inf)
      // and must not bring the sink in again.
      {{"Randn_ShortBesideLong_Splits8", config(8, 2, 64, 16), {{1, 500}, {1, 3}, {1, 17}, {1, 64}}}, S::randn, 8},
      {{"Plus30_ShortBesideLong_Splits8", config(8, 2, 64, 16), {{1, 500}, {1, 3}, {1, 17}, {1, 64}}}, S::plus30,
       8},
      {{"Plus30_ShortBesideLong_Block1_Splits64", config(8, 2, 64, 1), {{1, 300}, {1, 2}}}, S::plus30, 64},
      // 8-bit caches (oracle on the dequantized cache).
      {{"Int8_Randn_Milestone_Group4_D128", in_format(g4, F::int8), milestone_requests()}, S::randn, kAuto},
      {{"Fp8_Randn_Milestone_Group4_D128", in_format(g4, F::fp8_e4m3), milestone_requests()}, S::randn, kAuto},
      {{"Int8_Plus30_Decodes_Group4_D128_Splits3", in_format(g4, F::int8), ragged_decodes()}, S::plus30, 3},
      {{"Fp8_Randn5_Decodes_Group8_D64_Splits3", in_format(config(16, 2, 64, 16), F::fp8_e4m3), ragged_decodes()},
       S::randn5, 3},
      {{"Fp8_Randn_Decodes_Group4_D64_Block1_Splits8", in_format(config(8, 2, 64, 1), F::fp8_e4m3), ragged_decodes()},
       S::randn, 8},
      // Requests with no query and padding rows: exactly +0.0 and lse -inf there, never the sink.
      {{"Randn_EmptyRequestsAndPaddingRows", config(8, 2, 64, 16), empty_and_padding, padded}, S::randn, kAuto},
      {{"Plus30_EmptyRequestsAndPaddingRows_Splits3", config(8, 2, 64, 16), empty_and_padding_decodes, padded},
       S::plus30, 3},
      {{"Int8_Randn_EmptyRequestsAndPaddingRows_Splits1", in_format(config(8, 2, 64, 16), F::int8),
        empty_and_padding_decodes, padded},
       S::randn, 1},
      {{"Fp8_Randn_EmptyRequestsAndPaddingRows", in_format(config(8, 2, 64, 16), F::fp8_e4m3), empty_and_padding,
        padded},
       S::randn, kAuto},
      // Learned sinks with a window (stage 06's mask and window splits).
      {{"Randn_Window20_Milestone_Group4_D128", windowed(8, 2, 128, 16, 20), milestone_requests()}, S::randn, kAuto},
      {{"Plus30_Window40_Decodes_Splits3", windowed(8, 2, 128, 16, 40), ragged_decodes()}, S::plus30, 3},
      {{"Randn_Window5_Decodes_Block1_Splits8", windowed(8, 2, 64, 1, 5), ragged_decodes()}, S::randn, 8},
      // gpt-oss: 64 query heads, 8 KV heads, head_dim 64, window 128 on alternate layers.
      {{"GptOss_Window128_Decodes_SplitsAuto", windowed(64, 8, 64, 16, 128), {{1, 300}, {1, 129}, {1, 128}, {1, 50}}},
       S::randn, kAuto},
      {{"GptOss_Window128_Decodes_Splits3", windowed(64, 8, 64, 16, 128), {{1, 300}, {1, 129}, {1, 128}, {1, 50}}},
       S::randn, 3},
      {{"GptOss_Window128_Mixed_Padding", windowed(64, 8, 64, 16, 128), {{40, 300}, {1, 260}, {130, 130}, {1, 77}},
        BuildOptions{.seed = 3, .padding_rows = 2}},
       S::randn, kAuto},
      {{"GptOss_NoWindow_Mixed", config(64, 8, 64, 16), {{40, 300}, {1, 260}, {130, 130}, {1, 77}}}, S::randn,
       kAuto},
      // Sink tokens whose split (split 0) is empty: the window reaches back to key 0
      // (contexts up to window + block), so the learned sink rides on an empty split.
      {{"Randn_SinkTokens4_Window16_EmptySinkSplit_Splits3", windowed(8, 2, 64, 16, 16, 4),
        {{1, 10}, {1, 16}, {1, 17}, {1, 31}, {1, 200}}},
       S::randn, 3},
      {{"Plus30_SinkTokens4_Window16_EmptySinkSplit_Splits3", windowed(8, 2, 64, 16, 16, 4),
        {{1, 10}, {1, 16}, {1, 17}, {1, 31}, {1, 200}}},
       S::plus30, 3},
      {{"Plus30_SinkTokens4_Window16_EmptySinkSplit_Splits1", windowed(8, 2, 64, 16, 16, 4),
        {{1, 10}, {1, 16}, {1, 17}, {1, 31}, {1, 200}}},
       S::plus30, 1},
      // More sink tokens than the window; more than any context (= no window).
      {{"SinkTokens40_Window16_Decodes_Splits3", windowed(8, 2, 64, 16, 16, 40), sink_token_decodes(16, 40)},
       S::none, 3},
      {{"SinkTokens40_Window16_Prefill", windowed(8, 2, 64, 16, 16, 40), sink_token_prefill(16)}, S::none, kAuto},
      {{"SinkTokens1000_Window16_Milestone", windowed(8, 2, 64, 16, 16, 1000), milestone_requests()}, S::none,
       kAuto},
      // Without a window sink tokens change nothing.
      {{"SinkTokens4_NoWindow_Milestone", windowed(8, 2, 64, 16, 0, 4), milestone_requests()}, S::randn, kAuto},
      {{"SinkTokens4_NoWindow_Decodes_Splits3", windowed(8, 2, 64, 16, 0, 4), ragged_decodes()}, S::none, 3},
      // Page sizes 1 and 64, groups 1 and 8, head_dim 128, 8-bit caches, padding.
      {{"SinkTokens4_Window23_Block1_Decodes_Splits8", windowed(8, 2, 64, 1, 23, 4), sink_token_decodes(23, 4)},
       S::none, 8},
      {{"SinkTokens4_Window23_Block1_Milestone", windowed(16, 2, 64, 1, 23, 4), milestone_requests()}, S::randn,
       kAuto},
      {{"SinkTokens4_Window100_Block64_Mixed", windowed(8, 2, 128, 64, 100, 4), sink_token_prefill(100)}, S::randn,
       kAuto},
      {{"SinkTokens4_Window100_Block64_Decodes_Splits3", windowed(8, 2, 128, 64, 100, 4),
        sink_token_decodes(100, 4)},
       S::randn, 3},
      {{"SinkTokens4_Window17_MHA_D128_Decodes_Splits3", windowed(4, 4, 128, 16, 17, 4), sink_token_decodes(17, 4)},
       S::randn, 3},
      {{"SinkTokens4_Window17_Group8_D128_Prefill", windowed(16, 2, 128, 16, 17, 4), sink_token_prefill(17)},
       S::randn, kAuto},
      {{"Int8_SinkTokens4_Window16_Decodes_Splits3", windowed(8, 2, 128, 16, 16, 4, F::int8),
        sink_token_decodes(16, 4)},
       S::randn, 3},
      {{"Fp8_SinkTokens4_Window17_Prefill", windowed(8, 2, 64, 16, 17, 4, F::fp8_e4m3), sink_token_prefill(17)},
       S::randn, kAuto},
      {{"Int8_SinkTokens1_Window15_Decodes_SplitsAuto", windowed(8, 2, 64, 16, 15, 1, F::int8),
        sink_token_decodes(15, 1)},
       S::none, kAuto},
      {{"SinkTokens4_Window16_EmptyRequestsAndPaddingRows", windowed(8, 2, 64, 16, 16, 4), empty_and_padding,
        padded},
       S::randn, kAuto},
      {{"SinkTokens4_Window16_EmptyRequestsAndPaddingRows_Splits3", windowed(8, 2, 64, 16, 16, 4),
        empty_and_padding_decodes, padded},
       S::randn, 3},
      // gpt-oss's shape with StreamingLLM's four sink tokens beside the 128 window.
      {{"GptOss_SinkTokens4_Window128_Decodes_SplitsAuto", windowed(64, 8, 64, 16, 128, 4),
        {{1, 300}, {1, 133}, {1, 132}, {1, 131}, {1, 50}}},
       S::randn, kAuto},
      // Head sizes between the tile's (padded rows), on whole tiles and on split decodes.
      {{"Randn_Milestone_Group4_D96", config(8, 2, 96, 16), milestone_requests()}, S::randn, kAuto},
      {{"Randn_Decodes_Group4_D80_Splits3", config(8, 2, 80, 16), ragged_decodes()}, S::randn, 3},
      {{"Randn_Milestone_Group2_D192", config(4, 2, 192, 16), milestone_requests()}, S::randn, kAuto},
      {{"SinkTokens4_Window40_Decodes_D96_Splits3", windowed(8, 2, 96, 16, 40, 4), sink_token_decodes(40, 4)},
       S::randn, 3},
      {{"GptOss_SinkTokens4_Window128_Mixed", windowed(64, 8, 64, 16, 128, 4), {{40, 300}, {1, 260}, {150, 150}}},
       S::randn, kAuto},
  };
  // Sink tokens S in {1, 4} with windows on and around a block boundary (block 16):
  // decodes at every forced split count, and prefill chunks. Four sink tokens also
  // carry learned sinks.
  for (const int s : {1, 4}) {
    for (const int w : {15, 16, 17, 128}) {
      const std::string n = "SinkTokens" + std::to_string(s) + "_Window" + std::to_string(w) + "_Block16";
      const int head_dim = w == 128 ? 128 : 64;
      const SinkValues learned = s == 4 ? S::randn : S::none;
      for (const int splits : {kAuto, 1, 3}) {
        const std::string sn = splits == kAuto ? "SplitsAuto" : "Splits" + std::to_string(splits);
        cases.push_back({{n + "_Decodes_" + sn, windowed(8, 2, head_dim, 16, w, s), sink_token_decodes(w, s)},
                         learned, splits});
      }
      cases.push_back({{n + "_PrefillChunks", windowed(8, 2, head_dim, 16, w, s), sink_token_prefill(w)}, learned,
                       kAuto});
    }
  }
  // Windows near INT_MAX (no context reaches them), with learned sinks, with and
  // without sink tokens: the window's span and first key must not wrap in 32
  // bits. Forced splits 2 and 5 and the automatic plan on decodes, prefill tiles
  // on the milestone.
  for (const auto& [w, wn] : {std::pair{INT_MAX, "WindowIntMax"}, std::pair{INT_MAX - 15, "WindowIntMaxMinus15"}}) {
    const std::vector<RequestShape> decodes = {{1, 300}, {1, 130}, {1, 1}, {1, 33}};
    for (const int s : {0, 4}) {
      const std::string n = std::string(wn) + (s ? "_SinkTokens4" : "");
      for (const int splits : {kAuto, 2, 5}) {
        const std::string sn = splits == kAuto ? "SplitsAuto" : "Splits" + std::to_string(splits);
        cases.push_back({{n + "_Block16_Decodes_" + sn, windowed(8, 2, 64, 16, w, s), decodes}, S::randn, splits});
      }
      cases.push_back({{n + "_Block64_Decodes_Splits2", windowed(8, 2, 64, 64, w, s), decodes}, S::randn, 2});
      cases.push_back({{n + "_Int8_Decodes_Splits5", windowed(8, 2, 128, 16, w, s, F::int8), decodes}, S::randn, 5});
      cases.push_back({{n + "_Milestone", windowed(8, 2, 128, 16, w, s), milestone_requests()}, S::randn, kAuto});
    }
  }
  if (kGpuBuild) {
    // Full size on a GPU: gpt-oss's attention shape at real context lengths.
    cases.push_back({{"Gpu_GptOss_Window128_Decode16x4096", windowed(64, 8, 64, 16, 128), decode_requests(16, 4096)},
                     S::randn, kAuto});
    cases.push_back({{"Gpu_GptOss_NoWindow_Decode16x4096", config(64, 8, 64, 16), decode_requests(16, 4096)},
                     S::randn, kAuto});
    cases.push_back({{"Gpu_GptOss_Mixed", config(64, 8, 64, 16), random_mixed_requests(5, 12, 2048),
                      BuildOptions{.seed = 5, .padding_rows = 4}},
                     S::randn, kAuto});
    cases.push_back({{"Gpu_SinkTokens4_Window4096_Decode4x32768_Qwen3Shape", windowed(32, 8, 128, 16, 4096, 4),
                      decode_requests(4, 32768)},
                     S::randn, kAuto});
  }
  return cases;
}


inline std::vector<SinkCase> split_count_cases() {
  using S = SinkValues;
  return {
      {{"Randn_RaggedDecodes_Group4_D128", config(8, 2, 128, 16), ragged_decodes()}, S::randn, 0},
      {{"Plus30_ShortBesideLong_Group4_D64", config(8, 2, 64, 16), {{1, 500}, {1, 3}, {1, 17}, {1, 64}}}, S::plus30,
       0},
      {{"Randn5_Window40_RaggedDecodes_Group8_D64", windowed(16, 2, 64, 16, 40), ragged_decodes()}, S::randn5, 0},
      {{"Randn_SinkTokens4_Window16_Decodes", windowed(8, 2, 64, 16, 16, 4), sink_token_decodes(16, 4)}, S::randn,
       0},
      {{"Int8_Plus30_SinkTokens1_Window17_Decodes", windowed(8, 2, 128, 16, 17, 1, KvFormat::int8),
        sink_token_decodes(17, 1)},
       S::plus30, 0},
  };
}


constexpr int kCascade = 1;  // stage07::plan's force: every group with queries takes the cascade path
constexpr int kModel = -1;   // the cost model decides per group

using GroupSpec = std::vector<std::pair<std::vector<int>, int>>;  // (members, prefix_len), as share_prefixes takes

struct CascadeSinkCase {
  Case c;
  GroupSpec groups;
  SinkValues sinks;
  int force;
};

inline std::string cascade_case_name(const testing::TestParamInfo<CascadeSinkCase>& info) { return info.param.c.name; }
inline void PrintTo(const CascadeSinkCase& k, std::ostream* os) {
  *os << k.c.name << " (" << k.c.cfg.describe() << ", sinks " << sink_name(k.sinks) << ", force " << k.force << ")";
}

inline std::vector<RequestShape> concat(std::initializer_list<std::vector<RequestShape>> parts) {
  std::vector<RequestShape> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}
inline std::vector<RequestShape> decodes(int members, int prefix_len, int suffix_len, int block_size = 16) {
  return shared_prefix_decodes(members, prefix_len, suffix_len, block_size);
}
inline std::vector<RequestShape> chunks(int members, int prefix_len, int suffix_len, int q_len, int block_size = 16) {
  return shared_prefix_requests(members, prefix_len, suffix_len, q_len, block_size);
}


inline std::vector<CascadeSinkCase> cascade_cases() {
  using F = KvFormat;
  using S = SinkValues;
  const AttentionConfig g4 = config(8, 2, 128, 16);
  // Two groups (prefix 37 ending inside a block; prefix 64 on block boundaries),
  // a decode and a full prompt in no group, a request with no query, padding rows.
  const std::vector<RequestShape> two_groups =
      concat({decodes(3, 37, 11), {{1, 70}}, chunks(2, 64, 3, 4), {{16, 16}}, {{0, 0}}});
  const GroupSpec two_groups_spec = {{{0, 1, 2}, 37}, {{4, 5}, 64}};
  const BuildOptions padded{.seed = 7, .padding_rows = 3};
  std::vector<CascadeSinkCase> cases = {
      {{"Randn_Prefix37_Decodes_Group4_D128", g4, decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, S::randn, kCascade},
      {{"Plus30_Prefix37_Decodes_Group4_D128", g4, decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, S::plus30, kCascade},
      {{"Plus100_Prefix32_Suffix0_Decodes_MHA_D64", config(4, 4, 64, 16), decodes(3, 32, 0)}, {{{0, 1, 2}, 32}},
       S::plus100, kCascade},
      {{"MinusInf_Prefix37_Decodes_Group4_D64", config(8, 2, 64, 16), decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}},
       S::minus_inf, kCascade},
      {{"Randn5_Prefix37_PrefillChunks_Group3_D64", config(6, 2, 64, 16), chunks(3, 37, 11, 5)}, {{{0, 1, 2}, 37}},
       S::randn5, kCascade},
      {{"Plus30_Prefix32_Suffix0_PrefillChunks40_Group8_D64", config(16, 2, 64, 16), chunks(3, 32, 0, 40)},
       {{{0, 1, 2}, 32}},
       S::plus30, kCascade},
      {{"Randn_TwoGroupsAndUngrouped_Mixed_Padding_Group4_D128", g4, two_groups, padded}, two_groups_spec, S::randn,
       kCascade},
      {{"Plus30_Prefix37_Block1_Suffix1_Decodes_Group4_D64", config(8, 2, 64, 1), decodes(3, 37, 1, 1)},
       {{{0, 1, 2}, 37}},
       S::plus30, kCascade},
      // A long prefix: the prefix pass cuts it into key ranges (none may carry the sink).
      {{"Plus30_LongPrefix1000_PrefixSplits_Group2_D64", config(2, 1, 64, 16), decodes(2, 1000, 8)},
       {{{0, 1}, 1000}},
       S::plus30, kCascade},
      {{"Randn_TwoGroups_LongAndShortPrefix_EmptyPrefixRanges_Group2_D64", config(2, 1, 64, 16),
        concat({decodes(2, 1000, 8), decodes(2, 37, 11)})},
       {{{0, 1}, 1000}, {{2, 3}, 37}},
       S::randn, kCascade},
      // Long suffixes: the own pass splits too; the sink in its split 0 only.
      {{"Plus30_LongSuffixes1100_SplitOwnPass_MHA_D64", config(1, 1, 64, 16), decodes(2, 64, 1100)},
       {{{0, 1}, 64}},
       S::plus30, kCascade},
      // gpt-oss's heads: many group rows in the prefix pass.
      {{"Randn_Prefix64_EightMembers_GptOssHeads", config(64, 8, 64, 16), decodes(8, 64, 5)},
       {{{0, 1, 2, 3, 4, 5, 6, 7}, 64}},
       S::randn, kCascade},
      // 8-bit caches.
      {{"Int8_Plus30_Prefix37_Decodes_Group4_D128", in_format(g4, F::int8), decodes(4, 37, 11)},
       {{{0, 1, 2, 3}, 37}},
       S::plus30, kCascade},
      {{"Fp8_Randn_TwoGroupsAndUngrouped_Mixed_Padding_Group4_D128", in_format(g4, F::fp8_e4m3), two_groups, padded},
       two_groups_spec, S::randn, kCascade},
      // The cost model decides (either path must carry the sink once).
      {{"Model_Randn_Prefix37_Decodes_Group4_D128", g4, decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, S::randn,
       kModel},
  };
  if (kGpuBuild) {
    std::vector<int> all(64);
    for (int i = 0; i < 64; ++i) all[i] = i;
    cases.push_back({{"Gpu_Prefix4000_64Decodes_GptOssHeads", config(64, 8, 64, 16), decodes(64, 4000, 96)},
                     {{all, 4000}},
                     S::randn, kCascade});
  }
  return cases;
}

// The cases of `cases` whose cache is in format f.
template <class C>
std::vector<C> in_cache_format(const std::vector<C>& cases, KvFormat f) {
  std::vector<C> out;
  for (const C& c : cases) {
    if (c.c.cfg.kv_format == f) out.push_back(c);
  }
  return out;
}

}  // namespace pa::test
