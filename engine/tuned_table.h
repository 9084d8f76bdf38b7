// A tuned table: measured split counts that engine::plan uses instead of stage
// 04's rule (exercises/03_autotune writes them). Load it once, hand it to every
// plan through Options::tuned; the plan looks an entry up (no allocation) and
// run() is unchanged.
//
// The file, version 1 (every field required unless marked, no other field allowed):
//   {
//     "tuned_plan_version": 1,
//     "device": "NVIDIA H200",               optional: where it was measured (not checked)
//     "shape": {                             the layers it was tuned for; plan() refuses others
//       "num_kv_heads": 8, "head_dim": 128, "block_size": 16, "kv_format": "bf16"
//     },
//     "entries": [                           at least one; each key (max_batch, max_context, group) once
//       {"max_batch": 4, "max_context": 4096, "group": 4, "num_splits": 16},
//       ...
//     ]
//   }
// An entry serves decode batches of <= max_batch requests whose longest span
// (the context, or the window) is <= max_context keys, at `group` query heads
// per KV head (exactly). A plan takes the tightest entry that serves its bounds:
// the smallest max_context, then the smallest max_batch. Where none serves (a
// larger batch or context than any entry, another group) the plan keeps stage
// 04's rule. The entry's num_splits (1..64) is an upper bound: splits that
// would be empty at the plan's span are dropped, as stage 04's rule does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/attention_params.h"

namespace pa::engine {

constexpr int TUNED_PLAN_VERSION = 1;
constexpr int TUNED_MAX_SPLITS = 64;  // stage04::MAX_SPLITS (plan.cu checks that they agree)

struct TunedShape {
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  KvFormat format = KvFormat::bf16;
};

struct TunedEntry {
  int max_batch = 0;    // serves num_requests <= max_batch
  int max_context = 0;  // serves span_keys <= max_context
  int group = 0;        // num_q_heads / num_kv_heads
  int num_splits = 0;   // 1..TUNED_MAX_SPLITS
};

class TunedTable {
 public:
  // Validates (pa::Error naming `source` and the entry): positive sizes, a
  // split count in 1..TUNED_MAX_SPLITS, each key once, at least one entry.
  TunedTable(const TunedShape& shape, std::vector<TunedEntry> entries, std::string device = {},
             const std::string& source = "tuned table");

  // The file format above; `source` names it in errors.
  static TunedTable parse(std::string_view json, const std::string& source = "tuned table");
  static TunedTable load(const std::string& path);
  std::string to_json() const;

  const TunedShape& shape() const { return shape_; }
  const std::vector<TunedEntry>& entries() const { return entries_; }  // by (group, max_context, max_batch)
  const std::string& device() const { return device_; }

  // The tightest entry serving (num_requests, span_keys, group), or null. Allocates nothing.
  const TunedEntry* find(int num_requests, int span_keys, int group) const;

 private:
  TunedShape shape_;
  std::vector<TunedEntry> entries_;
  std::string device_;
};

bool operator==(const TunedEntry& a, const TunedEntry& b);

}  // namespace pa::engine
