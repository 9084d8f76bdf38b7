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
#include "side_stream.h"

#include <memory>
#include <vector>

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
// Attention over an int8 or fp8_e4m3 cache, dequantized in registers: decode-only
// batches that stage 04's plan splits run the split path, everything else whole
// query tiles. bf16 caches are stage 04's (or the engine's); no sliding window
// (stage 06), no sinks, no batch-invariant mode: the engine composes those.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
// num_splits 0 = as above; 1..64 forces the split path with that many splits
// (decode-only batches; for tests).
void forward(const AttentionParams& p, cudaStream_t stream, int num_splits);
}  // namespace stage05

namespace stage06 {
// Sliding-window attention (p.window > 0: a query at q_pos sees keys k_pos <=
// q_pos with q_pos - k_pos < window; 0 = no window) over bf16 caches. The key
// loop starts at the block holding the first key of the oldest query's window,
// so a windowed decode reads only ~window keys. Decode-only batches that the
// split plan splits run stage 04's split-KV over the window only, everything
// else stage 03's tiles. No sinks; 8-bit caches and batch-invariant mode with a
// window are the engine's (engine/engine.h): refused here with that message.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
// num_splits 0 = as above; 1..64 forces the split path (decode-only batches; for tests).
void forward(const AttentionParams& p, cudaStream_t stream, int num_splits);
// The split plan for p (stage 04's rule, over the window's span when p.window > 0).
stage04::SplitPlan plan(const AttentionParams& p, int num_sms);
}  // namespace stage06

namespace stage07 {
// Cascade attention for shared prefixes. Requests whose contexts start with the
// same cached prefix (a system prompt), stored once in shared blocks, read it
// once for the whole group: all of the group's queries (tokens x GQA heads as
// tile rows) attend to the prefix in one pass, each request attends to its own
// suffix, and the two partial states merge by log-sum-exp (fused into the
// suffix pass's epilogue).
using PrefixGroup = ::pa::PrefixGroup;  // common/problem.h

// The cost model's verdict for one group.
enum class Path : int8_t {
  plain,    // the members read the prefix through their own tables (as stage 04 would)
  cascade,  // the prefix pass reads it once for the group
};

// A validated cascade for one batch, on the device. Built on the host once per
// batch from the host copy of the metadata (like a serving engine's per-step
// plan), outside the decode step itself. Move-only.
struct Cascade {
  std::vector<Path> paths;   // [num groups] the path each group takes
  int num_groups = 0;        // groups on the cascade path (the prefix pass's grid z)
  int num_tokens = 0;        // query tokens of those groups (rows of the gathered queries)
  int max_group_tokens = 0;
  int max_prefix_len = 0;
  int max_prefix_blocks = 0;
  int num_prefix_splits = 1;    // the prefix pass cuts each prefix into this many key ranges
  int prefix_keys_per_split = 0;
  int max_own_keys = 0;         // the most keys a request reads in the suffix pass (its suffix, or all when plain)
  bool warpgroup_prefix = false;  // planned for the engine's prefix pass on stage 09's tile (engine::plan_cascade)
  DeviceBuffer<bf16> q;                 // [num_tokens, Hq, D]  the cascaded queries, gathered group by group
  DeviceBuffer<int> gather_rows;        // [num_tokens]         batch row of each gathered query
  DeviceBuffer<int> query_start_loc;    // [num_groups + 1]     gathered rows of each group
  DeviceBuffer<int> seq_lens;           // [num_groups]         prefix_len + the group's queries (positions after the prefix)
  DeviceBuffer<int> prefix_lens;        // [num_groups]
  DeviceBuffer<int> block_table;        // [num_groups, max_prefix_blocks]  the prefixes' blocks
  DeviceBuffer<int> gathered_row_of;    // [batch num_tokens]   gathered row of a batch row, -1 if not cascaded
  DeviceBuffer<int> suffix_begin;       // [num_requests]       first key of each request's own pass (0 or prefix_len)
  DeviceBuffer<float> part_o;           // [num_prefix_splits, num_tokens, Hq, D]  normalized prefix partials
  DeviceBuffer<float> part_lse;         // [num_prefix_splits, num_tokens, Hq]     their lse (-inf when empty)
  // The suffix pass of a decode batch: stage 04's split plan over each request's own keys,
  // made here once, and its partials when it splits (forward() allocates nothing).
  int num_sms = 0;                      // the SM count the plan was made for
  int suffix_splits = 1;
  int suffix_keys_per_split = 0;
  DeviceBuffer<float> suffix_o;         // [suffix_splits, batch num_tokens, Hq, D]
  DeviceBuffer<float> suffix_lse;       // [suffix_splits, batch num_tokens, Hq]
  // A second stream for a suffix pass that runs beside the prefix pass (the engine's prefix
  // pass, engine/compose_cascade.cuh); null when the plan runs the passes in one stream.
  std::unique_ptr<SideStream> side;
};

// force: -1 = the cost model decides per group, 0 = every group plain, 1 = every group cascaded.
// Throws pa::Error naming the group and request before anything touches the device: a group with
// no members or no prefix, a member listed twice or in two groups, a request index out of range, a
// member whose table does not start with the group's blocks, a prefix that reaches into a member's
// new tokens (prefix_len > seq_len - q_len), a sliding window (not supported with cascade).
// Sinks are accepted here and refused by forward(); engine::run_cascade runs them.
// prefix_pass: another kernel for the prefix pass (the engine's, engine::plan_cascade); nullptr =
// this stage's own, stage 03's tiles.
struct PrefixPassModel;
Cascade plan(const AttentionParams& p, const BatchMeta& meta, const std::vector<PrefixGroup>& groups,
             int force = -1, const PrefixPassModel* prefix_pass = nullptr);
// The cost model alone (no device work): the path a group of `members` requests sharing
// `prefix_len` positions would take, each with `queries` query tokens and `suffix_len`
// positions after the prefix, on a device with num_sms SMs, with stage 03's tiles for the prefix.
Path choose_path(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len, int num_sms);

// A GQA-packed tile as the cost model sees it: its rows, how many programs share
// an SM, and the multiple a prefix split's keys are rounded to (its key ranges
// begin at whole K/V tiles).
struct TileShape {
  int rows, per_sm;
  int key_multiple = 64;
};
// What plan() needs to know of another prefix pass: whether it serves the batch,
// the tile it runs for a group's rows (the prefix splits are sized for it), and
// its cost model's verdict for one group (choose_path's arguments).
struct PrefixPassModel {
  bool (*serves)(const AttentionParams& p);
  TileShape (*tile)(const AttentionParams& p, int group_rows);  // p: its head_dim, for tiles that depend on it
  Path (*choose)(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len, int num_sms);
};
// Attention over any batch of bf16, int8 or fp8_e4m3 caches with the plan's groups.
void forward(const AttentionParams& p, const Cascade& c, cudaStream_t stream = nullptr);
}  // namespace stage07

