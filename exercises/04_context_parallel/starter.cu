// Exercise 04: your part. Each placeholder keeps the exercise safe to run and
// reports its TODO; README.md says what each one is for. solution.cu has an
// answer.
#include <cmath>
#include <string>

#include "common/batch_ops.h"
#include "common/check.h"
#include "common/merge.cuh"
#include "context_parallel.h"

namespace pa::exercise04 {
namespace {

// The device TODOs that ran unfinished, one bit each (check_todos reads them).
__device__ unsigned int todo_bits = 0;

std::string todo_message(unsigned bits, const std::string& what = "") {
  std::string msg = "exercises/04_context_parallel: ";
  bool first = true;
  for (int n = 1; n < 32; ++n) {
    if (!(bits & (1u << n))) continue;
    msg += (first ? "TODO " : ", TODO ") + std::to_string(n);
    first = false;
  }
  return msg + " not done yet (see exercises/04_context_parallel/README.md)" + what;
}

}  // namespace

// TODO 1: the rank that holds block b of a request of num_blocks blocks,
// contiguous (rank r: blocks [r n / R, (r + 1) n / R)) or interleaved (b % R).
int owner(Sharding s, int b, int num_blocks, int ranks) {
  (void)s, (void)b, (void)num_blocks, (void)ranks;
  throw TodoError(todo_message(1u << 1, ": owner() has no rule yet, so no block has a rank"));
}

namespace {

// Program t: row t of the whole batch, Hq x D values and Hq lse.
__global__ void write_partials_kernel(const int* shard_row, int num_q_heads, int head_dim, const bf16* shard_o,
                                      const float* shard_lse, bf16* o, float* lse) {
  const int t = blockIdx.x;
  const int s = shard_row[t];
  const size_t n = static_cast<size_t>(num_q_heads) * head_dim;
  // TODO 2: a row with no key on this rank must be the empty state. The
  // placeholder gives it o = 0 and lse = 0, a finite lse.
  if (s < 0 && threadIdx.x == 0) atomicOr(&todo_bits, 1u << 2);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    o[t * n + i] = s >= 0 ? shard_o[s * n + i] : __float2bfloat16(0.0f);
  }
  for (int h = threadIdx.x; h < num_q_heads; h += blockDim.x) {
    lse[static_cast<size_t>(t) * num_q_heads + h] = s >= 0 ? shard_lse[static_cast<size_t>(s) * num_q_heads + h] : 0.0f;
  }
}

// TODO 3: the merge's source: partial i of a row must be rank i's (o, lse),
// at [i, row] of the gathered buffers. The placeholder reads rank 0's for every i.
struct RankPartials {
  const bf16* o;     // [ranks, rows, Hq, D]
  const float* lse;  // [ranks, rows, Hq]
  int ranks;
  size_t rows_hq;    // rows x Hq: one rank's partials

  struct Row : MergeRow {};
  __device__ Row row(const AttentionParams& p, int r, int h) const {
    const int q0 = p.batch.query_start_loc[r], q1 = p.batch.query_start_loc[r + 1];
    Row row;
    row.merges = q1 > q0;
    row.q_row = static_cast<size_t>(q0) * p.num_q_heads + h;
    return row;
  }
  __device__ int num_partials() const { return ranks; }
  __device__ SoftmaxState<4> partial(const AttentionParams& p, const Row& row, int i, const MergeChunk& chunk) const {
    if (i > 0 && chunk.chunk == 0) atomicOr(&todo_bits, 1u << 3);
    const size_t at = row.q_row;  // placeholder: rank 0's partial, whatever i is
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (chunk.real) {
      const bf16* src = o + at * p.kv.head_dim + chunk.dim(0);
      for (int k = 0; k < 4; ++k) v[k] = __bfloat162float(src[k]);
    }
    return SoftmaxState<4>::partial(lse[at], v);
  }
};

template <int HEAD_DIM>
void launch_merge_ranks(const AttentionParams& whole, const RankPartials& src, cudaStream_t stream) {
  launch_merge<HEAD_DIM, 1>(whole, src, stream);  // one lane: the plain fold in rank order
}

}  // namespace

void write_partials(const int* shard_row, int rows, int num_q_heads, int head_dim, const bf16* shard_o,
                    const float* shard_lse, bf16* o, float* lse, cudaStream_t stream) {
  if (rows == 0) return;
  launch(write_partials_kernel, dim3(rows), dim3(128), 0, stream, shard_row, num_q_heads, head_dim, shard_o, shard_lse,
         o, lse);
}

void merge_ranks(const AttentionParams& whole, const bf16* o, const float* lse, int ranks, cudaStream_t stream) {
  PA_REQUIRE(ranks >= 1, "exercise 04: merging " + std::to_string(ranks) + " ranks");
  const RankPartials src{o, lse, ranks, static_cast<size_t>(whole.batch.num_tokens) * whole.num_q_heads};
  if (whole.batch.num_requests > 0) {
    const int d = whole.kv.head_dim;
    if (d <= 64) {
      launch_merge_ranks<64>(whole, src, stream);
    } else if (d <= 128) {
      launch_merge_ranks<128>(whole, src, stream);
    } else {
      launch_merge_ranks<256>(whole, src, stream);
    }
  }
  clear_padding_rows(whole, stream);  // rows past the last request: exact zeros, lse -inf
}

void check_todos() {
  unsigned bits = 0;
  PA_CHECK(cudaDeviceSynchronize());
  PA_CHECK(cudaMemcpyFromSymbol(&bits, todo_bits, sizeof(bits)));
  if (bits) {
    const unsigned zero = 0;
    PA_CHECK(cudaMemcpyToSymbol(todo_bits, &zero, sizeof(zero)));
    throw TodoError(todo_message(bits));
  }
}

}  // namespace pa::exercise04
