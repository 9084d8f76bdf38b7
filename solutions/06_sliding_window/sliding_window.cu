// Stage 06: sliding-window attention.
//
// The window counts positions: a query at q_pos sees the keys at k_pos with
// k_pos <= q_pos (causal) and q_pos - k_pos < window. A decode at 32768 with a
// 4096 window needs 4096 keys, so it must read only those: 1/8 of the bytes.
//  - The key loop starts late: a tile's keys begin at the block holding the
//    first key of its OLDEST query's window (SlidingWindow::first_key); every
//    later query's window starts further on, so nothing it needs comes before.
//  - Per warp, tiles older than every row's window are skipped, and on the few
//    tiles where a row's window starts, the keys before it are masked
//    (SlidingWindow::for_warp).
//  - Split-KV splits only the window's span: stage 04's plan is sized by
//    span_keys(), and its Splits count from the first key.
// All of it is a `Mask` policy of stage 03's tiles, run through stage 04's
// splits or whole query tiles over bf16 caches. The engine (engine/engine.h)
// composes the same mask with the 8-bit caches and batch-invariant mode.
#include <algorithm>
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/stages.h"
#include "common/todo.cuh"
// Stage 06 builds on the reference solutions of stages 03 and 04.
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "sliding_window.cuh"

namespace pa::stage06 {
namespace {

// Stage 03's shape rules, plus this stage's: bf16 caches, a window >= 0, no
// sinks, no batch-invariant mode (the engine composes the window with 8-bit
// caches and with that mode).
stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window >= 0, "stage 06: window " + std::to_string(p.window) + " is negative (0 = no window)");
  PA_REQUIRE(p.sinks == nullptr && p.sink_tokens == 0,
             "stage 06 implements causal sliding-window attention: no sink logits or sink tokens (stage 08)");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             "stage 06 reads bf16 caches; windows over 8-bit caches run in the engine (engine/engine.h)");
  PA_REQUIRE(!p.batch_invariant,
             "stage 06 has no batch-invariant mode of its own; the engine (engine/engine.h) composes the window "
             "with batch-invariant mode (going_further/batch_invariant.cuh)");
  return stage03::checked_packing(p, "06");
}

}  // namespace

stage04::SplitPlan plan(const AttentionParams& p_in, int num_sms) {
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  return stage04::plan_rule(p, num_sms, span_keys(p));
}

void forward(const AttentionParams& p_in, cudaStream_t stream) { forward(p_in, stream, 0); }

void forward(const AttentionParams& p_in, cudaStream_t stream, int num_splits) {
  const stage03::Packing pk = validate(p_in);
  check_device_batch(p_in, "stage 06", stream);
  // No window (0) is a window no context outgrows: q_pos - k_pos <= max_seq_len - 1.
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  stage04::run_splits_or_tiles<stage03::Bf16Tiles, SlidingWindow>(p, pk, stream, num_splits, span_keys(p));
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("06_sliding_window");
}

}  // namespace pa::stage06
