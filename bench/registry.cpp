#include "registry.h"

#include <memory>

#include "common/stages.h"

namespace pa::bench {

namespace {
constexpr int kBenchWindow = 4096;
// gpt-oss's windowed layers (window 128), with StreamingLLM's 4 sink tokens.
constexpr int kSinkWindow = 128;
constexpr int kSinkTokens = 4;
std::string always(const Problem&) { return {}; }
std::string decode_only(const Problem& p) {
  return p.meta.decode_only ? std::string() : "split-KV serves decode-only batches";
}
}  // namespace

const std::vector<Backend>& backends() {
  static stage01::Workspace ws01;
  static const std::vector<Backend> all = {
      {"01_reference_gather", always,
       [](const Problem& p, DeviceBatch& db) { stage01::forward(db.params(), p.meta, ws01); }},
      {"02_fused_paged", always, [](const Problem&, DeviceBatch& db) { stage02::forward(db.params()); }},
      {"03_gqa_packing", always, [](const Problem&, DeviceBatch& db) { stage03::forward(db.params()); }},
      {"04_split_kv", decode_only, [](const Problem&, DeviceBatch& db) { stage04::forward(db.params()); }},
      {"05_quantized_kv_int8", always, [](const Problem&, DeviceBatch& db) { stage05::forward(db.params()); },
       [](AttentionConfig& c) { c.kv_format = KvFormat::int8; }},
      {"05_quantized_kv_fp8", always, [](const Problem&, DeviceBatch& db) { stage05::forward(db.params()); },
       [](AttentionConfig& c) { c.kv_format = KvFormat::fp8_e4m3; }},
      // Window 4096 on every case: the 32768-token decodes read 1/8 of their context.
      {"06_sliding_window", always, [](const Problem&, DeviceBatch& db) { stage06::forward(db.params()); },
       [](AttentionConfig& c) { c.window = kBenchWindow; }},
      // Every group cascaded (force 1). A batch without shared prefixes has no
      // groups: every request then reads its whole context in the suffix pass
      // (the plain path). bench_cascade also times the cost model's choice.
      {"07_cascade", always, nullptr, nullptr,
       [](const Problem& p, DeviceBatch& db, const std::vector<PrefixGroup>& groups) -> Backend::Step {
         auto plan = std::make_shared<stage07::Cascade>(stage07::plan(db.params(), p.meta, groups, /*force=*/1));
         return [plan, params = db.params()] { stage07::forward(params, *plan); };
       }},
      // gpt-oss's full-attention layers: one learned sink logit per query head.
      {"08_attention_sinks", always, [](const Problem&, DeviceBatch& db) { stage08::forward(db.params()); },
       [](AttentionConfig& c) { c.with_sinks = true; }},
      // gpt-oss's windowed layers plus StreamingLLM's sink tokens: learned sinks,
      // window 128 and the first 4 positions visible to every query, so a decode
      // reads at most 132 positions however long its context.
      {"08_sinks_window", always, [](const Problem&, DeviceBatch& db) { stage08::forward(db.params()); },
       [](AttentionConfig& c) {
         c.with_sinks = true;
         c.window = kSinkWindow;
         c.sink_tokens = kSinkTokens;
       }},
  };
  return all;
}

Backend::Step make_step(const Backend& b, const Problem& p, DeviceBatch& db, const std::vector<PrefixGroup>& groups) {
  if (b.prepare) return b.prepare(p, db, groups);
  return [&b, &p, &db] { b.forward(p, db); };
}

}  // namespace pa::bench
