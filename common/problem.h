// Host-side inputs: the attention configuration, batch metadata with its
// validation, and the builders that make test and benchmark batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attention_params.h"

namespace pa {

// Model shape and kernel options shared by every request of a batch.
struct AttentionConfig {
  int num_q_heads = 32;   // Qwen3-8B: 32 query heads
  int num_kv_heads = 8;   //           8 KV heads (group of 4)
  int head_dim = 128;
  int block_size = 16;    // tokens per KV-cache block
  int window = 0;         // sliding window in positions, 0 = none
  bool with_sinks = false;  // one learned sink logit per query head
  int sink_tokens = 0;      // with a window: the first sink_tokens positions stay visible (StreamingLLM)
  KvFormat kv_format = KvFormat::bf16;  // how the cache stores K/V (stage 05: int8, fp8_e4m3)

  int group() const { return num_q_heads / num_kv_heads; }
  float softmax_scale() const;
  // Bytes of K+V for one token of one layer in this cache format: per KV head,
  // head_dim bf16 values, or head_dim 1-byte codes plus one fp32 scale.
  size_t kv_token_bytes() const;
  std::string describe() const;
};

// Batch metadata, host copy. Shapes as in attention_params.h.
struct BatchMeta {
  std::vector<int> query_start_loc;  // [R + 1]
  std::vector<int> seq_lens;         // [R]
  std::vector<int> block_table;      // [R, max_blocks_per_seq]
  std::vector<int> slot_mapping;     // [num_tokens], -1 for padding rows
  int num_tokens = 0;
  int max_blocks_per_seq = 0;
  int max_query_len = 0;
  int max_seq_len = 0;
  bool decode_only = false;

  int num_requests() const { return static_cast<int>(seq_lens.size()); }
  int q_len(int r) const { return query_start_loc[r + 1] - query_start_loc[r]; }
  int block_id(int r, int pos, int block_size) const {
    return block_table[static_cast<size_t>(r) * max_blocks_per_seq + pos / block_size];
  }
};

// Throws pa::Error with a message that names the request and the broken rule
// (negative lengths, seq_len < q_len, a block table too short for seq_len, block
// ids out of range, slot_mapping that disagrees with the block table, maxima
// smaller than the data, Hq % Hkv != 0, unsupported head_dim or block_size).
void validate(const BatchMeta& meta, const AttentionConfig& cfg, int num_blocks);
void validate_config(const AttentionConfig& cfg);

// A complete input on the host: metadata, queries, this step's new K/V, and the
// cache as it was before this step (history written, every other slot NaN so a
// stray read poisons the output).
// 8-bit formats (cfg.kv_format int8 / fp8_e4m3): k_cache / v_cache still hold the
// full-precision history (the same values a bf16 Problem with the same seed has),
// which the oracle's full-precision mode reads; the cache the kernels see is
// k_codes / k_scale, that history quantized with common/quant.cuh. Unused slots:
// codes 0xFF and scale NaN, so a stray read dequantizes to NaN.
struct Problem {
  AttentionConfig cfg;
  BatchMeta meta;
  int num_blocks = 0;
  std::vector<bf16> q;        // [num_tokens, num_q_heads, head_dim]
  std::vector<bf16> k_new;    // [num_tokens, num_kv_heads, head_dim]  written through slot_mapping
  std::vector<bf16> v_new;    // [num_tokens, num_kv_heads, head_dim]
  std::vector<bf16> k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  std::vector<bf16> v_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  std::vector<float> sinks;   // [num_q_heads] when cfg.with_sinks, else empty
  std::vector<uint8_t> k_codes, v_codes;  // [num_blocks, block_size, num_kv_heads, head_dim]  8-bit formats only
  std::vector<float> k_scale, v_scale;    // [num_blocks, block_size, num_kv_heads]            8-bit formats only

