// What every stage test shares: named cases, running a backend on a Problem,
// and the comparison against the fp64 oracle with teaching failure messages.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/device_batch.h"
#include "common/oracle.h"
#include "common/problem.h"
#include "common/stages.h"

namespace pa::test {

// True in the GPU flavor: tests add full-size cases there.
#if defined(PA_GPU_BUILD)
inline constexpr bool kGpuBuild = true;
#else
inline constexpr bool kGpuBuild = false;
#endif

struct Case {
  std::string name;  // becomes the test name: say what is awkward about it
  AttentionConfig cfg;
  std::vector<RequestShape> requests;
  BuildOptions opt{};
};

inline std::string case_name(const testing::TestParamInfo<Case>& info) { return info.param.name; }
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name << " (" << c.cfg.describe() << ")"; }

inline AttentionConfig config(int num_q_heads, int num_kv_heads, int head_dim, int block_size) {
  AttentionConfig c;
  c.num_q_heads = num_q_heads;
  c.num_kv_heads = num_kv_heads;
  c.head_dim = head_dim;
  c.block_size = block_size;
  return c;
}

// Stages with a split path (04, 05, 06): num_splits 0 is the stage's own plan
// (from the SM count), 1..64 forces that many splits.
inline constexpr int kAuto = 0;

// A case with the split count to force (kAuto: the stage's own dispatch).
struct SplitCase {
  Case c;
  int num_splits;
};

inline std::string split_case_name(const testing::TestParamInfo<SplitCase>& info) { return info.param.c.name; }
inline void PrintTo(const SplitCase& s, std::ostream* os) {
  *os << s.c.name << " (" << s.c.cfg.describe() << ", num_splits " << s.num_splits << ")";
}

// Decodes at uneven lengths: a partly filled last block, a one-token context.
inline std::vector<RequestShape> ragged_decodes() { return {{1, 70}, {1, 130}, {1, 1}, {1, 33}}; }

using Forward = std::function<void(const Problem&, DeviceBatch&)>;

// Builds the case, runs `forward` once on poisoned (NaN) outputs and checks out
// and lse against the oracle. Returns the downloaded output for further checks.
inline std::vector<float> expect_matches_oracle(const Case& c, const Forward& forward, bool check_lse = true) {
  const Problem p = make_problem(c.cfg, c.requests, c.opt);
  DeviceBatch db(p);
  forward(p, db);
  const std::vector<float> out = db.out_host();
  const OracleResult want = reference_attention(p);
  const std::vector<float> lse = check_lse ? db.lse_host() : std::vector<float>{};
  // The rule the main job (bench/backends.cpp) judges every backend by, too.
  const AttentionCheck a = check_attention(p, want, out, check_lse ? &lse : nullptr);
  EXPECT_TRUE(a.out.ok) << "case " << c.name << " (" << c.cfg.describe() << ")\n" << a.out.report;
  if (a.lse) EXPECT_TRUE(a.lse->ok) << "case " << c.name << " (" << c.cfg.describe() << ")\n" << a.lse->report;
  return out;
}

// For batches that are not built from a Case alone (stage 07's shared prefixes:
// make_problem, then share_prefixes): the output and lse already on the device
// against the oracle, by the same rule as expect_matches_oracle. `label` names
// the case in the failure message.
inline void expect_device_matches_oracle(const Problem& p, const DeviceBatch& db, const std::string& label,
                                         const OracleResult& want) {
  const std::vector<float> out = db.out_host();
  const std::vector<float> lse = db.lse_host();
  const AttentionCheck a = check_attention(p, want, out, &lse);
  EXPECT_TRUE(a.out.ok) << label << " (" << p.cfg.describe() << ") against the oracle\n" << a.out.report;
  if (a.lse) EXPECT_TRUE(a.lse->ok) << label << " (" << p.cfg.describe() << ") against the oracle\n" << a.lse->report;
}

