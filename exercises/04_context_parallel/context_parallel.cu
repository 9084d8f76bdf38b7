// Exercise 04's given code: the shards, one rank's run, and the exercise in one
// process with the all-gather as a copy. The TODOs are in starter.cu.
#include "context_parallel.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

#include "common/check.h"
#include "engine/engine.h"

namespace pa::exercise04 {

const char* name(Sharding s) { return s == Sharding::contiguous ? "contiguous" : "interleaved"; }

long long Shard::keys() const {
  long long n = 0;
  for (int len : problem.meta.seq_lens) n += len;
  return n;
}

Shard make_shard(const Problem& whole, int rank, int ranks, Sharding s) {
  PA_REQUIRE(ranks >= 1, "exercise 04: " + std::to_string(ranks) + " ranks; at least 1");
  PA_REQUIRE(rank >= 0 && rank < ranks,
             "exercise 04: rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " ranks");
  const AttentionConfig& cfg = whole.cfg;
  PA_REQUIRE(cfg.kv_format == KvFormat::bf16, "exercise 04 shards a bf16 cache");
  PA_REQUIRE(cfg.window == 0 && cfg.sink_tokens == 0 && !cfg.with_sinks,
             "exercise 04 shards plain decode attention: no window, sink tokens or sinks (a window's keys "
             "would be a range of positions, not a set)");
  const BatchMeta& m = whole.meta;
  for (int r = 0; r < m.num_requests(); ++r) {
    PA_REQUIRE(m.q_len(r) <= 1, "exercise 04 shards decode batches: request " + std::to_string(r) + " has " +
                                    std::to_string(m.q_len(r)) + " queries");
  }
  const int bs = cfg.block_size;
  const size_t slot_elems = static_cast<size_t>(cfg.num_kv_heads) * cfg.head_dim;  // one slot: [Hkv, D]
  const size_t block_elems = bs * slot_elems;
  const size_t q_elems = static_cast<size_t>(cfg.num_q_heads) * cfg.head_dim;      // one row of q: [Hq, D]

  // The cache as the whole batch's write path leaves it: the history, and this
  // step's K/V in their slots. A shard is cut from it, so that the rank that
  // holds a request's last block holds its newest key.
  std::vector<bf16> k = whole.k_cache, v = whole.v_cache;
  for (int t = 0; t < m.num_tokens; ++t) {
    const int slot = m.slot_mapping[t];
    if (slot < 0) continue;
    std::copy_n(whole.k_new.begin() + t * slot_elems, slot_elems, k.begin() + slot * slot_elems);
    std::copy_n(whole.v_new.begin() + t * slot_elems, slot_elems, v.begin() + slot * slot_elems);
  }

  Shard sh;
  sh.rank = rank;
  sh.ranks = ranks;
  sh.sharding = s;
  sh.shard_row.assign(m.num_tokens, -1);
  Problem& p = sh.problem;
  p.cfg = cfg;
  BatchMeta& out = p.meta;
  out.query_start_loc = {0};
  std::vector<std::vector<int>> tables;  // per shard request: the whole pool's block ids it holds here
  for (int r = 0; r < m.num_requests(); ++r) {
    if (m.q_len(r) == 0) continue;  // no query: nothing to attend, on any rank
    const int seq_len = m.seq_lens[r];
    const int n = (seq_len + bs - 1) / bs;
    std::vector<int> mine;
    int keys = 0;
    for (int b = 0; b < n; ++b) {
      const int o = owner(s, b, n, ranks);
      PA_REQUIRE(o >= 0 && o < ranks, "exercise 04: owner(" + std::string(name(s)) + ", block " + std::to_string(b) +
                                          " of " + std::to_string(n) + ", " + std::to_string(ranks) +
                                          " ranks) = " + std::to_string(o) + ", not a rank");
      if (o != rank) continue;
      mine.push_back(m.block_id(r, b * bs, bs));
      keys += b + 1 < n ? bs : seq_len - b * bs;  // only a request's last block may be partly filled
    }
    if (keys == 0) continue;  // no key here: this rank's partial of the row is the empty state
    const int t = m.query_start_loc[r];
    sh.shard_row[t] = static_cast<int>(tables.size());
    tables.push_back(mine);
    out.seq_lens.push_back(keys);
    out.query_start_loc.push_back(static_cast<int>(tables.size()));
    p.q.insert(p.q.end(), whole.q.begin() + t * q_elems, whole.q.begin() + (t + 1) * q_elems);
  }

  // The rank's own pool: its blocks in the order met, renumbered from 0. The
  // slots past a request's last key keep what the whole pool has there (NaN).
  const int nreq = static_cast<int>(tables.size());
  out.num_tokens = nreq;
  out.max_query_len = nreq ? 1 : 0;
  out.decode_only = true;
  for (const auto& tab : tables) out.max_blocks_per_seq = std::max(out.max_blocks_per_seq, static_cast<int>(tab.size()));
  for (int len : out.seq_lens) out.max_seq_len = std::max(out.max_seq_len, len);
  out.block_table.assign(static_cast<size_t>(nreq) * out.max_blocks_per_seq, 0);
  for (int i = 0; i < nreq; ++i) {
    for (size_t j = 0; j < tables[i].size(); ++j) {
      const int local = p.num_blocks++;
      out.block_table[i * out.max_blocks_per_seq + j] = local;
      const size_t from = tables[i][j] * block_elems;
      p.k_cache.insert(p.k_cache.end(), k.begin() + from, k.begin() + from + block_elems);
      p.v_cache.insert(p.v_cache.end(), v.begin() + from, v.begin() + from + block_elems);
    }
  }
  // Each query's "new" K/V is the shard's newest key, written back to its own
  // slot: the shard's write path leaves its pool as it is.
  out.slot_mapping.resize(nreq);
  for (int i = 0; i < nreq; ++i) {
    const int last = out.seq_lens[i] - 1;
    const int slot = out.block_table[i * out.max_blocks_per_seq + last / bs] * bs + last % bs;
    out.slot_mapping[i] = slot;
    p.k_new.insert(p.k_new.end(), p.k_cache.begin() + slot * slot_elems, p.k_cache.begin() + (slot + 1) * slot_elems);
    p.v_new.insert(p.v_new.end(), p.v_cache.begin() + slot * slot_elems, p.v_cache.begin() + (slot + 1) * slot_elems);
  }
  if (nreq) validate(out, cfg, p.num_blocks);
  return sh;
}

void local_attention(const Shard& shard, DeviceBatch* db, bf16* o, float* lse, cudaStream_t stream) {
  const AttentionConfig& cfg = shard.problem.cfg;
  const int rows = static_cast<int>(shard.shard_row.size());
  const DeviceBuffer<int> shard_row(shard.shard_row);
  if (shard.problem.meta.num_requests() == 0) {
    write_partials(shard_row.data(), rows, cfg.num_q_heads, cfg.head_dim, nullptr, nullptr, o, lse, stream);
  } else {
    PA_REQUIRE(db != nullptr, "exercise 04: rank " + std::to_string(shard.rank) + " holds keys but has no DeviceBatch");
    const AttentionParams a = db->params();
    engine::forward(a, stream);  // the engine's split decode over the shard: out and lse per shard row
    write_partials(shard_row.data(), rows, cfg.num_q_heads, cfg.head_dim, a.out, a.lse, o, lse, stream);
  }
  PA_CHECK(cudaStreamSynchronize(stream));  // shard_row is freed on return
}

void run_in_one_process(const Problem& whole, DeviceBatch& whole_db, int ranks, Sharding s,
                        const std::vector<int>& rank_order) {
  PA_REQUIRE(ranks >= 1, "exercise 04: " + std::to_string(ranks) + " ranks; at least 1");
  std::vector<int> order = rank_order;
  if (order.empty()) {
    order.resize(ranks);
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int r = 0; r < ranks; ++r) {
    PA_REQUIRE(static_cast<int>(sorted.size()) == ranks && sorted[r] == r,
               "exercise 04: the rank order must name each of the " + std::to_string(ranks) + " ranks once");
  }
  const AttentionParams a = whole_db.params();
  const size_t rows_hq = static_cast<size_t>(whole.meta.num_tokens) * whole.cfg.num_q_heads;
  const size_t row_elems = rows_hq * whole.cfg.head_dim;
  DeviceBuffer<bf16> gathered_o(ranks * row_elems);  // [ranks, rows, Hq, D]
  DeviceBuffer<float> gathered_lse(ranks * rows_hq);  // [ranks, rows, Hq]
  DeviceBuffer<bf16> mine_o(row_elems);
  DeviceBuffer<float> mine_lse(rows_hq);
  for (int r : order) {
    const Shard sh = make_shard(whole, r, ranks, s);
    std::unique_ptr<DeviceBatch> db;
    if (sh.problem.meta.num_requests() > 0) db = std::make_unique<DeviceBatch>(sh.problem);
    local_attention(sh, db.get(), mine_o.data(), mine_lse.data());
    // The all-gather, in one process: rank r's partials to slot r.
    PA_CHECK(cudaMemcpy(gathered_o.data() + r * row_elems, mine_o.data(), row_elems * sizeof(bf16),
                        cudaMemcpyDeviceToDevice));
    PA_CHECK(cudaMemcpy(gathered_lse.data() + r * rows_hq, mine_lse.data(), rows_hq * sizeof(float),
                        cudaMemcpyDeviceToDevice));
  }
  merge_ranks(a, gathered_o.data(), gathered_lse.data(), ranks);
  PA_CHECK(cudaDeviceSynchronize());
  check_todos();
}

}  // namespace pa::exercise04
