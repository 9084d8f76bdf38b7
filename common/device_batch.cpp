#include "device_batch.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "batch_ops.h"
#include "quant.cuh"

namespace pa {

std::vector<float> to_float(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
  return out;
}

namespace {

// Throws unless host tensor `name` has `want` elements.
template <class T>
void require_size(const std::vector<T>& x, size_t want, const char* name, const char* shape) {
  PA_REQUIRE(x.size() == want, std::string("Problem::") + name + " has " + std::to_string(x.size()) +
                                   " elements; the metadata needs " + shape + " = " + std::to_string(want));
}

template <class T>
void require_empty(const std::vector<T>& x, const char* name, const char* why) {
  PA_REQUIRE(x.empty(), std::string("Problem::") + name + " has " + std::to_string(x.size()) + " elements; " + why);
}

// Whether p carries its values (make_problem's fill_values), or leaves q and the
// cache for the device to fill (benchmarks): then every value tensor is empty.
bool has_values(const Problem& p) {
  return !(p.q.empty() && p.k_new.empty() && p.v_new.empty() && p.k_cache.empty() && p.v_cache.empty() &&
           p.k_codes.empty() && p.v_codes.empty() && p.k_scale.empty() && p.v_scale.empty());
}

// Every host tensor the constructor uploads has exactly the size the metadata
// gives it, so the uploads, the write path and the kernels stay inside their
// buffers: a short q or k_new would be read past its end, a short cache written
// past its end through slot_mapping.
void check_sizes(const Problem& p) {
  const AttentionConfig& c = p.cfg;
  const size_t tokens = static_cast<size_t>(p.meta.num_tokens);
  const size_t slots = static_cast<size_t>(p.num_blocks) * c.block_size;
  const size_t q_elems = tokens * c.num_q_heads * c.head_dim;
  const size_t new_elems = tokens * c.num_kv_heads * c.head_dim;
  const size_t cache_elems = slots * c.num_kv_heads * c.head_dim;
  if (c.with_sinks) require_size(p.sinks, static_cast<size_t>(c.num_q_heads), "sinks", "[num_q_heads]");
  if (!has_values(p)) return;
  require_size(p.q, q_elems, "q", "[num_tokens, num_q_heads, head_dim]");
  require_size(p.k_new, new_elems, "k_new", "[num_tokens, num_kv_heads, head_dim]");
  require_size(p.v_new, new_elems, "v_new", "[num_tokens, num_kv_heads, head_dim]");
  if (is_quantized(c.kv_format)) {
    // k_cache / v_cache are the oracle's full-precision history; the device never reads them.
    require_size(p.k_codes, cache_elems, "k_codes", "[num_blocks, block_size, num_kv_heads, head_dim]");
    require_size(p.v_codes, cache_elems, "v_codes", "[num_blocks, block_size, num_kv_heads, head_dim]");
    require_size(p.k_scale, slots * c.num_kv_heads, "k_scale", "[num_blocks, block_size, num_kv_heads]");
    require_size(p.v_scale, slots * c.num_kv_heads, "v_scale", "[num_blocks, block_size, num_kv_heads]");
  } else {
    require_size(p.k_cache, cache_elems, "k_cache", "[num_blocks, block_size, num_kv_heads, head_dim]");
    require_size(p.v_cache, cache_elems, "v_cache", "[num_blocks, block_size, num_kv_heads, head_dim]");
    const char* why = "a bf16 cache has no codes or scales";
    require_empty(p.k_codes, "k_codes", why);
    require_empty(p.v_codes, "v_codes", why);
    require_empty(p.k_scale, "k_scale", why);
    require_empty(p.v_scale, "v_scale", why);
  }
}

}  // namespace

DeviceBatch::DeviceBatch(const Problem& p, cudaStream_t stream) {
  const BatchMeta& m = p.meta;
  validate(m, p.cfg, p.num_blocks);
  check_sizes(p);
  const AttentionConfig& c = p.cfg;
  const size_t q_elems = static_cast<size_t>(m.num_tokens) * c.num_q_heads * c.head_dim;
  const size_t cache_elems = static_cast<size_t>(p.num_blocks) * c.block_size * c.num_kv_heads * c.head_dim;
  const bool quantized = is_quantized(c.kv_format);
  const bool values = has_values(p);
  if (quantized && values) {
    // The cache is the host-quantized history; the bf16 copy is the oracle's.
    q.upload(p.q);
    k_codes.upload(p.k_codes);
    v_codes.upload(p.v_codes);
    k_scale.upload(p.k_scale);
    v_scale.upload(p.v_scale);
    k_new.upload(p.k_new);
    v_new.upload(p.v_new);
  } else if (quantized) {
    q.resize(q_elems);
    fill_random(q.data(), q_elems, 1, stream);
    k_codes.resize(cache_elems);
    v_codes.resize(cache_elems);
    k_scale.resize(static_cast<size_t>(p.num_blocks) * c.block_size * c.num_kv_heads);
    v_scale.resize(k_scale.size());
  } else if (values) {
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
  if (quantized) {
    a.kv.format = c.kv_format;
    a.kv.k_codes = k_codes.data();
    a.kv.v_codes = v_codes.data();
    a.kv.k_scale = k_scale.data();
    a.kv.v_scale = v_scale.data();
  }
  a.batch = BatchView{query_start_loc.data(), seq_lens.data(), block_table.data(), slot_mapping.data(),
                      m.num_requests(), m.num_tokens, m.query_start_loc.back(), m.max_blocks_per_seq, m.max_query_len,
                      m.max_seq_len, m.decode_only};
  a.num_q_heads = p.cfg.num_q_heads;
  a.softmax_scale = p.cfg.softmax_scale();
  a.window = p.cfg.window;
  a.sinks = p.cfg.with_sinks ? sinks.data() : nullptr;
  a.sink_tokens = p.cfg.sink_tokens;
  a.checked = true;

  if (quantized && !values) fill_random_quantized(p.num_blocks * c.block_size, stream);
  if (values && m.num_tokens > 0) {
    if (quantized) {
      write_kv_quantized(a.kv, k_new.data(), v_new.data(), slot_mapping.data(), m.num_tokens, stream);
    } else {
      write_kv(a.kv, k_new.data(), v_new.data(), slot_mapping.data(), m.num_tokens, stream);
    }
  }
  poison_outputs();
}

// Benchmarks (fill_values = false) with an 8-bit cache: random bf16 rows made on
// the device and quantized into every slot by the write path itself, a chunk of
// slots at a time, so the bf16 staging buffers stay small next to the cache.
void DeviceBatch::fill_random_quantized(int num_slots, cudaStream_t stream) {
  const AttentionParams& a = params_;
  const int chunk = std::min(num_slots, 16384);
  const size_t row_elems = static_cast<size_t>(a.kv.num_kv_heads) * a.kv.head_dim;
  DeviceBuffer<bf16> k_rows(chunk * row_elems), v_rows(chunk * row_elems);  // [chunk, Hkv, D] each
  std::vector<int> slots(chunk);
  DeviceBuffer<int> slot_ids(chunk);
  for (int first = 0, c = 0; first < num_slots; first += chunk, ++c) {
    const int n = std::min(chunk, num_slots - first);
    std::iota(slots.begin(), slots.begin() + n, first);
    PA_CHECK(cudaMemcpy(slot_ids.data(), slots.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    fill_random(k_rows.data(), n * row_elems, 2 + 2 * static_cast<uint64_t>(c), stream);
    fill_random(v_rows.data(), n * row_elems, 3 + 2 * static_cast<uint64_t>(c), stream);
    write_kv_quantized(a.kv, k_rows.data(), v_rows.data(), slot_ids.data(), n, stream);
  }
  PA_CHECK(cudaStreamSynchronize(stream));  // the staging buffers are freed on return
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
