#include <algorithm>
#include <map>
#include <utility>

#include "autotune.h"
#include "common/check.h"

// Each unfinished TODO throws a TodoError that names it, so the test fails with
// that name instead of checking a placeholder's answer.
#define EXERCISE03_TODO(n, what)                                                                 \
  throw ::pa::TodoError("exercises/03_autotune: TODO " #n " (" what                           \
                        ") not done yet (see exercises/03_autotune/README.md)")

namespace pa::exercise03 {

int pick_best(const KeyRows& rows, double tie_margin) {
  (void)rows, (void)tie_margin;
  // TODO 1: the fastest candidate's time; every candidate within tie_margin of
  // it ties; among the tied, the default plan's split count if it is there,
  // else the fewest splits. No candidates: a pa::Error.
  EXERCISE03_TODO(1, "pick_best");
}

engine::TunedTable make_table(const std::vector<Choice>& choices, const engine::TunedShape& shape,
                              const std::string& device) {
  (void)choices, (void)shape, (void)device;
  // TODO 2: per (group, context), the batches in increasing order; a stretch of
  // batches with one split count becomes one entry whose max_batch is the
  // stretch's largest batch. engine::TunedTable's constructor checks the result.
  EXERCISE03_TODO(2, "make_table");
}

}  // namespace pa::exercise03
