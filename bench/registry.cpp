#include "registry.h"

#include "common/stages.h"

namespace pa::bench {

namespace {
std::string always(const Problem&) { return {}; }
}  // namespace

const std::vector<Backend>& backends() {
  static stage01::Workspace ws01;
  static const std::vector<Backend> all = {
      {"01_reference_gather", always,
       [](const Problem& p, DeviceBatch& db) { stage01::forward(db.params(), p.meta, ws01); }},
      {"02_fused_paged", always, [](const Problem&, DeviceBatch& db) { stage02::forward(db.params()); }},
  };
  return all;
}

}  // namespace pa::bench
