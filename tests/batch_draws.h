// Random valid batches for the property test (tests/test_property.cpp): one
// seed, one batch, the same on every machine with the same standard library.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/problem.h"

namespace pa::test {

struct Draw {
  uint64_t seed = 0;
  AttentionConfig cfg;
  std::vector<RequestShape> requests;
  BuildOptions opt;
  float sink_scale = 1.0f;  // the builder's N(0, 1) sinks times this: 5 lets some sinks dominate their row
  // Prefix groups as share_prefixes takes them: (members, prefix_len).
  std::vector<std::pair<std::vector<int>, int>> group_spec;
  int num_page_shares = 0;  // single history pages pointed at from a second table entry
  int num_splits = 0;       // stages 04/05/06/08: 0 = their own plan, 1..64 forced
  int force = -1;           // stage 07's plan: -1 cost model, 0 plain, 1 cascade
  std::vector<PrefixGroup> prefix_groups;  // filled by build_problem

  std::string describe() const {
    std::ostringstream s;
    s << cfg.describe() << ", " << requests.size() << " requests, " << opt.padding_rows << " padding rows";
    if (!group_spec.empty()) s << ", " << group_spec.size() << " prefix groups";
    if (num_page_shares) s << ", " << num_page_shares << " shared pages";
    if (cfg.with_sinks && sink_scale != 1.0f) s << ", sinks x" << sink_scale;
    s << "\n  requests (q_len, seq_len):";
    for (const RequestShape& r : requests) s << " (" << r.q_len << ", " << r.seq_len << ")";
    for (const auto& [members, prefix_len] : group_spec) {
      s << "\n  prefix group: " << prefix_len << " positions shared by requests";
      for (const int m : members) s << " " << m;
    }
    s << "\n  num_splits " << num_splits << ", stage 07 force " << force << ", build seed " << opt.seed;
    return s.str();
  }
};

namespace draws {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(gen_); }
  template <class T>
  T pick(const std::vector<T>& xs) { return xs[uniform(0, static_cast<int>(xs.size()) - 1)]; }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// One request of a random kind with at most max_ctx positions.
inline RequestShape request(Rng& g, int max_ctx) {
  const int kind = g.uniform(0, 9);
  if (kind == 0) return {0, g.uniform(0, max_ctx)};  // in the batch, no query this step
  if (kind <= 4) return {1, g.uniform(1, max_ctx)};  // decode
  if (kind == 5) {                                   // verify block (speculative decoding)
    const int seq = g.uniform(2, std::max(2, max_ctx));
    return {g.uniform(2, std::min(seq, 6)), seq};
  }
  if (kind <= 7) {  // prefill chunk: the last q_len of seq positions
    const int seq = g.uniform(2, std::max(2, max_ctx));
    return {g.uniform(2, std::min(seq, 32)), seq};
  }
  const int seq = g.uniform(1, std::min(max_ctx, 48));  // full prompt
  return {seq, seq};
}

}  // namespace draws

