#include "problem.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "check.h"
#include "quant.cuh"

namespace pa {

namespace {

bool is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

std::string req(int r) { return "request " + std::to_string(r) + ": "; }

}  // namespace

float AttentionConfig::softmax_scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

std::string AttentionConfig::describe() const {
  std::ostringstream s;
  s << "Hq=" << num_q_heads << " Hkv=" << num_kv_heads << " D=" << head_dim << " block=" << block_size;
  if (window) s << " window=" << window;
  if (sink_tokens) s << " sink_tokens=" << sink_tokens;
  if (with_sinks) s << " sinks";
  if (kv_format != KvFormat::bf16) s << " kv=" << name(kv_format);
  return s.str();
}

void validate_config(const AttentionConfig& cfg) {
  PA_REQUIRE(cfg.num_q_heads > 0 && cfg.num_kv_heads > 0,
             "num_q_heads and num_kv_heads must be positive (got " + std::to_string(cfg.num_q_heads) +
                 ", " + std::to_string(cfg.num_kv_heads) + ")");
  PA_REQUIRE(cfg.num_q_heads % cfg.num_kv_heads == 0,
             "num_q_heads (" + std::to_string(cfg.num_q_heads) + ") must be a multiple of num_kv_heads (" +
                 std::to_string(cfg.num_kv_heads) + "): each KV head serves a whole group of query heads");
  PA_REQUIRE(supported_head_dim(cfg.head_dim), "head_dim " + std::to_string(cfg.head_dim) +
                                                  " is not supported (a multiple of 16 from 16 to 256)");
  PA_REQUIRE(is_pow2(cfg.block_size) && cfg.block_size <= 256,
             "block_size " + std::to_string(cfg.block_size) + " is not supported (a power of two, 1..256)");
  PA_REQUIRE(cfg.window >= 0, "window must be >= 0 (0 = no window), got " + std::to_string(cfg.window));
  PA_REQUIRE(cfg.sink_tokens >= 0,
             "sink_tokens must be >= 0 (0 = none), got " + std::to_string(cfg.sink_tokens));
  // KvFormat is a byte: any value converts to it, and the host code takes every
  // value but bf16 for an 8-bit format.
  PA_REQUIRE(cfg.kv_format == KvFormat::bf16 || cfg.kv_format == KvFormat::int8 ||
                 cfg.kv_format == KvFormat::fp8_e4m3,
             "kv_format " + std::to_string(static_cast<int>(cfg.kv_format)) +
                 " is not one of bf16, int8, fp8_e4m3");
}

void validate(const BatchMeta& m, const AttentionConfig& cfg, int num_blocks) {
  validate_config(cfg);
  const int R = m.num_requests();
  PA_REQUIRE(static_cast<int>(m.query_start_loc.size()) == R + 1,
             "query_start_loc has " + std::to_string(m.query_start_loc.size()) + " entries; " +
                 std::to_string(R) + " requests need " + std::to_string(R + 1));
  PA_REQUIRE(m.query_start_loc[0] == 0, "query_start_loc[0] must be 0, got " + std::to_string(m.query_start_loc[0]));
  PA_REQUIRE(m.max_blocks_per_seq >= 0, "max_blocks_per_seq must be >= 0");
  // Slot ids (slot_mapping, block * block_size + offset) are ints.
  PA_REQUIRE(num_blocks >= 0 && static_cast<long long>(num_blocks) * cfg.block_size <= INT_MAX,
             "num_blocks " + std::to_string(num_blocks) + " x block_size " + std::to_string(cfg.block_size) +
                 ": the cache's slot ids must fit in [0, INT_MAX]");
  PA_REQUIRE(m.block_table.size() == static_cast<size_t>(R) * m.max_blocks_per_seq,
             "block_table has " + std::to_string(m.block_table.size()) + " entries; expected num_requests x " +
                 "max_blocks_per_seq = " + std::to_string(static_cast<size_t>(R) * m.max_blocks_per_seq));
  PA_REQUIRE(static_cast<int>(m.slot_mapping.size()) == m.num_tokens,
             "slot_mapping has " + std::to_string(m.slot_mapping.size()) + " entries for " +
                 std::to_string(m.num_tokens) + " tokens");
  for (int r = 0; r < R; ++r) {
    // In 64 bits: query_start_loc[r] >= 0 here (entry 0 is, and none so far
    // decreased), but entry r + 1 may be anything, e.g. INT_MIN.
    const long long q_len_64 = static_cast<long long>(m.query_start_loc[r + 1]) - m.query_start_loc[r];
    PA_REQUIRE(q_len_64 >= 0, req(r) + "negative query length " + std::to_string(q_len_64) +
                                  " (query_start_loc must not decrease)");
    const int q_len = static_cast<int>(q_len_64);
    const int seq_len = m.seq_lens[r];
    PA_REQUIRE(seq_len >= 0, req(r) + "negative seq_len " + std::to_string(seq_len));
    PA_REQUIRE(seq_len >= q_len, req(r) + "seq_len " + std::to_string(seq_len) + " < query length " +
                                     std::to_string(q_len) +
                                     ": its queries must be the last q_len of its seq_len positions");
    PA_REQUIRE(q_len <= m.max_query_len, req(r) + "query length " + std::to_string(q_len) +
                                             " exceeds max_query_len " + std::to_string(m.max_query_len));
    PA_REQUIRE(seq_len <= m.max_seq_len, req(r) + "seq_len " + std::to_string(seq_len) +
                                             " exceeds max_seq_len " + std::to_string(m.max_seq_len));
    PA_REQUIRE(!m.decode_only || q_len <= 1,
               req(r) + "decode_only is set but the request has " + std::to_string(q_len) + " queries");
    const long long blocks_needed = (static_cast<long long>(seq_len) + cfg.block_size - 1) / cfg.block_size;
    PA_REQUIRE(blocks_needed <= m.max_blocks_per_seq,
               req(r) + "block table too short: seq_len " + std::to_string(seq_len) + " needs " +
                   std::to_string(blocks_needed) + " blocks of " + std::to_string(cfg.block_size) +
                   ", the table row has " + std::to_string(m.max_blocks_per_seq));
    for (int b = 0; b < blocks_needed; ++b) {
      const int id = m.block_table[static_cast<size_t>(r) * m.max_blocks_per_seq + b];
      PA_REQUIRE(id >= 0 && id < num_blocks, req(r) + "block_table[" + std::to_string(r) + "][" +
                                                 std::to_string(b) + "] = " + std::to_string(id) +
                                                 " is out of range [0, " + std::to_string(num_blocks) + ")");
    }
    for (int i = 0; i < q_len; ++i) {
      const int t = m.query_start_loc[r] + i;
      PA_REQUIRE(t < m.num_tokens, req(r) + "query rows run past num_tokens " + std::to_string(m.num_tokens));
      const int pos = seq_len - q_len + i;
      const int want = m.block_id(r, pos, cfg.block_size) * cfg.block_size + pos % cfg.block_size;
      PA_REQUIRE(m.slot_mapping[t] == want,
                 req(r) + "slot_mapping[" + std::to_string(t) + "] = " + std::to_string(m.slot_mapping[t]) +
                     " disagrees with the block table, which puts position " + std::to_string(pos) +
                     " in slot " + std::to_string(want));
    }
  }
  // The maxima are upper bounds, and the launchers size grids and workspaces
  // from them: a bound no request of this batch could reach is refused. A
  // request's queries are among its positions, and its positions fit its table row.
  PA_REQUIRE(m.max_query_len >= 0 && m.max_query_len <= m.max_seq_len,
             "max_query_len " + std::to_string(m.max_query_len) + " must be in [0, max_seq_len = " +
                 std::to_string(m.max_seq_len) + "]: a request's queries are the last of its positions");
  PA_REQUIRE(static_cast<long long>(m.max_seq_len) <= static_cast<long long>(m.max_blocks_per_seq) * cfg.block_size,
             "max_seq_len " + std::to_string(m.max_seq_len) + " exceeds what a block-table row holds: " +
                 "max_blocks_per_seq " + std::to_string(m.max_blocks_per_seq) + " x block_size " +
                 std::to_string(cfg.block_size));
  PA_REQUIRE(m.query_start_loc[R] <= m.num_tokens,
             "query_start_loc[" + std::to_string(R) + "] = " + std::to_string(m.query_start_loc[R]) +
                 " exceeds num_tokens " + std::to_string(m.num_tokens));
  for (int t = m.query_start_loc[R]; t < m.num_tokens; ++t) {
    PA_REQUIRE(m.slot_mapping[t] == -1, "padding row " + std::to_string(t) + " has slot_mapping " +
                                            std::to_string(m.slot_mapping[t]) + "; padding rows must use -1");
  }
}

size_t AttentionConfig::kv_token_bytes() const {
  const size_t head_row = is_quantized(kv_format) ? head_dim * sizeof(uint8_t) + sizeof(float)  // codes + scale
                                                  : head_dim * sizeof(bf16);
  return 2 * static_cast<size_t>(num_kv_heads) * head_row;  // K and V
}

size_t Problem::kv_bytes_read() const {
  size_t tokens = 0;
  for (int r = 0; r < meta.num_requests(); ++r) {
    const int seq_len = meta.seq_lens[r];
    // A request with no query this step needs none of its keys.
    if (meta.q_len(r) == 0) continue;
    // With a sliding window only the keys some query of r sees: from its oldest
    // query's window start (position seq_len - q_len - window + 1) to the end,
    // i.e. min(seq_len, q_len + window - 1) keys; a decode: min(seq_len, window).
    // Sink tokens add the positions [0, sink_tokens) that lie before that start.
    int keys = seq_len;
    if (cfg.window > 0) {
      // 64 bits: q_len + window - 1 wraps for windows near INT_MAX.
      keys = static_cast<int>(std::min<long long>(seq_len, static_cast<long long>(meta.q_len(r)) + cfg.window - 1));
      keys += std::min(cfg.sink_tokens, seq_len - keys);
    }
    tokens += static_cast<size_t>(std::max(keys, 0));
  }
  return tokens * kv_token_bytes();
}

double Problem::attended_pairs() const {
  double pairs = 0;
  for (int r = 0; r < meta.num_requests(); ++r) {
    for (int i = 0; i < meta.q_len(r); ++i) {
      const int q_pos = meta.seq_lens[r] - meta.q_len(r) + i;  // sees keys 0..q_pos
      if (cfg.window > 0) {
        // The window [q_pos - window + 1, q_pos], and the sink tokens before it.
        pairs += std::min(q_pos + 1, cfg.window) + std::min(cfg.sink_tokens, std::max(0, q_pos + 1 - cfg.window));
      } else {
        pairs += q_pos + 1;
      }
    }
  }
  return pairs;
}

Problem make_problem(const AttentionConfig& cfg, const std::vector<RequestShape>& requests,
                     const BuildOptions& opt) {
  validate_config(cfg);
  // num_tokens = query rows + padding_rows sizes slot_mapping and q: a negative
  // count would make them shorter than the rows written below.
  PA_REQUIRE(opt.padding_rows >= 0,
             "make_problem: padding_rows " + std::to_string(opt.padding_rows) + " (must be >= 0)");
  Problem p;
  p.cfg = cfg;
  BatchMeta& m = p.meta;
  const int R = static_cast<int>(requests.size());
  const int bs = cfg.block_size;
  std::mt19937_64 gen(opt.seed);

  m.query_start_loc.assign(R + 1, 0);
  int blocks_needed_total = 0, max_blocks = 0;
  m.decode_only = true;
  for (int r = 0; r < R; ++r) {
    const RequestShape s = requests[r];
    PA_REQUIRE(s.q_len >= 0 && s.seq_len >= s.q_len,
               "make_problem: " + req(r) + "q_len " + std::to_string(s.q_len) + ", seq_len " +
                   std::to_string(s.seq_len) + " (a request needs 0 <= q_len <= seq_len)");
    m.query_start_loc[r + 1] = m.query_start_loc[r] + s.q_len;
    m.seq_lens.push_back(s.seq_len);
    m.max_query_len = std::max(m.max_query_len, s.q_len);
    m.max_seq_len = std::max(m.max_seq_len, s.seq_len);
    m.decode_only = m.decode_only && s.q_len <= 1;
    const int nb = (s.seq_len + bs - 1) / bs;
    blocks_needed_total += nb;
    max_blocks = std::max(max_blocks, nb);
  }
  m.num_tokens = m.query_start_loc[R] + opt.padding_rows;
  // One spare column, so every row has at least one padding entry that points at
  // a NaN-filled spare block: a kernel that reads past seq_len reads NaN.
  m.max_blocks_per_seq = max_blocks + 1;
  const int spare_blocks = 2 + blocks_needed_total / 8;
  p.num_blocks = blocks_needed_total + spare_blocks;

  std::vector<int> ids(p.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (opt.shuffle_blocks) std::shuffle(ids.begin(), ids.end(), gen);
  m.block_table.assign(static_cast<size_t>(R) * m.max_blocks_per_seq, 0);
  int next = 0;
  for (int r = 0; r < R; ++r) {
    const int nb = (m.seq_lens[r] + bs - 1) / bs;
    for (int b = 0; b < m.max_blocks_per_seq; ++b) {
      const int spare = ids[blocks_needed_total + (r + b) % spare_blocks];
      m.block_table[static_cast<size_t>(r) * m.max_blocks_per_seq + b] = b < nb ? ids[next++] : spare;
    }
  }
  m.slot_mapping.assign(m.num_tokens, -1);
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < m.q_len(r); ++i) {
      const int pos = m.seq_lens[r] - m.q_len(r) + i;
      m.slot_mapping[m.query_start_loc[r] + i] = m.block_id(r, pos, bs) * bs + pos % bs;
    }
  }

