// vendor_cudnn: the course's paged batch as one cuDNN SDPA graph (see vendor_cudnn.h).
//
// The graph, per batch shape:
//   Q      (R, Hq, s_q, D)   strides (s_q*Hq*D, D, Hq*D, 1)  ragged offset q_offsets[r] = query_start_loc[r]*Hq*D
//   K, V   (num_blocks, Hkv, block_size, D)  strides (block_size*Hkv*D, D, Hkv*D, 1): our cache, in place
//   page tables K and V   (R, 1, max_blocks_per_seq, 1): our block_table, in place; s_kv is the
//          table's reach, max_blocks_per_seq * block_size (cuDNN wants the table exactly that wide)
//   seq_len_q (R, 1, 1, 1): q_len per request;  seq_len_kv (R, 1, 1, 1): our seq_lens, in place
//   O      like Q (same ragged offsets);  Stats (R, Hq, s_q, 1) strides (s_q*Hq, 1, Hq, 1), ragged
//          offset query_start_loc[r]*Hq: our lse [num_tokens, Hq]
//   options: padding mask (per-request lengths), causal mask aligned bottom-right (request r's
//            q_len queries are the last q_len of its seq_len positions), a diagonal band of
//            `window` keys (kept: q_pos - k_pos < window), scale = softmax_scale, stats on.
// A batch of decodes only (q_len 1 each, no empty request) is dense: s_q = 1, row r = request r,
// no ragged offsets.
#include "vendor_cudnn.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/check.h"
#include "common/checked_launch.h"
#include "common/device_buffer.h"

namespace fe = cudnn_frontend;

namespace pa::vendor_cudnn {

namespace {

enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats,
  kSeqLenQ, kSeqLenKv, kPageTableK, kPageTableV,
  kQOffsets, kOOffsets, kStatsOffsets,
};

std::string version_string(int64_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

cudnnHandle_t handle() {
  // Never destroyed: cuDNN's teardown must not run after the CUDA runtime's at exit.
  static cudnnHandle_t h = [] {
    cudnnHandle_t created = nullptr;
    const cudnnStatus_t status = cudnnCreate(&created);
    PA_REQUIRE(status == CUDNN_STATUS_SUCCESS,
               std::string("vendor_cudnn: cudnnCreate failed: ") + cudnnGetErrorString(status));
    std::fprintf(stderr, "[vendor_cudnn] %s\n", versions().c_str());
    return created;
  }();
  return h;
}

// Everything a graph is built for; two batches with the same key share one graph.
struct GraphKey {
  int num_requests, num_q_heads, num_kv_heads, head_dim, block_size, num_blocks, max_blocks_per_seq;
  int max_query_len;  // s_q; 1 for dense decode batches (s_kv is the block table's reach)
  int window;
  bool dense;
  uint32_t scale_bits;
  auto operator<=>(const GraphKey&) const = default;
};

// Every request has exactly one query: rows are requests, no ragged offsets needed.
bool is_dense_decode(const BatchMeta& m) {
  for (int r = 0; r < m.num_requests(); ++r)
    if (m.q_len(r) != 1) return false;
  return true;
}

GraphKey key_of(const Problem& p) {
  const BatchMeta& m = p.meta;
  const bool dense = is_dense_decode(m);
  // A ragged graph's s_q is at least 2 (it is an upper bound): with s_q == 1 and
  // ragged offsets, cuDNN 9.14 wrote most of the stats wrong (NaN; measured on
  // an H200, a decode batch with an empty request) while the output was right.
  const int s_q = dense ? 1 : std::max(2, m.max_query_len);
  return {m.num_requests(), p.cfg.num_q_heads, p.cfg.num_kv_heads, p.cfg.head_dim, p.cfg.block_size, p.num_blocks,
          m.max_blocks_per_seq, s_q, p.cfg.window, dense,
          std::bit_cast<uint32_t>(p.cfg.softmax_scale())};
}

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::string error;  // empty when built
  DeviceBuffer<uint8_t> workspace;
};

std::shared_ptr<fe::graph::Tensor_attributes> int32_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                           std::vector<int64_t> dim, std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dim))
                      .set_stride(std::move(stride))
                      .set_data_type(fe::DataType_t::INT32));
}