  size_t kv_token_bytes() const { return cfg.kv_token_bytes(); }
  size_t kv_bytes_read() const;   // K/V bytes a read-once kernel must load: sum of seq_lens, or with
                                  //   cfg.window > 0 of the keys some query sees, min(seq_len, q_len + window - 1)
                                  //   plus the sink tokens before the oldest query's window
  double attended_pairs() const;  // (query, key) pairs the softmax covers: causal, inside the window or
                                  //   among the sink tokens
};

// Requests whose contexts start with the same cached prefix, stored once in
// shared blocks (stage 07's cascade).
struct PrefixGroup {
  std::vector<int> blocks;   // the prefix's physical block ids: ceil(prefix_len / block_size) of them
  int prefix_len = 0;        // shared positions [0, prefix_len); may end inside the last block, whose
                             //   later slots each member reads as part of its own suffix
  std::vector<int> members;  // request indices; each one's block table starts with `blocks`
};

// One request: (q_len, seq_len). q_len == seq_len is a full prompt, 1 a decode.
struct RequestShape {
  int q_len;
  int seq_len;
};

struct BuildOptions {
  uint64_t seed = 1;
  int padding_rows = 0;      // extra rows after the last request (exact-zero outputs)
  bool shuffle_blocks = true;  // block tables are a random permutation, never the identity
  bool fill_values = true;   // false: leave q/K/V unset (benchmarks fill on the device)
};

Problem make_problem(const AttentionConfig& cfg, const std::vector<RequestShape>& requests,
                     const BuildOptions& opt = {});

// Makes prefixes physically shared (stage 07's batches). Each entry is
// (members, prefix_len): the members' first ceil(prefix_len / block_size) table
// entries become the first member's, so every member reads the first member's
// cached K/V at those blocks' positions (the prefix, and the slots after it in a
// last block that the prefix fills only in part). The blocks no table references
// any more are poisoned like unused slots (NaN; 8-bit: codes 0xFF, scale NaN).
// Returns the groups in the order given, `blocks` = the shared ids.
// Throws pa::Error naming the group and request for: no members, prefix_len < 1,
// a request index out of range, a request listed twice (in one group or two),
// prefix_len > seq_len - q_len (the prefix must be history), a new token
// (position >= seq_len - q_len) that would land in a shared block (members would
// write different K/V into one slot), and a member whose cached positions in the
// shared blocks reach past the first member's (it would read unwritten slots).
std::vector<PrefixGroup> share_prefixes(Problem& p, const std::vector<std::pair<std::vector<int>, int>>& groups);

// The smallest suffix (cached positions after the prefix, before the first new
// token) that keeps new tokens out of the shared blocks: 0 when prefix_len is a
// multiple of block_size, else up to the end of the prefix's last block.
int min_suffix_len(int prefix_len, int block_size);
// `members` requests that share `prefix_len` cached positions, each with
// `suffix_len` cached positions of its own after them and then q_len new tokens
// (seq_len = prefix_len + suffix_len + q_len). Throws pa::Error when suffix_len <
// min_suffix_len (the new tokens would land in a shared block).
std::vector<RequestShape> shared_prefix_requests(int members, int prefix_len, int suffix_len, int q_len,
                                                 int block_size);
// The same with q_len 1: decodes at position prefix_len + suffix_len.
std::vector<RequestShape> shared_prefix_decodes(int members, int prefix_len, int suffix_len, int block_size);

// The chapter's milestone batch: a mid-prefill chunk (16 queries at positions
// 24..39), a full 16-token prompt, a 21-token prompt, decodes at 70 and 130.
std::vector<RequestShape> milestone_requests();
// The main job's and the benchmark's mixed batch: two prefill chunks (512
// queries at the end of 4096 and of 2048 positions) and 30 decodes at 1024 ..
// 4736 tokens; every length divided by `shrink` for CPU-sized runs.
std::vector<RequestShape> mixed_chunks_and_decodes(int shrink = 1);
// R decodes at the same context length.
std::vector<RequestShape> decode_requests(int num_requests, int context_len);
// A reproducible mix of prefill chunks, full prompts and decodes.
std::vector<RequestShape> random_mixed_requests(uint64_t seed, int num_requests, int max_seq_len);

}  // namespace pa