// Two backends' answers on the same batch, element by element, by the same
// tolerance table (out: the bf16 row, lse: the fp32 row), `want` taken as the
// reference. Both are also checked against the oracle; this names the first
// elements where a new path drifts from the path it replaces.
inline void expect_same_as_backend(const Problem& p, const std::vector<float>& out, const std::vector<float>& lse,
                                   const std::vector<float>& want_out, const std::vector<float>& want_lse,
                                   const std::string& label) {
  const std::vector<double> ref_out(want_out.begin(), want_out.end()), ref_lse(want_lse.begin(), want_lse.end());
  const CheckResult o = check_rows(out, ref_out, p.meta, p.cfg.num_q_heads, p.cfg.head_dim, Precision::bf16, "out");
  const CheckResult l = check_rows(lse, ref_lse, p.meta, p.cfg.num_q_heads, 1, Precision::fp32, "lse");
  EXPECT_TRUE(o.ok) << label << " (" << p.cfg.describe() << ")\n" << o.report;
  EXPECT_TRUE(l.ok) << label << " (" << p.cfg.describe() << ")\n" << l.report;
}

// After a forward on a batch with padding rows (rows past the last request):
// every element of those rows is exactly +0.0 (bit pattern 0) and their lse is
// -inf. `label` starts the failure messages (e.g. the cache format).
inline void expect_padding_rows_exact_zero(const Problem& p, const DeviceBatch& db, const std::string& label = "") {
  const std::vector<bf16> out = db.out.download();
  const std::vector<float> lse = db.lse.download();
  const size_t row_elems = static_cast<size_t>(p.cfg.num_q_heads) * p.cfg.head_dim;
  for (int row = p.meta.query_start_loc.back(); row < p.meta.num_tokens; ++row) {
    for (size_t e = 0; e < row_elems; ++e) {
      uint16_t bits;
      std::memcpy(&bits, &out[row * row_elems + e], sizeof(bits));
      ASSERT_EQ(bits, 0u) << label << "padding row " << row << " element " << e << " is not exactly +0.0";
    }
    for (int h = 0; h < p.cfg.num_q_heads; ++h) {
      const float l = lse[static_cast<size_t>(row) * p.cfg.num_q_heads + h];
      ASSERT_TRUE(std::isinf(l) && l < 0) << label << "padding row " << row << " head " << h << ": lse " << l
                                          << ", want -inf";
    }
  }
}

// The sizes a split plan reads (stage04::plan, stage06::plan) for num_requests
// decodes at seq_len, group 4, head_dim 128; nothing is allocated.
inline AttentionParams decode_plan_sizes(int num_requests, int seq_len, int num_kv_heads = 8, int block_size = 16) {
  AttentionParams p{};
  p.batch.num_requests = num_requests;
  p.batch.num_tokens = num_requests;
  p.batch.max_query_len = 1;
  p.batch.max_seq_len = seq_len;
  p.batch.decode_only = true;
  p.kv.num_kv_heads = num_kv_heads;
  p.kv.block_size = block_size;
  p.kv.head_dim = 128;
  p.num_q_heads = 4 * num_kv_heads;
  return p;
}

// Request t of batch b as a batch of its own over the same cache: its queries,
// its new K/V and its table row (the same physical blocks), so it reads exactly
// the keys and values it reads inside b (batch-invariance tests compare the two).
inline Problem alone(const Problem& b, int t) {
  const BatchMeta& m = b.meta;
  const AttentionConfig& c = b.cfg;
  const int q_len = m.q_len(t), row0 = m.query_start_loc[t];
  Problem s = b;  // the config, the cache pool (bf16 or codes and scales), the sinks
  BatchMeta& a = s.meta;
  a.query_start_loc = {0, q_len};
  a.seq_lens = {m.seq_lens[t]};
  a.block_table.assign(m.block_table.begin() + static_cast<size_t>(t) * m.max_blocks_per_seq,
                       m.block_table.begin() + static_cast<size_t>(t + 1) * m.max_blocks_per_seq);
  a.slot_mapping.assign(m.slot_mapping.begin() + row0, m.slot_mapping.begin() + row0 + q_len);
  a.num_tokens = q_len;
  a.max_query_len = q_len;
  a.max_seq_len = m.seq_lens[t];
  a.decode_only = q_len <= 1;
  const size_t q_row = static_cast<size_t>(c.num_q_heads) * c.head_dim;
  const size_t kv_row = static_cast<size_t>(c.num_kv_heads) * c.head_dim;
  s.q.assign(b.q.begin() + row0 * q_row, b.q.begin() + (row0 + q_len) * q_row);
  s.k_new.assign(b.k_new.begin() + row0 * kv_row, b.k_new.begin() + (row0 + q_len) * kv_row);
  s.v_new.assign(b.v_new.begin() + row0 * kv_row, b.v_new.begin() + (row0 + q_len) * kv_row);
  return s;
}

