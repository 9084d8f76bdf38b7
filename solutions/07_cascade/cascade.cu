// Stage 07: cascade attention for shared prefixes.
//
// 64 requests that share a 4000-token system prompt read it 64 times in a
// plain decode: 1 GB for Qwen3-8B, where 16 MB would do. Cascade attention
// reads the prefix once per group (cascade.cuh has the two passes). It costs
// two more launches and a prefix pass whose tiles do real tensor-core work
// (rows = the group's queries), so it loses on short prefixes and small groups:
// choose_path() is the cost model that decides per group, and a group it
// rejects simply reads its prefix in the suffix pass, as a plain decode would.
//
// This file: plan() (validation and the device metadata, once per batch),
// choose_path() (cost_model.cuh has its pieces) and forward() (2-3 launches:
// gather, prefix pass, suffix pass, plus a merge when the suffix pass is split).
// The engine's cascade (engine::plan_cascade, engine::run_cascade) plans the
// same groups for a prefix pass on stage 09's tile (engine/compose_cascade.cuh).
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "cascade.cuh"
#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
#include "solutions/07_cascade/cost_model.cuh"  // the model's pieces: not a file the learner edits

namespace pa::stage07 {
namespace {

using stage03::Packing;

void fail(const std::string& msg) { throw Error("stage 07: " + msg); }

}  // namespace

Path choose_path(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len, int num_sms) {
  //@ TODO 4: the cost model: cascade when gather + prefix pass + suffix pass (+ the prefix splits' merge) beat the plain pass; a group of one stays plain
  if (members < 2 || queries < 1) return Path::plain;  // a group of one reads its prefix once either way
  const PassTimes t{p, members, queries, num_sms};
  const double plain = t.own_keys(prefix_len + suffix_len + queries, false);
  const PrefixSplitPlan pre = prefix_split_plan(p, members * queries, prefix_len, 1, num_sms);
  const double key_s = pre.tile.rows == 16 ? t.costs.decode_tile_key_s : t.costs.prefill_tile_key_s;
  const double cascade = t.costs.launch_s /* the gather */ +
                         t.prefix_pass(pre, prefix_len, key_s, t.costs.tile_flop_per_s, t.costs.program_start_s) +
                         t.own_keys(suffix_len + queries, false) + pre.num_splits * t.costs.prefix_split_merge_s;
  return cascade < plain ? Path::cascade : Path::plain;
  //@ skeleton
  //@ (void)p, (void)members, (void)prefix_len, (void)queries, (void)suffix_len, (void)num_sms;
  //@ PA_TODO_HOST(4, "07_cascade");
  //@ end
}

Cascade plan(const AttentionParams& p, const BatchMeta& meta, const std::vector<PrefixGroup>& groups, int force,
             const PrefixPassModel* prefix_pass) {
  PA_REQUIRE(!p.batch_invariant,
             "stage 07: cascade has no batch-invariant mode: its prefix pass runs a request's queries with the "
             "rest of its group, so its bits depend on the group by design; the engine without groups has the mode");
  PA_REQUIRE(p.window == 0, "stage 07: cascade with a sliding window is not supported (the prefix pass would need "
                            "each member's window); run windowed batches through stage 06");
  PA_REQUIRE(force >= -1 && force <= 1, "stage 07: force is -1 (cost model), 0 (plain) or 1 (cascade)");
  // The head configuration, block_size and head_dim first: the cost model and
  // the split plan divide by the group size, and the partials are sized by head_dim.
  stage03::checked_packing(p, "07");
  const int R = meta.num_requests(), bs = p.kv.block_size;
  PA_REQUIRE(R == p.batch.num_requests && meta.num_tokens == p.batch.num_tokens,
             "stage 07: the host metadata does not describe the batch in AttentionParams");
  std::vector<int> group_of(R, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    const PrefixGroup& grp = groups[g];
    const std::string who = "prefix group " + std::to_string(g);
    if (grp.members.empty()) fail(who + " has no members");
    if (grp.prefix_len < 1) fail(who + " has prefix_len " + std::to_string(grp.prefix_len) + "; it needs >= 1");
    const long long nb = ceil_div64(grp.prefix_len, bs);  // 64 bits: prefix_len may be up to INT_MAX
    if (static_cast<long long>(grp.blocks.size()) != nb) {
      fail(who + " lists " + std::to_string(grp.blocks.size()) + " blocks; a prefix of " +
           std::to_string(grp.prefix_len) + " positions in blocks of " + std::to_string(bs) + " needs " +
           std::to_string(nb));
    }
    for (int b : grp.blocks) {
      if (b < 0 || b >= p.kv.num_blocks) fail(who + ": block id " + std::to_string(b) + " is out of range");
    }
    long long queries = 0;  // the group's, in 64 bits
    for (int m : grp.members) {
      if (m < 0 || m >= R) fail(who + ": member " + std::to_string(m) + " is not a request of this batch");
      queries += meta.q_len(m);
      if (group_of[m] != -1) {
        fail("request " + std::to_string(m) + " is a member of prefix groups " + std::to_string(group_of[m]) +
             " and " + std::to_string(g) + " (or listed twice)");
      }
      group_of[m] = static_cast<int>(g);
      const int history = meta.seq_lens[m] - meta.q_len(m);
      if (grp.prefix_len > history) {
        fail(who + ": request " + std::to_string(m) + " has " + std::to_string(history) +
             " cached positions before its queries, fewer than the prefix's " + std::to_string(grp.prefix_len));
      }
      for (int i = 0; i < nb; ++i) {
        const int id = meta.block_table[static_cast<size_t>(m) * meta.max_blocks_per_seq + i];
        if (id != grp.blocks[i]) {
          fail(who + ": request " + std::to_string(m) + "'s block table entry " + std::to_string(i) + " is block " +
               std::to_string(id) + ", not the prefix's block " + std::to_string(grp.blocks[i]));
        }
      }
    }
    // The prefix pass runs the group as one request whose queries follow the prefix: its length is an int.
    if (grp.prefix_len + queries > INT_MAX) {
      fail(who + ": prefix_len " + std::to_string(grp.prefix_len) + " and the group's " + std::to_string(queries) +
           " queries make a prefix pass of " + std::to_string(grp.prefix_len + queries) +
           " positions, past INT_MAX (the queries follow the prefix there)");
    }
  }

  Cascade c;
  // Another prefix pass only where it serves the batch; else stage 03's tiles and this stage's model.
  if (prefix_pass != nullptr && !prefix_pass->serves(p)) prefix_pass = nullptr;
  c.warpgroup_prefix = prefix_pass != nullptr;
  const auto choose = prefix_pass != nullptr ? prefix_pass->choose : choose_path;
  const int num_sms = stage04::sm_count();
  std::vector<int> qsl{0}, seq, plens, table, rows, suffix_begin(R, 0), row_of(meta.num_tokens, -1);
  for (const PrefixGroup& grp : groups) {
    // Sums over the members in 64 bits: each member's suffix fits an int, their sum need not.
    long long queries = 0, suffix = 0;
    for (int m : grp.members) queries += meta.q_len(m), suffix += meta.seq_lens[m] - meta.q_len(m) - grp.prefix_len;
    const int n = static_cast<int>(grp.members.size());
    const Path path = force == 1   ? Path::cascade
                      : force == 0 ? Path::plain
                                   : choose(p, n, grp.prefix_len, static_cast<int>(ceil_div64(queries, n)),
                                            static_cast<int>(suffix / n), num_sms);
    c.paths.push_back(queries == 0 ? Path::plain : path);
    if (c.paths.back() == Path::plain) continue;
    for (int m : grp.members) {
      suffix_begin[m] = grp.prefix_len;
      for (int t = meta.query_start_loc[m]; t < meta.query_start_loc[m + 1]; ++t) {
        row_of[t] = static_cast<int>(rows.size());
        rows.push_back(t);
      }
    }
    const int group_tokens = static_cast<int>(rows.size()) - qsl.back();
    qsl.push_back(static_cast<int>(rows.size()));
    seq.push_back(grp.prefix_len + group_tokens);
    plens.push_back(grp.prefix_len);
    c.max_group_tokens = std::max(c.max_group_tokens, group_tokens);
    c.max_prefix_len = std::max(c.max_prefix_len, grp.prefix_len);
    // The table spans the prefix pass's positions, its queries' included (see below).
    const long long spanned = ceil_div64(grp.prefix_len + static_cast<long long>(group_tokens), p.kv.block_size);
    c.max_prefix_blocks = std::max({c.max_prefix_blocks, static_cast<int>(grp.blocks.size()), static_cast<int>(spanned)});
  }
  c.num_groups = static_cast<int>(plens.size());
  c.num_tokens = static_cast<int>(rows.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (c.paths[g] == Path::plain) continue;
    std::vector<int> ids = groups[g].blocks;
    // Entries past the prefix repeat its first block. A correct prefix pass never
    // reads them; a key range not clipped to prefix_len (TODO 1) reads real,
    // wrong keys there, which the tests report, instead of an unmapped block.
    ids.resize(c.max_prefix_blocks, ids.front());
    table.insert(table.end(), ids.begin(), ids.end());
  }
  for (int r = 0; r < R; ++r) c.max_own_keys = std::max(c.max_own_keys, meta.seq_lens[r] - suffix_begin[r]);
  c.num_sms = num_sms;
  // The suffix pass of a decode batch: split as stage 04 splits it, over each request's own keys.
  if (p.batch.decode_only || p.batch.max_query_len <= 1) {
    const stage04::SplitPlan sp = stage04::plan_rule(p, num_sms, std::max(1, c.max_own_keys));
    c.suffix_splits = sp.num_splits;
    c.suffix_keys_per_split = sp.blocks_per_split * p.kv.block_size;
    if (sp.num_splits > 1) allocate_suffix_partials(c, p);
  }
  // Prefix splits: enough programs for one wave of the prefix pass's tiles.
  if (c.num_groups > 0) {
    const PrefixSplitPlan pre =
        prefix_split_plan(p, c.max_group_tokens, c.max_prefix_len, c.num_groups, num_sms,
                          prefix_pass != nullptr ? prefix_pass->tile : tile_shape);
    c.prefix_keys_per_split = pre.keys_per_split;
    c.num_prefix_splits = pre.num_splits;
    const size_t part_rows = static_cast<size_t>(c.num_prefix_splits) * c.num_tokens * p.num_q_heads;
    c.part_o.resize(part_rows * p.kv.head_dim);
    c.part_lse.resize(part_rows);
    c.q.resize(static_cast<size_t>(c.num_tokens) * p.num_q_heads * p.kv.head_dim);
    c.gather_rows.upload(rows);
    c.query_start_loc.upload(qsl);
    c.seq_lens.upload(seq);
    c.prefix_lens.upload(plens);
    c.block_table.upload(table);
  }
  c.gathered_row_of.upload(row_of.empty() ? std::vector<int>{-1} : row_of);
  c.suffix_begin.upload(suffix_begin.empty() ? std::vector<int>{0} : suffix_begin);
  return c;
}

void forward(const AttentionParams& p, const Cascade& c, cudaStream_t stream) {
  const Packing pk = stage03::checked_packing(p, "07");
  PA_REQUIRE(!p.batch_invariant,
             "stage 07: cascade has no batch-invariant mode: its prefix pass runs a request's queries with the "
             "rest of its group, so its bits depend on the group by design; the engine without groups has the mode");
  check_device_batch(p, "stage 07", stream);
  PA_REQUIRE(p.window == 0, "stage 07: no sliding window (see plan())");
  PA_REQUIRE(p.sinks == nullptr, "stage 07 implements causal attention without sinks (stage 08 adds them)");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             std::string("stage 07 implements cascade over bf16 caches (stage 03/04's tiles); a ") +
                 name(p.kv.format) +
                 " cache with shared prefixes is the engine's: engine::plan_cascade + run_cascade compose the "
                 "cascade with stage 05's tiles");
  PA_REQUIRE(c.suffix_begin.size() >= static_cast<size_t>(p.batch.num_requests),
             "stage 07: the cascade plan was made for another batch");
  forward_with<stage03::Bf16Tiles>(p, pk, c, stream);
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("07_cascade");
}

}  // namespace pa::stage07
