// The cp.async ring: K/V tiles stream through STAGES shared-memory buffers, so
// the copies of the next STAGES - 1 tiles are in flight while one is computed.
//
//   prologue(n, load)         tiles 0 .. STAGES-2 issued (load(tile, slot))
//   for tile in [0, n):
//     slot = advance(tile, n, load)   tile has landed for everyone; tile + STAGES - 1
//                                      is issued into the slot tile - 1 used
//     ... compute on slot ...
//   drain()
//
// Every thread commits one group per slot even when it has no tile to load,
// so "wait until at most STAGES - 2 groups are pending" always means "this
// tile's group has landed". A group committed before the prologue (a Q tile)
// is retired by wait_prologue() (or the first advance()).
#pragma once

#include "cuda_compat.cuh"
#include "ptx.cuh"

namespace pa {

template <int STAGES>
struct CpAsyncRing {
  static_assert(STAGES >= 2, "the ring needs one buffer being read and one being filled");

  template <class LoadTile>
  __device__ __forceinline__ static void prologue(int num_tiles, LoadTile&& load) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < num_tiles) load(s, s);
      cp_async_commit();
    }
  }

  // The group committed before the prologue (e.g. Q) has landed for this thread.
  __device__ __forceinline__ static void wait_prologue() { cp_async_wait<STAGES - 1>(); }

  // WARP_PRIVATE: each warp copies only the rows it reads itself, so a warp
  // barrier suffices and warps run their rings independently.
  template <bool WARP_PRIVATE, class LoadTile>
  __device__ __forceinline__ static int advance(int tile, int num_tiles, LoadTile&& load) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of `tile` have landed ...
    // ... everyone's have, and everyone is done with tile - 1's buffer.
    if constexpr (WARP_PRIVATE) {
      __syncwarp();
    } else {
      __syncthreads();
    }
    const int next = tile + STAGES - 1;  // refills the buffer tile - 1 used
    if (next < num_tiles) load(next, next % STAGES);
    cp_async_commit();
    return tile % STAGES;
  }

  // Only empty groups are left after the last tile; retire them before the block ends.
  __device__ __forceinline__ static void drain() { cp_async_wait<0>(); }
};

}  // namespace pa
