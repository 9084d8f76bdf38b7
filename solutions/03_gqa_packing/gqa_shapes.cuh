// Stage 03's tile shapes and the host-side checks that derive a kernel's
// Packing from a batch (gqa_packing.cuh has the kernel). Named shapes, so that
// a launch says what it runs: Tiling<DecodeShape<128>>, not a row of numbers.
#pragma once

#include <algorithm>
#include <string>

#include "common/attention_params.h"
#include "common/check.h"
#include "common/online_softmax.cuh"
#include "common/tile_contract.cuh"

namespace pa::stage03 {
// The tile contract's vocabulary, by its stage-03 names: the kernel's Packing
// (checked_packing() below), a program's KeyRange, a warp's WarpKeys.
using pa::KeyRange, pa::Packing, pa::WarpKeys;

// Internal linkage, like the kernel (each stage's library instantiates it).
namespace {

constexpr int MAX_GROUP = 64;

// A tile shape, by name. A program is ROW_WARPS x KV_WARPS warps: each row warp
// owns 16 tile rows; KV_WARPS warps share those rows and split every K/V tile's
// keys (stage 05's 8-bit decode tile; bf16 tiles have one).
template <class Shape>
struct Tiling : Shape {
  using Shape::HEAD_DIM, Shape::ROW_WARPS, Shape::KV_WARPS, Shape::TILE_K, Shape::STAGES;
  // Programs an SM must be able to hold at once (__launch_bounds__): caps the
  // registers per thread at 65536 / (MIN_PROGRAMS_PER_SM * NUM_THREADS).
  using Shape::MIN_PROGRAMS_PER_SM;
  static constexpr int NUM_WARPS = ROW_WARPS * KV_WARPS;
  static constexpr int NUM_THREADS = NUM_WARPS * 32;
  static constexpr int ROWS = ROW_WARPS * 16;       // tile rows: 16 per row warp, the MMA's M
  static constexpr int WARP_K = TILE_K / KV_WARPS;  // keys of a tile one warp computes
  static constexpr int CHUNKS = HEAD_DIM / 8;       // 16-byte chunks of a bf16 row
  static constexpr int Q_ELEMS = ROWS * HEAD_DIM;
  static constexpr int KV_ELEMS = TILE_K * HEAD_DIM;  // one K (or V) tile

  static_assert(WARP_K % 16 == 0 && WARP_K * KV_WARPS == TILE_K,
                "a warp's keys are consumed 16 at a time (the k of P*V, two n-tiles of Q*K^T)");
  static_assert(HEAD_DIM % 16 == 0, "the MMA's k-steps and the swizzle take 16 dims at a time");
};

// Decode-like batches (every request's tile fits 16 rows: decodes, short verify
// blocks) get one warp per program, so 64 decodes x 8 KV heads make 512 small
// programs. Each keeps 2 K/V tiles of 8 KB in flight (4096 bytes per K or V tile
// at every head_dim); its shared memory (Q + 3 stages: 50-56 KB) lets 4 programs
// share an SM. Stage 04 runs this tile too.
template <int HEAD_DIM_>
struct DecodeShape {
  static constexpr int HEAD_DIM = HEAD_DIM_, ROW_WARPS = 1, KV_WARPS = 1, TILE_K = 4096 / HEAD_DIM, STAGES = 3;
  static constexpr int MIN_PROGRAMS_PER_SM = 1;
};
// Everything else gets 128-row programs with 64-key tiles (32 for head_dim 256);
// their registers (~220 per lane) allow one program per SM anyway, so the shared
// memory for a third stage (128 KB in all for head_dim 128) costs nothing.
template <int HEAD_DIM_>
struct PrefillShape {
  static constexpr int HEAD_DIM = HEAD_DIM_, ROW_WARPS = 8, KV_WARPS = 1, TILE_K = HEAD_DIM <= 128 ? 64 : 32;
  static constexpr int STAGES = 3, MIN_PROGRAMS_PER_SM = 1;
};

// The tiles of stages 03-08 are built for HEAD_DIM = 64, 128 or 256 values per
// row (stage 05's 8-bit layouts work in 64-dim groups). A head_dim between
// those (80, 96 of Phi-3, 192) runs the next tile up
// with its last dims padded: q, K and V are read for head_dim values only and
// the rest of each shared row is zero-filled, so the padding adds 0 to every
// score and its output dims are never stored. The bytes read are the cache's
// own; the MMAs do HEAD_DIM / head_dim times the work, which decode (memory
// bound) hides.
inline int tile_head_dim(int head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

inline std::string head_dim_refusal(int head_dim) {
  return "head_dim " + std::to_string(head_dim) + " is not supported (a multiple of 16 from 16 to 256)";
}

// Smallest s with 2^s >= x.
inline int log2_ceil(int x) {
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

// What every launcher of these tiles (stages 03-08) requires of the batch's
// shape, checked on the host before any launch; returns the kernel's Packing.
// Each stage adds its own feature checks (format, window, sinks) on top.
inline Packing checked_packing(const AttentionParams& p, const char* stage) {
  const std::string who = std::string("stage ") + stage;
  PA_REQUIRE(p.kv.num_kv_heads > 0 && p.num_q_heads % p.kv.num_kv_heads == 0,
             who + ": num_q_heads (" + std::to_string(p.num_q_heads) + ") must be a multiple of num_kv_heads (" +
                 std::to_string(p.kv.num_kv_heads) + ")");
  const int group = p.num_q_heads / p.kv.num_kv_heads;
  PA_REQUIRE(group >= 1 && group <= MAX_GROUP,
             who + " packs GQA groups of 1.." + std::to_string(MAX_GROUP) + " query heads per KV head; got group " +
                 std::to_string(group) + " (num_q_heads " + std::to_string(p.num_q_heads) + ", num_kv_heads " +
                 std::to_string(p.kv.num_kv_heads) + ")");
  PA_REQUIRE(p.kv.block_size >= 1 && (p.kv.block_size & (p.kv.block_size - 1)) == 0,
             who + ": block_size " + std::to_string(p.kv.block_size) + " is not a power of two");
  PA_REQUIRE(supported_head_dim(p.kv.head_dim), who + ": " + head_dim_refusal(p.kv.head_dim));
  return Packing{group, log2_ceil(group), log2_ceil(p.kv.block_size), p.softmax_scale * LOG2E};
}

// Tiles of `rows` rows that cover q_len tokens x GROUP_PAD heads (a group wider
// than a tile takes GROUP_PAD / rows tiles per token).
inline int query_tiles(int q_len, const Packing& pk, int rows) {
  return static_cast<int>(((static_cast<long long>(q_len) << pk.group_shift) + rows - 1) / rows);
}

}  // namespace
}  // namespace pa::stage03
