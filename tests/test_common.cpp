// The shared ground every stage stands on: metadata validation, batch
// builders, the fp64 oracle and the comparison.
#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "common/batch_ops.h"
#include "common/quant.cuh"
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
  // Rows are whole 16-byte chunks of 8-bit codes, at most 256 values.
  expect_error([&] { validate_config(config(8, 2, 72, 16)); }, "head_dim 72 is not supported");
  expect_error([&] { validate_config(config(8, 2, 320, 16)); }, "head_dim 320 is not supported");
  expect_error([&] { validate_config(config(8, 2, 0, 16)); }, "head_dim 0 is not supported");
  validate_config(config(8, 2, 96, 16));  // Phi-3's 96, and 80 and 192, are served
}

TEST(Validate, BlockSizeNotAPowerOfTwo) {
  expect_error([&] { validate_config(config(8, 2, 64, 24)); }, "block_size 24 is not supported");
}

TEST(Validate, DeviceBatchRejectsBeforeTouchingTheDevice) {
  Problem p = milestone();
  p.meta.block_table[0] = -5;
  expect_error([&] { DeviceBatch db(p); }, "is out of range");
}

// --- DeviceBatch: every tensor's size against the metadata, before any upload --

// The milestone batch in `format` (8 q / 2 kv heads, head_dim 64, block 16):
// the milestone has 50 query rows.
Problem milestone_in(KvFormat format, bool with_sinks = false) {
  AttentionConfig c = config(8, 2, 64, 16);
  c.kv_format = format;
  c.with_sinks = with_sinks;
  return make_problem(c, milestone_requests());
}

std::string size_message(const char* name, size_t got, const char* shape, size_t want) {
  return std::string("Problem::") + name + " has " + std::to_string(got) + " elements; the metadata needs " + shape +
         " = " + std::to_string(want);
}

TEST(DeviceBatchSizes, QueriesOneRowShort) {
  Problem p = milestone_in(KvFormat::bf16);
  const size_t want = p.q.size(), row = static_cast<size_t>(p.cfg.num_q_heads) * p.cfg.head_dim;
  p.q.resize(want - row);
  expect_error([&] { DeviceBatch db(p); },
               size_message("q", want - row, "[num_tokens, num_q_heads, head_dim]", want));
}

TEST(DeviceBatchSizes, NewKeysOneRowShort) {
  Problem p = milestone_in(KvFormat::bf16);
  const size_t want = p.k_new.size(), row = static_cast<size_t>(p.cfg.num_kv_heads) * p.cfg.head_dim;
  p.k_new.resize(want - row);
  expect_error([&] { DeviceBatch db(p); },
               size_message("k_new", want - row, "[num_tokens, num_kv_heads, head_dim]", want));
}

TEST(DeviceBatchSizes, NewValuesMissing) {
  Problem p = milestone_in(KvFormat::bf16);
  const size_t want = p.v_new.size();
  p.v_new.clear();
  expect_error([&] { DeviceBatch db(p); }, size_message("v_new", 0, "[num_tokens, num_kv_heads, head_dim]", want));
}

TEST(DeviceBatchSizes, KeyCacheWithHalfTheBlocks) {
  Problem p = milestone_in(KvFormat::bf16);
  const size_t want = p.k_cache.size();
  p.k_cache.resize(want / 2);
  expect_error([&] { DeviceBatch db(p); },
               size_message("k_cache", want / 2, "[num_blocks, block_size, num_kv_heads, head_dim]", want));
}

TEST(DeviceBatchSizes, EmptyValueCache) {
  Problem p = milestone_in(KvFormat::bf16);
  const size_t want = p.v_cache.size();
  p.v_cache.clear();
  expect_error([&] { DeviceBatch db(p); },
               size_message("v_cache", 0, "[num_blocks, block_size, num_kv_heads, head_dim]", want));
}

