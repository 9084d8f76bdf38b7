// Exercise 03: autotune the engine's decode plan.
//
// The tuner (tuner.cpp) times the engine's decode path at every candidate split
// count for each measured key (batch, context, group), and the default plan
// (stage 04's rule) beside them. From those rows you pick one split count per
// key (TODO 1) and turn the choices into the table engine::plan reads (TODO 2,
// engine/tuned_table.h). Everything else here is given.
//
// The names the tuner gives its Google Benchmark rows, which read_rows parses:
//   sweep/engine/batch:B/ctx:C/group:G/splits:S   the engine with S splits (a one-entry table)
//   plan/default/batch:B/ctx:C/group:G            the engine's own plan (stage 04's rule)
//   plan/tuned/batch:B/ctx:C/group:G              the engine with the table made from this run's sweep
// (Google Benchmark appends "/iterations:N/manual_time" to each, which
// read_rows drops.) Every row carries the counters ms_median, kv_bytes, GBps, floor_fraction and
// num_splits (the split count the plan really ran).
#pragma once

#include <string>
#include <vector>

#include "engine/tuned_table.h"

namespace pa::exercise03 {

// A measured point: decode batches of `batch` requests, each `context` keys,
// `group` query heads per KV head.
struct Key {
  int batch = 0;
  int context = 0;
  int group = 0;
  auto operator<=>(const Key&) const = default;
};

struct Measured {
  int num_splits = 0;  // what the plan ran
  double ms = 0.0;     // median step time
};

// One key's sweep: every candidate's time, and what the default plan chose there.
struct KeyRows {
  Key key;
  int default_splits = 0;  // stage 04's rule at this key; 0 when the run has no plan/default row for it
  std::vector<Measured> candidates;
};

struct Choice {
  Key key;
  int num_splits = 0;
};

// Two times closer than this fraction of the faster are a tie: event-timed
// medians of one decode step on an H200 move by about 1% from run to run.
constexpr double TIE_MARGIN = 0.02;

// ---- the TODOs (starter.cpp, solution.cpp) -------------------------------------

// TODO 1: the split count to use at rows.key. The fastest candidate, except
// that every candidate within tie_margin of it (ms <= best_ms * (1 + tie_margin))
// is as good as the fastest: among those, keep the default plan's split count
// if it is one of them (the table then differs from the rule only where it is
// measurably faster), else the fewest splits (less workspace, a smaller merge).
// Throws pa::Error when rows has no candidates.
int pick_best(const KeyRows& rows, double tie_margin);

// TODO 2: the table for `choices`. For each (group, context), walk the batches
// in increasing order; an entry with max_batch = b serves every batch above the
// previous measured one up to b, so consecutive batches with the same split
// count become one entry (max_batch = the largest of them), and the context
// becomes max_context. Entries for batches or contexts the sweep did not reach
// are not invented: the plan keeps stage 04's rule there.
engine::TunedTable make_table(const std::vector<Choice>& choices, const engine::TunedShape& shape,
                              const std::string& device);

// ---- given (autotune.cpp) --------------------------------------------------------

// The split counts the tuner tries: a few between each power of two, up to stage 04's MAX_SPLITS.
std::vector<int> candidate_splits();

std::string sweep_name(const Key& k, int num_splits);
std::string plan_name(const Key& k, bool tuned);

// The sweep and plan/default rows of a Google Benchmark JSON file's text, by
// key (sorted). Rows that failed or were skipped (error_occurred) and aggregate
// rows are left out; names of other suites are ignored.
std::vector<KeyRows> read_rows(const std::string& benchmark_json, const std::string& source);

// pick_best for every key, in read_rows' order.
std::vector<Choice> choose_all(const std::vector<KeyRows>& rows, double tie_margin = TIE_MARGIN);

}  // namespace pa::exercise03