std::unique_ptr<BuiltGraph> build(const GraphKey& k) {
  auto built = std::make_unique<BuiltGraph>();
  const int64_t B = k.num_requests, Hq = k.num_q_heads, Hkv = k.num_kv_heads, D = k.head_dim;
  const int64_t s_q = k.max_query_len, bs = k.block_size, table = k.max_blocks_per_seq;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);

  const std::vector<int64_t> qo_dim = {B, Hq, s_q, D}, qo_stride = {s_q * Hq * D, D, Hq * D, 1};
  auto q_attrs = fe::graph::Tensor_attributes().set_name("Q").set_uid(kQ).set_dim(qo_dim).set_stride(qo_stride);
  std::shared_ptr<fe::graph::Tensor_attributes> o_offsets, stats_offsets;
  if (!k.dense) {
    q_attrs.set_ragged_offset(int32_tensor(*g, "q_offsets", kQOffsets, {B + 1, 1, 1, 1}, {1, 1, 1, 1}));
    o_offsets = int32_tensor(*g, "o_offsets", kOOffsets, {B + 1, 1, 1, 1}, {1, 1, 1, 1});
    stats_offsets = int32_tensor(*g, "stats_offsets", kStatsOffsets, {B + 1, 1, 1, 1}, {1, 1, 1, 1});
  }
  auto Q = g->tensor(q_attrs);
  // Our cache [num_blocks, block_size, Hkv, D] seen as cuDNN's container (num_blocks, Hkv, block_size, D).
  const std::vector<int64_t> kv_dim = {k.num_blocks, Hkv, bs, D}, kv_stride = {bs * Hkv * D, D, Hkv * D, 1};
  auto K = g->tensor(fe::graph::Tensor_attributes().set_name("K_cache").set_uid(kK).set_dim(kv_dim).set_stride(kv_stride));
  auto V = g->tensor(fe::graph::Tensor_attributes().set_name("V_cache").set_uid(kV).set_dim(kv_dim).set_stride(kv_stride));
  auto seq_len_q = int32_tensor(*g, "seq_len_q", kSeqLenQ, {B, 1, 1, 1}, {1, 1, 1, 1});
  auto seq_len_kv = int32_tensor(*g, "seq_len_kv", kSeqLenKv, {B, 1, 1, 1}, {1, 1, 1, 1});
  auto page_k = int32_tensor(*g, "page_table_k", kPageTableK, {B, 1, table, 1}, {table, table, 1, 1});
  auto page_v = int32_tensor(*g, "page_table_v", kPageTableV, {B, 1, table, 1}, {table, table, 1, 1});

  auto options = fe::graph::SDPA_attributes()
                     .set_name("paged_sdpa")
                     .set_generate_stats(true)
                     .set_attn_scale(std::bit_cast<float>(k.scale_bits))
                     .set_causal_mask_bottom_right(true)
                     .set_padding_mask(true)
                     .set_seq_len_q(seq_len_q)
                     .set_seq_len_kv(seq_len_kv)
                     .set_paged_attention_k_table(page_k)
                     .set_paged_attention_v_table(page_v)
                     // cuDNN wants ceil(s_kv / block_size) == the table's width, and our
                     // table has a spare column: s_kv is the table's reach; the
                     // padding mask holds each request to its own seq_len.
                     .set_paged_attention_max_seq_len_kv(static_cast<int>(table * bs));
  if (k.window > 0) options.set_diagonal_band_left_bound(k.window);

  auto [O, stats] = g->sdpa(Q, K, V, options);
  O->set_output(true).set_uid(kO).set_dim(qo_dim).set_stride(qo_stride);
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({B, Hq, s_q, 1});
  if (k.dense) {
    stats->set_stride({Hq, 1, 1, 1});  // (R, Hq, 1, 1) = our [num_tokens, Hq]
  } else {
    O->set_ragged_offset(o_offsets);
    stats->set_stride({s_q * Hq, 1, Hq, 1}).set_ragged_offset(stats_offsets);
  }

  auto fail = [&](const char* stage, fe::error_t e) {
    built->error = std::string("cuDNN ") + stage + ": " + e.get_message();
    return std::move(built);
  };
  const cudnnHandle_t h = handle();
  if (auto e = g->validate(); e.is_bad()) return fail("validate", e);
  if (auto e = g->build_operation_graph(h); e.is_bad()) return fail("build_operation_graph", e);
  if (auto e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad())
    return fail("create_execution_plans", e);
  if (auto e = g->check_support(h); e.is_bad()) return fail("check_support", e);
  if (auto e = g->build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); e.is_bad()) return fail("build_plans", e);
  int64_t workspace_bytes = 0;
  if (auto e = g->get_workspace_size(workspace_bytes); e.is_bad()) return fail("get_workspace_size", e);
  built->workspace.resize(static_cast<size_t>(workspace_bytes));
  built->graph = std::move(g);
  return built;
}

