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
// All of it is a `Mask` policy of the tiles of stages 03 and 05, so the same
// code serves bf16 and 8-bit caches, prefill tiles and decode splits.
#include <algorithm>
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
// Stage 06 builds on the reference solutions of stages 03-05.
#include "solutions/03_gqa_packing/gqa_packing.cuh"
#include "solutions/04_split_kv/split_kv.cuh"
#include "solutions/04_split_kv/split_kv_invariant.cuh"
#include "solutions/04_split_kv/split_kv_warps.cuh"
#include "solutions/05_quantized_kv/quantized_tile.cuh"
#include "sliding_window.cuh"

namespace pa::stage06 {
namespace {

// Stage 03's shape rules, plus this stage's: a window >= 0, no sinks, and an
// 8-bit cache has its codes and scales.
stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window >= 0, "stage 06: window " + std::to_string(p.window) + " is negative (0 = no window)");
  PA_REQUIRE(p.sinks == nullptr && p.sink_tokens == 0,
             "stage 06 implements causal sliding-window attention: no sink logits or sink tokens (stage 08)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             std::string("stage 06: a ") + name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  return stage03::checked_packing(p, "06");
}

}  // namespace

stage04::SplitPlan plan(const AttentionParams& p_in, int num_sms) {
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  if (p.batch_invariant) return stage04::invariant_plan(span_keys(p), p.kv.block_size);
  return stage04::plan_rule(p, num_sms, span_keys(p));
}

void forward(const AttentionParams& p_in, cudaStream_t stream) { forward(p_in, stream, 0); }

void forward(const AttentionParams& p_in, cudaStream_t stream, int num_splits) {
  const stage03::Packing pk = validate(p_in);
  check_device_batch(p_in, "stage 06", stream);
  // No window (0) is a window no context outgrows: q_pos - k_pos <= max_seq_len - 1.
  AttentionParams p = p_in;
  if (p.window == 0) p.window = p.batch.max_seq_len + 1;
  const int span = span_keys(p);
  using stage05::run_splits_or_tiles;
  switch (p.kv.format) {
    case KvFormat::bf16:
      run_splits_or_tiles<stage04::Bf16SplitTiles, SlidingWindow>(p, pk, stream, num_splits, span);
      break;
    case KvFormat::int8:
      run_splits_or_tiles<stage05::QuantizedTiles<KvFormat::int8>, SlidingWindow>(p, pk, stream, num_splits, span);
      break;
    case KvFormat::fp8_e4m3:
      run_splits_or_tiles<stage05::QuantizedTiles<KvFormat::fp8_e4m3>, SlidingWindow>(p, pk, stream, num_splits,
                                                                                       span);
      break;
  }
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("06_sliding_window");
}

}  // namespace pa::stage06
