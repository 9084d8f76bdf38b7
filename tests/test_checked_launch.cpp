// Checked launches (AttentionParams::checked, common/checked_launch.h): the
// device copy of a batch's metadata is corrupted after DeviceBatch validated
// the host copy, and every stage's launcher must throw pa::Error naming the
// first bad item, before any attention kernel runs (the poisoned outputs stay
// NaN). On a good batch the check changes no bit of the output.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/checked_launch.h"
#include "engine/engine.h"
#include "tests/harness.h"

namespace pa::test {
namespace {

// A stage's launcher on a batch (stage 01 also reads the host metadata, and
// stages 07/08 cascade build a plan, with no shared prefixes here).
struct StageRun {
  std::string name;
  bool decodes_only;  // serves decode-only batches only (stage 04)
  std::function<void(const Problem&, const AttentionParams&)> forward;
  KvFormat format = KvFormat::bf16;  // the cache it reads (stage 05: 8-bit only)
};

std::vector<StageRun> stage_runs() {
  static stage01::Workspace ws01;
  return {
      {"stage 01", false, [](const Problem& p, const AttentionParams& a) { stage01::forward(a, p.meta, ws01); }},
      {"stage 02", false, [](const Problem&, const AttentionParams& a) { stage02::forward(a); }},
      {"stage 03", false, [](const Problem&, const AttentionParams& a) { stage03::forward(a); }},
      {"stage 04", true, [](const Problem&, const AttentionParams& a) { stage04::forward(a); }},
      {"stage 05", false, [](const Problem&, const AttentionParams& a) { stage05::forward(a); }, KvFormat::int8},
      {"stage 06", false, [](const Problem&, const AttentionParams& a) { stage06::forward(a); }},
      {"stage 07", false,
       [](const Problem& p, const AttentionParams& a) {
         const stage07::Cascade c = stage07::plan(a, p.meta, {}, /*force=*/-1);
         stage07::forward(a, c);
       }},
      {"stage 08", false, [](const Problem&, const AttentionParams& a) { stage08::forward(a); }},
      {"stage 09", false, [](const Problem&, const AttentionParams& a) { stage09::forward(a); }},
      {"engine", false, [](const Problem&, const AttentionParams& a) { engine::forward(a); }},
      {"engine", false,  // its cascade entry point
       [](const Problem& p, const AttentionParams& a) {
         const stage07::Cascade c = engine::plan_cascade(a, p.meta, {}, /*force=*/-1);
         engine::run_cascade(c, a);
       }},
  };
}

// Decodes (stage 04 serves only those) with a partly filled last block, and a
// mixed batch; group 4, head_dim 64, blocks of 16.
AttentionConfig config_in(KvFormat f) {
  AttentionConfig c = config(8, 2, 64, 16);
  c.kv_format = f;
  return c;
}
Problem decode_batch(KvFormat f = KvFormat::bf16) {
  return make_problem(config_in(f), ragged_decodes(), {.seed = 3, .padding_rows = 2});
}
// A prefill chunk, a decode at 130, a full prompt, a decode at 70, a short prompt.
Problem mixed_batch(KvFormat f = KvFormat::bf16) {
  return make_problem(config_in(f), {{16, 40}, {1, 130}, {21, 21}, {1, 70}, {16, 16}}, {.seed = 4});
}

void write_device_int(int* device_array, size_t index, int value) {
  PA_CHECK(cudaMemcpy(device_array + index, &value, sizeof(int), cudaMemcpyHostToDevice));
}

// Every output bit is still the poison: no kernel wrote anything.
void expect_outputs_untouched(const DeviceBatch& db, const std::string& label) {
  const std::vector<bf16> out = db.out.download();
  const std::vector<float> lse = db.lse.download();
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, &out[i], sizeof(bits));
    ASSERT_EQ(bits, 0xFFFFu) << label << ": out element " << i << " was written; no kernel may run on a bad batch";
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &lse[i], sizeof(bits));
    ASSERT_EQ(bits, 0xFFFFFFFFu) << label << ": lse element " << i << " was written";
  }
}

