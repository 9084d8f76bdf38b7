// Stage 01, the reference backend: gather + naive attention, per request.
#include "tests/harness.h"

namespace pa::test {
namespace {

void run_stage01(const Problem& p, DeviceBatch& db) {
  stage01::Workspace ws;
  stage01::forward(db.params(), p.meta, ws);
}

class Stage01 : public testing::TestWithParam<Case> {};

TEST_P(Stage01, MatchesOracle) { expect_matches_oracle(GetParam(), run_stage01); }

INSTANTIATE_TEST_SUITE_P(Cases, Stage01, testing::ValuesIn(basic_cases()), case_name);

TEST(Stage01Reruns, BitIdentical) {
  expect_bit_identical_reruns({"Milestone", config(8, 2, 128, 16), milestone_requests()}, run_stage01);
}

TEST(Stage01Errors, RejectsSlidingWindow) {
  expect_rejects_window({"Milestone", config(8, 2, 64, 16), milestone_requests()},
                        [](const Problem& p, const AttentionParams& params) {
                          stage01::Workspace ws;
                          stage01::forward(params, p.meta, ws);
                        });
}

// An 8-bit cache has no k_cache / v_cache: the gather would read a null
// pointer (it did, and crashed, until the property test found it).
TEST(Stage01Errors, RejectsEightBitCaches) {
  for (KvFormat f : {KvFormat::int8, KvFormat::fp8_e4m3}) {
    AttentionConfig cfg = config(8, 2, 64, 16);
    cfg.kv_format = f;
    const Problem p = make_problem(cfg, milestone_requests());
    DeviceBatch db(p);
    stage01::Workspace ws;
    expect_error([&] { stage01::forward(db.params(), p.meta, ws); }, "stage 01 gathers a bf16 cache");
  }
}

// Shapes the launcher is handed directly (params that did not come through
// validate()): each is refused with its numbers before any launch, by the data
// model's rules (common/problem.h), as stages 02-08 refuse them. Before these
// checks stage 01 launched on all of them: a zero group or block size divided by
// zero in the kernels, a negative head_dim asked for a 2^64-byte workspace, and
// the rest read q, the table or the cache at the wrong strides.
// Checked launches off: these are host-side rules, which must hold without one.
class Stage01Shapes : public testing::Test {
 protected:
  void SetUp() override { params.checked = false; }

  Problem p = make_problem(config(8, 2, 64, 16), milestone_requests());
  DeviceBatch db{p};
  AttentionParams params = db.params();
  BatchMeta meta = p.meta;  // the host copy stage 01 loops over
  stage01::Workspace ws;

  void expect_refused(const std::string& needle) {
    expect_error([&] { stage01::forward(params, meta, ws); }, needle);
  }
};

TEST_F(Stage01Shapes, RefusesPartialGroup) {
  params.num_q_heads = 7;  // query head 6 would map to KV head 2 of 2
  expect_refused("stage 01: num_q_heads (7) must be a multiple of num_kv_heads (2)");
}

TEST_F(Stage01Shapes, RefusesZeroKvHeads) {
  params.kv.num_kv_heads = 0;  // the group size would divide by zero
  expect_refused("stage 01: num_q_heads and num_kv_heads must be positive (got 8, 0)");
}

TEST_F(Stage01Shapes, RefusesNegativeKvHeads) {
  params.kv.num_kv_heads = -2;  // 8 % -2 == 0: a negative group size, and a negative workspace
  expect_refused("stage 01: num_q_heads and num_kv_heads must be positive (got 8, -2)");
}

TEST_F(Stage01Shapes, RefusesZeroQueryHeads) {
  params.num_q_heads = 0;
  expect_refused("stage 01: num_q_heads and num_kv_heads must be positive (got 0, 2)");
}

TEST_F(Stage01Shapes, RefusesZeroHeadDim) {
  params.kv.head_dim = 0;
  expect_refused("stage 01: head_dim 0 is not supported (a multiple of 16 from 16 to 256)");
}

TEST_F(Stage01Shapes, RefusesNegativeHeadDim) {
  params.kv.head_dim = -64;  // the workspace size wraps to ~2^64 bytes: "out of memory", naming nothing
  expect_refused("stage 01: head_dim -64 is not supported");
}

TEST_F(Stage01Shapes, RefusesHeadDimNotAMultipleOf16) {
  params.kv.head_dim = 40;  // the gather copies 16-byte chunks of a slot's rows
  expect_refused("stage 01: head_dim 40 is not supported");
}

TEST_F(Stage01Shapes, RefusesHeadDimAbove256) {
  params.kv.head_dim = 512;
  expect_refused("stage 01: head_dim 512 is not supported");
}

TEST_F(Stage01Shapes, RefusesZeroBlockSize) {
  params.kv.block_size = 0;  // positions are divided by it
  expect_refused("stage 01: block_size 0 is not supported (a power of two, 1..256)");
}

TEST_F(Stage01Shapes, RefusesBlockSizeNotAPowerOfTwo) {
  params.kv.block_size = 12;  // the cache and the table were built for 16; the data model allows powers of two
  expect_refused("stage 01: block_size 12 is not supported (a power of two, 1..256)");
}

TEST_F(Stage01Shapes, RefusesBlockSizeAbove256) {
  params.kv.block_size = 512;
  expect_refused("stage 01: block_size 512 is not supported");
}

// Stage 01 sizes its grids from the host copy's lengths and reads the device
// table with them: a seq_len past the table row would gather block ids from
// the next request's row, or past the table.
TEST_F(Stage01Shapes, RefusesHostSeqLenPastTheTableRow) {
  meta.seq_lens[4] = 1000;  // request 4 is a decode at 130; its row holds 9 blocks of 16
  meta.max_seq_len = 1000;
  expect_refused("stage 01: request 4: block table too short: seq_len 1000 needs 63 blocks of 16, the table row has " +
                 std::to_string(meta.max_blocks_per_seq));
}

// The host metadata and the device arrays must be one batch: stage 01 walks
// the host copy's requests through the device copy's block table and rows.
TEST_F(Stage01Shapes, RefusesHostMetadataOfAnotherBatch) {
  const Problem other = make_problem(config(8, 2, 64, 16), {{1, 20}, {1, 30}, {2, 2}, {1, 9}, {1, 40}, {1, 50}});
  meta = other.meta;
  expect_refused("stage 01: the host metadata (6 requests, 7 tokens");
  expect_refused("does not describe the batch in AttentionParams (5 requests, 55 tokens");
}

}  // namespace
}  // namespace pa::test
