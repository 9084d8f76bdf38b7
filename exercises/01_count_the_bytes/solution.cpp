#include "bytes.h"

namespace pa::exercise01 {

Costs count(const BatchMeta& meta, const AttentionConfig& cfg, double gbps) {
  // One token of one layer: K and V, each num_kv_heads x head_dim bf16 values.
  const uint64_t token_bytes = 2ull * cfg.num_kv_heads * cfg.head_dim * 2;
  uint64_t tokens = 0, launches = 0;
  for (int r = 0; r < meta.num_requests(); ++r) {
    tokens += static_cast<uint64_t>(meta.seq_lens[r]);
    if (meta.q_len(r) > 0) launches += 2;  // gather + attention
  }
  Costs c{};
  c.floor_bytes = tokens * token_bytes;
  // Gather: read the blocks, write the copy. Attention: every query head reads
  // its KV head's copy, so the copy is read group = Hq / Hkv times.
  c.reference_bytes = 2 * c.floor_bytes + static_cast<uint64_t>(cfg.group()) * c.floor_bytes;
  c.reference_launches = launches;
  c.floor_ms = static_cast<double>(c.floor_bytes) / (gbps * 1e9) * 1e3;
  return c;
}

}  // namespace pa::exercise01
