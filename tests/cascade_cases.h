// Stage 07's cascade cases, shared by its tests (stage 07's own passes, the bf16
// ones) and the engine's (all of them: the same groups with the warpgroup
// prefix pass where it serves, and the 8-bit caches, which only the engine
// composes with a cascade).
#pragma once

#include <climits>
#include <ostream>
#include <string>
#include <vector>

#include "common/quant.cuh"
#include "tests/harness.h"
#include "tests/sink_cases.h"

namespace pa::stage07 {
// gtest prints a Path in failures by name (it would print a 1-byte enum as its bytes).
inline void PrintTo(Path path, std::ostream* os) { *os << (path == Path::cascade ? "cascade" : "plain"); }
}  // namespace pa::stage07

namespace pa::test {

// stage07::plan's `force` (kCascade and kModel: tests/sink_cases.h).
constexpr int kPlain = 0;  // every group reads its prefix through its members' tables

struct CascadeCase {
  Case c;            // config, requests, build options
  GroupSpec groups;  // which requests share which prefix
  int force;         // kCascade, kModel or kPlain
};

inline std::string stage07_case_name(const testing::TestParamInfo<CascadeCase>& info) { return info.param.c.name; }
inline void PrintTo(const CascadeCase& k, std::ostream* os) {
  *os << k.c.name << " (" << k.c.cfg.describe() << ", force " << k.force << ")";
}

inline AttentionConfig cfg_of(int num_q_heads, int num_kv_heads, int head_dim, int block_size, KvFormat f = KvFormat::bf16) {
  AttentionConfig c = config(num_q_heads, num_kv_heads, head_dim, block_size);
  c.kv_format = f;
  return c;
}

// Request indices [first, first + count): a group's members.
inline std::vector<int> members(int first, int count) {
  std::vector<int> m(count);
  for (int i = 0; i < count; ++i) m[i] = first + i;
  return m;
}

// The plain path of the earlier stages on the same batch: stage 04 for bf16
// decode batches, stage 03 for other bf16 batches, stage 05 for 8-bit caches.
// Each member reads the shared prefix through its own table.
inline void run_plain(const Problem& p, DeviceBatch& db) {
  if (is_quantized(p.cfg.kv_format)) {
    stage05::forward(db.params());
  } else if (p.meta.decode_only || p.meta.max_query_len <= 1) {
    stage04::forward(db.params());
  } else {
    stage03::forward(db.params());
  }
}

inline std::vector<CascadeCase> stage07_cases();

// The cases stage 07 runs itself: bf16 caches (8-bit caches with shared
// prefixes are the engine's composition, tested in tests/test_engine.cpp).
inline std::vector<CascadeCase> stage07_bf16_cases() {
  std::vector<CascadeCase> out;
  for (const CascadeCase& k : stage07_cases()) {
    if (k.c.cfg.kv_format == KvFormat::bf16) out.push_back(k);
  }
  return out;
}

inline std::vector<CascadeCase> stage07_cases() {
  using F = KvFormat;
  const AttentionConfig g4 = config(8, 2, 128, 16);  // GQA group 4, the most common shape here
  // Two groups (prefix 37 ending inside a block; prefix 64 on block boundaries),
  // a decode and a full prompt in no group, a request with no query, padding rows.
  const std::vector<RequestShape> two_groups = concat({decodes(3, 37, 11), {{1, 70}}, chunks(2, 64, 3, 4), {{16, 16}},
                                                       {{0, 0}}});
  const GroupSpec two_groups_spec = {{{0, 1, 2}, 37}, {{4, 5}, 64}};
  // The same as decodes only: the plain path splits the decodes (stage 04's tiles and merge).
  const std::vector<RequestShape> two_groups_decodes = concat({decodes(3, 37, 11), {{1, 70}}, decodes(2, 64, 3),
                                                               {{1, 9}}, {{0, 0}}});
  const BuildOptions padded{.seed = 7, .padding_rows = 3};

  std::vector<CascadeCase> cases = {
      // A prefix on block boundaries; suffix 0: the decode's history is exactly the prefix.
      {{"Prefix32_BlockMultiple_Suffix0_Decodes_Group4_D128", g4, decodes(4, 32, 0)}, {{{0, 1, 2, 3}, 32}}, kCascade},
      {{"Prefix32_BlockMultiple_Suffix1_Decodes_Group4_D128", g4, decodes(4, 32, 1)}, {{{0, 1, 2, 3}, 32}}, kCascade},
      // A prefix that ends inside its last block: the block's slots 5..15 belong to
      // each member's own pass, read from the shared block.
      {{"Prefix37_InsideBlock_Suffix11_Decodes_Group4_D128", g4, decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kCascade},
      {{"Prefix37_InsideBlock_UnevenSuffixes_Decodes_Group4_D128", g4,
        concat({decodes(1, 37, 11), decodes(1, 37, 12), decodes(1, 37, 60), decodes(1, 37, 27)})},
       {{{0, 1, 2, 3}, 37}},
       kCascade},
      // A one-position prefix: the rest of its block is each member's own.
      {{"Prefix1_InsideFirstBlock_Suffix15_Decodes_Group4_D64", config(8, 2, 64, 16), decodes(3, 1, 15)},
       {{{0, 1, 2}, 1}},
       kCascade},
      // Block sizes: one position per block (every prefix is a block multiple), 64.
      {{"Prefix37_Block1_Suffix0_Decodes_Group4_D64", config(8, 2, 64, 1), decodes(3, 37, 0, 1)}, {{{0, 1, 2}, 37}},
       kCascade},
      {{"Prefix37_Block1_Suffix1_Decodes_Group4_D64", config(8, 2, 64, 1), decodes(3, 37, 1, 1)}, {{{0, 1, 2}, 37}},
       kCascade},
      {{"Prefix128_Block64_Suffix0_Decodes_Group4_D128", config(8, 2, 128, 64), decodes(3, 128, 0, 64)},
       {{{0, 1, 2}, 128}},
       kCascade},
      {{"Prefix100_Block64_InsideBlock_Suffix28_Decodes_Group4_D128", config(8, 2, 128, 64), decodes(3, 100, 28, 64)},
       {{{0, 1, 2}, 100}},
       kCascade},
      // GQA groups 1, 3 (padded to 4), 4, 8 and head dims 64, 128, 256.
      {{"Prefix37_Decodes_MHA_D64", config(4, 4, 64, 16), decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kCascade},
      {{"Prefix37_Decodes_Group3_D128", config(6, 2, 128, 16), decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kCascade},
      {{"Prefix37_Decodes_Group8_D128", config(16, 2, 128, 16), decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kCascade},
      {{"Prefix37_Decodes_Group4_D256", config(8, 2, 256, 16), decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kCascade},
      {{"Prefix32_Decodes_Group8_D256", config(16, 2, 256, 16), decodes(3, 32, 1)}, {{{0, 1, 2}, 32}}, kCascade},
      // Head sizes between the tile's (padded rows): partials and merges carry head_dim values.
      {{"Prefix37_Decodes_Group4_D96", config(8, 2, 96, 16), decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kCascade},
      {{"Prefix37_Decodes_Group2_D80", config(4, 2, 80, 16), decodes(3, 37, 300)}, {{{0, 1, 2}, 37}}, kCascade},
      {{"Prefix37_PrefillChunks_Group4_D192", config(8, 2, 192, 16), chunks(3, 37, 11, 5)}, {{{0, 1, 2}, 37}},
       kCascade},
      // Groups wider than 8: 16 rows per token, and 32 / 64, wider than the decode tile.
      {{"Prefix37_Decodes_Group16_D64", config(32, 2, 64, 16), decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kCascade},
      {{"Prefix37_Decodes_Group32_D128", config(64, 2, 128, 16), decodes(3, 37, 11)}, {{{0, 1, 2}, 37}}, kCascade},
      {{"Prefix37_Decodes_Group64_D64", config(64, 1, 64, 16), decodes(5, 37, 300)}, {{members(0, 5), 37}},
       kCascade},
      {{"Prefix37_PrefillChunks_Group12_D64", config(24, 2, 64, 16), chunks(3, 37, 11, 5)}, {{{0, 1, 2}, 37}},
       kCascade},
      {{"Prefix37_PrefillChunks_Group3_D64", config(6, 2, 64, 16), chunks(3, 37, 11, 5)}, {{{0, 1, 2}, 37}},
       kCascade},
      // More group rows than a decode tile holds (8 members x 4 heads): the prefix pass's large tile.
      {{"Prefix37_EightMembers_Decodes_Group4_D128", g4, decodes(8, 37, 11)}, {{members(0, 8), 37}},
       kCascade},
      {{"Prefix64_SixteenMembers_Decodes_Qwen3Shape", config(32, 8, 128, 16), decodes(16, 64, 5)},
       {{members(0, 16), 64}},
       kCascade},
      {{"Prefix200_FortyMembers_TwoPrefixTiles_Qwen3Shape", config(32, 8, 128, 16), decodes(40, 200, 8)},
       {{members(0, 40), 200}},
       kCascade},
      // gpt-oss heads (64 / 8, head_dim 64): 8 rows a token, 64 members = 4 prefix query tiles of 128 rows.
      {{"Prefix300_SixtyFourMembers_GptOssHeads", config(64, 8, 64, 16), decodes(64, 300, 5)},
       {{members(0, 64), 300}},
       kCascade},
      // Prefill chunks whose queries lie after the prefix: short ones, long ones
      // (480 group rows: several prefix query tiles), and decodes and a chunk in one group.
      {{"Prefix37_PrefillChunks5_Group4_D128", g4, chunks(3, 37, 11, 5)}, {{{0, 1, 2}, 37}}, kCascade},
      {{"Prefix32_Suffix0_PrefillChunks40_Group4_D64", config(8, 2, 64, 16), chunks(3, 32, 0, 40)},
       {{{0, 1, 2}, 32}},
       kCascade},
      {{"Prefix37_DecodesAndAChunkInOneGroup_Group4_D128", g4, concat({decodes(2, 37, 11), chunks(1, 37, 20, 7)})},
       {{{0, 1, 2}, 37}},
       kCascade},
      // Two groups in one batch, requests in no group, a request with no query, padding rows.
      {{"TwoGroupsAndUngrouped_Mixed_Padding_Group4_D128", g4, two_groups, padded}, two_groups_spec, kCascade},
      {{"TwoGroupsAndUngrouped_DecodesOnly_Padding_Group3_D64", config(6, 2, 64, 16), two_groups_decodes, padded},
       {{{0, 1, 2}, 37}, {{4, 5}, 64}},
       kCascade},
      // Members without a query: one in a group that has queries, and a group with none (it stays plain).
      {{"MembersWithoutQueries_Group4_D64", config(8, 2, 64, 16),
        concat({decodes(2, 37, 11), {{0, 40}}, {{0, 45}, {0, 40}}})},
       {{{0, 1, 2}, 37}, {{3, 4}, 37}},
       kCascade},
      // A long prefix (the prefix pass splits it into key ranges) and long suffixes
      // (the own-positions pass splits too, and the merge takes the prefix partials).
      {{"LongPrefix1000_PrefixSplits_Group2_D64", config(2, 1, 64, 16), decodes(2, 1000, 8)}, {{{0, 1}, 1000}},
       kCascade},
      // Two groups whose prefixes differ in length: the short one's later key ranges are empty (lse -inf).
      {{"TwoGroups_LongAndShortPrefix_EmptyPrefixRanges_Group2_D64", config(2, 1, 64, 16),
        concat({decodes(2, 1000, 8), decodes(2, 37, 11)})},
       {{{0, 1}, 1000}, {{2, 3}, 37}},
       kCascade},
      {{"LongSuffixes1100_SplitOwnPass_MHA_D64", config(1, 1, 64, 16), decodes(2, 64, 1100)}, {{{0, 1}, 64}},
       kCascade},
      // 8-bit caches (the engine's: stage 07 refuses them).
      {{"Int8_Prefix37_Decodes_Group4_D128", cfg_of(8, 2, 128, 16, F::int8), decodes(4, 37, 11)},
       {{{0, 1, 2, 3}, 37}},
       kCascade},
      {{"Fp8_Prefix37_Decodes_Group4_D128", cfg_of(8, 2, 128, 16, F::fp8_e4m3), decodes(4, 37, 11)},
       {{{0, 1, 2, 3}, 37}},
       kCascade},
      {{"Int8_TwoGroupsAndUngrouped_Mixed_Padding_Group3_D64", cfg_of(6, 2, 64, 16, F::int8), two_groups, padded},
       two_groups_spec,
       kCascade},
      {{"Fp8_TwoGroupsAndUngrouped_Mixed_Padding_Group4_D128", cfg_of(8, 2, 128, 16, F::fp8_e4m3), two_groups,
        padded},
       two_groups_spec,
       kCascade},
      {{"Fp8_Prefix37_Block1_Suffix0_Decodes_Group8_D64", cfg_of(16, 2, 64, 1, F::fp8_e4m3), decodes(3, 37, 0, 1)},
       {{{0, 1, 2}, 37}},
       kCascade},
      {{"Int8_Prefix100_Block64_PrefillChunks_Group4_D256", cfg_of(8, 2, 256, 64, F::int8), chunks(2, 100, 28, 6, 64)},
       {{{0, 1}, 100}},
       kCascade},
      {{"Int8_LongSuffixes1100_SplitOwnPass_MHA_D64", cfg_of(1, 1, 64, 16, F::int8), decodes(2, 64, 1100)},
       {{{0, 1}, 64}},
       kCascade},
      // The cost model decides (on the CPU runtime's few "SMs"), and force 0.
      {{"Model_Prefix37_Decodes_Group4_D128", g4, decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kModel},
      {{"Model_TwoGroupsAndUngrouped_Mixed_Padding_Group4_D128", g4, two_groups, padded}, two_groups_spec, kModel},
      {{"Model_LongPrefix1000_Group2_D64", config(2, 1, 64, 16), decodes(4, 1000, 8)}, {{{0, 1, 2, 3}, 1000}},
       kModel},
      // Long enough for the model to cascade on a runtime of a few "SMs" (and plain on a GPU).
      {{"Model_SixteenMembersPrefix2000_Group2_D64", config(2, 1, 64, 16), decodes(16, 2000, 0)},
       {{members(0, 16), 2000}},
       kModel},
      {{"Model_Int8_Prefix37_Decodes_Group4_D128", cfg_of(8, 2, 128, 16, F::int8), decodes(4, 37, 11)},
       {{{0, 1, 2, 3}, 37}},
       kModel},
      {{"Plain_Prefix37_Decodes_Group4_D128", g4, decodes(4, 37, 11)}, {{{0, 1, 2, 3}, 37}}, kPlain},
      {{"Plain_Fp8_TwoGroupsAndUngrouped_Mixed_Padding", cfg_of(8, 2, 64, 16, F::fp8_e4m3), two_groups, padded},
       two_groups_spec,
       kPlain},
  };
  if (kGpuBuild) {
    // Full size on a GPU: 64 decodes of Qwen3-8B sharing a 4000-token system prompt.
    const std::vector<int> all = members(0, 64);
    const AttentionConfig qwen = config(32, 8, 128, 16);
    cases.push_back({{"Gpu_Prefix4000_64Decodes_Qwen3Shape", qwen, decodes(64, 4000, 96)}, {{all, 4000}}, kCascade});
    cases.push_back({{"Gpu_Model_Prefix4000_64Decodes_Qwen3Shape", qwen, decodes(64, 4000, 96)}, {{all, 4000}},
                     kModel});
    cases.push_back({{"Gpu_Prefix4000_64Decodes_MHA", config(32, 32, 128, 16), decodes(64, 4000, 128)},
                     {{all, 4000}},
                     kCascade});
    cases.push_back({{"Gpu_Prefix4000_64PrefillChunks_Qwen3Shape", qwen, chunks(64, 4000, 96, 4)}, {{all, 4000}},
                     kCascade});
    // gpt-oss heads (64 / 8, head_dim 64): 512 group rows, 4 prefix query tiles; and the same rows at head_dim 128.
    const AttentionConfig gpt_oss = config(64, 8, 64, 16);
    cases.push_back({{"Gpu_Prefix4000_64Decodes_GptOssHeads", gpt_oss, decodes(64, 4000, 96)}, {{all, 4000}},
                     kCascade});
    cases.push_back({{"Gpu_Prefix4000_16Decodes_GptOssHeads", gpt_oss, decodes(16, 4000, 96)},
                     {{members(0, 16), 4000}},
                     kCascade});
    cases.push_back({{"Gpu_Prefix4000_64PrefillChunks_GptOssHeads", gpt_oss, chunks(64, 4000, 96, 2)},
                     {{all, 4000}},
                     kCascade});
    cases.push_back({{"Gpu_Prefix4000_64Decodes_Group8_D128", config(64, 8, 128, 16), decodes(64, 4000, 96)},
                     {{all, 4000}},
                     kCascade});
    cases.push_back({{"Gpu_Prefix4000_64Decodes_Group4_D64", config(32, 8, 64, 16), decodes(64, 4000, 96)},
                     {{all, 4000}},
                     kCascade});
    cases.push_back({{"Gpu_Int8_Prefix4000_64Decodes_Qwen3Shape", cfg_of(32, 8, 128, 16, F::int8),
                      decodes(64, 4000, 96)},
                     {{all, 4000}},
                     kCascade});
  }
  return cases;
}

// Two decodes at position INT_MAX - 1, in blocks of 256: a batch the data model
// accepts, whose table rows (2^23 entries) all name block 0 (nothing forbids a
// table from repeating a block), so planning it needs no cache.
struct IntMaxDecodes {
  static constexpr int kRowEntries = 1 << 23;  // ceil(INT_MAX / 256)
  AttentionConfig cfg = config(8, 2, 64, 256);
  BatchMeta meta;
  AttentionParams params{};

  IntMaxDecodes() {
    meta.query_start_loc = {0, 1, 2};
    meta.seq_lens = {INT_MAX, INT_MAX};
    meta.max_blocks_per_seq = kRowEntries;
    meta.block_table.assign(2 * static_cast<size_t>(kRowEntries), 0);
    meta.slot_mapping = {254, 254};  // position INT_MAX - 1 = 2^31 - 2: block 0, offset 254
    meta.num_tokens = 2;
    meta.max_query_len = 1;
    meta.max_seq_len = INT_MAX;
    meta.decode_only = true;
    params.kv = PagedKV{nullptr, nullptr, /*num_blocks=*/1, cfg.block_size, cfg.num_kv_heads, cfg.head_dim};
    params.batch = BatchView{nullptr, nullptr, nullptr, nullptr, 2, 2, 2, kRowEntries, 1, INT_MAX, true};
    params.num_q_heads = cfg.num_q_heads;
    params.softmax_scale = cfg.softmax_scale();
  }
  PrefixGroup group(int prefix_len) const { return PrefixGroup{std::vector<int>(kRowEntries, 0), prefix_len, {0, 1}}; }
};

// What the plan of a prefix near INT_MAX must hold (stage 07's plan and the engine's).
inline void expect_prefix_split_in_64_bits(const stage07::Cascade& c, const IntMaxDecodes& b, int prefix_len) {
  ASSERT_EQ(c.num_groups, 1);
  EXPECT_EQ(c.max_prefix_len, prefix_len);
  EXPECT_GE(c.num_prefix_splits, 1);
  EXPECT_LE(c.num_prefix_splits, 64);
  EXPECT_EQ(c.prefix_keys_per_split % 64, 0) << c.prefix_keys_per_split;
  EXPECT_GE(static_cast<long long>(c.num_prefix_splits) * c.prefix_keys_per_split, prefix_len);
  EXPECT_LT(static_cast<long long>(c.num_prefix_splits - 1) * c.prefix_keys_per_split, prefix_len)
      << "the last split must hold keys";
  EXPECT_EQ(c.part_lse.size(), static_cast<size_t>(c.num_prefix_splits) * c.num_tokens * b.params.num_q_heads);
}

}  // namespace pa::test
