// The data model: every tensor the kernels see, with its shape, in one place.
//
// A batch is flattened: the query tokens of all requests are concatenated, and
// request r owns rows [query_start_loc[r], query_start_loc[r+1]). Its q_len
// queries are the LAST q_len of its seq_len positions, so query i of request r
// sits at position  q_pos = seq_len[r] - q_len[r] + i  and may attend to keys at
// positions <= q_pos (causal by position). A decode is q_len = 1; a prefill chunk
// is q_len < seq_len with q_len > 1; a full prompt is q_len = seq_len.
// Rows [query_start_loc[R], num_tokens) are padding (e.g. a CUDA-graph batch
// rounded up): they belong to no request and their output is exactly zero.
//
// K and V live in a paged cache: fixed-size blocks of block_size token slots.
// Request r's position p is in physical block block_table[r][p / block_size], at
// offset p % block_size. Slot s = block * block_size + offset.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(PA_HOST_CUDA_HEADERS)
#include <cuda_bf16.h>
#endif

namespace pa {

using bf16 = __nv_bfloat16;

// Batch metadata on the device, plus the host-side sizes a launcher needs.
struct BatchView {
  const int* query_start_loc;  // [num_requests + 1]  prefix sums of q_len, starts at 0
  const int* seq_lens;         // [num_requests]      context length incl. this step's queries
  const int* block_table;      // [num_requests, max_blocks_per_seq]  physical block ids
  const int* slot_mapping;     // [num_tokens]        slot each new token's K/V is written to, -1 = none
  int num_requests;
  int num_tokens;              // rows of q/out, >= query_start_loc[num_requests]
  int first_padding_row;       // query_start_loc[num_requests]; rows from here on are padding
  int max_blocks_per_seq;      // row stride of block_table
  int max_query_len;           // max over r of q_len (upper bound)
  int max_seq_len;             // max over r of seq_len (upper bound)
  bool decode_only;            // every q_len <= 1
};

// How the cache stores K and V (stage 05). The 8-bit formats keep one byte per
// element plus one fp32 scale per (token, KV head), symmetric around zero:
// value = code * scale (common/quant.cuh has the exact rules).
enum class KvFormat : uint8_t {
  bf16,      // k_cache / v_cache hold the values
  int8,      // k_codes / v_codes hold int8 codes, scale = max|x| / 127
  fp8_e4m3,  // k_codes / v_codes hold e4m3 codes, scale = max|x| / 448
};

// The paged KV cache. One slot = one token's rows of all KV heads; slot s is
// block s / block_size, offset s % block_size. The first six members come first
// so that PagedKV{k, v, blocks, block_size, heads, dim} still builds a bf16 cache.
struct PagedKV {
  bf16* k_cache;   // [num_blocks, block_size, num_kv_heads, head_dim]  bf16 format; null for 8-bit
  bf16* v_cache;   // [num_blocks, block_size, num_kv_heads, head_dim]  bf16 format; null for 8-bit
  int num_blocks;
  int block_size;    // power of two, 1..256
  int num_kv_heads;
  int head_dim;      // a multiple of 16, 16..256 (supported_head_dim)
  KvFormat format = KvFormat::bf16;
  uint8_t* k_codes = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] one byte per element, null for bf16
  uint8_t* v_codes = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] one byte per element, null for bf16
  float* k_scale = nullptr;    // [num_blocks, block_size, num_kv_heads] per (token, KV head), null for bf16
  float* v_scale = nullptr;    // [num_blocks, block_size, num_kv_heads] per (token, KV head), null for bf16
};

// Head sizes the course's caches and kernels take: rows of 16-byte chunks of
// bf16 pairs and of 8-bit codes alike, up to 256 values. The tensor-core tiles
// (stages 03-08) pad a row to 64, 128 or 256 values in shared memory; the cache
// and q/out keep exactly head_dim values per row.
constexpr bool supported_head_dim(int head_dim) { return head_dim >= 16 && head_dim <= 256 && head_dim % 16 == 0; }

// Everything an attention launcher receives, passed to kernels by value.
struct AttentionParams {
  const bf16* q;      // [num_tokens, num_q_heads, head_dim]
  bf16* out;          // [num_tokens, num_q_heads, head_dim]
  float* lse;         // [num_tokens, num_q_heads]  natural-log log-sum-exp of the scaled scores;
                      //   -inf for padding rows; may be null when not wanted
  PagedKV kv;
  BatchView batch;
  int num_q_heads;    // a multiple of kv.num_kv_heads; query head h uses KV head h / group
  float softmax_scale;  // usually 1/sqrt(head_dim)
  int window;         // sliding window in positions (key kept if q_pos - k_pos < window); 0 = none
  const float* sinks;  // [num_q_heads] one learned sink logit per query head (natural-log units, not
                       //   multiplied by softmax_scale), or null (stage 08). Each is finite, or -inf
                       //   for "no sink" on that head. NaN or +inf would give a NaN output with a
                       //   finite or -inf lse, which an lse-based merge then drops without a trace;
                       //   the kernels do not test for it, a checked launch (below) refuses it.
  int sink_tokens = 0;  // with a window: the first sink_tokens positions stay visible to every query
                        //   (StreamingLLM's attention sinks, stage 08); 0 = none
  // Checked launch (common/checked_launch.h): before its attention kernels the launcher validates
  // the device copy of `batch` (block ids each request reads, query starts, lengths, the host-side
  // bounds) and of `sinks` (each finite or -inf) and throws pa::Error naming the first bad item.
  // Costs one small kernel and a host sync per launch; off, the device metadata is trusted as it
  // stands (a bad block id reads out of bounds).
  bool checked = false;
  // Batch-invariant mode (going_further/batch_invariant.cuh): each request's out and lse are
  // bitwise the same whatever batch it runs in. The engine (engine/engine.h) runs it for every
  // format, window and sink; stages 01 and 02 are invariant anyway; stages 03-08 refuse it,
  // naming the engine, and so does a cascade (its prefix pass serves a whole group).
  bool batch_invariant = false;
};

}  // namespace pa