namespace stage08 {
// Attention sinks over bf16 caches, on the paths of stages 03, 04 and 06.
//  (a) Learned sink logits (gpt-oss): p.sinks[h] joins row h's softmax
//      denominator and adds no value, o = sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sink_h});
//      not multiplied by softmax_scale. Added exactly once per row: in the
//      epilogue of whole-context tiles, in split 0's partial of split-KV (also
//      when that split saw no key). The returned lse INCLUDES the sink:
//      log(sum_j e^{s_j} + e^{sink_h}). A row that sees no key gives o = 0 and lse = sink_h.
//  (b) Sink tokens (StreamingLLM): with a window, the first p.sink_tokens
//      positions stay visible to every query. Decode batches read only those
//      positions' blocks and the window (a split of their own); prefill tiles
//      start at key 0 and skip the math of tiles between the two.
// Any window (0 = none). 8-bit caches, batch-invariant mode and cascade with
// sinks are the engine's (engine/engine.h): refused here with that message.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
// num_splits 0 = automatic, 1..64 forces the split path (decode-only batches; for tests).
void forward(const AttentionParams& p, cudaStream_t stream, int num_splits);
}  // namespace stage08

namespace stage09 {
// Stage 03's 128-row tile on Hopper's machinery: a producer warpgroup copies K/V
// tiles with TMA into a ring of shared-memory slots guarded by mbarriers, two
// consumer warpgroups (three, 192 rows, at head_dim 64) multiply with wgmma and
// take turns on the tensor core.
// bf16 caches, causal, any batch (decodes ride in its tiles); no window,
// no sinks. Runs on sm_90a GPUs and on the CPU runtime.
void forward(const AttentionParams& p, cudaStream_t stream = nullptr);
}  // namespace stage09

}  // namespace pa