TEST(DeviceBatchSizes, Int8KeyScalesOfHalfSize) {
  Problem p = milestone_in(KvFormat::int8);
  const size_t want = p.k_scale.size();
  p.k_scale.resize(want / 2);
  expect_error([&] { DeviceBatch db(p); },
               size_message("k_scale", want / 2, "[num_blocks, block_size, num_kv_heads]", want));
}

TEST(DeviceBatchSizes, Int8ValueScalesOfHalfSize) {
  Problem p = milestone_in(KvFormat::int8);
  const size_t want = p.v_scale.size();
  p.v_scale.resize(want / 2);
  expect_error([&] { DeviceBatch db(p); },
               size_message("v_scale", want / 2, "[num_blocks, block_size, num_kv_heads]", want));
}

TEST(DeviceBatchSizes, Fp8ValueCodesShort) {
  Problem p = milestone_in(KvFormat::fp8_e4m3);
  const size_t want = p.v_codes.size();
  p.v_codes.resize(want - 1);
  expect_error([&] { DeviceBatch db(p); },
               size_message("v_codes", want - 1, "[num_blocks, block_size, num_kv_heads, head_dim]", want));
}

TEST(DeviceBatchSizes, SinksMissing) {
  Problem p = milestone_in(KvFormat::bf16, /*with_sinks=*/true);
  p.sinks.clear();  // the kernels would silently run without sinks
  expect_error([&] { DeviceBatch db(p); }, size_message("sinks", 0, "[num_q_heads]", 8));
}