// Runs `forward` twice on the same input; the outputs must match bit for bit
// (no races, no dependence on scheduling order).
inline void expect_bit_identical_reruns(const Case& c, const Forward& forward) {
  const Problem p = make_problem(c.cfg, c.requests, c.opt);
  DeviceBatch db(p);
  forward(p, db);
  const std::vector<bf16> first = db.out.download();
  const std::vector<float> first_lse = db.lse.download();
  db.poison_outputs();
  forward(p, db);
  const std::vector<bf16> second = db.out.download();
  const std::vector<float> second_lse = db.lse.download();
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(bf16)))
      << "two runs on the same input gave different outputs: a race, or a read of memory nothing wrote";
  EXPECT_EQ(0, std::memcmp(first_lse.data(), second_lse.data(), first_lse.size() * sizeof(float)))
      << "two runs on the same input gave different lse values";
}

// Expects fn() to throw pa::Error whose message contains `needle`.
template <class F>
void expect_error(F&& fn, const std::string& needle) {
  try {
    fn();
  } catch (const TodoError&) {
    throw;  // an unfinished TODO is the message the learner needs, not ours
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "the error message should mention \"" << needle << "\"; it was:\n" << e.what();
    return;
  }
  ADD_FAILURE() << "expected a pa::Error mentioning \"" << needle << "\", but nothing was thrown";
}

// Stages 01-05 implement no sliding window (stage 06 does): given the case's
// batch on the device with params.window set, `forward` must refuse before any
// launch with a message that says so.
inline void expect_rejects_window(const Case& c, const std::function<void(const Problem&, const AttentionParams&)>& forward) {
  const Problem p = make_problem(c.cfg, c.requests, c.opt);
  DeviceBatch db(p);
  AttentionParams params = db.params();
  params.window = 8;
  expect_error([&] { forward(p, params); }, "no sliding window");
}

// The cases every attention stage faces (issue: milestone batch for groups 4,
// 3 and 1, head_dim 64/128, block sizes 1/16/64, partly filled last block, NaN
// in unused blocks (always: the builder fills them), padding rows, empty requests).
inline std::vector<Case> basic_cases() {
  std::vector<Case> cases = {
      {"Milestone_Group4_D128_Block16", config(8, 2, 128, 16), milestone_requests()},
      {"Milestone_Group3_D128_Block16", config(6, 2, 128, 16), milestone_requests()},
      {"Milestone_MHA_D64_Block16", config(4, 4, 64, 16), milestone_requests()},
      {"Milestone_Group4_D64_Block1", config(8, 2, 64, 1), milestone_requests()},
      {"Milestone_Group4_D128_Block64", config(8, 2, 128, 64), milestone_requests()},
      {"Milestone_Qwen3Shape", config(32, 8, 128, 16), milestone_requests()},
      {"PartlyFilledLastBlock", config(8, 2, 64, 16), {{1, 33}, {3, 17}, {5, 5}}},
      {"OneTokenContext", config(8, 2, 64, 16), {{1, 1}, {1, 2}}},
      {"EmptyRequestsAndPaddingRows", config(8, 2, 64, 16), {{0, 0}, {1, 40}, {0, 0}, {2, 9}},
       BuildOptions{.seed = 7, .padding_rows = 3}},
      {"RandomMixed", config(8, 2, 128, 16), random_mixed_requests(11, 6, 150), BuildOptions{.seed = 11}},
  };
  if (kGpuBuild) {
    // Full size on a GPU: the Qwen3-8B attention shape at real context lengths.
    cases.push_back({"Gpu_Decode16x4096_Qwen3Shape", config(32, 8, 128, 16), decode_requests(16, 4096)});
    cases.push_back({"Gpu_Mixed_Qwen3Shape", config(32, 8, 128, 16),
                     random_mixed_requests(5, 12, 2048), BuildOptions{.seed = 5, .padding_rows = 4}});
  }
  return cases;
}

}  // namespace pa::test
