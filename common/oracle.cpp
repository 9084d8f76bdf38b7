#include "oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "quant.cuh"

namespace pa {

std::vector<float> logical_kv(const Problem& p, int r, bool values) {
  return logical_kv(p, r, values, KvSource::stored);
}

std::vector<float> logical_kv(const Problem& p, int r, bool values, KvSource source) {
  const KvFormat format = p.cfg.kv_format;
  if (source == KvSource::stored && is_quantized(format)) {
    // Dequantized: code * scale per element, in fp32 as the kernels compute it.
    const BatchMeta& m = p.meta;
    const int Hkv = p.cfg.num_kv_heads, D = p.cfg.head_dim, bs = p.cfg.block_size;
    const int seq_len = m.seq_lens[r], q_len = m.q_len(r);
    const auto& codes = values ? p.v_codes : p.k_codes;
    const auto& scales = values ? p.v_scale : p.k_scale;
    const auto& fresh = values ? p.v_new : p.k_new;
    std::vector<uint8_t> fresh_codes(D);
    std::vector<float> kv(static_cast<size_t>(seq_len) * Hkv * D);
    for (int pos = 0; pos < seq_len; ++pos) {
      for (int h = 0; h < Hkv; ++h) {
        const uint8_t* code;
        float scale;
        if (pos < seq_len - q_len) {
          const size_t row = (static_cast<size_t>(m.block_id(r, pos, bs)) * bs + pos % bs) * Hkv + h;
          code = &codes[row * D];
          scale = scales[row];
        } else {
          // This step's token: quantized as the write path will store it.
          const size_t t = static_cast<size_t>(m.query_start_loc[r]) + (pos - (seq_len - q_len));
          scale = quantize_row(format, &fresh[(t * Hkv + h) * D], D, fresh_codes.data());
          code = fresh_codes.data();
        }
        float* dst = &kv[(static_cast<size_t>(pos) * Hkv + h) * D];
        for (int d = 0; d < D; ++d) dst[d] = dequantize(format, code[d], scale);
      }
    }
    return kv;
  }
  const BatchMeta& m = p.meta;
  const int Hkv = p.cfg.num_kv_heads, D = p.cfg.head_dim, bs = p.cfg.block_size;
  const int seq_len = m.seq_lens[r], q_len = m.q_len(r);
  const auto& cache = values ? p.v_cache : p.k_cache;
  const auto& fresh = values ? p.v_new : p.k_new;
  const size_t row = static_cast<size_t>(Hkv) * D;
  std::vector<float> kv(static_cast<size_t>(seq_len) * row);
  for (int pos = 0; pos < seq_len; ++pos) {
    const bf16* src;
    if (pos < seq_len - q_len) {
      const size_t slot = static_cast<size_t>(m.block_id(r, pos, bs)) * bs + pos % bs;
      src = &cache[slot * row];
    } else {
      const size_t t = static_cast<size_t>(m.query_start_loc[r]) + (pos - (seq_len - q_len));
      src = &fresh[t * row];
    }
    for (size_t e = 0; e < row; ++e) kv[pos * row + e] = __bfloat162float(src[e]);
  }
  return kv;
}

OracleResult reference_attention(const Problem& p) { return reference_attention(p, KvSource::stored); }

OracleResult reference_attention(const Problem& p, KvSource source) {
  const BatchMeta& m = p.meta;
  const AttentionConfig& c = p.cfg;
  const int Hq = c.num_q_heads, Hkv = c.num_kv_heads, D = c.head_dim, group = c.group();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  OracleResult res;
  res.out.assign(static_cast<size_t>(m.num_tokens) * Hq * D, 0.0);
  res.lse.assign(static_cast<size_t>(m.num_tokens) * Hq, -std::numeric_limits<double>::infinity());

  // Work items write disjoint rows, so threads need no locking. A prefill
  // chunk of thousands of queries would keep one core busy for minutes, so an
  // item is (request, query head, 32 queries); each request's logical K/V is
  // built once, first, and shared by its items.
  const int R = m.num_requests();
  auto parallel_for = [](int n, const auto& body) {
    const int num_threads = std::max(1, std::min<int>(n, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (int w = 0; w < num_threads; ++w) {
      pool.emplace_back([&, w] {
        for (int item = w; item < n; item += num_threads) body(item);
      });
    }
    for (auto& th : pool) th.join();
  };
  std::vector<std::vector<float>> ks(R), vs(R);  // [seq_len, Hkv, D] per request
  parallel_for(R, [&](int r) {
    if (m.q_len(r) == 0) return;
    ks[r] = logical_kv(p, r, false, source);
    vs[r] = logical_kv(p, r, true, source);
  });
  constexpr int QUERIES_PER_ITEM = 32;
  struct Item {
    int r, h, i_begin, i_end;
  };
  std::vector<Item> items;
  for (int r = 0; r < R; ++r) {
    for (int h = 0; h < Hq; ++h) {
      for (int i = 0; i < m.q_len(r); i += QUERIES_PER_ITEM) items.push_back({r, h, i, std::min(m.q_len(r), i + QUERIES_PER_ITEM)});
    }
  }
  parallel_for(static_cast<int>(items.size()), [&](int item) {
    const auto [r, h, i_begin, i_end] = items[item];
    const int seq_len = m.seq_lens[r], q_len = m.q_len(r);
    const std::vector<float>& k = ks[r];
    const std::vector<float>& v = vs[r];
    std::vector<double> s;  // scores of the visible keys, then their weights
    std::vector<int> keys;  // positions of the visible keys, ascending
    const int kvh = h / group;
    for (int i = i_begin; i < i_end; ++i) {
      const int t = m.query_start_loc[r] + i;
      const int q_pos = seq_len - q_len + i;
      // Visible keys: the sink tokens before the window, then the window itself.
      const int k_begin = c.window > 0 ? std::max(0, q_pos - c.window + 1) : 0;
      const int num_sink_keys = c.window > 0 ? std::min(c.sink_tokens, k_begin) : 0;  // [0, num_sink_keys)
      keys.clear();
      for (int kp = 0; kp < num_sink_keys; ++kp) keys.push_back(kp);
      for (int kp = k_begin; kp <= q_pos; ++kp) keys.push_back(kp);
      const bf16* q = &p.q[(static_cast<size_t>(t) * Hq + h) * D];
      s.assign(keys.size(), 0.0);
      double mx = c.with_sinks ? static_cast<double>(p.sinks[h]) : -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* kr = &k[(static_cast<size_t>(keys[j]) * Hkv + kvh) * D];
        double dot = 0.0;
        for (int d = 0; d < D; ++d) dot += static_cast<double>(__bfloat162float(q[d])) * kr[d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double denom = c.with_sinks ? std::exp(static_cast<double>(p.sinks[h]) - mx) : 0.0;
      for (double& x : s) {
        x = std::exp(x - mx);
        denom += x;
      }
      double* o = &res.out[(static_cast<size_t>(t) * Hq + h) * D];
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* vr = &v[(static_cast<size_t>(keys[j]) * Hkv + kvh) * D];
        const double w = s[j] / denom;
        for (int d = 0; d < D; ++d) o[d] += w * vr[d];
      }
      res.lse[static_cast<size_t>(t) * Hq + h] = mx + std::log(denom);
    }
  });
  return res;
}

}  // namespace pa
