// Small helpers for tiles that feed mma.sync m16n8k16 (stages 03-08): the
// shared-memory swizzle that ldmatrix reads without bank conflicts, and packing
// two floats into the 16-bit-pair registers the MMA takes.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_compat.cuh"

namespace pa {

// Element offset of (row, 16-byte chunk) in a shared tile of 16-bit values with
// HEAD_DIM-element rows, stored back to back. ldmatrix reads one chunk from
// each of 8 consecutive rows, and the 8 must land on 8 different 16-byte bank
// groups (offsets mod 128 bytes). Unswizzled, rows 128/256/512 bytes apart all
// start on bank 0 and the 8 reads serialize; XORing the chunk index with
// row % 8 separates them. Rows of other lengths already spread out in part: a
// row of 12 chunks (head_dim 96) moves by 64 bytes, so rows 2 apart collide and
// 2 bits of XOR (with row / 2) suffice; a row of 10 chunks (80) moves by 32
// bytes, and 1 bit (with row / 4) does. The XOR stays inside an aligned group of
// 2^bits chunks, so inside the row.
template <int HEAD_DIM>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(HEAD_DIM % 16 == 0, "rows of whole 16-byte chunk pairs");
  constexpr int CHUNKS = HEAD_DIM / 8;
  constexpr int BITS = CHUNKS % 8 == 0 ? 3 : CHUNKS % 4 == 0 ? 2 : 1;
  const int x = (row >> (3 - BITS)) & ((1 << BITS) - 1);
  return row * HEAD_DIM + ((chunk ^ x) * 8);
}

// Two floats as the bf16x2 register an MMA operand expects (lo in the low half).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// Two floats as an fp16x2 register (lo in the low half).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

}  // namespace pa
