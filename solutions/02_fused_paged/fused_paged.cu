// Stage 02: one fused launch for the whole flattened batch.
//
// Program (request r, query tile, query head h) owns BLOCK_Q consecutive query
// rows of one request, one warp per row. It walks the request's keys in tiles of
// TILE_K, reading each key's K and V row straight from its cache block through
// the block table (no gather copy), and keeps an online softmax per row, so the
// scores never leave the SM. Prefill chunks, full prompts and decodes all ride
// in the same launch.
#include <algorithm>
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/cuda_compat.cuh"
#include "common/launch.cuh"
#include "common/online_softmax.cuh"
#include "common/quant.cuh"
#include "common/reduce.cuh"
#include "common/stages.h"
#include "common/todo.cuh"

namespace pa::stage02 {
namespace {

constexpr int BLOCK_Q = 4;   // query rows per program: one warp each
constexpr int TILE_K = 32;   // keys per tile: one per lane when scoring
constexpr int NUM_THREADS = BLOCK_Q * 32;

template <int HEAD_DIM>
__global__ void __launch_bounds__(NUM_THREADS) fused_paged_kernel(AttentionParams p) {
  constexpr int DIMS_PER_LANE = HEAD_DIM / 32;  // lane owns dims lane, lane+32, ...
  constexpr int CHUNKS = HEAD_DIM / 8;          // 16-byte chunks per K/V row
  __shared__ float q_s[BLOCK_Q][HEAD_DIM];                    // queries of the tile, scaled to log2 units
  __shared__ __align__(16) bf16 k_s[TILE_K][HEAD_DIM];        // one K tile
  __shared__ __align__(16) bf16 v_s[TILE_K][HEAD_DIM];        // one V tile
  __shared__ float p_s[BLOCK_Q][TILE_K];                      // softmax weights, per warp

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  //@ TODO 1: which request, query rows and head this program serves; exit at once when it has no rows
  const int r = blockIdx.x, h = blockIdx.z;
  const int row_begin = p.batch.query_start_loc[r];
  const int q_len = p.batch.query_start_loc[r + 1] - row_begin;
  const int tile_first = blockIdx.y * BLOCK_Q;  // first query index (within the request) of this tile
  if (tile_first >= q_len) return;              // the grid is sized for the longest request
  //@ skeleton
  //@ const int r = 0, h = 0, row_begin = 0, q_len = 0, tile_first = 0;
  //@ if (threadIdx.x == 0) PA_TODO(1);
  //@ if (blockIdx.x + blockIdx.y + blockIdx.z > 0 || q_len == 0) return;
  //@ end
  const int seq_len = p.batch.seq_lens[r];
  const int kv_head = h / (p.num_q_heads / p.kv.num_kv_heads);
  const int q_idx = tile_first + warp;  // this warp's query, within the request
  const bool row_valid = q_idx < q_len;
  const int q_pos = seq_len - q_len + q_idx;  // its position: the queries are the last q_len positions
  const size_t q_row = static_cast<size_t>(row_begin + q_idx) * p.num_q_heads + h;

  //@ TODO 2: the key range [0, kv_end): stop after the position of the tile's LAST query
  const int tile_last = min(q_len, tile_first + BLOCK_Q) - 1;
  const int kv_end = seq_len - q_len + tile_last + 1;
  //@ skeleton
  //@ const int kv_end = 0;  // placeholder: no keys at all
  //@ if (threadIdx.x == 0) PA_TODO(2);
  //@ end

  // Scores in the shared state's log2 units: q * softmax_scale * log2(e), so each weight is one exp2.
  const float scale_log2 = p.softmax_scale * LOG2E;
  if (row_valid) {
    for (int d = lane; d < HEAD_DIM; d += 32) {
      q_s[warp][d] = __bfloat162float(p.q[q_row * HEAD_DIM + d]) * scale_log2;
    }
  }
  SoftmaxState<DIMS_PER_LANE> state;
  state.init();

  const int* table = p.batch.block_table + static_cast<size_t>(r) * p.batch.max_blocks_per_seq;
  for (int tile_start = 0; tile_start < kv_end; tile_start += TILE_K) {
    __syncthreads();  // the previous tile is consumed (and q_s is written, on the first pass)
    for (int c = threadIdx.x; c < TILE_K * CHUNKS; c += NUM_THREADS) {
      const int j = c / CHUNKS, chunk = c % CHUNKS;
      const int kv_pos = tile_start + j;
      uint4 k_val = make_uint4(0, 0, 0, 0), v_val = make_uint4(0, 0, 0, 0);
      if (kv_pos < kv_end) {
        //@ TODO 3: load key kv_pos's K and V rows (this KV head) from their cache block
        const int block = table[kv_pos / p.kv.block_size];
        const size_t slot = static_cast<size_t>(block) * p.kv.block_size + kv_pos % p.kv.block_size;
        const size_t offset = (slot * p.kv.num_kv_heads + kv_head) * HEAD_DIM + chunk * 8;
        k_val = *reinterpret_cast<const uint4*>(p.kv.k_cache + offset);
        v_val = *reinterpret_cast<const uint4*>(p.kv.v_cache + offset);
        //@ skeleton
        //@ if (c == 0) PA_TODO(3);  // placeholder: the tile stays zero
        //@ end
      }
      *reinterpret_cast<uint4*>(&k_s[j][chunk * 8]) = k_val;
      *reinterpret_cast<uint4*>(&v_s[j][chunk * 8]) = v_val;
    }
    __syncthreads();
    if (!row_valid) continue;  // whole warp: rows past q_len only help load tiles

    // Lane j scores key tile_start + j. Starting each lane's walk over the head
    // dimension at a different bf16 pair keeps the 32 lanes on 32 different banks.
    const int kv_pos = tile_start + lane;
    float s = -INFINITY;
    if (kv_pos < kv_end && kv_pos <= q_pos) {
      float dot = 0.0f;
      for (int i = 0; i < HEAD_DIM / 2; ++i) {
        const int d = 2 * ((i + lane) % (HEAD_DIM / 2));
        const float2 kk = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&k_s[lane][d]));
        dot += q_s[warp][d] * kk.x + q_s[warp][d + 1] * kk.y;
      }
      s = dot;
    }
    //@ TODO 4: online softmax: raise the running max to the tile's, weight each key, add to l and o
    state.raise_max(warp_max(s));
    const float w = state.weight(s);
    state.l += warp_sum(w);
    p_s[warp][lane] = w;
    __syncwarp();
    for (int j = 0; j < TILE_K; ++j) {
      const float wj = p_s[warp][j];
#pragma unroll
      for (int i = 0; i < DIMS_PER_LANE; ++i) state.o[i] += wj * __bfloat162float(v_s[j][lane + 32 * i]);
    }
    __syncwarp();  // p_s is rewritten by the next tile
    //@ skeleton
    //@ (void)s;
    //@ if (lane == 0) PA_TODO(4);
    //@ end
  }

