// Stage 07's cost model, the pieces: a device's figures and the time of one
// launch. choose_path() (cascade.cu, TODO 4) composes them into the two paths'
// times; the engine's prefix pass on stage 09's tile (engine/compose_cascade.cuh)
// composes the same pieces with its own figures.
//
// A pass costs a launch, its programs' start-up once per wave, and the slowest
// of three limits: its bytes at the read rate, its FLOPs at the MMA rate, and
// its longest program's keys at one program's per-key latency. The last one
// decides small decode batches: 8 requests x 8 KV heads fill at most one wave,
// so a plain decode takes as long as its longest split, not as long as its
// bytes. Other GPUs scale the rates by their SM count; the latencies stay.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>

#include "common/attention_params.h"
#include "common/quant.cuh"  // is_quantized: the 8-bit caches' bytes (the engine plans them with this model)
#include "common/stages.h"
#include "solutions/03_gqa_packing/gqa_shapes.cuh"
#include "solutions/04_split_kv/split_kv.cuh"

namespace pa::stage07 {

// One device's figures (notes/07_cascade.md: how they were fitted, on which grid).
struct DeviceCosts {
  int sms;
  double read_bytes_per_s;      // the bench's streaming-read probe
  double tile_flop_per_s;       // mma.sync in 128-row tiles, all SMs
  double decode_tile_key_s;     // one key through one 16-row (decode) program
  double prefill_tile_key_s;    // one key through one 128-row program, when rows are few
  double launch_s;              // one kernel launch: gather, a pass, a merge
  double program_start_s;       // per wave: the Q tile's load and the K/V ring's fill
  double prefix_split_merge_s;  // per prefix split: the suffix pass merges them one by one
};
inline constexpr DeviceCosts H200_COSTS{132, 4.6e12, 1.8e14, 50e-9, 28e-9, 3e-6, 6e-6, 0.4e-6};

// A GQA-packed tile of stage 03 for `rows` rows per request (tokens x padded
// heads): the 16-row decode tile when they fit it (stage 04 runs 4 per SM),
// else 128-row tiles (one per SM). The shape of PrefixPassModel::tile, whose
// tiles may depend on p (stage 03's do not).
inline TileShape tile_shape(const AttentionParams& /*p*/, int rows) {
  return rows <= 16 ? TileShape{16, stage04::PROGRAMS_PER_SM} : TileShape{128, 1};
}

// ceil(a / b) for a >= 0, b >= 1, in 64 bits: a prefix may be up to INT_MAX
// positions long, and a + b - 1 must not wrap.
inline long long ceil_div64(long long a, long long b) { return (a + b - 1) / b; }

// How the prefix pass cuts the prefix: enough splits for one wave of its tiles
// (`shape` for a group's rows), in whole 64-key tiles. plan() uses it for the
// batch (its largest group), and the cost model for one group, so the model
// times the launch that will run.
struct PrefixSplitPlan {
  TileShape tile;
  int query_tiles, keys_per_split, num_splits;
};
inline PrefixSplitPlan prefix_split_plan(const AttentionParams& p, int group_tokens, int prefix_len, int num_groups,
                                         int num_sms,
                                         TileShape (*shape)(const AttentionParams&, int rows) = tile_shape) {
  const int group_pad = 1 << stage03::log2_ceil(p.num_q_heads / p.kv.num_kv_heads);
  // 64 bits: tokens x padded group passes INT_MAX from 2^25 tokens. The shapes only ask whether the rows fit 16 or 64.
  const long long rows = static_cast<long long>(group_tokens) * group_pad;
  const TileShape tile = shape(p, static_cast<int>(std::min<long long>(rows, 128)));
  const long long query_tiles = ceil_div64(rows, tile.rows);
  const long long tiles = query_tiles * p.kv.num_kv_heads * num_groups;
  const int wanted = static_cast<int>(
      std::clamp<long long>(tile.per_sm * num_sms / std::max(1LL, tiles), 1, stage04::MAX_SPLITS));
  const long long multiple = tile.key_multiple;
  // Rounded up to the multiple, one split of a prefix near INT_MAX would pass
  // INT_MAX: a split holds at most the largest multiple that fits an int.
  const long long max_keys = INT_MAX / multiple * multiple;
  const int keys = static_cast<int>(std::min(
      max_keys, std::max(multiple, ceil_div64(ceil_div64(prefix_len, wanted), multiple) * multiple)));
  return {tile, static_cast<int>(query_tiles), keys, static_cast<int>(ceil_div64(prefix_len, keys))};
}

// The times of one group's launches: `members` requests of `queries` query
// tokens each, on a device of num_sms SMs with the figures of `costs`.
struct PassTimes {
  const AttentionParams& p;
  int members, queries, num_sms;
  DeviceCosts costs = H200_COSTS;

