// Stage 01: the reference backend.
//
// For each request, on its own: (1) gather its blocks into contiguous K and V,
// (2) run naive attention, one program per (query, query head). Correct, and
// slow in three ways the README counts: every K/V byte crosses memory three
// times (read for the gather, written, read again), there are two launches per
// request, and each query head reads its KV head's keys and values again.
#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/cuda_compat.cuh"
#include "common/launch.cuh"
#include "common/reduce.cuh"
#include "common/stages.h"
#include "common/todo.cuh"

namespace pa::stage01 {
namespace {

constexpr int kThreads = 128;

// One program per position of one request: copies that position's K and V rows
// (all KV heads) out of the paged cache, 16 bytes per thread per step.
__global__ void gather_kv_kernel(PagedKV kv,
                                 const int* __restrict__ block_table_row,  // [max_blocks_per_seq]
                                 bf16* __restrict__ k_out,                 // [seq_len, Hkv, D]
                                 bf16* __restrict__ v_out) {               // [seq_len, Hkv, D]
  const int pos = blockIdx.x;
  //@ TODO 1: find the cache slot that holds position `pos` through the block table
  const int block = block_table_row[pos / kv.block_size];
  const size_t slot = static_cast<size_t>(block) * kv.block_size + pos % kv.block_size;
  //@ skeleton
  //@ const size_t slot = 0;  // placeholder: every position reads slot 0
  //@ if (threadIdx.x == 0) PA_TODO(1);
  //@ end
  const size_t row = static_cast<size_t>(kv.num_kv_heads) * kv.head_dim;  // elements per slot
  const uint4* k_src = reinterpret_cast<const uint4*>(kv.k_cache + slot * row);
  const uint4* v_src = reinterpret_cast<const uint4*>(kv.v_cache + slot * row);
  uint4* k_dst = reinterpret_cast<uint4*>(k_out + pos * row);
  uint4* v_dst = reinterpret_cast<uint4*>(v_out + pos * row);
  for (size_t c = threadIdx.x; c < row / 8; c += blockDim.x) {
    k_dst[c] = k_src[c];
    v_dst[c] = v_src[c];
  }
}

// One program per (query i, query head h) of one request. Scores for all keys
// the query may see go to shared memory, then a softmax, then a weighted sum
// of V. Each program reads every key and value of its KV head by itself.
__global__ void naive_attention_kernel(const bf16* __restrict__ q,  // [q_len, Hq, D] this request's rows
                                       const bf16* __restrict__ k,  // [seq_len, Hkv, D] contiguous
                                       const bf16* __restrict__ v,  // [seq_len, Hkv, D]
                                       bf16* __restrict__ out,      // [q_len, Hq, D]
                                       float* __restrict__ lse,     // [q_len, Hq] or null
                                       int q_len, int seq_len, int num_q_heads, int num_kv_heads,
                                       int head_dim, float scale) {
  float* scores = dynamic_smem<float>();  // [seq_len]
  __shared__ float scratch[kThreads / 32];
  const int i = blockIdx.x, h = blockIdx.y;
  const int kv_head = h / (num_q_heads / num_kv_heads);  // GQA: a group of query heads shares one KV head
  const bf16* q_row = q + (static_cast<size_t>(i) * num_q_heads + h) * head_dim;

  //@ TODO 2: causal scores. Query i sits at position seq_len - q_len + i and sees keys 0..q_pos
  const int q_pos = seq_len - q_len + i;
  const int num_keys = q_pos + 1;
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < num_keys; j += blockDim.x) {
    const bf16* k_row = k + (static_cast<size_t>(j) * num_kv_heads + kv_head) * head_dim;
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot = fmaf(__bfloat162float(q_row[d]), __bfloat162float(k_row[d]), dot);
    scores[j] = dot * scale;
    local_max = fmaxf(local_max, scores[j]);
  }
  //@ skeleton
  //@ const int num_keys = 1;  // placeholder: only key 0, score 0
  //@ float local_max = 0.0f;
  //@ if (threadIdx.x == 0) scores[0] = 0.0f;
  //@ if (threadIdx.x == 0) PA_TODO(2);
  //@ end
  const float row_max = block_reduce<true>(local_max, scratch);

