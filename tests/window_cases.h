// The cases of sliding windows (stage 06), shared by the stage's tests (its
// bf16 ones) and the engine's (every cache format).
#pragma once

#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "tests/harness.h"

namespace pa::test {

inline AttentionConfig wconfig(int num_q_heads, int num_kv_heads, int head_dim, int block_size, int window,
                        KvFormat f = KvFormat::bf16) {
  AttentionConfig c = config(num_q_heads, num_kv_heads, head_dim, block_size);
  c.window = window;
  c.kv_format = f;
  return c;
}

inline std::vector<SplitCase> window_cases() {
  using F = KvFormat;
  std::vector<SplitCase> cases = {
      // Window 1: every query sees only its own key (prefill tiles and decodes).
      {{"Window1_Milestone_Group4", wconfig(8, 2, 128, 16, 1), milestone_requests()}, kAuto},
      {{"Window1_Decodes_Splits3", wconfig(8, 2, 64, 16, 1), ragged_decodes()}, 3},
      // Groups wider than 8: 16 in the decode tile, 32 and 64 in the 128-row tile; 8-bit too.
      {{"Window20_Milestone_Group16_D64", wconfig(32, 2, 64, 16, 20), milestone_requests()}, kAuto},
      {{"Window37_Decodes_Group32_D128_Splits3", wconfig(64, 2, 128, 16, 37), ragged_decodes()}, 3},
      {{"Window37_Decodes_Group64_D64_Int8_Splits5", wconfig(64, 1, 64, 16, 37, F::int8), ragged_decodes()}, 5},
      {{"Window23_Milestone_Group24_D128_Fp8", wconfig(48, 2, 128, 16, 23, F::fp8_e4m3), milestone_requests()},
       kAuto},
      // Smaller than a block: the first block is partly before the window (masked).
      {{"Window5_Block16_Milestone_Group3", wconfig(6, 2, 128, 16, 5), milestone_requests()}, kAuto},
      {{"Window5_Block16_Decodes", wconfig(8, 2, 64, 16, 5), ragged_decodes()}, kAuto},
      // Windows whose start falls inside a block, spanning several blocks.
      {{"Window20_Block16_Milestone_Group4", wconfig(8, 2, 128, 16, 20), milestone_requests()}, kAuto},
      {{"Window37_Block16_Milestone_MHA_D64", wconfig(4, 4, 64, 16, 37), milestone_requests()}, kAuto},
      {{"Window23_Block1_Milestone_Group8", wconfig(16, 2, 64, 1, 23), milestone_requests()}, kAuto},
      {{"Window100_Block64_Milestone_D256", wconfig(8, 2, 256, 64, 100), milestone_requests()}, kAuto},
      // Larger than every context: the same as no window.
      {{"Window1000_LargerThanContext", wconfig(8, 2, 128, 16, 1000), milestone_requests()}, kAuto},
      {{"Window0_NoWindow", wconfig(8, 2, 64, 16, 0), milestone_requests()}, kAuto},
      // A long prompt: prefill tiles of 64-key steps skip the tiles outside every row's window.
      {{"Window50_LongPrompt_Group4", wconfig(8, 2, 64, 16, 50), {{300, 300}, {40, 200}, {1, 180}}}, kAuto},
      // The same without GQA, at head_dim 64 and a window wider than one 64-key step.
      {{"Window100_LongPrompt_MHA_D64", wconfig(4, 4, 64, 16, 100), {{300, 300}, {1, 180}}}, kAuto},
      // Mixed prefill chunks, prompts and decodes, with padding rows.
      {{"Window37_RandomMixed_Padding", wconfig(8, 2, 128, 16, 37), random_mixed_requests(11, 6, 150),
        BuildOptions{.seed = 11, .padding_rows = 2}},
       kAuto},
      // Decodes through the split path: only the window is split, splits start at its first block.
      {{"Window40_Decodes_Splits3", wconfig(8, 2, 128, 16, 40), ragged_decodes()}, 3},
      {{"Window40_Decodes_Splits8", wconfig(8, 2, 128, 16, 40), ragged_decodes()}, 8},
      {{"Window300_LongDecodes_Block1_Splits8", wconfig(6, 2, 64, 1, 300), {{1, 1000}, {1, 250}, {1, 999}}}, 8},
      {{"Window500_OneLongDecode_SplitsAuto", wconfig(1, 1, 64, 16, 500), {{1, 2400}}}, kAuto},
      {{"Window17_EmptyRequestsAndPadding_Splits3", wconfig(8, 2, 64, 16, 17), {{0, 0}, {1, 40}, {0, 0}, {1, 9}},
        BuildOptions{.seed = 7, .padding_rows = 3}},
       3},
      // Quantized caches with a window (stage 05's policy), both paths.
      {{"Int8_Window20_Milestone", wconfig(8, 2, 128, 16, 20, F::int8), milestone_requests()}, kAuto},
      {{"Fp8_Window20_Milestone", wconfig(8, 2, 128, 16, 20, F::fp8_e4m3), milestone_requests()}, kAuto},
      {{"Int8_Window40_Decodes_Splits3", wconfig(8, 2, 128, 16, 40, F::int8), ragged_decodes()}, 3},
      {{"Fp8_Window5_Block1_Decodes_Splits8", wconfig(8, 2, 64, 1, 5, F::fp8_e4m3), ragged_decodes()}, 8},
      // Head sizes between the tile's (padded rows): prefill tiles and split decodes, bf16 and 8-bit.
      {{"Window20_Milestone_Group4_D96", wconfig(8, 2, 96, 16, 20), milestone_requests()}, kAuto},
      {{"Window40_Decodes_Group4_D80_Splits3", wconfig(8, 2, 80, 16, 40), ragged_decodes()}, 3},
      {{"Window37_Decodes_Group2_D192_Splits5", wconfig(4, 2, 192, 16, 37), ragged_decodes()}, 5},
      {{"Int8_Window20_Milestone_D96", wconfig(8, 2, 96, 16, 20, F::int8), milestone_requests()}, kAuto},
      {{"Fp8_Window40_Decodes_D192_Splits3", wconfig(8, 2, 192, 16, 40, F::fp8_e4m3), ragged_decodes()}, 3},
  };
  // Windows near INT_MAX (no context reaches them): window + block_size - 1 and
  // the window's first key must not wrap in 32 bits. Forced splits 2 and 5 and
  // the automatic plan on decodes, prefill tiles on the milestone.
  for (const auto& [w, wn] : {std::pair{INT_MAX, "WindowIntMax"}, std::pair{INT_MAX - 15, "WindowIntMaxMinus15"}}) {
    const std::string n = wn;
    const std::vector<RequestShape> decodes = {{1, 300}, {1, 130}, {1, 1}, {1, 33}};
    for (const int splits : {kAuto, 2, 5}) {
      const std::string sn = splits == kAuto ? "SplitsAuto" : "Splits" + std::to_string(splits);
      cases.push_back({{n + "_Block16_Decodes_" + sn, wconfig(8, 2, 64, 16, w), decodes}, splits});
    }
    cases.push_back({{n + "_Block64_Decodes_Splits2", wconfig(8, 2, 64, 64, w), decodes}, 2});
    cases.push_back({{n + "_Block1_Decodes_Splits5", wconfig(8, 2, 64, 1, w), decodes}, 5});
    cases.push_back({{n + "_Int8_Decodes_Splits5", wconfig(8, 2, 128, 16, w, F::int8), decodes}, 5});
    cases.push_back({{n + "_Milestone", wconfig(8, 2, 128, 16, w), milestone_requests()}, kAuto});
  }
  if (kGpuBuild) {
    cases.push_back({{"Gpu_Window4096_Decode4x32768_Qwen3Shape", wconfig(32, 8, 128, 16, 4096),
                      decode_requests(4, 32768)},
                     kAuto});
    cases.push_back({{"Gpu_Int8_Window1000_Mixed_Qwen3Shape", wconfig(32, 8, 128, 16, 1000, F::int8),
                      random_mixed_requests(5, 12, 4096), BuildOptions{.seed = 5, .padding_rows = 4}},
                     kAuto});
  }
  return cases;
}

}  // namespace pa::test