  double scale() const { return static_cast<double>(num_sms) / costs.sms; }
  int group_pad() const { return 1 << stage03::log2_ceil(p.num_q_heads / p.kv.num_kv_heads); }
  // K and V of one position, all KV heads: bf16 values, or 1-byte codes and an fp32 scale.
  double token_bytes() const {
    return 2.0 * p.kv.num_kv_heads * (is_quantized(p.kv.format) ? p.kv.head_dim + sizeof(float) : 2.0 * p.kv.head_dim);
  }
  // Q K^T and P V of one query token against one key, all heads (padded rows included).
  double key_flops() const { return 4.0 * p.kv.num_kv_heads * group_pad() * p.kv.head_dim; }

  // One launch: its start-up per wave of programs, then its bytes, its FLOPs or its longest program.
  double pass(double programs, int per_sm, double keys, double key_s, double bytes, double flops, double flop_rate,
              double start_s) const {
    const double waves = std::ceil(programs / (static_cast<double>(per_sm) * num_sms));
    return costs.launch_s + waves * start_s +
           std::max({bytes / (costs.read_bytes_per_s * scale()), flops / (flop_rate * scale()), waves * keys * key_s});
  }

  // Every member's queries over `span` keys of its own, as the suffix pass (and
  // a plain decode) runs them: stage 04's split plan for decodes (and its merge
  // kernel when it splits, unless the caller merges: `merged`), else whole
  // query tiles over the whole span.
  double own_keys(int span, bool merged) const {
    const double bytes = static_cast<double>(members) * span * token_bytes();
    const int hkv = p.kv.num_kv_heads, bs = p.kv.block_size;
    if (queries == 1) {
      AttentionParams batch = p;
      batch.batch.num_requests = members;
      const stage04::SplitPlan sp = stage04::plan_rule(batch, num_sms, span);
      const double t = pass(static_cast<double>(sp.num_splits) * members * hkv, stage04::PROGRAMS_PER_SM,
                            static_cast<double>(sp.blocks_per_split) * bs, costs.decode_tile_key_s, bytes, 0.0, 1.0,
                            costs.program_start_s);
      return sp.num_splits > 1 && !merged ? t + costs.launch_s : t;
    }
    const TileShape tile = tile_shape(p, queries * group_pad());
    const long long query_tiles = ceil_div64(static_cast<long long>(queries) * group_pad(), tile.rows);
    return pass(static_cast<double>(query_tiles) * members * hkv, tile.per_sm,
                static_cast<double>(ceil_div64(span, bs)) * bs,
                tile.rows == 16 ? costs.decode_tile_key_s : costs.prefill_tile_key_s,
                static_cast<double>(query_tiles) * bytes, key_flops() * members * queries * span,
                costs.tile_flop_per_s, costs.program_start_s);
  }

  // The prefix pass of `pre`: every query tile of the group reads each prefix
  // key once; key_s is one key through one of its programs.
  double prefix_pass(const PrefixSplitPlan& pre, int prefix_len, double key_s, double flop_rate,
                     double start_s) const {
    return pass(static_cast<double>(pre.num_splits) * pre.query_tiles * p.kv.num_kv_heads, pre.tile.per_sm,
                pre.keys_per_split, key_s, static_cast<double>(pre.query_tiles) * prefix_len * token_bytes(),
                key_flops() * members * queries * prefix_len, flop_rate, start_s);
  }
};

}  // namespace pa::stage07