// Bad block ids in the entries a request reads: past the cache, negative, far past.
class BadBlockIds : public testing::TestWithParam<int> {};

TEST_P(BadBlockIds, EveryStageThrowsNamingTheFirstBadEntry) {
  for (const bool mixed : {false, true}) {
    for (const StageRun& s : stage_runs()) {
      if (s.decodes_only && mixed) continue;
      const Problem p = mixed ? mixed_batch(s.format) : decode_batch(s.format);
      const int bad = GetParam() == -2 ? p.num_blocks : GetParam();  // -2 stands for num_blocks
      // The first bad item: request 1, entry 2 (its context has >= 3 blocks in
      // both batches). Later ones must not be the one reported: request 1 entry
      // 3 and request 2 entry 0. An entry no request reads (request 0's spare
      // column) holds a bad id too and must be ignored.
      ASSERT_GE(p.meta.seq_lens[1], 3 * p.cfg.block_size + 1);
      const int mb = p.meta.max_blocks_per_seq;
      DeviceBatch db(p);
      write_device_int(db.block_table.data(), static_cast<size_t>(mb) - 1, -7);  // request 0's spare entry
      write_device_int(db.block_table.data(), mb + 3, bad);
      write_device_int(db.block_table.data(), mb + 2, bad);
      write_device_int(db.block_table.data(), 2 * static_cast<size_t>(mb), bad);
      const std::string want = "request 1: block_table[1][2] = " + std::to_string(bad) + " is out of range [0, " +
                               std::to_string(p.num_blocks) + ")";
      SCOPED_TRACE(s.name + (mixed ? ", mixed batch" : ", decode batch"));
      expect_error([&] { s.forward(p, db.params()); }, s.name + ": checked launch: " + want);
      expect_outputs_untouched(db, s.name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CheckedLaunch, BadBlockIds, testing::Values(-2, -1, 1 << 28),
                         [](const testing::TestParamInfo<int>& info) {
                           return info.param == -2 ? std::string("NumBlocks")
                                  : info.param < 0 ? std::string("MinusOne")
                                                   : std::string("TwoToThe28");
                         });

// Metadata the kernels depend on, corrupted on the device (and, where a rule
// needs it, a host bound loosened so that the rule is the first one broken):
// the message names the request, the value and the valid range.
struct BadMeta {
  std::string name;
  std::function<void(const Problem&, DeviceBatch&, AttentionParams&)> corrupt;
  std::string want;  // part of the message
};

std::vector<BadMeta> bad_meta() {
  // decode_batch(): 4 decodes at 70, 130, 1, 33 (query rows 0..3), 2 padding rows, table rows of 10 blocks.
  return {
      {"SeqLenPastMaxSeqLen",
       [](const Problem&, DeviceBatch& db, AttentionParams&) { write_device_int(db.seq_lens.data(), 2, 131); },
       "request 2: seq_lens[2] = 131 exceeds max_seq_len 130 (valid: [1, 130])"},
      {"SeqLenBelowQueryLen",
       [](const Problem&, DeviceBatch& db, AttentionParams&) { write_device_int(db.seq_lens.data(), 1, 0); },
       "request 1: seq_lens[1] = 0 is below its query length 1"},
      {"SeqLenPastTheTableRow",
       [](const Problem&, DeviceBatch& db, AttentionParams& a) {
         a.batch.max_seq_len = 1000;
         write_device_int(db.seq_lens.data(), 3, 161);
       },
       "request 3: seq_lens[3] = 161 needs more than the table row's 10 blocks of 16 (valid: [1, 160])"},
      {"QueryStartsDecrease",
       [](const Problem&, DeviceBatch& db, AttentionParams&) { write_device_int(db.query_start_loc.data(), 2, 0); },
       "request 1: query_start_loc[2] = 0 is below query_start_loc[1] = 1"},
      {"QueryRowsPastNumTokens",
       [](const Problem&, DeviceBatch& db, AttentionParams&) { write_device_int(db.query_start_loc.data(), 3, 7); },
       "request 2: query_start_loc[3] = 7 is past num_tokens (valid: [2, 6])"},
      {"LastQueryStartIsNotTheFirstPaddingRow",
       [](const Problem&, DeviceBatch& db, AttentionParams&) { write_device_int(db.query_start_loc.data(), 4, 5); },
       "query_start_loc[4] = 5, but first_padding_row is 4"},
      {"QueryLongerThanMaxQueryLen",
       [](const Problem&, DeviceBatch& db, AttentionParams&) { write_device_int(db.query_start_loc.data(), 1, 2); },
       "request 0: query length 2 exceeds max_query_len 1"},
      {"DecodeOnlyWithTwoQueries",
       [](const Problem&, DeviceBatch& db, AttentionParams& a) {
         a.batch.max_query_len = 8;
         write_device_int(db.query_start_loc.data(), 1, 2);
       },
       "request 0: decode_only is set, but the request has 2 queries (valid: [0, 1])"},
  };
}

class CorruptMetadata : public testing::TestWithParam<BadMeta> {};

TEST_P(CorruptMetadata, EveryStageThrowsNamingIt) {
  for (const StageRun& s : stage_runs()) {
    const Problem p = decode_batch(s.format);
    DeviceBatch db(p);
    AttentionParams a = db.params();
    GetParam().corrupt(p, db, a);
    SCOPED_TRACE(s.name);
    expect_error([&] { s.forward(p, a); }, s.name + ": checked launch: " + GetParam().want);
    expect_outputs_untouched(db, s.name);
  }
}

INSTANTIATE_TEST_SUITE_P(CheckedLaunch, CorruptMetadata, testing::ValuesIn(bad_meta()),
                         [](const testing::TestParamInfo<BadMeta>& info) { return info.param.name; });

// The host-side bounds must really bound: max_query_len below a request's
// q_len, decode_only with a prefill, max_seq_len below a seq_len (a host value
// that lies is as wrong as a device value that does).
TEST(CheckedLaunch, HostBoundsThatDoNotBoundAreRefused) {
  for (const StageRun& s : stage_runs()) {
    if (s.decodes_only) continue;
    const Problem p = mixed_batch(s.format);
    DeviceBatch db(p);
    SCOPED_TRACE(s.name);
    AttentionParams a = db.params();
    a.batch.max_query_len = 20;  // request 2 has 21
    expect_error([&] { s.forward(p, a); }, "request 2: query length 21 exceeds max_query_len 20");
    a = db.params();
    a.batch.max_seq_len = 129;  // request 1 is a decode at 130
    expect_error([&] { s.forward(p, a); }, "request 1: seq_lens[1] = 130 exceeds max_seq_len 129");
    expect_outputs_untouched(db, s.name);
  }
  // decode_only on a batch with prefills: stage 04 would take it as a decode batch.
  const Problem p = mixed_batch();
  DeviceBatch db(p);
  AttentionParams a = db.params();
  a.batch.decode_only = true;
  expect_error([&] { stage04::forward(a); }, "request 0: decode_only is set, but the request has 16 queries");
  expect_outputs_untouched(db, "stage 04");
}

// On a good batch the outputs are the same bits with the check on and off.
TEST(CheckedLaunch, GoodBatchesGiveTheSameBitsCheckedOrNot) {
  for (const bool mixed : {false, true}) {
    for (const StageRun& s : stage_runs()) {
      if (s.decodes_only && mixed) continue;
      const Problem p = mixed ? mixed_batch(s.format) : decode_batch(s.format);
      SCOPED_TRACE(s.name + (mixed ? ", mixed batch" : ", decode batch"));
      DeviceBatch db(p);
      AttentionParams a = db.params();
      ASSERT_TRUE(a.checked) << "DeviceBatch turns checked launches on for the tests";
      s.forward(p, a);
      const std::vector<bf16> checked_out = db.out.download();
      const std::vector<float> checked_lse = db.lse.download();
      db.poison_outputs();
      a.checked = false;
      s.forward(p, a);
      const std::vector<bf16> out = db.out.download();
      const std::vector<float> lse = db.lse.download();
      EXPECT_EQ(0, std::memcmp(out.data(), checked_out.data(), out.size() * sizeof(bf16)));
      EXPECT_EQ(0, std::memcmp(lse.data(), checked_lse.data(), lse.size() * sizeof(float)));
    }
  }
}

// A request that reads no block (seq_len 0) may hold anything in its row, and
// a batch with no requests at all passes.
TEST(CheckedLaunch, EntriesNoRequestReadsAreNotChecked) {
  for (const StageRun& s : stage_runs()) {
    const Problem p = make_problem(config_in(s.format), {{0, 0}, {1, 40}, {0, 0}}, {.seed = 5, .padding_rows = 1});
    DeviceBatch db(p);
    for (int b = 0; b < p.meta.max_blocks_per_seq; ++b) {
      write_device_int(db.block_table.data(), b, -1);  // request 0: seq_len 0
      write_device_int(db.block_table.data(), 2 * p.meta.max_blocks_per_seq + b, 1 << 28);  // request 2
    }
    SCOPED_TRACE(s.name);
    db.poison_outputs();
    s.forward(p, db.params());
    expect_device_matches_oracle(p, db, s.name, reference_attention(p));
  }
  const Problem none = make_problem(config(8, 2, 64, 16), {}, {.seed = 6, .padding_rows = 2});
  DeviceBatch db_none(none);
  stage04::forward(db_none.params());
  expect_padding_rows_exact_zero(none, db_none);
}

// Learned sinks (AttentionParams::sinks) are device data the kernels take as
// they stand: a NaN or +inf sink gave a NaN output with an lse of -inf or a
// finite value, so a merge by lse dropped the row without a trace. A checked
// launch refuses them, naming the first bad query head (heads 5 and 6 are bad
// here: 5 is the one reported); -inf is "no sink" on that head and passes.
Problem sink_batch(float sink) {
  AttentionConfig cfg = config(8, 2, 64, 16);
  cfg.with_sinks = true;
  Problem p = make_problem(cfg, {{16, 40}, {1, 130}, {21, 21}, {1, 70}}, {.seed = 8, .padding_rows = 1});
  p.sinks[5] = sink;
  p.sinks[6] = sink;
  return p;
}

void expect_sink_refused(float sink, const std::string& shown) {
  const Problem p = sink_batch(sink);
  DeviceBatch db(p);
  expect_error([&] { stage08::forward(db.params()); },
               "stage 08: checked launch: query head 5: sinks[5] = " + shown + " (valid: a finite logit, or -inf");
  expect_outputs_untouched(db, "stage 08");
  // The check itself, as every launcher calls it.
  expect_error([&] { check_device_batch(db.params(), "caller"); }, "caller: checked launch: query head 5: sinks[5]");
}

TEST(CheckedLaunch, NanSinkIsRefusedNamingTheHead) { expect_sink_refused(NAN, "nan"); }

TEST(CheckedLaunch, PlusInfSinkIsRefusedNamingTheHead) { expect_sink_refused(INFINITY, "inf"); }

TEST(CheckedLaunch, MinusInfSinkPasses) {
  const Problem p = sink_batch(-INFINITY);
  DeviceBatch db(p);
  ASSERT_TRUE(db.params().checked);
  stage08::forward(db.params());
  expect_device_matches_oracle(p, db, "stage 08", reference_attention(p));
}

// Unchecked, the kernels take the sinks as they are (no cost on the hot path).
TEST(CheckedLaunch, SinksAreNotCheckedWhenTheLaunchIsNot) {
  const Problem p = sink_batch(NAN);
  DeviceBatch db(p);
  db.set_checked(false);
  EXPECT_NO_THROW(check_device_batch(db.params(), "caller"));
}

}  // namespace
}  // namespace pa::test
