// Validation at the edges of int: metadata from a buggy or hostile scheduler
// must be refused with a message, never overflow or read out of bounds. Each
// case here is one that tests/fuzz_metadata.cpp found, or that its fixes
// closed; the same batch before the fix is described above each test.
#include <climits>

#include "tests/harness.h"

namespace pa::test {
namespace {

// Milestone batch: requests 0..4 are (16, 40), (16, 16), (21, 21), (1, 70), (1, 130).
Problem milestone() { return make_problem(config(8, 2, 64, 16), milestone_requests()); }

// query_start_loc[2] - query_start_loc[1] overflowed int (undefined behaviour;
// in practice it wrapped to a large positive length and was refused for the
// wrong reason).
TEST(ValidateLimits, QueryStartLocIntMin) {
  Problem p = milestone();
  p.meta.query_start_loc[2] = INT_MIN;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "request 1: negative query length");
}

// seq_len + block_size - 1 overflowed: the table looked long enough, and the
// slot_mapping check then read block_table far past its end.
TEST(ValidateLimits, SeqLenIntMax) {
  Problem p = milestone();
  p.meta.seq_lens[4] = INT_MAX;
  p.meta.max_seq_len = INT_MAX;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "request 4: block table too short");
}

// block * block_size + offset, a slot id, is an int.
TEST(ValidateLimits, CacheWithMoreSlotsThanInt) {
  const Problem p = milestone();
  expect_error([&] { validate(p.meta, p.cfg, INT_MAX / 16 + 1); }, "slot ids must fit");
  expect_error([&] { validate(p.meta, p.cfg, -1); }, "num_blocks -1");
}

// Every byte converts to KvFormat; the host code took 3..255 for an 8-bit format.
TEST(ValidateLimits, UnknownKvFormat) {
  AttentionConfig c = config(8, 2, 64, 16);
  c.kv_format = static_cast<KvFormat>(3);
  expect_error([&] { validate_config(c); }, "kv_format 3 is not one of bf16, int8, fp8_e4m3");
}

// Upper bounds no request could reach: stage 01 sized its workspace from
// max_seq_len (2^28 positions x 2 KV heads x 64 dims: 64 GiB), and the
// launchers size their grids from max_query_len.
TEST(ValidateLimits, MaxSeqLenBeyondTheTableRow) {
  Problem p = milestone();
  p.meta.max_seq_len = 1 << 28;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "max_seq_len 268435456 exceeds what a block-table row holds");
}

TEST(ValidateLimits, MaxQueryLenBeyondMaxSeqLen) {
  Problem p = milestone();
  p.meta.max_query_len = p.meta.max_seq_len + 1;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "max_query_len 131 must be in [0, max_seq_len = 130]");
  p.meta.max_query_len = -1;
  expect_error([&] { validate(p.meta, p.cfg, p.num_blocks); }, "max_query_len -1");
}

// Loose bounds that a batch could reach stay valid: a scheduler may size them
// for the step's worst case.
TEST(ValidateLimits, LooseBoundsInsideTheTableStayValid) {
  Problem p = milestone();
  p.meta.max_seq_len = p.meta.max_blocks_per_seq * p.cfg.block_size;
  p.meta.max_query_len = p.meta.max_seq_len;
  EXPECT_NO_THROW(validate(p.meta, p.cfg, p.num_blocks));
}

// A negative padding count made num_tokens smaller than the query rows, and
// make_problem wrote slot_mapping past its end.
TEST(ValidateLimits, NegativePaddingRows) {
  expect_error([] { make_problem(config(8, 2, 64, 16), milestone_requests(), {.padding_rows = -1}); },
               "padding_rows -1");
}

TEST(ValidateLimits, BadRequestShapeNamesTheRequest) {
  expect_error([] { make_problem(config(8, 2, 64, 16), {{1, 8}, {5, 3}}); }, "request 1: q_len 5, seq_len 3");
}

// prefix_len + block_size - 1 overflowed before the prefix was compared with
// the members' history.
TEST(ValidateLimits, SharedPrefixIntMax) {
  Problem p = make_problem(config(8, 2, 64, 16), shared_prefix_decodes(2, 32, 8, 16));
  expect_error([&] { share_prefixes(p, {{{0, 1}, INT_MAX}}); }, "prefix_len 2147483647 > seq_len - q_len");
}

}  // namespace
}  // namespace pa::test
