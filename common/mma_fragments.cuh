// Small helpers for tiles that feed mma.sync m16n8k16 (stages 03-08): the
// shared-memory swizzle that ldmatrix reads without bank conflicts, and packing
// two floats into the 16-bit-pair registers the MMA takes.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_compat.cuh"

namespace pa {

// Element offset of (row, 16-byte chunk) in a shared tile of 16-bit values with
// HEAD_DIM-element rows. ldmatrix reads one chunk from each of 8 consecutive
// rows; unswizzled, rows 128/256/512 bytes apart all start on bank 0 and the 8
// reads serialize. XORing the chunk index with row % 8 puts the 8 chunks on 8
// different bank quads (rows need >= 8 chunks: HEAD_DIM % 64 == 0).
template <int HEAD_DIM>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(HEAD_DIM % 64 == 0, "the swizzle XORs 3 bits of the chunk index");
  return row * HEAD_DIM + ((chunk ^ (row & 7)) * 8);
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