TEST(DeviceBatchSizes, BenchmarkBatchesCarryNoValues) {
  // fill_values = false: the device fills q and the cache; only the sinks come from the host.
  for (KvFormat f : {KvFormat::bf16, KvFormat::int8}) {
    AttentionConfig c = config(8, 2, 64, 16);
    c.kv_format = f;
    c.with_sinks = true;
    const Problem p = make_problem(c, milestone_requests(), {.seed = 3, .fill_values = false});
    EXPECT_NO_THROW(DeviceBatch db(p)) << name(f);
  }
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

// --- shared prefixes (stage 07's batches) --------------------------------------

std::vector<RequestShape> concat(std::vector<RequestShape> a, const std::vector<RequestShape>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Three decodes sharing a 37-token prefix (blocks 0..2, the third filled to slot
// 5) with 11, 11 and 30 positions of their own, and one request in no group.
std::vector<RequestShape> three_sharing_37() {
  return concat(concat(shared_prefix_decodes(2, 37, 11, 16), shared_prefix_decodes(1, 37, 30, 16)), {{1, 50}});
}

TEST(SharePrefixes, MembersPointAtTheFirstMembersBlocks) {
  Problem p = make_problem(config(8, 2, 64, 16), three_sharing_37());
  const Problem before = p;
  const std::vector<PrefixGroup> groups = share_prefixes(p, {{{0, 1, 2}, 37}});
  EXPECT_NO_THROW(validate(p.meta, p.cfg, p.num_blocks));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].prefix_len, 37);
  EXPECT_EQ(groups[0].members, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(groups[0].blocks.size(), 3u) << "ceil(37 / 16) shared blocks";
  for (int r = 0; r < 3; ++r) {
    for (int b = 0; b < 3; ++b) EXPECT_EQ(p.meta.block_id(r, b * 16, 16), groups[0].blocks[b]) << "request " << r;
    // The block after the prefix's blocks stays the member's own.
    EXPECT_EQ(p.meta.block_id(r, 48, 16), before.meta.block_id(r, 48, 16)) << "request " << r;
  }
  for (int b = 0; b < 3; ++b) EXPECT_EQ(groups[0].blocks[b], before.meta.block_id(0, b * 16, 16));
  EXPECT_EQ(p.meta.block_table[3 * p.meta.max_blocks_per_seq], before.meta.block_table[3 * p.meta.max_blocks_per_seq])
      << "a request in no group keeps its table";
  EXPECT_EQ(p.meta.slot_mapping, before.meta.slot_mapping) << "new tokens never land in shared blocks";
  // The members' old prefix blocks are referenced no more: poisoned with NaN.
  const size_t block_elems = 16 * static_cast<size_t>(p.cfg.num_kv_heads) * p.cfg.head_dim;
  for (int r = 1; r < 3; ++r) {
    for (int b = 0; b < 3; ++b) {
      const int old = before.meta.block_id(r, b * 16, 16);
      for (size_t e = 0; e < block_elems; ++e) {
        ASSERT_TRUE(std::isnan(__bfloat162float(p.k_cache[old * block_elems + e])) &&
                    std::isnan(__bfloat162float(p.v_cache[old * block_elems + e])))
            << "request " << r << "'s old block " << old << " element " << e << " is not NaN";
      }
    }
  }
}

// Sharing is the same as copying the first member's cached K/V over each
// member's own prefix blocks: the oracle (which reads through each member's
// table) must give the same answer for both layouts, bit for bit. Positions
// [37, 48) share the prefix's last block, so they are the first member's too.
void expect_sharing_equals_copying(KvFormat f) {
  AttentionConfig cfg = config(8, 2, 64, 16);
  cfg.kv_format = f;
  const Problem original = make_problem(cfg, three_sharing_37(), {.seed = 5});
  Problem shared = original;
  share_prefixes(shared, {{{0, 1, 2}, 37}});
  Problem copied = original;
  const size_t row = static_cast<size_t>(cfg.num_kv_heads) * cfg.head_dim;  // (slot) -> elements
  for (int r = 1; r < 3; ++r) {
    for (int pos = 0; pos < 48; ++pos) {
      const size_t src = static_cast<size_t>(original.meta.block_id(0, pos, 16)) * 16 + pos % 16;
      const size_t dst = static_cast<size_t>(original.meta.block_id(r, pos, 16)) * 16 + pos % 16;
      std::copy_n(&original.k_cache[src * row], row, &copied.k_cache[dst * row]);
      std::copy_n(&original.v_cache[src * row], row, &copied.v_cache[dst * row]);
      if (is_quantized(f)) {
        std::copy_n(&original.k_codes[src * row], row, &copied.k_codes[dst * row]);
        std::copy_n(&original.v_codes[src * row], row, &copied.v_codes[dst * row]);
        std::copy_n(&original.k_scale[src * cfg.num_kv_heads], cfg.num_kv_heads, &copied.k_scale[dst * cfg.num_kv_heads]);
        std::copy_n(&original.v_scale[src * cfg.num_kv_heads], cfg.num_kv_heads, &copied.v_scale[dst * cfg.num_kv_heads]);
      }
    }
  }
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(logical_kv(shared, r, false), logical_kv(copied, r, false)) << name(f) << " request " << r << " K";
    EXPECT_EQ(logical_kv(shared, r, true), logical_kv(copied, r, true)) << name(f) << " request " << r << " V";
    const std::vector<float> k0 = logical_kv(shared, 0, false), kr = logical_kv(shared, r, false);
    EXPECT_TRUE(std::equal(k0.begin(), k0.begin() + 48 * row, kr.begin()))
        << name(f) << " request " << r << ": positions [0, 48) must be the first member's";
  }
  const OracleResult a = reference_attention(shared), b = reference_attention(copied);
  EXPECT_EQ(a.out, b.out) << name(f);
  EXPECT_EQ(a.lse, b.lse) << name(f);
  if (is_quantized(f)) {
    const OracleResult fa = reference_attention_full_precision(shared);
    const OracleResult fb = reference_attention_full_precision(copied);
    EXPECT_EQ(fa.out, fb.out) << name(f) << " (full precision)";
  }
}

TEST(SharePrefixes, OracleOfAMemberReadsTheFirstMembersPrefixBf16) { expect_sharing_equals_copying(KvFormat::bf16); }
TEST(SharePrefixes, OracleOfAMemberReadsTheFirstMembersPrefixInt8) { expect_sharing_equals_copying(KvFormat::int8); }
TEST(SharePrefixes, OracleOfAMemberReadsTheFirstMembersPrefixFp8) {
  expect_sharing_equals_copying(KvFormat::fp8_e4m3);
}

TEST(SharePrefixes, ReleasedBlocksOfAnEightBitCacheArePoisoned) {
  AttentionConfig cfg = config(8, 2, 64, 16);
  cfg.kv_format = KvFormat::int8;
  Problem p = make_problem(cfg, shared_prefix_decodes(2, 32, 0, 16));
  const int old = p.meta.block_id(1, 0, 16);
  share_prefixes(p, {{{0, 1}, 32}});
  const size_t rows = 16 * static_cast<size_t>(cfg.num_kv_heads);
  for (size_t i = old * rows; i < (old + 1) * rows; ++i) {
    ASSERT_TRUE(std::isnan(p.k_scale[i]) && std::isnan(p.v_scale[i])) << "scale row " << i;
    for (int d = 0; d < 64; ++d) ASSERT_EQ(p.k_codes[i * 64 + d], 0xFF) << "code row " << i << " dim " << d;
  }
}

TEST(SharePrefixes, TwoGroupsAndBenchmarkBatches) {
  // Two groups, one request in neither, and a batch without values (benchmarks).
  const auto requests = concat(concat(shared_prefix_decodes(2, 64, 3, 16), shared_prefix_decodes(3, 20, 12, 16)),
                               {{1, 9}});
  Problem p = make_problem(config(8, 2, 64, 16), requests, {.fill_values = false});
  const std::vector<PrefixGroup> g = share_prefixes(p, {{{0, 1}, 64}, {{2, 3, 4}, 20}});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].blocks.size(), 4u);
  EXPECT_EQ(g[1].blocks.size(), 2u);
  EXPECT_EQ(p.meta.block_id(4, 16, 16), g[1].blocks[1]);
  EXPECT_NO_THROW(validate(p.meta, p.cfg, p.num_blocks));
}

