// The learner's contract: what each stage's launcher must do. The tests call
// only these functions; steps/NN_name (skeleton) and solutions/NN_name both
// implement them, and each test binary links one of the two.
//
// Every launcher: reads q and the paged cache described by `p`, writes out for
// every row (padding rows exactly 0) and lse when p.lse is not null, and
// throws pa::Error on what it cannot do, before any launch.
#pragma once

#include "attention_params.h"
#include "check.h"
#include "device_buffer.h"
#include "problem.h"

namespace pa {

namespace stage01 {
// The reference backend, slow in three countable ways: it copies each request's
// blocks into contiguous K/V (`ws`), launches per request, and every query head
// reads its KV head's keys and values on its own. Needs the host copy of the
// metadata to loop over requests.
struct Workspace {
  DeviceBuffer<bf16> k, v;  // [max seq_len, num_kv_heads, head_dim] each
};
void forward(const AttentionParams& p, const BatchMeta& meta, Workspace& ws, cudaStream_t stream = nullptr);
}  // namespace stage01

namespace stage02 {
// One launch for the whole flattened batch, K/V read through the block table,
// online softmax, the key loop stopping at each tile's last query.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
}  // namespace stage02

namespace stage03 {
// GQA packing on tensor cores: a program's tile rows are BLOCK_Q tokens x the
// (padded) query heads of one KV head's group, so each K/V tile is read once per
// group. Serves any mix of prefill chunks, full prompts and decodes.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
}  // namespace stage03

namespace stage04 {
// Split-KV (Flash-Decoding) for decode-only batches (every q_len <= 1; a longer
// query throws pa::Error naming the request). Program (request, KV head, split)
// runs stage 03's decode tile over one block-aligned slice of the context for
// the whole GQA group and writes a normalized partial output + lse; a merge
// kernel combines the splits.
struct SplitPlan {
  int num_splits;        // grid x of the split kernel; 1 = it writes out/lse itself, no merge
  int blocks_per_split;  // cache blocks per split: split s covers keys
                         //   [s * blocks_per_split * block_size, (s + 1) * ...) clipped to seq_len
};
// The dispatch rule (steps/04_split_kv/README.md): as many splits as fit one
// wave of 4 programs per SM (requests x KV heads x splits <= 4 x num_sms), each
// split >= 256 keys, at most 64.
SplitPlan plan(const AttentionParams& p, int num_sms);
// Exactly num_splits splits (1..64) over max_seq_len; some may be empty. For tests.
SplitPlan plan_fixed(const AttentionParams& p, int num_splits);
// Automatic plan from the current device's SM count.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
// num_splits 0 = automatic, else plan_fixed(p, num_splits).
void forward(const AttentionParams& p, cudaStream_t stream, int num_splits);
}  // namespace stage04

namespace stage05 {
// INT8 / FP8 (E4M3) caches: one byte per element plus one fp32 scale per (token,
// KV head) for K and for V (common/quant.cuh has the rule).
// The write path: quantizes this step's K/V head rows (k_new, v_new: [num_tokens,
// num_kv_heads, head_dim]) into kv's codes and scales at slot_mapping ([num_tokens],
// -1 = skip). kv.format must be int8 or fp8_e4m3.
void write_kv(const PagedKV& kv, const bf16* k_new, const bf16* v_new, const int* slot_mapping, int num_tokens,
              cudaStream_t stream = nullptr);
// Attention over a cache of any format (bf16, int8, fp8_e4m3), dequantized in
// registers: decode-only batches that stage 04's plan splits run the split path,
// everything else stage 03's tiles. No sliding window (stage 06), no sinks.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
// num_splits 0 = as above; 1..64 forces the split path with that many splits
// (decode-only batches; for tests).
void forward(const AttentionParams& p, cudaStream_t stream, int num_splits);
}  // namespace stage05

namespace stage06 {
// Sliding-window attention (p.window > 0: a query at q_pos sees keys k_pos <=
// q_pos with q_pos - k_pos < window; 0 = no window) over bf16, int8 or fp8_e4m3
// caches. The key loop starts at the block holding the first key of the oldest
// query's window, so a windowed decode reads only ~window keys. Dispatch as
// stage 05: decode-only batches that the split plan splits run split-KV over the
// window only, everything else stage 03's tiles. No sinks.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
// num_splits 0 = as above; 1..64 forces the split path (decode-only batches; for tests).
void forward(const AttentionParams& p, cudaStream_t stream, int num_splits);
// The split plan for p (stage 04's rule, over the window's span when p.window > 0).
stage04::SplitPlan plan(const AttentionParams& p, int num_sms);
}  // namespace stage06

}  // namespace pa
