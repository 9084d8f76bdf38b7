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

}  // namespace pa
