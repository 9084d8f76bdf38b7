// The engine's host side: plan() picks the path and sizes the workspace once
// per batch shape; run() checks a step against its plan and hands it to the
// translation unit of its (format, sinks) pair.
#include <algorithm>
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/device_buffer.h"
#include "common/quant.cuh"
#include "compose.h"
#include "tuned_table.h"
#include "solutions/03_gqa_packing/gqa_shapes.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "going_further/batch_invariant.cuh"
#include "solutions/06_sliding_window/sliding_window.cuh"
#include "solutions/09_hopper_pipeline/hopper_pipeline.cuh"

namespace pa::engine {
namespace {

static_assert(TUNED_MAX_SPLITS == stage04::MAX_SPLITS, "a tuned table's split counts are stage 04's");

constexpr size_t WORKSPACE_ALIGN = 256;
size_t align_up(size_t bytes) { return (bytes + WORKSPACE_ALIGN - 1) / WORKSPACE_ALIGN * WORKSPACE_ALIGN; }

std::string str(long long v) { return std::to_string(v); }

void check_bounds(const Bounds& b) {
  PA_REQUIRE(b.num_requests >= 0 && b.num_tokens >= 0,
             "engine::plan: bounds num_requests " + str(b.num_requests) + " and num_tokens " + str(b.num_tokens) +
                 " must be >= 0");
  PA_REQUIRE(b.max_query_len >= 0, "engine::plan: bounds max_query_len " + str(b.max_query_len) + " is negative");
  PA_REQUIRE(b.max_seq_len >= b.max_query_len,
             "engine::plan: bounds max_seq_len " + str(b.max_seq_len) + " is below max_query_len " +
                 str(b.max_query_len) + " (a request's queries are the last of its positions)");
}

// The batch as the kernels see it: the plan's bounds as the host-side sizes.
AttentionParams bounded(const AttentionParams& p_in, const Bounds& b) {
  AttentionParams p = p_in;
  p.batch.num_requests = b.num_requests;
  p.batch.num_tokens = b.num_tokens;
  p.batch.max_query_len = b.max_query_len;
  p.batch.max_seq_len = b.max_seq_len;
  p.batch.decode_only = b.decode_only || b.max_query_len <= 1;
  if (p.window == 0) p.sink_tokens = 0;  // without a window every position is visible anyway
  return p;
}

// The mixed path's chunk programs per KV head when Options leaves the count to
// the plan. A chunk program fills its SM, so an SM either computes chunk tiles
// or reads decode keys, and the step ends when the slower side does: give the
// chunks the share f of the SMs at which both sides take as long. Per key
// position, a chunk row costs head_dim x 4 FLOP per query head and a decode
// reads head_dim x 4 bytes per KV head (bf16 K and V), so with G query heads
// per KV head the chunks' work over the decodes' is r = (rows x G / decodes) /
// kappa, where kappa is what an SM does of chunk FLOPs per byte a reading SM
// streams, and f = r / (1 + r). The bounds say how many rows are not the first
// of their request (num_tokens - num_requests, padding rows included), each
// chunk has at most max_query_len of them, and the rest of the requests are
// decodes. Bounds with no decodes keep one program per query tile.
int balanced_chunk_programs(const Bounds& b, int group, int num_kv_heads, int sms) {
  // Fitted on the H100 (notes/engine.md, 2026-12-07): the mixed batch's
  // fastest count (10 per KV head, three runs) lies at kappa 78-100.
  constexpr double kappa = 88.0;
  const long long extra_rows = static_cast<long long>(b.num_tokens) - b.num_requests;
  if (b.max_query_len <= 1 || extra_rows <= 0) return 0;
  const long long chunks = (extra_rows + b.max_query_len - 2) / (b.max_query_len - 1);
  const long long decodes = b.num_requests - chunks;
  const int most = sms / num_kv_heads;
  if (decodes <= 0 || most < 1) return 0;
  const double r = static_cast<double>(extra_rows + chunks) * group / decodes / kappa;
  const int n = static_cast<int>(r / (1.0 + r) * sms / num_kv_heads + 0.5);
  return std::clamp(n, 1, most);
}

// A tuned table serves only the layer shape it was measured on.
void check_table_shape(const TunedTable& t, const AttentionParams& p) {
  const TunedShape& s = t.shape();
  auto same = [&](int table_value, int value, const char* field) {
    PA_REQUIRE(table_value == value, "engine::plan: the tuned table was made for " + std::string(field) + " " +
                                         str(table_value) + ", this layer has " + str(value));
  };
  same(s.num_kv_heads, p.kv.num_kv_heads, "num_kv_heads");
  same(s.head_dim, p.kv.head_dim, "head_dim");
  same(s.block_size, p.kv.block_size, "block_size");
  PA_REQUIRE(s.format == p.kv.format, std::string("engine::plan: the tuned table was made for a ") +
                                          pa::name(s.format) + " cache, this layer's is " + pa::name(p.kv.format));
}

// The entry's split count over `span_keys`, whole blocks per split, with the
// splits that would be empty dropped (stage 04's rule rounds the same way).
stage04::SplitPlan tuned_split_plan(int span_keys, int block_size, int num_splits) {
  const int num_blocks = stage04::max_blocks(span_keys, block_size);
  const int blocks_per_split = stage04::ceil_div(num_blocks, num_splits);
  return stage04::SplitPlan{stage04::ceil_div(num_blocks, blocks_per_split), blocks_per_split};
}

// Whether the current device runs stage 09's sm_90a code: compute capability
// 9.0 (the CPU runtime reports 0.0).
bool device_is_sm90() {
  int device = 0, major = 0, minor = 0;
  PA_CHECK(cudaGetDevice(&device));
  PA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  PA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

// Options::prefill_tiles: whether a path that runs prefill query tiles runs
// stage 09's. PrefillTiles::hopper is checked whatever the path.
bool plans_hopper_prefill(const AttentionParams& p, PrefillTiles choice) {
  switch (choice) {
    case PrefillTiles::mma_sync: return false;
    case PrefillTiles::automatic: return stage09::serves_layer(p) && device_is_sm90();
    case PrefillTiles::hopper: break;
  }
  PA_REQUIRE(stage09::serves_layer(p),
             "engine::plan: stage 09's prefill tile (PrefillTiles::hopper) serves bf16 caches with causal attention "
             "only: no window, no learned sinks, not batch-invariant, at most 2^31 - 1 cache slots");
  detail::require_hopper_device("engine::plan: stage 09's prefill tile (PrefillTiles::hopper)");
  return true;
}

}  // namespace

namespace detail {
bool hopper_code_runs() {
#if defined(__CUDACC__)  // the CPU runtime emulates TMA, mbarriers and wgmma
  return device_is_sm90();
#else
  return true;
#endif
}

void require_hopper_device(const std::string& what) {
  PA_REQUIRE(hopper_code_runs(), what + " needs an sm_90 GPU (its code is sm_90a); this one is not");
}
}  // namespace detail

Bounds bounds_of(const BatchView& batch) {
  return Bounds{batch.num_requests, batch.num_tokens, batch.max_query_len, batch.max_seq_len, batch.decode_only};
}

const char* name(Path path) {
  switch (path) {
    case Path::whole_tiles: return "whole tiles";
    case Path::splits: return "splits";
    case Path::sink_token_splits: return "sink-token splits";
    case Path::mixed: return "mixed";
    case Path::work_list: return "work list";
    case Path::invariant: return "batch-invariant";
  }
  return "?";
}

std::string Plan::describe() const {
  std::string s = name(path);
  if (path == Path::work_list) {
    s += " of up to " + std::to_string(num_splits) + " items (" + std::to_string(items_per_wave) +
         " a wave per KV head, >= " + std::to_string(keys_per_split) + " keys each)";
  } else if (path != Path::whole_tiles) {
    s += " x" + std::to_string(num_splits) + " (" + std::to_string(keys_per_split) + " keys each)";
  }
  s += std::string(", ") + pa::name(format);
  if (window > 0) s += ", window " + std::to_string(window);
  if (sink_tokens > 0) s += ", " + std::to_string(sink_tokens) + " sink tokens";
  if (sinks) s += ", learned sinks";
  if (tuned) s += ", tuned";
  if (hopper_prefill) s += cp_async_copies ? ", Hopper prefill tiles (cp.async copies)" : ", Hopper prefill tiles";
  if (chunk_programs > 0) s += ", " + std::to_string(chunk_programs) + " chunk programs per KV head";
  return s;
}


Plan plan(const AttentionParams& p_in, const Bounds& b, const Options& options) {
  PA_REQUIRE(p_in.window >= 0, "engine::plan: window " + str(p_in.window) + " is negative (0 = no window)");
  PA_REQUIRE(p_in.sink_tokens >= 0,
             "engine::plan: sink_tokens " + str(p_in.sink_tokens) + " is negative (0 = no sink tokens)");
  PA_REQUIRE(options.num_splits >= 0 && options.num_splits <= stage04::MAX_SPLITS,
             "engine::plan: num_splits " + str(options.num_splits) + " is outside 0 (automatic) .. " +
                 str(stage04::MAX_SPLITS));
  check_bounds(b);
  const AttentionParams p = bounded(p_in, b);
  (void)stage03::checked_packing(p, "engine");  // heads, group, block size, head_dim
  if (options.tuned) {
    PA_REQUIRE(options.num_splits == 0, "engine::plan: num_splits " + str(options.num_splits) +
                                            " and a tuned table both choose the split count; give one of them");
    check_table_shape(*options.tuned, p);
  }

  Plan pl;
  pl.num_q_heads = p.num_q_heads;
  pl.num_kv_heads = p.kv.num_kv_heads;
  pl.head_dim = p.kv.head_dim;
  pl.block_size = p.kv.block_size;
  pl.format = p.kv.format;
  pl.window = p.window;
  pl.sink_tokens = p.sink_tokens;
  pl.sinks = p.sinks != nullptr;
  pl.batch_invariant = p.batch_invariant;
  pl.bounds = b;
  pl.bounds.decode_only = p.batch.decode_only;
  pl.span_keys = p.window > 0 ? stage06::span_keys(p) : p.batch.max_seq_len;

  const bool decode = p.batch.decode_only;
  const int block = p.kv.block_size;
  auto num_sms = [&] { return options.num_sms > 0 ? options.num_sms : stage04::sm_count(); };
  // A tuned table's entries were measured on decode batches: the mixed path keeps the rule.
  auto split_plan = [&](bool use_table = true) {
    const TunedEntry* entry =
        options.tuned && use_table ? options.tuned->find(b.num_requests, pl.span_keys, p.num_q_heads / p.kv.num_kv_heads)
                      : nullptr;
    pl.tuned = entry != nullptr;
    const stage04::SplitPlan sp = entry ? tuned_split_plan(pl.span_keys, block, entry->num_splits)
                                  : options.num_splits == 0
                                      ? stage04::plan_rule(p, num_sms(), pl.span_keys)
                                      : stage04::plan_fixed_rule(pl.span_keys, block, options.num_splits);
    stage04::check_plan(sp, pl.span_keys, block);
    return sp;
  };

  size_t rows = static_cast<size_t>(b.num_tokens);  // partial rows per split: by token, or by request
  if (options.work_list) {
    const std::string why = "engine::plan: the work list serves decode batches ";
    PA_REQUIRE(decode, why + "(every q_len <= 1); these bounds allow queries of " + str(b.max_query_len) + " tokens");
    PA_REQUIRE(!p.batch_invariant, why + "outside batch-invariant mode, whose splits are fixed in keys");
    PA_REQUIRE(options.num_splits == 0 && options.tuned == nullptr,
               why + "with its own cut: num_splits must be 0 and no tuned table given");
    pl.path = Path::work_list;
    pl.items_per_wave = std::max(1, stage04::programs_per_sm(p) * num_sms() / p.kv.num_kv_heads);
    // At most items_per_wave + num_requests items, and one more a request for
    // its sink tokens (engine/compose.cuh, WorkList).
    pl.num_splits = pl.items_per_wave + (p.sink_tokens > 0 ? 2 : 1) * b.num_requests;
    pl.keys_per_split = std::max(block, stage04::MIN_KEYS_PER_SPLIT / block * block);
    rows = 1;
  } else if (p.batch_invariant) {
    PA_REQUIRE(options.num_splits == 0, "engine::plan: batch-invariant mode cuts every context into splits of " +
                                            str(further::INVARIANT_KEYS_PER_SPLIT) +
                                            " keys whatever the batch; num_splits must be 0 (automatic)");
    pl.path = Path::invariant;
    pl.num_splits = (p.sink_tokens > 0 ? 1 : 0) + further::invariant_plan(pl.span_keys, block).num_splits;
    pl.keys_per_split = further::INVARIANT_KEYS_PER_SPLIT;
    rows = static_cast<size_t>(b.num_requests);
  } else if (decode && p.sink_tokens > 0) {
    const stage04::SplitPlan sp = split_plan();
    pl.path = Path::sink_token_splits;
    pl.num_splits = sp.num_splits + 1;
    pl.keys_per_split = sp.blocks_per_split * block;
  } else if (decode) {
    const stage04::SplitPlan sp = split_plan();
    pl.path = sp.num_splits > 1 || options.num_splits > 0 ? Path::splits : Path::whole_tiles;
    pl.num_splits = sp.num_splits;
    pl.keys_per_split = sp.blocks_per_split * block;
  } else {
    // Chunks and decodes: the decodes' splits (and sink-token split) as a
    // decode batch of the same bounds would get them, partials by request.
    const stage04::SplitPlan sp = split_plan(false);
    pl.path = Path::mixed;
    pl.num_splits = (p.sink_tokens > 0 ? 1 : 0) + sp.num_splits;
    pl.keys_per_split = sp.blocks_per_split * block;
    rows = static_cast<size_t>(b.num_requests);
  }
  if (pl.path == Path::whole_tiles) {
    pl.num_splits = 1;
    pl.keys_per_split = 0;
  }
  // Query tiles of prefill chunks run on the whole-tiles and mixed paths (a
  // batch whose tiles fit the decode tile's rows takes that one: compose.cuh).
  const bool hopper = plans_hopper_prefill(p, options.prefill_tiles);
  pl.hopper_prefill = hopper && ((pl.path == Path::whole_tiles && !decode) || pl.path == Path::mixed);
  PA_REQUIRE(options.prefill_copies == PrefillCopies::tma || options.prefill_tiles != PrefillTiles::mma_sync,
             "engine::plan: Options::prefill_copies = cp_async fills stage 09's ring; "
             "prefill_tiles = mma_sync runs no stage 09 tile (choose automatic or hopper)");
  pl.cp_async_copies = pl.hopper_prefill && options.prefill_copies == PrefillCopies::cp_async;
  PA_REQUIRE(options.chunk_programs >= Options::one_program_per_tile,
             "engine::plan: Options::chunk_programs " + str(options.chunk_programs) +
                 " is below -1 (0: the plan's count, n > 0: n programs per KV head, -1: one program per query tile)");
  PA_REQUIRE(options.chunk_programs * p.kv.num_kv_heads <= num_sms(),
             "engine::plan: Options::chunk_programs " + str(options.chunk_programs) + " x " +
                 str(p.kv.num_kv_heads) + " KV heads is more programs than the device's " + str(num_sms()) +
                 " SMs hold at once (one program of stage 09's tile per SM)");
  PA_REQUIRE(options.chunk_programs <= 0 || options.prefill_tiles != PrefillTiles::mma_sync,
             "engine::plan: Options::chunk_programs sets stage 09's chunk programs; "
             "prefill_tiles = mma_sync runs no stage 09 tile (choose automatic or hopper)");
  if (pl.hopper_prefill && pl.path == Path::mixed) {
    if (options.chunk_programs > 0) {
      pl.chunk_programs = options.chunk_programs;
    } else if (options.chunk_programs == 0) {
      pl.chunk_programs = balanced_chunk_programs(b, p.num_q_heads / p.kv.num_kv_heads, p.kv.num_kv_heads, num_sms());
    }  // one_program_per_tile leaves 0: stage 09's grid
  }
  const bool partials =
      pl.path == Path::invariant || pl.path == Path::mixed || pl.path == Path::work_list || pl.num_splits > 1;
  if (partials) {
    pl.part_lse_floats = static_cast<size_t>(pl.num_splits) * rows * p.num_q_heads;
    pl.part_o_floats = pl.part_lse_floats * p.kv.head_dim;
    pl.workspace_bytes = align_up(pl.part_o_floats * sizeof(float)) + align_up(pl.part_lse_floats * sizeof(float));
  }
  return pl;
}

void run(const Plan& pl, const AttentionParams& p_in, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const std::string who = "engine::run: ";
  auto same = [&](long long plan_value, long long value, const char* field) {
    PA_REQUIRE(plan_value == value, who + field + " is " + str(value) + ", the plan was made for " + str(plan_value));
  };
  same(pl.num_q_heads, p_in.num_q_heads, "num_q_heads");
  same(pl.num_kv_heads, p_in.kv.num_kv_heads, "kv.num_kv_heads");
  same(pl.head_dim, p_in.kv.head_dim, "kv.head_dim");
  same(pl.block_size, p_in.kv.block_size, "kv.block_size");
  same(static_cast<int>(pl.format), static_cast<int>(p_in.kv.format), "kv.format");
  same(pl.window, p_in.window, "window");
  same(pl.sink_tokens, p_in.window == 0 ? 0 : p_in.sink_tokens, "sink_tokens");
  same(pl.sinks, p_in.sinks != nullptr, "sinks (0 = null)");
  same(pl.batch_invariant, p_in.batch_invariant, "batch_invariant");
  const Bounds& b = pl.bounds;
  const BatchView& batch = p_in.batch;
  same(b.num_requests, batch.num_requests, "batch.num_requests");
  same(b.num_tokens, batch.num_tokens, "batch.num_tokens");
  PA_REQUIRE(batch.max_query_len >= 0 && batch.max_query_len <= b.max_query_len,
             who + "batch.max_query_len " + str(batch.max_query_len) + " is outside the plan's bounds 0.." +
                 str(b.max_query_len));
  PA_REQUIRE(batch.max_seq_len >= 0 && batch.max_seq_len <= b.max_seq_len,
             who + "batch.max_seq_len " + str(batch.max_seq_len) + " is outside the plan's bounds 0.." +
                 str(b.max_seq_len) + ": plan again for longer contexts");
  PA_REQUIRE(batch.first_padding_row >= 0 && batch.first_padding_row <= batch.num_tokens,
             who + "batch.first_padding_row " + str(batch.first_padding_row) + " is outside 0..num_tokens (" +
                 str(batch.num_tokens) + ")");
  if (b.num_tokens > 0) PA_REQUIRE(p_in.q && p_in.out, who + "q and out must not be null");
  if (b.num_requests > 0) {
    PA_REQUIRE(batch.query_start_loc && batch.seq_lens && batch.block_table,
               who + "batch.query_start_loc, seq_lens and block_table must not be null");
    if (is_quantized(pl.format)) {
      PA_REQUIRE(p_in.kv.k_codes && p_in.kv.v_codes && p_in.kv.k_scale && p_in.kv.v_scale,
                 who + "a " + pa::name(pl.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
    } else {
      PA_REQUIRE(p_in.kv.k_cache && p_in.kv.v_cache, who + "a bf16 cache needs k_cache and v_cache");
    }
  }
  PA_REQUIRE(workspace_bytes >= pl.workspace_bytes && (pl.workspace_bytes == 0 || workspace != nullptr),
             who + "the plan needs a workspace of " + str(static_cast<long long>(pl.workspace_bytes)) +
                 " bytes, got " + str(static_cast<long long>(workspace_bytes)) + (workspace ? "" : " (null)"));
  PA_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, who + "the workspace must be 16-byte aligned");

  const AttentionParams p = bounded(p_in, b);
  if (p.checked) check_device_batch(p, "engine", stream);
  float* part_o = static_cast<float*>(workspace);
  float* part_lse = pl.part_o_floats > 0
                        ? reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                                   align_up(pl.part_o_floats * sizeof(float)))
                        : nullptr;
  const detail::Launch l{pl, p, part_o, part_lse, stream};
  switch (pl.format) {
    case KvFormat::bf16: pl.sinks ? detail::run_bf16_sinks(l) : detail::run_bf16(l); break;
    case KvFormat::int8: pl.sinks ? detail::run_int8_sinks(l) : detail::run_int8(l); break;
    case KvFormat::fp8_e4m3: pl.sinks ? detail::run_fp8_sinks(l) : detail::run_fp8(l); break;
  }
  clear_padding_rows(p, stream);
}

void run_cascade(const stage07::Cascade& c, const AttentionParams& p, cudaStream_t stream) {
  const std::string who = "engine::run_cascade: ";
  (void)stage03::checked_packing(p, "engine");
  PA_REQUIRE(p.window == 0 && p.sink_tokens == 0,
             who + "a cascade takes no sliding window and no sink tokens (stage 07 refuses windows); got window " +
                 str(p.window) + ", sink_tokens " + str(p.sink_tokens));
  PA_REQUIRE(!p.batch_invariant,
             who + "a cascade has no batch-invariant mode (stage 07: its prefix pass serves a whole group)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             who + "a " + pa::name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  PA_REQUIRE(c.suffix_begin.size() >= static_cast<size_t>(p.batch.num_requests),
             who + "the cascade plan was made for another batch (stage07::plan() once per batch)");
  if (p.checked) check_device_batch(p, "engine", stream);
  switch (p.kv.format) {
    case KvFormat::bf16: detail::cascade_bf16(p, c, stream); break;
    case KvFormat::int8: detail::cascade_int8(p, c, stream); break;
    case KvFormat::fp8_e4m3: detail::cascade_fp8(p, c, stream); break;
  }
  clear_padding_rows(p, stream);
}

void forward(const AttentionParams& p, cudaStream_t stream, const Options& options) {
  const Plan pl = plan(p, bounds_of(p.batch), options);
  DeviceBuffer<unsigned char> workspace(pl.workspace_bytes);
  run(pl, p, workspace.data(), pl.workspace_bytes, stream);
}

}  // namespace pa::engine
