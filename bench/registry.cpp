#include "registry.h"

#include "common/stages.h"

namespace pa::bench {

namespace {
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
  };
  return all;
}

}  // namespace pa::bench