  const int D = cfg.head_dim, Hq = cfg.num_q_heads, Hkv = cfg.num_kv_heads;
  const size_t cache_elems = static_cast<size_t>(p.num_blocks) * bs * Hkv * D;
  if (!opt.fill_values) {
    // Benchmarks fill q and the cache on the device, but a kernel's sinks are
    // part of the model: draw them here too (a few floats).
    if (cfg.with_sinks) {
      std::mt19937_64 sink_gen(opt.seed ^ 0x51A4u);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      p.sinks.resize(Hq);
      for (auto& s : p.sinks) s = normal(sink_gen);
    }
    return p;
  }

  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto rnd = [&] { return __float2bfloat16(normal(gen)); };
  p.q.resize(static_cast<size_t>(m.num_tokens) * Hq * D);
  for (auto& x : p.q) x = rnd();
  p.k_new.resize(static_cast<size_t>(m.num_tokens) * Hkv * D);
  p.v_new.resize(p.k_new.size());
  for (size_t i = 0; i < p.k_new.size(); ++i) {
    p.k_new[i] = rnd();
    p.v_new[i] = rnd();
  }
  const bf16 nan = __float2bfloat16(NAN);
  p.k_cache.assign(cache_elems, nan);
  p.v_cache.assign(cache_elems, nan);
  // History: positions before this step's queries were written by earlier steps.
  for (int r = 0; r < R; ++r) {
    for (int pos = 0; pos < m.seq_lens[r] - m.q_len(r); ++pos) {
      const size_t slot = static_cast<size_t>(m.block_id(r, pos, bs)) * bs + pos % bs;
      for (size_t e = 0; e < static_cast<size_t>(Hkv) * D; ++e) {
        p.k_cache[slot * Hkv * D + e] = rnd();
        p.v_cache[slot * Hkv * D + e] = rnd();
      }
    }
  }
  if (cfg.with_sinks) {
    p.sinks.resize(Hq);
    for (auto& s : p.sinks) s = normal(gen);
  }
  if (is_quantized(cfg.kv_format)) {
    // After every random draw, so the format never changes the values: an int8
    // and a bf16 Problem with the same seed hold the same full-precision data.
    const size_t num_slots = static_cast<size_t>(p.num_blocks) * bs;
    p.k_codes.assign(cache_elems, 0xFF);  // int8 -1, e4m3 NaN; the NaN scale poisons either way
    p.v_codes.assign(cache_elems, 0xFF);
    p.k_scale.assign(num_slots * Hkv, NAN);
    p.v_scale.assign(num_slots * Hkv, NAN);
    for (int r = 0; r < R; ++r) {
      for (int pos = 0; pos < m.seq_lens[r] - m.q_len(r); ++pos) {
        const size_t slot = static_cast<size_t>(m.block_id(r, pos, bs)) * bs + pos % bs;
        for (int h = 0; h < Hkv; ++h) {
          const size_t row = slot * Hkv + h;  // index of the (slot, head) scale; its codes start at row * D
          p.k_scale[row] = quantize_row(cfg.kv_format, &p.k_cache[row * D], D, &p.k_codes[row * D]);
          p.v_scale[row] = quantize_row(cfg.kv_format, &p.v_cache[row * D], D, &p.v_codes[row * D]);
        }
      }
    }
  }
  return p;
}