inline Draw draw_batch(uint64_t seed) {
  draws::Rng g(seed);
  Draw d;
  d.seed = seed;
  AttentionConfig& c = d.cfg;
  // 80, 96 and 192 less often: stages that do not serve them refuse them.
  c.head_dim = g.pick<int>({64, 64, 64, 128, 128, 128, 256, 256, 80, 96, 192});
  c.block_size = 1 << g.uniform(0, 8);
  const int group = g.chance(0.6) ? g.uniform(1, 8) : g.pick<int>({12, 16, 24, 32, 40, 48, 64, g.uniform(9, 64)});
  c.num_kv_heads = group <= 8 ? g.uniform(1, 3) : group <= 16 ? g.uniform(1, 2) : 1;
  c.num_q_heads = group * c.num_kv_heads;
  const int format = g.uniform(0, 3);
  c.kv_format = format <= 1 ? KvFormat::bf16 : format == 2 ? KvFormat::int8 : KvFormat::fp8_e4m3;
  if (g.chance(0.35)) {
    const int w = g.uniform(0, 9);
    c.window = w == 0 ? INT_MAX : w <= 4 ? g.uniform(1, 16) : g.uniform(17, 200);
  }
  if (g.chance(0.25)) c.sink_tokens = g.uniform(1, 8);
  c.with_sinks = g.chance(0.3);
  d.sink_scale = g.chance(0.3) ? 5.0f : 1.0f;

  const int max_ctx = g.uniform(1, 300);
  const int num_requests = g.chance(0.05) ? 0 : g.uniform(1, 6);
  for (int r = 0; r < num_requests; ++r) d.requests.push_back(draws::request(g, max_ctx));

  // Prefix groups: members whose first prefix_len cached positions are the same
  // physical pages. Every member keeps its new tokens out of the shared pages
  // (min_suffix_len), so each one has cached at least the shared pages' span
  // and any of them can be the group's first member (share_prefixes' rules).
  const int num_groups = g.chance(0.3) ? (g.chance(0.25) ? 2 : 1) : 0;
  for (int k = 0; k < num_groups; ++k) {
    const int prefix_len = g.uniform(1, 120);
    const int num_members = g.uniform(2, 4);
    std::vector<int> members;
    for (int i = 0; i < num_members; ++i) {
      const int suffix = min_suffix_len(prefix_len, c.block_size) + g.uniform(0, 40);
      const int kind = g.uniform(0, 5);
      const int q_len = kind == 0 ? 0 : kind <= 3 ? 1 : g.uniform(2, 12);
      const int at = g.uniform(0, static_cast<int>(d.requests.size()));
      d.requests.insert(d.requests.begin() + at, RequestShape{q_len, prefix_len + suffix + q_len});
      // Indices at or after `at` move one up, in this group and the ones before it.
      for (int& m : members) m += m >= at;
      for (auto& [other, len] : d.group_spec) {
        for (int& m : other) m += m >= at;
      }
      members.push_back(at);
    }
    d.group_spec.push_back({members, prefix_len});
  }

  d.opt.seed = seed * 1000003u + 17u;
  d.opt.padding_rows = g.chance(0.3) ? g.uniform(1, 3) : 0;
  d.num_page_shares = g.chance(0.35) ? g.uniform(1, 6) : 0;
  // Forced splits serve decode batches; on others they are refused, which a
  // few draws check, while most run the stages' own dispatch.
  const bool decodes = std::all_of(d.requests.begin(), d.requests.end(), [](RequestShape r) { return r.q_len <= 1; });
  const int splits = g.uniform(0, 3);
  d.num_splits = splits <= 1 || (!decodes && g.chance(0.85)) ? 0 : splits == 2 ? g.uniform(1, 8) : g.uniform(1, 64);
  d.force = g.uniform(-1, 1);
  return d;
}

// make_problem, then the draw's prefix groups (share_prefixes) and shared
// pages; fills d.prefix_groups. Throws pa::Error where make_problem does.
//
// A shared page is a table entry of one request pointed at a page another
// request (or the same one) already uses. Both pages hold only history
// (positions below seq_len - q_len of their owner), so no new token is ever
// written into a page that some request reads as history, and the oracle,
// which reads the cache through each request's own table, sees the same keys
// as the kernels. Group members' shared prefix entries stay as they are (stage
// 07's plan checks that every member's table starts with the group's pages).
inline Problem build_problem(Draw& d) {
  Problem p = make_problem(d.cfg, d.requests, d.opt);
  if (d.cfg.with_sinks) {
    for (float& s : p.sinks) s *= d.sink_scale;
  }
  d.prefix_groups = share_prefixes(p, d.group_spec);

  BatchMeta& m = p.meta;
  const int bs = d.cfg.block_size;
  std::vector<int> first_free_col(m.num_requests(), 0);
  for (const PrefixGroup& grp : d.prefix_groups) {
    for (const int r : grp.members) first_free_col[r] = static_cast<int>(grp.blocks.size());
  }
  std::vector<std::pair<int, int>> sources, targets;  // (request, table column) of whole history pages
  for (int r = 0; r < m.num_requests(); ++r) {
    const int history = m.seq_lens[r] - m.q_len(r);
    for (int b = 0; (b + 1) * bs <= history; ++b) {
      sources.push_back({r, b});
      if (b >= first_free_col[r]) targets.push_back({r, b});
    }
  }
  draws::Rng g(d.opt.seed ^ 0x5EA5EDu);
  for (int k = 0; k < d.num_page_shares && !targets.empty(); ++k) {
    const auto [tr, tb] = g.pick(targets);
    const auto [sr, sb] = g.pick(sources);
    m.block_table[static_cast<size_t>(tr) * m.max_blocks_per_seq + tb] =
        m.block_table[static_cast<size_t>(sr) * m.max_blocks_per_seq + sb];
  }
  validate(m, p.cfg, p.num_blocks);
  return p;
}

}  // namespace pa::test
