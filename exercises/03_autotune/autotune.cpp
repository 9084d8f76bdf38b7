// Exercise 03's given pieces: the candidates, the row names, reading a run's JSON.
#include "autotune.h"

#include <cstdio>
#include <map>

#include "common/check.h"
#include "engine/json.h"

namespace pa::exercise03 {
namespace {

std::string key_label(const Key& k) {
  return "batch:" + std::to_string(k.batch) + "/ctx:" + std::to_string(k.context) + "/group:" +
         std::to_string(k.group);
}

// "batch:B/ctx:C/group:G" (+ "/splits:S" when splits is not null) -> the numbers; false if the label differs.
bool parse_label(const std::string& label, Key& k, int* splits) {
  int n = 0, consumed = 0;
  const int fields = std::sscanf(label.c_str(), "batch:%d/ctx:%d/group:%d%n", &k.batch, &k.context, &k.group, &consumed);
  if (fields != 3) return false;
  const std::string rest = label.substr(consumed);
  if (!splits) return rest.empty();
  consumed = 0;
  if (std::sscanf(rest.c_str(), "/splits:%d%n", &n, &consumed) != 1 || static_cast<size_t>(consumed) != rest.size())
    return false;
  *splits = n;
  return true;
}

// Google Benchmark appends the run's settings to a name
// ("/iterations:20/manual_time"); the label is what comes before them.
std::string without_run_settings(std::string name) {
  static const char* const settings[] = {"iterations:", "repeats:", "threads:", "min_time:", "min_warmup_time:",
                                         "manual_time", "real_time", "process_time"};
  while (true) {
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos) return name;
    const std::string last = name.substr(slash + 1);
    bool setting = false;
    for (const char* s : settings) setting = setting || last.rfind(s, 0) == 0;
    if (!setting) return name;
    name.resize(slash);
  }
}

double counter(const engine::json::Value& row, const char* name, const std::string& where) {
  const engine::json::Value* v = row.find(name);
  PA_REQUIRE(v && v->is_number(), where + ": the row has no counter \"" + name + "\"");
  return v->number;
}

}  // namespace

std::vector<int> candidate_splits() { return {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}; }

std::string sweep_name(const Key& k, int num_splits) {
  return "sweep/engine/" + key_label(k) + "/splits:" + std::to_string(num_splits);
}

std::string plan_name(const Key& k, bool tuned) { return std::string("plan/") + (tuned ? "tuned/" : "default/") + key_label(k); }

std::vector<KeyRows> read_rows(const std::string& text, const std::string& source) {
  const engine::json::Value doc = engine::json::parse(text, source);
  const engine::json::Value* list = doc.find("benchmarks");
  PA_REQUIRE(list && list->is_array(), source + ": no \"benchmarks\" list (not a Google Benchmark JSON file?)");
  std::map<Key, KeyRows> by_key;
  for (const engine::json::Value& row : list->items) {
    const engine::json::Value* name = row.find("name");
    if (!name || !name->is_string()) continue;
    if (const engine::json::Value* e = row.find("error_occurred"); e && e->boolean) continue;
    if (const engine::json::Value* t = row.find("run_type"); t && t->is_string() && t->string != "iteration") continue;
    const std::string n = without_run_settings(name->string);
    const std::string where = source + ": " + n;
    Key k;
    int splits = 0;
    if (n.rfind("sweep/engine/", 0) == 0 && parse_label(n.substr(13), k, &splits)) {
      KeyRows& r = by_key[k];
      r.key = k;
      // The split count the plan ran (a candidate past a short context's blocks runs fewer).
      r.candidates.push_back({static_cast<int>(counter(row, "num_splits", where)), counter(row, "ms_median", where)});
    } else if (n.rfind("plan/default/", 0) == 0 && parse_label(n.substr(13), k, nullptr)) {
      KeyRows& r = by_key[k];
      r.key = k;
      r.default_splits = static_cast<int>(counter(row, "num_splits", where));
    }
  }
  std::vector<KeyRows> out;
  for (auto& [k, r] : by_key)
    if (!r.candidates.empty()) out.push_back(std::move(r));
  return out;
}

std::vector<Choice> choose_all(const std::vector<KeyRows>& rows, double tie_margin) {
  std::vector<Choice> out;
  for (const KeyRows& r : rows) out.push_back({r.key, pick_best(r, tie_margin)});
  return out;
}

}  // namespace pa::exercise03