std::vector<PrefixGroup> share_prefixes(Problem& p, const std::vector<std::pair<std::vector<int>, int>>& groups) {
  BatchMeta& m = p.meta;
  const int R = m.num_requests(), bs = p.cfg.block_size;
  auto table = [&](int r, int b) -> int& { return m.block_table[static_cast<size_t>(r) * m.max_blocks_per_seq + b]; };

  // Every rule is checked before the first table entry changes, so a throw
  // leaves p as it was.
  std::vector<int> group_of(R, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& [members, prefix_len] = groups[g];
    const std::string where = "share_prefixes: group " + std::to_string(g) + ": ";
    PA_REQUIRE(!members.empty(), where + "no members");
    PA_REQUIRE(prefix_len >= 1, where + "prefix_len " + std::to_string(prefix_len) + " (must be >= 1)");
    // Positions [0, shared_end) live in shared blocks; 64 bits, as prefix_len may be anything up to INT_MAX.
    const long long shared_end = (static_cast<long long>(prefix_len) + bs - 1) / bs * bs;
    for (const int r : members) {
      PA_REQUIRE(r >= 0 && r < R, where + "request index " + std::to_string(r) + " is out of range [0, " +
                                      std::to_string(R) + ")");
      PA_REQUIRE(group_of[r] == -1,
                 where + req(r) + (group_of[r] == static_cast<int>(g)
                                       ? std::string("listed twice")
                                       : "already a member of group " + std::to_string(group_of[r])));
      group_of[r] = static_cast<int>(g);
      const int history = m.seq_lens[r] - m.q_len(r);  // cached positions [0, history)
      PA_REQUIRE(prefix_len <= history,
                 where + req(r) + "prefix_len " + std::to_string(prefix_len) + " > seq_len - q_len = " +
                     std::to_string(history) + ": the prefix must be history, written before this step");
      PA_REQUIRE(m.q_len(r) == 0 || history >= shared_end,
                 where + req(r) + "its first new token (position " + std::to_string(history) +
                     ") would land in shared block " + std::to_string(history / bs) +
                     ", where every member would write its own K/V into one slot; it needs at least " +
                     std::to_string(min_suffix_len(prefix_len, bs)) + " cached positions after the prefix");
      const int first_history = m.seq_lens[members[0]] - m.q_len(members[0]);
      PA_REQUIRE(std::min<long long>(history, shared_end) <= first_history,
                 where + req(r) + "reads positions up to " + std::to_string(std::min<long long>(history, shared_end)) +
                     " from the shared blocks, but the first member (request " + std::to_string(members[0]) +
                     ") has written only " + std::to_string(first_history));
    }
  }

  std::vector<PrefixGroup> out;
  std::vector<int> released;
  for (const auto& [members, prefix_len] : groups) {
    PrefixGroup grp;
    grp.prefix_len = prefix_len;
    grp.members = members;
    const int num_shared = static_cast<int>((static_cast<long long>(prefix_len) + bs - 1) / bs);
    for (int b = 0; b < num_shared; ++b) grp.blocks.push_back(table(members[0], b));
    for (const int r : members) {
      for (int b = 0; b < num_shared; ++b) {
        if (table(r, b) != grp.blocks[b]) released.push_back(table(r, b));
        table(r, b) = grp.blocks[b];
      }
    }
    out.push_back(std::move(grp));
  }

  // A released block that no table entry (padding columns included) points at
  // any more gets the unused slots' poison, so a kernel that reads a member's
  // old block instead of the shared one reads NaN.
  std::vector<bool> referenced(p.num_blocks, false);
  for (const int id : m.block_table) {
    if (id >= 0 && id < p.num_blocks) referenced[id] = true;
  }
  const size_t block_rows = static_cast<size_t>(bs) * p.cfg.num_kv_heads;  // (slot, KV head) rows per block
  const size_t D = p.cfg.head_dim;
  for (const int id : released) {
    if (referenced[id]) continue;
    const size_t first_row = static_cast<size_t>(id) * block_rows;
    auto poison = [&](auto& v, auto value, size_t per_row) {
      if (v.empty()) return;  // built with fill_values = false
      std::fill(v.begin() + first_row * per_row, v.begin() + (first_row + block_rows) * per_row, value);
    };
    poison(p.k_cache, __float2bfloat16(NAN), D);
    poison(p.v_cache, __float2bfloat16(NAN), D);
    poison(p.k_codes, uint8_t{0xFF}, D);
    poison(p.v_codes, uint8_t{0xFF}, D);
    poison(p.k_scale, NAN, size_t{1});
    poison(p.v_scale, NAN, size_t{1});
  }
  validate(m, p.cfg, p.num_blocks);
  return out;
}

