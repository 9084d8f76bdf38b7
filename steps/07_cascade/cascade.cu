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
// choose_path() and forward() (2-3 launches: gather, prefix pass, suffix pass,
// plus a merge when the suffix pass is split; with the going-further prefix
// pass of prefix_warpgroup.cuh, no gather, and the suffix pass started while
// the prefix pass runs, or for some decode batches on a second stream beside
// it, then one merge kernel).
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "cascade.cuh"
#include "solutions/04_split_kv/split_kv_warps.cuh"
#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"

namespace pa::stage07 {
namespace {

using stage03::Packing;

// The cost model's figures, from an H200 (132 SMs), fitted on the grid of the
// stage README (P x B x S, Qwen3-8B shape; measured on 2026-11-30 with stages
// 04-08's two-warp decode tile, the tests' classic grid): it picks the faster
// path in 43 of the 45 cells, and its worst pick is 1.055x the faster path.
// Each pass of either path costs a launch,
// its programs' start-up once per wave, and the slowest of three limits: its
// bytes at the read rate, its FLOPs at the MMA rate, and its longest program's
// keys at one program's per-key latency. The last one decides small decode
// batches: 8 requests x 8 KV heads fill at most one wave, so a plain decode takes
// as long as its longest split, not as long as its bytes. Other GPUs scale the
// rates by their SM count; the latencies stay.
constexpr double H200_READ_BYTES_PER_S = 4.6e12;  // the bench's streaming-read probe (4599 GB/s)
constexpr double H200_TILE_FLOP_PER_S = 1.8e14;   // mma.sync in 128-row tiles, all SMs
constexpr double DECODE_TILE_KEY_S = 50e-9;       // one key through one 16-row (decode) program
constexpr double PREFILL_TILE_KEY_S = 28e-9;      // one key through one 128-row program, when rows are few
constexpr double LAUNCH_S = 3e-6;                 // one kernel launch: gather, a pass, a merge
constexpr double PROGRAM_START_S = 6e-6;          // per wave: the Q tile's load and the K/V ring's fill
constexpr double PREFIX_SPLIT_MERGE_S = 0.4e-6;   // per prefix split: the suffix pass merges them one by one
// The warpgroup prefix pass ("going further", prefix_warpgroup.cuh), fitted on
// the grid measured with it on 2026-12-01 at 01:31 UTC (44 of 45 cells, worst
// 1.02x); on the grid the tests embed (04:05 UTC, after its loop was
// pipelined) the same constants score 44 of 45, worst 1.05x.
// Its decode steps run the suffix pass beside the prefix pass and then a merge
// kernel, so the model takes the slower pass plus the join.
constexpr double H200_WARPGROUP_FLOP_PER_S = 2.6e14;  // wgmma in 64/128-row tiles, all SMs (measured at P 16384, B 256)
constexpr double WARPGROUP_ROW_KEY_S = 0.05e-9;       // one key through one program, per tile row
constexpr double WARPGROUP_START_S = 2e-6;            // per wave: Q's gathered load, the ring's fill
constexpr double JOIN_S = 7e-6;                       // the second stream's join and the merge kernel
constexpr double WARPGROUP_SPLIT_MERGE_S = 0.2e-6;    // per prefix split, in the merge kernel
// Decodes whose suffix pass merges in its epilogue (fused_merge_pays) run it
// after the prefix pass instead; its programs then wait there for the prefix
// partials, about this long per full wave of them (fitted on the grid of
// 2026-12-01 11:19 UTC: 64 members pay ~5 us more than 8 beyond their bytes).
constexpr double FUSED_MERGE_WAVE_S = 5e-6;
constexpr int H200_SMS = 132;

// A GQA-packed tile of stage 03 for `rows` rows per request (tokens x padded
// heads): the 16-row decode tile when they fit it (stage 04 runs 4 per SM),
// else 128-row tiles (one per SM).
struct TileShape {
  int rows, per_sm;
};
TileShape tile_shape(int rows) { return rows <= 16 ? TileShape{16, stage04::PROGRAMS_PER_SM} : TileShape{128, 1}; }
// The warpgroup prefix tile (prefix_warpgroup.cuh): 64 rows, two per SM, or 128, one per SM.
TileShape warpgroup_shape(int rows) { return warpgroups_for(rows) == 1 ? TileShape{64, 2} : TileShape{128, 1}; }

// How the prefix pass cuts the prefix: enough splits for one wave of its tiles,
// in whole 64-key tiles. plan() uses it for the batch (its largest group), and
// choose_path() for one group, so the model times the launch that will run.
struct PrefixSplitPlan {
  TileShape tile;
  int query_tiles, keys_per_split, num_splits;
};

// ceil(a / b) for a >= 0, b >= 1, in 64 bits: a prefix may be up to INT_MAX
// positions long, and a + b - 1 must not wrap.
long long ceil_div64(long long a, long long b) { return (a + b - 1) / b; }

PrefixSplitPlan prefix_split_plan(const AttentionParams& p, int group_tokens, int prefix_len, int num_groups,
                                  int num_sms, bool warpgroup) {
  const int group_pad = 1 << stage03::log2_ceil(p.num_q_heads / p.kv.num_kv_heads);
  // 64 bits: tokens x padded group passes INT_MAX from 2^25 tokens. The shapes only ask whether the rows fit 16 or 64.
  const long long rows = static_cast<long long>(group_tokens) * group_pad;
  const int shape_rows = static_cast<int>(std::min<long long>(rows, 128));
  const TileShape tile = warpgroup ? warpgroup_shape(shape_rows) : tile_shape(shape_rows);
  const long long query_tiles = ceil_div64(rows, tile.rows);
  const long long tiles = query_tiles * p.kv.num_kv_heads * num_groups;
  const int wanted = static_cast<int>(std::clamp<long long>(tile.per_sm * num_sms / std::max(1LL, tiles), 1, stage04::MAX_SPLITS));
  const int keys = static_cast<int>(std::max(64LL, ceil_div64(ceil_div64(prefix_len, wanted), 64) * 64));  // whole 64-key tiles
  return {tile, static_cast<int>(query_tiles), keys, static_cast<int>(ceil_div64(prefix_len, keys))};
}

void fail(const std::string& msg) { throw Error("stage 07: " + msg); }

}  // namespace

Path choose_path(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len, int num_sms,
                 bool warpgroup_prefix) {
  // TODO 4: the cost model: cascade when gather + prefix pass + suffix pass beat the plain pass; each pass = launch + start-up per wave + max(bytes, FLOPs, longest program's keys)
  (void)p, (void)members, (void)prefix_len, (void)queries, (void)suffix_len, (void)num_sms, (void)warpgroup_prefix;
  PA_TODO_HOST(4, "07_cascade");
}

Cascade plan(const AttentionParams& p, const BatchMeta& meta, const std::vector<PrefixGroup>& groups, int force,
             bool warpgroup_prefix) {
  PA_REQUIRE(!p.batch_invariant,
             "stage 07: cascade has no batch-invariant mode: its prefix pass runs a request's queries with the "
             "rest of its group, so its bits depend on the group by design; use stages 04-06 or 08 for that");
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
  c.warpgroup_prefix = warpgroup_prefix && warpgroup_prefix_serves(p);
  const int num_sms = stage04::sm_count();
  std::vector<int> qsl{0}, seq, plens, table, rows, suffix_begin(R, 0), row_of(meta.num_tokens, -1);
  for (const PrefixGroup& grp : groups) {
    // Sums over the members in 64 bits: each member's suffix fits an int, their sum need not.
    long long queries = 0, suffix = 0;
    for (int m : grp.members) queries += meta.q_len(m), suffix += meta.seq_lens[m] - meta.q_len(m) - grp.prefix_len;
    const int n = static_cast<int>(grp.members.size());
    const Path path = force == 1   ? Path::cascade
                      : force == 0 ? Path::plain
                                   : choose_path(p, n, grp.prefix_len, static_cast<int>(ceil_div64(queries, n)),
                                                 static_cast<int>(suffix / n), num_sms, c.warpgroup_prefix);
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
    c.max_prefix_blocks = std::max(c.max_prefix_blocks, static_cast<int>(grp.blocks.size()));
  }
  c.num_groups = static_cast<int>(plens.size());
  c.num_tokens = static_cast<int>(rows.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (c.paths[g] == Path::plain) continue;
    std::vector<int> ids = groups[g].blocks;
    ids.resize(c.max_prefix_blocks, ids.front());  // padding entries past the prefix are never read
    table.insert(table.end(), ids.begin(), ids.end());
  }
  for (int r = 0; r < R; ++r) c.max_own_keys = std::max(c.max_own_keys, meta.seq_lens[r] - suffix_begin[r]);
  // Prefix splits: enough programs for one wave of the prefix pass's tiles.
  if (c.num_groups > 0) {
    const PrefixSplitPlan pre =
        prefix_split_plan(p, c.max_group_tokens, c.max_prefix_len, c.num_groups, num_sms, c.warpgroup_prefix);
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
             "rest of its group, so its bits depend on the group by design; use stages 04-06 or 08 for that");
  check_device_batch(p, "stage 07", stream);
  PA_REQUIRE(p.window == 0, "stage 07: no sliding window (see plan())");
  PA_REQUIRE(p.sinks == nullptr, "stage 07 implements causal attention without sinks (stage 08 adds them)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             std::string("stage 07: a ") + name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  PA_REQUIRE(c.suffix_begin.size() >= static_cast<size_t>(p.batch.num_requests),
             "stage 07: the cascade plan was made for another batch");
  // Split decodes cut the keys of the suffix pass: each request's own keys.
  const int span = std::max(1, c.max_own_keys);
  switch (p.kv.format) {
    case KvFormat::bf16: forward_with<stage04::Bf16SplitTiles>(p, pk, c, span, stream); break;
    case KvFormat::int8: forward_with<stage05::QuantizedTiles<KvFormat::int8>>(p, pk, c, span, stream); break;
    case KvFormat::fp8_e4m3: forward_with<stage05::QuantizedTiles<KvFormat::fp8_e4m3>>(p, pk, c, span, stream); break;
  }
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("07_cascade");
}

}  // namespace pa::stage07
