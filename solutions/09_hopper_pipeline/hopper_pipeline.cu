// Stage 09: the prefill tile on Hopper's machinery (TMA, mbarriers, wgmma,
// warp specialisation).
//
// The kernel is in hopper_pipeline.cuh. This file checks the batch, makes the
// tensor maps over the paged pool and launches one program per (query tile,
// KV head, request), as stage 03 launches its tile.
#include <cstdint>
#include <string>

#include "common/batch_ops.h"
#include "common/checked_launch.h"
#include "common/stages.h"
#include "common/todo.cuh"
#include "hopper_pipeline.cuh"

namespace pa::stage09 {
namespace {

// The ring's arithmetic, on the host, before anything is launched: a parity or
// a byte count that is wrong does not fail on a GPU, it hangs (a waiter whose
// phase never completes). So the launcher refuses to run the kernel with one.
template <class T>
void check_protocol() {
  for (int t = 0; t < 3 * T::STAGES; ++t) {
    const RingPos<T::STAGES> pos(t);
    const uint32_t round = static_cast<uint32_t>(t / T::STAGES);
    if (pos.slot != t % T::STAGES || pos.full_parity != (round & 1u) || pos.empty_parity != ((round & 1u) ^ 1u)) {
      throw TodoError(todo_message("09_hopper_pipeline", 1u << 1) + ": RingPos(" + std::to_string(t) + ") gives slot " +
                      std::to_string(pos.slot) + ", full parity " + std::to_string(pos.full_parity) +
                      ", empty parity " + std::to_string(pos.empty_parity) + " with " + std::to_string(T::STAGES) +
                      " slots; the kernel would wait on phases that never complete");
    }
  }
  if (T::tile_bytes() != sizeof(bf16) * T::KV_ELEMS) {
    throw TodoError(todo_message("09_hopper_pipeline", 1u << 2) + ": a tile announces " +
                    std::to_string(T::tile_bytes()) + " bytes, and its copies deliver " +
                    std::to_string(sizeof(bf16) * T::KV_ELEMS) + " (TILE_K keys x HEAD_DIM dims of bf16)");
  }
}

template <int HEAD_DIM>
void run(const AttentionParams& p, const Packing& pk, cudaStream_t stream) {
  using T = HopperTile<HEAD_DIM>;
  check_protocol<T>();
  launch_tiles<HEAD_DIM>(p, pk, stream);
}

}  // namespace

void forward(const AttentionParams& p, cudaStream_t stream) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 09 implements plain causal attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.format == KvFormat::bf16,
             "stage 09 reads bf16 caches; run 8-bit caches through stage 05 (05_quantized_kv)");
  const Packing pk = stage03::checked_packing(p, "09");
  PA_REQUIRE(!p.batch_invariant,
             "stage 09 has no batch-invariant mode; the engine (engine/engine.h) has the mode");
  // TMA coordinates are 32-bit signed: the pool's slots are one of them.
  PA_REQUIRE(slots_fit_coordinates(p),
             "stage 09: the pool holds " + std::to_string(static_cast<int64_t>(p.kv.num_blocks) * p.kv.block_size) +
                 " slots; a tensor copy addresses at most 2^31 - 1");
  check_device_batch(p, "stage 09", stream);
  stage03::with_head_dim(p.kv.head_dim, [&]<int HEAD_DIM>() { run<HEAD_DIM>(p, pk, stream); });
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("09_hopper_pipeline");
}

}  // namespace pa::stage09