// Built graphs by shape. Never destroyed (see handle()).
BuiltGraph& graph_for(const Problem& p) {
  static auto& cache = *new std::map<GraphKey, std::unique_ptr<BuiltGraph>>();
  const GraphKey k = key_of(p);
  auto it = cache.find(k);
  if (it == cache.end()) {
    // Graph and plan building happen here, once per shape, before any timed
    // step; their cost is reported on its own line, never inside a timing.
    const auto t0 = std::chrono::steady_clock::now();
    it = cache.emplace(k, build(k)).first;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr,
                 "[vendor_cudnn] graph + plan for %d requests x %d q / %d kv heads, D %d, s_q %d, window %d: built in "
                 "%.1f ms (outside the timed step)%s\n",
                 k.num_requests, k.num_q_heads, k.num_kv_heads, k.head_dim, k.max_query_len, k.window, ms,
                 it->second->error.empty() ? "" : ", not supported");
  }
  return *it->second;
}

// The per-request integers cuDNN needs beyond our metadata, made on the host once
// per query_start_loc and kept on the device: q_len per request, and the ragged
// offsets of Q/O (elements) and of the stats (floats). Each part starts on a
// 64-byte boundary.
struct BatchAux {
  static constexpr size_t kAlign = 16;  // ints
  DeviceBuffer<int> data;
  size_t seq_len_q = 0, qo_offsets = 0, stats_offsets = 0;  // element offsets into data
};

const BatchAux& aux_for(const Problem& p) {
  struct AuxKey {
    std::vector<int> query_start_loc;
    int num_q_heads, head_dim;
    auto operator<=>(const AuxKey&) const = default;
  };
  static auto& cache = *new std::map<AuxKey, BatchAux>();
  AuxKey k{p.meta.query_start_loc, p.cfg.num_q_heads, p.cfg.head_dim};
  auto it = cache.find(k);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 64) cache.clear();  // a bench run meets a handful of batches; bound the memory anyway
  const int R = p.meta.num_requests();
  const size_t part = (static_cast<size_t>(R) + 1 + BatchAux::kAlign - 1) / BatchAux::kAlign * BatchAux::kAlign;
  BatchAux aux;
  aux.seq_len_q = 0;
  aux.qo_offsets = part;
  aux.stats_offsets = 2 * part;
  std::vector<int> host(3 * part, 0);
  const int64_t row = static_cast<int64_t>(p.cfg.num_q_heads) * p.cfg.head_dim;
  for (int r = 0; r <= R; ++r) {
    const int64_t start = p.meta.query_start_loc[r];
    if (r < R) host[aux.seq_len_q + r] = p.meta.q_len(r);
    host[aux.qo_offsets + r] = static_cast<int>(start * row);
    host[aux.stats_offsets + r] = static_cast<int>(start * p.cfg.num_q_heads);
  }
  aux.data.upload(host);
  return cache.emplace(std::move(k), std::move(aux)).first->second;
}

