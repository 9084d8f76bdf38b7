// Stage 03: GQA packing on tensor cores.
//
// The kernel is in gqa_packing.cuh (stage 04 runs the same tile): a program's
// rows are tokens x the (padded) query heads of one KV head's group, so each
// K/V tile is loaded once per group and feeds mma.sync. This file picks the
// tile shape for the batch and launches it over the whole context of every
// query tile (the WholeContext slice).
#include <string>

#include "common/batch_ops.h"
#include "common/launch.cuh"
#include "common/stages.h"
#include "common/todo.cuh"
#include "gqa_packing.cuh"

namespace pa::stage03 {
namespace {

template <class T>
void run(const AttentionParams& p, const Packing& pk, cudaStream_t stream) {
  const int block_q = T::ROWS >> pk.group_shift;
  const dim3 grid((p.batch.max_query_len + block_q - 1) / block_q, p.kv.num_kv_heads, p.batch.num_requests);
  launch(gqa_packing_kernel<T, WholeContext>, grid, dim3(T::NUM_THREADS), T::SMEM_BYTES, stream, p, pk,
         WholeContext{});
}

// The one-warp decode tile when every request's tile fits its 16 rows, so a
// decode batch has many small programs; the 128-row tile for everything else.
template <int HEAD_DIM>
void dispatch(const AttentionParams& p, const Packing& pk, cudaStream_t stream) {
  if ((p.batch.max_query_len << pk.group_shift) <= DecodeTiling<HEAD_DIM>::ROWS) {
    run<DecodeTiling<HEAD_DIM>>(p, pk, stream);
  } else {
    run<PrefillTiling<HEAD_DIM>>(p, pk, stream);
  }
}

}  // namespace

void forward(const AttentionParams& p, cudaStream_t stream) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 03 implements plain causal attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.num_kv_heads > 0 && p.num_q_heads % p.kv.num_kv_heads == 0,
             "stage 03: num_q_heads (" + std::to_string(p.num_q_heads) + ") must be a multiple of num_kv_heads (" +
                 std::to_string(p.kv.num_kv_heads) + ")");
  const int group = p.num_q_heads / p.kv.num_kv_heads;
  PA_REQUIRE(group >= 1 && group <= MAX_GROUP,
             "stage 03 packs GQA groups of 1.." + std::to_string(MAX_GROUP) + " query heads per KV head; got group " +
                 std::to_string(group) + " (num_q_heads " + std::to_string(p.num_q_heads) + ", num_kv_heads " +
                 std::to_string(p.kv.num_kv_heads) + ")");
  PA_REQUIRE(p.kv.block_size >= 1 && (p.kv.block_size & (p.kv.block_size - 1)) == 0,
             "stage 03: block_size " + std::to_string(p.kv.block_size) + " is not a power of two");
  const Packing pk = make_packing(p, group);
  switch (p.kv.head_dim) {
    case 64: dispatch<64>(p, pk, stream); break;
    case 128: dispatch<128>(p, pk, stream); break;
    case 256: dispatch<256>(p, pk, stream); break;
    default: throw Error("stage 03: head_dim " + std::to_string(p.kv.head_dim) + " is not supported (64, 128, 256)");
  }
  clear_padding_rows(p, stream);
  //@+ PA_CHECK_TODOS("03_gqa_packing");
}

}  // namespace pa::stage03