TEST(SharePrefixes, DecodeHelpersKeepNewTokensOutOfSharedBlocks) {
  EXPECT_EQ(min_suffix_len(37, 16), 11);
  EXPECT_EQ(min_suffix_len(32, 16), 0);
  EXPECT_EQ(min_suffix_len(37, 1), 0);
  const auto d = shared_prefix_decodes(3, 37, 11, 16);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].q_len, 1);
  EXPECT_EQ(d[0].seq_len, 49) << "a decode at position prefix_len + suffix_len";
  const auto c = shared_prefix_requests(2, 32, 0, 5, 16);
  EXPECT_EQ(c[1].q_len, 5);
  EXPECT_EQ(c[1].seq_len, 37);
  expect_error([] { shared_prefix_decodes(2, 37, 10, 16); }, "needs at least 11 positions");
}

// Each broken rule names the group, the request and the rule; p is unchanged.
void expect_share_error(const std::vector<RequestShape>& requests,
                        const std::vector<std::pair<std::vector<int>, int>>& groups, const std::string& needle) {
  Problem p = make_problem(config(8, 2, 64, 16), requests, {.fill_values = false});
  const std::vector<int> table = p.meta.block_table;
  expect_error([&] { share_prefixes(p, groups); }, needle);
  EXPECT_EQ(p.meta.block_table, table) << "a refused share_prefixes must leave the batch as it was";
}