// The course features this backend does not map onto cuDNN; empty = none.
std::string unmapped_feature(const Problem& p) {
  if (p.cfg.kv_format != KvFormat::bf16)
    return "vendor_cudnn reads bf16 caches: cuDNN's FP8 attention takes one scale per tensor, not the course's "
           "per-(token, KV head) scales";
  if (p.cfg.with_sinks)
    return "learned sinks are not mapped to cuDNN's sink token (cuDNN refuses a sink token for decode, s_q == 1)";
  if (p.cfg.sink_tokens > 0) return "sink tokens (StreamingLLM) need a mask that cuDNN's diagonal band cannot express";
  const int64_t elems = static_cast<int64_t>(p.meta.num_tokens) * p.cfg.num_q_heads * p.cfg.head_dim;
  if (elems > INT32_MAX) return "the ragged offsets are int32: num_tokens * Hq * D must stay below 2^31";
  return {};
}

// Nothing for cuDNN to compute: every row is padding (or there are no rows).
bool no_request_rows(const Problem& p) { return p.meta.num_requests() == 0 || p.meta.query_start_loc.back() == 0; }

}  // namespace

std::string versions() {
  return "cuDNN " + version_string(static_cast<int64_t>(cudnnGetVersion())) + " (built against " +
         version_string(CUDNN_VERSION) + "), cudnn-frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

std::string unsupported(const Problem& p) {
  if (std::string why = unmapped_feature(p); !why.empty()) return why;
  if (no_request_rows(p)) return {};
  return graph_for(p).error;
}

void forward(const Problem& p, DeviceBatch& db) {
  if (std::string why = unsupported(p); !why.empty()) throw Error("vendor_cudnn: " + why);
  const AttentionParams a = db.params();
  const BatchView& b = a.batch;
  // cuDNN picks its own work split per graph, and a graph is per batch shape:
  // nothing makes a request's bits independent of its batch.
  PA_REQUIRE(!a.batch_invariant, "vendor_cudnn: no batch-invariant mode (cuDNN's kernels split the work per batch "
                                 "shape, so a request's bits may depend on its batch)");
  // cuDNN reads the block table as it is: a bad entry is an out-of-bounds read
  // on the device (and a sticky CUDA error). With checked launches on, the
  // course's validation of the device copy runs first, as in every stage.
  check_device_batch(a, "vendor_cudnn");
  if (!no_request_rows(p)) {
    BuiltGraph& g = graph_for(p);
    const BatchAux& aux = aux_for(p);
    int* ints = const_cast<int*>(aux.data.data());
    std::unordered_map<int64_t, void*> pack = {
        {kQ, const_cast<bf16*>(a.q)},
        {kK, a.kv.k_cache},
        {kV, a.kv.v_cache},
        {kO, a.out},
        {kStats, a.lse},
        {kSeqLenQ, ints + aux.seq_len_q},
        {kSeqLenKv, const_cast<int*>(b.seq_lens)},
        {kPageTableK, const_cast<int*>(b.block_table)},
        {kPageTableV, const_cast<int*>(b.block_table)},
    };
    if (!key_of(p).dense) {
      pack[kQOffsets] = ints + aux.qo_offsets;
      pack[kOOffsets] = ints + aux.qo_offsets;
      pack[kStatsOffsets] = ints + aux.stats_offsets;
    }
    PA_REQUIRE(a.lse != nullptr, "vendor_cudnn: params.lse must be set (cuDNN writes the stats there)");
    if (auto e = g.graph->execute(handle(), pack, g.workspace.data()); e.is_bad())
      throw Error("vendor_cudnn: cuDNN execute: " + e.get_message());
  }
  fill_padding_rows(a.out, a.lse, b.first_padding_row, b.num_tokens, a.num_q_heads, a.kv.head_dim, nullptr);
}

}  // namespace pa::vendor_cudnn
