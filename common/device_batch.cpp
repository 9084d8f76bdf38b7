#include "device_batch.h"

#include "batch_ops.h"

namespace pa {

std::vector<float> to_float(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
  return out;
}

DeviceBatch::DeviceBatch(const Problem& p, cudaStream_t stream) {
  const BatchMeta& m = p.meta;
  validate(m, p.cfg, p.num_blocks);
  const AttentionConfig& c = p.cfg;
  const size_t q_elems = static_cast<size_t>(m.num_tokens) * c.num_q_heads * c.head_dim;
  const size_t cache_elems = static_cast<size_t>(p.num_blocks) * c.block_size * c.num_kv_heads * c.head_dim;
  if (!p.q.empty()) {
    q.upload(p.q);
    k_cache.upload(p.k_cache);
    v_cache.upload(p.v_cache);
    k_new.upload(p.k_new);
    v_new.upload(p.v_new);
  } else {
    // Built with fill_values = false (benchmarks): random values made on the
    // device; the write path has nothing to add.
    q.resize(q_elems);
    k_cache.resize(cache_elems);
    v_cache.resize(cache_elems);
    fill_random(q.data(), q_elems, 1, stream);
    fill_random(k_cache.data(), cache_elems, 2, stream);
    fill_random(v_cache.data(), cache_elems, 3, stream);
  }
  sinks.upload(p.sinks);
  query_start_loc.upload(m.query_start_loc);
  seq_lens.upload(m.seq_lens);
  block_table.upload(m.block_table);
  slot_mapping.upload(m.slot_mapping);
  out.resize(q_elems);
  lse.resize(static_cast<size_t>(m.num_tokens) * p.cfg.num_q_heads);

  AttentionParams& a = params_;
  a.q = q.data();
  a.out = out.data();
  a.lse = lse.data();
  a.kv = PagedKV{k_cache.data(), v_cache.data(), p.num_blocks, p.cfg.block_size, p.cfg.num_kv_heads,
                 p.cfg.head_dim};
  a.batch = BatchView{query_start_loc.data(), seq_lens.data(), block_table.data(), slot_mapping.data(),
                      m.num_requests(), m.num_tokens, m.query_start_loc.back(), m.max_blocks_per_seq, m.max_query_len,
                      m.max_seq_len, m.decode_only};
  a.num_q_heads = p.cfg.num_q_heads;
  a.softmax_scale = p.cfg.softmax_scale();
  a.window = p.cfg.window;
  a.sinks = p.cfg.with_sinks ? sinks.data() : nullptr;

  if (!p.k_new.empty()) write_kv(a.kv, k_new.data(), v_new.data(), slot_mapping.data(), m.num_tokens, stream);
  poison_outputs();
}

void DeviceBatch::poison_outputs() {
  out.fill_bytes(0xFF);  // 0xFFFF is a bf16 NaN, 0xFFFFFFFF an fp32 NaN
  lse.fill_bytes(0xFF);
}

std::vector<float> DeviceBatch::out_host() const {
  PA_CHECK(cudaDeviceSynchronize());
  return to_float(out.download());
}

std::vector<float> DeviceBatch::lse_host() const {
  PA_CHECK(cudaDeviceSynchronize());
  return lse.download();
}

}  // namespace pa
