// Stage 05: INT8 and FP8 (E4M3) KV caches.
//
// A decode reads every cached byte once, so its time is bytes / bandwidth: one
// byte per element instead of two (plus one fp32 scale per token and KV head)
// makes it ~1.9x faster and fits ~1.9x the tokens in the same memory.
//  - Write path (this file): each new token's K and V head rows are quantized
//    once, on write, through slot_mapping: scale = max|x| / 127 (int8) or / 448
//    (e4m3), code = x / scale rounded (common/quant.cuh is the rule, written once
//    for the host too; the tests compare bit for bit).
//  - Read path: stage 03's tile over code tiles (quantized_tile.cuh): codes and
//    scales stream through the cp.async ring, codes become fp16 operands in
//    registers (quantized_kv.cuh), scales are applied in fp32 to S and P.
//    Decode batches that stage 04's plan splits run its splits with the same
//    tile; everything else runs whole query tiles.
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/launch.cuh"
#include "common/quant.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
#include "quantized_kv.cuh"
#include "solutions/05_quantized_kv/quantized_tile.cuh"  // the tile itself: not a file the learner edits

namespace pa::stage05 {
namespace {

// One program per new token, one warp per head row: warp w quantizes rows
// w, w + WRITE_WARPS, ... of the token's 2 x num_kv_heads rows (K rows, then V
// rows). A head row (<= 256 values) fits a warp's registers, 8 per lane at
// most, so max|x| is a warp butterfly with no shared memory and no barrier.
// Lane l owns dims l, l + 32, ...: each load and store of the warp covers 32
// consecutive elements.
constexpr int WRITE_WARPS = 4;
constexpr int MAX_PER_LANE = 256 / 32;  // head_dim <= 256

template <KvFormat F>
__global__ void __launch_bounds__(32 * WRITE_WARPS)
    quantize_write_kernel(PagedKV kv, const bf16* __restrict__ k_new,  // [num_tokens, Hkv, D]
                          const bf16* __restrict__ v_new,              // [num_tokens, Hkv, D]
                          const int* __restrict__ slot_mapping) {      // [num_tokens]
  const int token = blockIdx.x;
  const int slot = slot_mapping[token];
  if (slot < 0) return;  // padding row: the whole block leaves, no warp is left waiting
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int Hkv = kv.num_kv_heads, D = kv.head_dim;
  for (int row = warp; row < 2 * Hkv; row += WRITE_WARPS) {  // warp-uniform: all lanes shuffle together
    const bool is_v = row >= Hkv;
    const int head = is_v ? row - Hkv : row;
    const bf16* src = (is_v ? v_new : k_new) + (static_cast<size_t>(token) * Hkv + head) * D;        // [D]
    uint8_t* codes = (is_v ? kv.v_codes : kv.k_codes) + (static_cast<size_t>(slot) * Hkv + head) * D;  // [D]
    float* scale_out = (is_v ? kv.v_scale : kv.k_scale) + static_cast<size_t>(slot) * Hkv + head;

    float x[MAX_PER_LANE];  // this lane's dims lane + 32 i (0 past D)
#pragma unroll
    for (int i = 0; i < MAX_PER_LANE; ++i) {
      const int d = lane + 32 * i;
      x[i] = d < D ? __bfloat162float(src[d]) : 0.0f;
    }
    // TODO 1: the row's scale: max|x| over the warp (nan_max, so a NaN poisons the row), divided by KvCodec<F>::MAX_CODE
    const float scale = 0.0f;  // placeholder: every row "all zeros"
    if (lane == 0) PA_TODO(1);
#pragma unroll
    for (int i = 0; i < MAX_PER_LANE; ++i) {
      const int d = lane + 32 * i;
      if (d >= D) continue;
      // TODO 2: the code of x[i]: 0 for a zero scale; else x / scale, int8: rounded half to even, clamped to [-127, 127]; e4m3: round-to-nearest, saturated
      const uint8_t code = 0;  // placeholder
      if (lane == 0 && i == 0) PA_TODO(2);
      codes[d] = code;
    }
    if (lane == 0) *scale_out = scale;
  }
}

// Stage 03's shape rules, plus this stage's: causal only, and an 8-bit cache has its codes and scales.
stage03::Packing validate(const AttentionParams& p) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 05 implements causal attention over 8-bit caches: no sliding window (stage 06), no sinks");
  PA_REQUIRE(is_quantized(p.kv.format),
             "stage 05 reads int8 and fp8_e4m3 caches; a bf16 cache is stage 04's (or the engine's, engine/engine.h)");
  PA_REQUIRE(!p.batch_invariant,
             "stage 05 has no batch-invariant mode of its own; the engine (engine/engine.h) composes 8-bit caches "
             "with it (going_further/batch_invariant.cuh)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             std::string("stage 05: a ") + name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  return stage03::checked_packing(p, "05");
}

}  // namespace

void write_kv(const PagedKV& kv, const bf16* k_new, const bf16* v_new, const int* slot_mapping, int num_tokens,
              cudaStream_t stream) {
  PA_REQUIRE(is_quantized(kv.format), "stage05::write_kv quantizes into an 8-bit cache; this one is bf16");
  PA_REQUIRE(kv.k_codes && kv.v_codes && kv.k_scale && kv.v_scale,
             std::string("stage05::write_kv: a ") + name(kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  PA_REQUIRE(supported_head_dim(kv.head_dim) && kv.head_dim <= 32 * MAX_PER_LANE,
             "stage05::write_kv: head_dim " + std::to_string(kv.head_dim) + " is not a multiple of 16 from 16 to 256");
  if (num_tokens > 0) {
    const dim3 grid(num_tokens), block(32 * WRITE_WARPS);
    if (kv.format == KvFormat::int8) {
      launch(quantize_write_kernel<KvFormat::int8>, grid, block, 0, stream, kv, k_new, v_new, slot_mapping);
    } else {
      launch(quantize_write_kernel<KvFormat::fp8_e4m3>, grid, block, 0, stream, kv, k_new, v_new, slot_mapping);
    }
  }
  PA_CHECK_TODOS("05_quantized_kv");
}

void forward(const AttentionParams& p, cudaStream_t stream) { forward(p, stream, 0); }

void forward(const AttentionParams& p, cudaStream_t stream, int num_splits) {
  const stage03::Packing pk = validate(p);
  check_device_batch(p, "stage 05", stream);
  const int span = p.batch.max_seq_len;
  using Causal = stage03::CausalMask;
  switch (p.kv.format) {
    case KvFormat::int8:
      stage04::run_splits_or_tiles<QuantizedTiles<KvFormat::int8>, Causal>(p, pk, stream, num_splits, span);
      break;
    case KvFormat::fp8_e4m3:
      stage04::run_splits_or_tiles<QuantizedTiles<KvFormat::fp8_e4m3>, Causal>(p, pk, stream, num_splits, span);
      break;
    case KvFormat::bf16: break;  // refused by validate()
  }
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("05_quantized_kv");
}

}  // namespace pa::stage05
