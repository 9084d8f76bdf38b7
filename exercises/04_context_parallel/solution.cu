// Exercise 04, an answer: the three TODOs of starter.cu, done.
#include <cmath>
#include <string>

#include "common/batch_ops.h"
#include "common/check.h"
#include "common/merge.cuh"
#include "context_parallel.h"

namespace pa::exercise04 {

// TODO 1: contiguous gives rank r the blocks [r n / R, (r + 1) n / R), so the
// ranks' counts differ by at most one and a request shorter than R blocks
// leaves ranks empty; interleaved deals block b to rank b % R.
int owner(Sharding s, int b, int num_blocks, int ranks) {
  if (s == Sharding::interleaved) return b % ranks;
  // The largest r whose run starts at or before b: floor(r n / R) <= b, that is
  // r n < (b + 1) R. In 64 bits: (b + 1) R may pass 2^31.
  return static_cast<int>(((static_cast<long long>(b) + 1) * ranks - 1) / num_blocks);
}

namespace {

// Program t: row t of the whole batch, Hq x D values and Hq lse.
__global__ void write_partials_kernel(const int* shard_row, int num_q_heads, int head_dim, const bf16* shard_o,
                                      const float* shard_lse, bf16* o, float* lse) {
  const int t = blockIdx.x;
  const int s = shard_row[t];
  const size_t n = static_cast<size_t>(num_q_heads) * head_dim;
  // TODO 2: a row with no key here is the empty state, o = 0 and lse = -inf:
  // weight 2^-inf = 0 in the merge. A finite lse (0, say) would give it weight
  // e^0 against the other ranks' and pull every output toward 0.
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    o[t * n + i] = s >= 0 ? shard_o[s * n + i] : __float2bfloat16(0.0f);
  }
  for (int h = threadIdx.x; h < num_q_heads; h += blockDim.x) {
    lse[static_cast<size_t>(t) * num_q_heads + h] = s >= 0 ? shard_lse[static_cast<size_t>(s) * num_q_heads + h]
                                                           : -INFINITY;
  }
}

// TODO 3: the merge's source. Partial i of a row is rank i's: its bf16 o row
// and its lse, at [i, row] of the gathered buffers. Program (request r, head h)
// merges the row of r's one query (none: a request without a query).
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
    const size_t at = static_cast<size_t>(i) * rows_hq + row.q_row;
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

void check_todos() {}

}  // namespace pa::exercise04
