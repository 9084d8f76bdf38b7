#include <algorithm>
#include <map>
#include <utility>

#include "autotune.h"
#include "common/check.h"

namespace pa::exercise03 {

int pick_best(const KeyRows& rows, double tie_margin) {
  PA_REQUIRE(!rows.candidates.empty(), "pick_best: no candidates measured at batch " + std::to_string(rows.key.batch) +
                                           ", context " + std::to_string(rows.key.context));
  double best_ms = rows.candidates.front().ms;
  for (const Measured& m : rows.candidates) best_ms = std::min(best_ms, m.ms);
  const double tied_ms = best_ms * (1.0 + tie_margin);
  int fewest = 0;
  for (const Measured& m : rows.candidates) {
    if (m.ms > tied_ms) continue;
    if (m.num_splits == rows.default_splits) return m.num_splits;
    if (fewest == 0 || m.num_splits < fewest) fewest = m.num_splits;
  }
  return fewest;
}

engine::TunedTable make_table(const std::vector<Choice>& choices, const engine::TunedShape& shape,
                              const std::string& device) {
  std::map<std::pair<int, int>, std::vector<Choice>> runs;  // (group, context) -> its batches
  for (const Choice& c : choices) runs[{c.key.group, c.key.context}].push_back(c);
  std::vector<engine::TunedEntry> entries;
  for (auto& [group_context, run] : runs) {
    std::sort(run.begin(), run.end(), [](const Choice& a, const Choice& b) { return a.key.batch < b.key.batch; });
    for (size_t i = 0; i < run.size(); ++i) {
      // The last batch of a stretch with one split count closes its entry.
      if (i + 1 < run.size() && run[i + 1].num_splits == run[i].num_splits) continue;
      entries.push_back({run[i].key.batch, group_context.second, group_context.first, run[i].num_splits});
    }
  }
  return engine::TunedTable(shape, std::move(entries), device);
}

}  // namespace pa::exercise03