  if (!row_valid) return;
  //@ TODO 5: finish the row: out = o / l (exact 0 for an empty row), lse = m + log(l) in natural-log units (the state knows how)
  const float inv_l = state.inv_l();
#pragma unroll
  for (int i = 0; i < DIMS_PER_LANE; ++i) p.out[q_row * HEAD_DIM + lane + 32 * i] = __float2bfloat16(state.o[i] * inv_l);
  if (p.lse != nullptr && lane == 0) p.lse[q_row] = state.lse();
  //@ skeleton
  //@ for (int i = 0; i < DIMS_PER_LANE; ++i) p.out[q_row * HEAD_DIM + lane + 32 * i] = __float2bfloat16(0.0f);
  //@ if (p.lse != nullptr && lane == 0) p.lse[q_row] = 0.0f;
  //@ if (lane == 0) PA_TODO(5);
  //@ end
}

// What the kernel assumes of `p`, checked on the host before any launch: it
// reads bf16 rows through k_cache / v_cache (an 8-bit cache leaves them null),
// maps query head h to KV head h / (num_q_heads / num_kv_heads) (a partial group
// would read past the last KV head), and divides positions by block_size.
void validate(const AttentionParams& p) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 02 implements plain causal attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             std::string("stage 02 reads bf16 caches; this one is ") + name(p.kv.format) +
                 " (run 8-bit caches through stage 05, 05_quantized_kv)");
  PA_REQUIRE(p.kv.k_cache != nullptr && p.kv.v_cache != nullptr, "stage 02: the bf16 cache needs k_cache and v_cache");
  PA_REQUIRE(p.kv.num_kv_heads > 0 && p.num_q_heads > 0 && p.num_q_heads % p.kv.num_kv_heads == 0,
             "stage 02: num_q_heads (" + std::to_string(p.num_q_heads) +
                 ") must be a positive multiple of num_kv_heads (" + std::to_string(p.kv.num_kv_heads) +
                 "): each KV head serves a whole group of query heads");
  PA_REQUIRE(p.kv.block_size >= 1,
             "stage 02: block_size " + std::to_string(p.kv.block_size) + " must be at least 1");
  PA_REQUIRE(p.kv.head_dim == 64 || p.kv.head_dim == 128 || p.kv.head_dim == 256,
             "stage 02: head_dim " + std::to_string(p.kv.head_dim) + " is not supported (64, 128, 256)");
}

}  // namespace

void forward(const AttentionParams& p, cudaStream_t stream) {
  validate(p);
  // A program's keys and query rows are its own request's, so stage 02 is batch-invariant as it
  // stands (p.batch_invariant needs nothing).
  check_device_batch(p, "stage 02", stream);
  const dim3 grid(p.batch.num_requests, (p.batch.max_query_len + BLOCK_Q - 1) / BLOCK_Q, p.num_q_heads);
  switch (p.kv.head_dim) {
    case 64: launch(fused_paged_kernel<64>, grid, dim3(NUM_THREADS), 0, stream, p); break;
    case 128: launch(fused_paged_kernel<128>, grid, dim3(NUM_THREADS), 0, stream, p); break;
    case 256: launch(fused_paged_kernel<256>, grid, dim3(NUM_THREADS), 0, stream, p); break;
    default: throw Error("stage 02: head_dim " + std::to_string(p.kv.head_dim) + " is not supported (64, 128, 256)");
  }
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("02_fused_paged");
}

}  // namespace pa::stage02