TEST(SharePrefixesErrors, NewTokenInASharedBlock) {
  // Prefix 37 ends inside block 2; request 1's decode at position 40 would be written into it.
  expect_share_error({{1, 49}, {1, 41}}, {{{0, 1}, 37}},
                     "group 0: request 1: its first new token (position 40) would land in shared block 2");
}
TEST(SharePrefixesErrors, PrefixReachesIntoNewTokens) {
  expect_share_error({{1, 49}, {4, 40}}, {{{0, 1}, 37}}, "group 0: request 1: prefix_len 37 > seq_len - q_len = 36");
}
TEST(SharePrefixesErrors, MemberInTwoGroups) {
  expect_share_error(decode_requests(3, 40), {{{0, 1}, 16}, {{2, 1}, 16}},
                     "group 1: request 1: already a member of group 0");
}
TEST(SharePrefixesErrors, MemberListedTwice) {
  expect_share_error(decode_requests(3, 40), {{{0, 1, 0}, 16}}, "group 0: request 0: listed twice");
}
TEST(SharePrefixesErrors, RequestIndexOutOfRange) {
  expect_share_error(decode_requests(3, 40), {{{0, 3}, 16}}, "group 0: request index 3 is out of range [0, 3)");
}
TEST(SharePrefixesErrors, NoMembers) { expect_share_error(decode_requests(3, 40), {{{}, 16}}, "group 0: no members"); }
TEST(SharePrefixesErrors, NoPrefix) {
  expect_share_error(decode_requests(3, 40), {{{0, 1}, 0}}, "group 0: prefix_len 0 (must be >= 1)");
}
TEST(SharePrefixesErrors, FirstMemberHasNotWrittenTheSharedSlots) {
  // Request 0 has no query and a 40-token context; request 1 would read its
  // block 2 up to position 48, of which only [32, 40) was written.
  expect_share_error({{0, 40}, {1, 60}}, {{{0, 1}, 37}}, "has written only 40");
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

// Sink tokens (StreamingLLM): a decode at position 4 with window 1 and one sink
// token sees keys 0 and 4 only. q = 8 e_0 and head_dim 64 make each score the
// key's dim 0 (scale 1/8): key 0 scores 1, key 4 scores 0, and keys 1..3 score 5,
// so a mask that lets any of them in moves the answer far.
TEST(Oracle, SinkTokenByHand) {
  Problem p = make_problem(config(1, 1, 64, 16), {{1, 5}});
  p.cfg.window = 1;
  p.cfg.sink_tokens = 1;
  for (auto& x : p.q) x = __float2bfloat16(0.0f);
  p.q[0] = __float2bfloat16(8.0f);
  auto key = [&](int pos) -> bf16* {  // positions 0..3 are cached, 4 is this step's
    if (pos == 4) return &p.k_new[0];
    return &p.k_cache[static_cast<size_t>(p.meta.block_id(0, pos, 16) * 16 + pos) * 64];
  };
  for (int pos = 0; pos < 5; ++pos) {
    for (int d = 0; d < 64; ++d) key(pos)[d] = __float2bfloat16(0.0f);
    key(pos)[0] = __float2bfloat16(pos == 0 ? 1.0f : pos == 4 ? 0.0f : 5.0f);
  }
  const std::vector<float> v = logical_kv(p, 0, true);  // [5, 1, 64]
  const double e = std::exp(1.0);
  OracleResult o = reference_attention(p);
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(o.out[d], (e * v[d] + v[4 * 64 + d]) / (e + 1), 1e-12) << "dim " << d;
  EXPECT_NEAR(o.lse[0], std::log(e + 1), 1e-12);

  // A learned sink of logit 0 beside them: one more term e^0 in the denominator only.
  p.cfg.with_sinks = true;
  p.sinks = {0.0f};
  o = reference_attention(p);
  for (int d = 0; d < 64; ++d) EXPECT_NEAR(o.out[d], (e * v[d] + v[4 * 64 + d]) / (e + 2), 1e-12) << "dim " << d;
  EXPECT_NEAR(o.lse[0], std::log(e + 2), 1e-12);

  // Without a window the sink token changes nothing: all five keys.
  p.cfg.with_sinks = false;
  p.cfg.window = 0;
  o = reference_attention(p);
  EXPECT_NEAR(o.lse[0], std::log(e + 1 + 3 * std::exp(5.0)), 1e-12);
}

// The mask, position by position: with all scores 0 every visible key weighs
// the same, so lse = log(number of visible keys) and out = their mean value.
// The visible set is written here as the rule says, key by key.
void expect_window_and_sink_tokens_mask(int window, int sink_tokens) {
  const int n = 20;
  Problem p = make_problem(config(1, 1, 64, 4), {{n, n}}, {.seed = 9});
  p.cfg.window = window;
  p.cfg.sink_tokens = sink_tokens;
  for (auto& x : p.q) x = __float2bfloat16(0.0f);
  const OracleResult o = reference_attention(p);
  const std::vector<float> v = logical_kv(p, 0, true);  // [n, 1, 64]
  double pairs = 0;
  for (int q_pos = 0; q_pos < n; ++q_pos) {
    std::vector<int> visible;
    for (int k = 0; k <= q_pos; ++k) {
      if (window == 0 || q_pos - k < window || k < sink_tokens) visible.push_back(k);
    }
    pairs += visible.size();
    const std::string where = "window " + std::to_string(window) + ", sink_tokens " + std::to_string(sink_tokens) +
                              ", query at " + std::to_string(q_pos);
    EXPECT_NEAR(o.lse[q_pos], std::log(static_cast<double>(visible.size())), 1e-12) << where;
    for (int d = 0; d < 64; ++d) {
      double mean = 0;
      for (int k : visible) mean += v[k * 64 + d];
      mean /= visible.size();
      ASSERT_NEAR(o.out[q_pos * 64 + d], mean, 1e-12) << where << ", dim " << d;
    }
  }
  EXPECT_EQ(p.attended_pairs(), pairs) << "window " << window << ", sink_tokens " << sink_tokens;
}

TEST(Oracle, SinkTokensBesideTheWindow) {
  expect_window_and_sink_tokens_mask(5, 1);
  expect_window_and_sink_tokens_mask(5, 3);
  expect_window_and_sink_tokens_mask(4, 4);  // the sinks end where the window of query 7 starts
  expect_window_and_sink_tokens_mask(5, 8);  // sinks reach into early queries' windows: counted once
  expect_window_and_sink_tokens_mask(1, 2);
  expect_window_and_sink_tokens_mask(5, 0);  // no sink tokens: the plain window
}

TEST(Oracle, SinkTokensWithoutAWindowChangeNothing) {
  Problem p = make_problem(config(4, 2, 64, 16), milestone_requests(), {.seed = 4});
  const OracleResult plain = reference_attention(p);
  p.cfg.sink_tokens = 4;
  const OracleResult with = reference_attention(p);
  EXPECT_EQ(plain.out, with.out);
  EXPECT_EQ(plain.lse, with.lse);
  EXPECT_EQ(p.attended_pairs(), make_problem(config(4, 2, 64, 16), milestone_requests(), {.fill_values = false})
                                    .attended_pairs());
}

// Sink tokens on an 8-bit cache: the mask is the same, on dequantized values.
TEST(Oracle, SinkTokensOnAnInt8Cache) {
  AttentionConfig cfg = config(2, 1, 64, 16);
  cfg.kv_format = KvFormat::int8;
  cfg.window = 3;
  cfg.sink_tokens = 2;
  Problem p = make_problem(cfg, {{1, 30}}, {.seed = 2});
  for (auto& x : p.q) x = __float2bfloat16(0.0f);
  const OracleResult o = reference_attention(p);
  const std::vector<float> v = logical_kv(p, 0, true);  // dequantized, [30, 1, 64]
  for (int d = 0; d < 64; ++d) {
    double mean = 0;
    for (int k : {0, 1, 27, 28, 29}) mean += v[k * 64 + d];  // the sinks and the window [27, 30)
    mean /= 5;
    EXPECT_NEAR(o.out[d], mean, 1e-12) << "dim " << d;
  }
  EXPECT_NEAR(o.lse[0], std::log(5.0), 1e-12);
}

TEST(Builders, KvBytesReadCountsSinkTokensBesideTheWindow) {
  auto bytes_in_tokens = [](int window, int sink_tokens, std::vector<RequestShape> requests) {
    AttentionConfig cfg = config(8, 2, 64, 16);
    cfg.window = window;
    cfg.sink_tokens = sink_tokens;
    const Problem p = make_problem(cfg, requests, {.fill_values = false});
    EXPECT_EQ(p.kv_bytes_read() % p.kv_token_bytes(), 0u);
    return p.kv_bytes_read() / p.kv_token_bytes();
  };
  // Decodes: min(seq_len, window) keys, plus the sink tokens before the window.
  EXPECT_EQ(bytes_in_tokens(16, 4, {{1, 100}}), 16u + 4u);
  EXPECT_EQ(bytes_in_tokens(16, 4, {{1, 18}}), 18u) << "window [2, 18) and sinks 0, 1: the whole context";
  EXPECT_EQ(bytes_in_tokens(16, 4, {{1, 20}}), 20u) << "the window starts right after the sinks";
  EXPECT_EQ(bytes_in_tokens(16, 4, {{1, 16}}), 16u) << "the window holds the sinks";
  EXPECT_EQ(bytes_in_tokens(16, 4, {{1, 3}}), 3u);
  EXPECT_EQ(bytes_in_tokens(128, 1, {{1, 400}, {1, 129}, {1, 128}}), (128u + 1) + (128 + 1) + 128);
  // A prefill chunk: the oldest query's window start (100 - 5 - 16 + 1 = 80), plus the sinks.
  EXPECT_EQ(bytes_in_tokens(16, 4, {{5, 100}}), 20u + 4u);
  // No window: the whole context, sink tokens or not.
  EXPECT_EQ(bytes_in_tokens(0, 4, {{1, 100}, {5, 60}}), 160u);
  EXPECT_EQ(bytes_in_tokens(16, 0, {{1, 100}}), 16u);
  // A request with no query this step reads none of its keys, with or without a window.
  EXPECT_EQ(bytes_in_tokens(0, 0, {{1, 100}, {0, 40}}), 100u);
  EXPECT_EQ(bytes_in_tokens(16, 4, {{1, 100}, {0, 40}}), 16u + 4u);
}

// A window no context reaches reads what no window reads, also near INT_MAX
// (q_len + window - 1 must not wrap) and with sink tokens.
TEST(Builders, KvBytesReadWithAWindowNearIntMax) {
  const Problem plain = make_problem(config(8, 2, 64, 16), milestone_requests());
  for (const int window : {INT_MAX, INT_MAX - 15}) {
    for (const int sink_tokens : {0, 4}) {
      AttentionConfig c = config(8, 2, 64, 16);
      c.window = window;
      c.sink_tokens = sink_tokens;
      const Problem p = make_problem(c, milestone_requests());
      EXPECT_EQ(p.kv_bytes_read(), plain.kv_bytes_read()) << "window " << window << ", sink tokens " << sink_tokens;
      EXPECT_EQ(p.attended_pairs(), plain.attended_pairs()) << "window " << window << ", sink tokens " << sink_tokens;
    }
  }
}

TEST(Builders, AttendedPairsCountSinkTokensOnce) {
  AttentionConfig cfg = config(2, 1, 64, 16);
  cfg.window = 2;
  cfg.sink_tokens = 1;
  const Problem p = make_problem(cfg, {{4, 4}, {1, 10}}, {.fill_values = false});
  // Queries 0..3 of the prompt see {0}, {0,1}, {1,2}+0, {2,3}+0; the decode at 9 sees {8,9}+0.
  EXPECT_EQ(p.attended_pairs(), (1 + 2 + 3 + 3) + 3);
}

TEST(Validate, NegativeSinkTokens) {
  AttentionConfig c = config(8, 2, 64, 16);
  c.window = 16;
  c.sink_tokens = -1;
  expect_error([&] { validate_config(c); }, "sink_tokens must be >= 0");
  expect_error([&] { make_problem(c, {{1, 20}}); }, "sink_tokens must be >= 0");
}

TEST(Validate, DescribeNamesSinkTokens) {
  AttentionConfig c = config(8, 2, 64, 16);
  c.window = 128;
  c.sink_tokens = 4;
  c.with_sinks = true;
  EXPECT_EQ(c.describe(), "Hq=8 Hkv=2 D=64 block=16 window=128 sink_tokens=4 sinks");
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