int min_suffix_len(int prefix_len, int block_size) {
  return static_cast<int>((static_cast<long long>(prefix_len) + block_size - 1) / block_size * block_size - prefix_len);
}

std::vector<RequestShape> shared_prefix_requests(int members, int prefix_len, int suffix_len, int q_len,
                                                 int block_size) {
  PA_REQUIRE(members >= 1 && prefix_len >= 1 && suffix_len >= 0 && q_len >= 1 && block_size >= 1,
             "shared_prefix_requests: bad shape");
  const int need = min_suffix_len(prefix_len, block_size);
  PA_REQUIRE(suffix_len >= need,
             "shared_prefix_requests: suffix_len " + std::to_string(suffix_len) + " puts the first new token at " +
                 "position " + std::to_string(prefix_len + suffix_len) + ", inside the prefix's last block of " +
                 std::to_string(block_size) + "; the suffix needs at least " + std::to_string(need) + " positions");
  return std::vector<RequestShape>(members, RequestShape{q_len, prefix_len + suffix_len + q_len});
}

std::vector<RequestShape> shared_prefix_decodes(int members, int prefix_len, int suffix_len, int block_size) {
  return shared_prefix_requests(members, prefix_len, suffix_len, 1, block_size);
}

std::vector<RequestShape> milestone_requests() {
  return {{16, 40}, {16, 16}, {21, 21}, {1, 70}, {1, 130}};
}

std::vector<RequestShape> mixed_chunks_and_decodes(int shrink) {
  std::vector<RequestShape> out = {{512 / shrink, 4096 / shrink}, {512 / shrink, 2048 / shrink}};
  for (int i = 0; i < 30; ++i) out.push_back({1, (1024 + 128 * i) / shrink});
  return out;
}

std::vector<RequestShape> decode_requests(int num_requests, int context_len) {
  return std::vector<RequestShape>(num_requests, RequestShape{1, context_len});
}

std::vector<RequestShape> random_mixed_requests(uint64_t seed, int num_requests, int max_seq_len) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> kind(0, 3), len(1, max_seq_len);
  std::vector<RequestShape> out;
  for (int r = 0; r < num_requests; ++r) {
    const int seq = len(gen);
    switch (kind(gen)) {
      case 0: out.push_back({seq, seq}); break;                          // full prompt
      case 1: out.push_back({1 + seq / 3, seq}); break;                  // prefill chunk
      default: out.push_back({1, seq}); break;                           // decode
    }
  }
  return out;
}

}  // namespace pa
