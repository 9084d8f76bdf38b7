// The paged cache's address arithmetic, written once: request r's key at
// position kv_pos lives in block block_table[r][kv_pos / block_size], offset
// kv_pos % block_size; slot = block * block_size + offset; and KV head h's row
// of that slot is cache row slot * num_kv_heads + h (of [num_blocks *
// block_size * num_kv_heads] rows, head_dim values each).
//
// block_shift (log2 block_size) and num_kv_heads are arguments rather than
// members: callers pass the kernel's parameters, which the compiler reads from
// constant memory at each use; copies held in a struct would occupy registers
// for the whole key loop.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "attention_params.h"
#include "cuda_compat.cuh"

namespace pa {

struct KvLookup {
  const int* table;  // [max_blocks_per_seq]  this request's physical block ids
  int kv_head;

  __device__ __forceinline__ KvLookup(const AttentionParams& p, int r, int kv_head_)
      : table(p.batch.block_table + static_cast<size_t>(r) * p.batch.max_blocks_per_seq), kv_head(kv_head_) {}

  // The block-table entry of the block holding kv_pos.
  __device__ __forceinline__ int entry(int kv_pos, int block_shift) const { return table[kv_pos >> block_shift]; }
  // kv_pos's slot, given its block's entry (32 bits: num_blocks * block_size < 2^32).
  __device__ __forceinline__ static uint32_t slot(int entry_of_block, int kv_pos, int block_shift) {
    return (static_cast<uint32_t>(entry_of_block) << block_shift) + (kv_pos & ((1 << block_shift) - 1));
  }
  // This KV head's row of a slot.
  __device__ __forceinline__ size_t head_row_of_slot(uint32_t s, int num_kv_heads) const {
    return static_cast<size_t>(s) * num_kv_heads + kv_head;
  }
  // This KV head's cache row of key kv_pos.
  __device__ __forceinline__ size_t head_row(int kv_pos, int block_shift, int num_kv_heads) const {
    const size_t s = (static_cast<size_t>(entry(kv_pos, block_shift)) << block_shift) +
                     (kv_pos & ((1 << block_shift) - 1));
    return s * num_kv_heads + kv_head;
  }
};

// One thread's block-table entries for the keys it copies from a K/V tile,
// read a tile ahead of the copies that use them. A cp.async is an `asm
// volatile` with a "memory" clobber, so the compiler moves no load across it:
// an entry read just before its copy is a global round trip on the critical
// path of every tile (and of every copy, when each reads its own). Read while
// the previous tile computes, the entries are in registers when the copies go.
//
// key_of(i): the key of the thread's copy i. Keys at or past keys_end are not
// read (their copies are zero-fills) and get entry 0.
template <int COPIES>
struct EntriesAhead {
  int entry[COPIES];    // block-table entry of copy i's key
  int first = INT_MIN;  // the tile's first key, INT_MIN before the first fetch

  template <class KeyOf>
  __device__ __forceinline__ void fetch(const KvLookup& lookup, int block_shift, int tile_first, int keys_end,
                                        KeyOf key_of) {
    first = tile_first;
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const int kv_pos = key_of(i);
      entry[i] = kv_pos < keys_end ? lookup.entry(kv_pos, block_shift) : 0;
    }
  }
};

}  // namespace pa