  //@ TODO 3: softmax weights, their sum, then out = sum_j w_j v_j / sum and lse = max + log(sum)
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < num_keys; j += blockDim.x) {
    scores[j] = softmax_exp2((scores[j] - row_max) * LOG2E);  // e^x as 2^(x log2 e), as stages 02-08 take it
    local_sum += scores[j];
  }
  const float sum = block_reduce<false>(local_sum, scratch);  // its barriers also publish scores[]
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < num_keys; ++j) {
      acc = fmaf(scores[j], __bfloat162float(v[(static_cast<size_t>(j) * num_kv_heads + kv_head) * head_dim + d]), acc);
    }
    out[(static_cast<size_t>(i) * num_q_heads + h) * head_dim + d] = __float2bfloat16(acc / sum);
  }
  // log(sum) as log2(sum) ln 2, with the GPU's log2f on both flavors (gpu_log2f).
  if (lse != nullptr && threadIdx.x == 0) lse[static_cast<size_t>(i) * num_q_heads + h] = fmaf(gpu_log2f(sum), LN2, row_max);
  //@ skeleton
  //@ (void)row_max;
  //@ (void)v;
  //@ for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
  //@   out[(static_cast<size_t>(i) * num_q_heads + h) * head_dim + d] = __float2bfloat16(0.0f);
  //@ }
  //@ if (lse != nullptr && threadIdx.x == 0) lse[static_cast<size_t>(i) * num_q_heads + h] = 0.0f;
  //@ if (threadIdx.x == 0) PA_TODO(3);
  //@ end
}

// What the kernels assume of `p` and `meta`, checked on the host before any
// launch with the data model's own rules (common/problem.h): they divide by the
// group size and by block_size, size the workspace and index q, the block table
// and the cache from the head counts and head_dim, and walk `meta`'s requests
// through `p`'s device arrays, so the two must describe the same batch.
void validate(const AttentionParams& p, const BatchMeta& meta) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 01 implements plain causal attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.format == KvFormat::bf16 && p.kv.k_cache != nullptr && p.kv.v_cache != nullptr,
             std::string("stage 01 gathers a bf16 cache (k_cache, v_cache); this one is ") + name(p.kv.format) +
                 ": 8-bit caches are stage 05's");
  AttentionConfig cfg;
  cfg.num_q_heads = p.num_q_heads;
  cfg.num_kv_heads = p.kv.num_kv_heads;
  cfg.head_dim = p.kv.head_dim;
  cfg.block_size = p.kv.block_size;
  cfg.kv_format = p.kv.format;
  try {
    pa::validate(meta, cfg, p.kv.num_blocks);  // the shape rules first (validate_config), then the metadata
  } catch (const Error& e) {
    throw Error(std::string("stage 01: ") + e.what());
  }
  const BatchView& b = p.batch;
  PA_REQUIRE(meta.num_requests() == b.num_requests && meta.num_tokens == b.num_tokens &&
                 meta.max_blocks_per_seq == b.max_blocks_per_seq &&
                 meta.query_start_loc[meta.num_requests()] == b.first_padding_row,
             "stage 01: the host metadata (" + std::to_string(meta.num_requests()) + " requests, " +
                 std::to_string(meta.num_tokens) + " tokens, table rows of " +
                 std::to_string(meta.max_blocks_per_seq) + ", padding from row " +
                 std::to_string(meta.query_start_loc[meta.num_requests()]) +
                 ") does not describe the batch in AttentionParams (" + std::to_string(b.num_requests) +
                 " requests, " + std::to_string(b.num_tokens) + " tokens, table rows of " +
                 std::to_string(b.max_blocks_per_seq) + ", padding from row " + std::to_string(b.first_padding_row) +
                 ")");
}

}  // namespace

void forward(const AttentionParams& p, const BatchMeta& meta, Workspace& ws, cudaStream_t stream) {
  validate(p, meta);
  // Each request is computed on its own, so it is batch-invariant as it stands (p.batch_invariant needs nothing).
  check_device_batch(p, "stage 01", stream);
  const int Hkv = p.kv.num_kv_heads, D = p.kv.head_dim;
  ws.k.resize(static_cast<size_t>(std::max(meta.max_seq_len, 1)) * Hkv * D);
  ws.v.resize(ws.k.size());
  // Rounded up to whole 16-byte vectors: nvcc reads scores[] four floats at a
  // time, also in the loop's tail, so the allocation must end on a 16-byte boundary.
  const size_t smem = (static_cast<size_t>(meta.max_seq_len) + 3) / 4 * 4 * sizeof(float);
  for (int r = 0; r < meta.num_requests(); ++r) {
    const int q_len = meta.q_len(r), seq_len = meta.seq_lens[r];
    if (q_len == 0) continue;
    const int* table_row = p.batch.block_table + static_cast<size_t>(r) * p.batch.max_blocks_per_seq;
    launch(gather_kv_kernel, dim3(seq_len), dim3(kThreads), 0, stream, p.kv, table_row, ws.k.data(),
           ws.v.data());
    const size_t row0 = meta.query_start_loc[r];
    launch(naive_attention_kernel, dim3(q_len, p.num_q_heads), dim3(kThreads), smem, stream,
           p.q + row0 * p.num_q_heads * D, ws.k.data(), ws.v.data(), p.out + row0 * p.num_q_heads * D,
           p.lse ? p.lse + row0 * p.num_q_heads : nullptr, q_len, seq_len, p.num_q_heads, Hkv, D,
           p.softmax_scale);
  }
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("01_reference_gather");
}

}  // namespace pa::stage01
