// The prefill chunks of a mixed batch on stage 09's tile, on a fixed number of
// programs that each run several query tiles (Plan::chunk_programs), so that
// the decodes beside them start at once on the SMs those programs leave.
//
// Stage 09's grid has one program per query tile, and its tile holds a whole
// SM (all the registers, most of the shared memory). A decode launched as its
// dependent can start only once every chunk program has started, that is after
// the chunks' first wave, so a mixed batch runs its tensor-core work and its
// memory traffic one after the other. Here the chunks run on
// chunk_programs x num_kv_heads programs, started together; each walks the
// batch's query tiles of its KV head and takes one of each round of
// chunk_programs (in snake order), and lets the decodes' grid start before its
// first tile. The decodes then stream
// on the other SMs, and on each chunk program's SM once it is done.
//
// One program runs its tiles through one ring: the producer's key tiles and
// the consumers' products go on in the ring's order from one query tile to the
// next (stage 09's `first`: the ring position of a query tile's first key
// tile), so the producer fills the next tile's slots while the consumers
// finish this one, and no barrier is made twice. The ping-pong goes on too:
// every consumer takes as many turns in a query tile, so the ring of turns
// runs on across them.
#pragma once

#include "common/ptx.cuh"
#include "common/tile_contract.cuh"
#include "solutions/09_hopper_pipeline/hopper_pipeline.cuh"

namespace pa::engine::detail {
namespace {

// The query tiles of the requests a Slice serves, numbered in batch order:
// request r's tiles are items [before, before + tiles) once the walk stands at
// r. A warp walks it forward, 32 requests a round (lane l reads request r + l,
// a shuffle scan adds up their tiles, a ballot finds the request of an item),
// so a batch of many decodes past the last chunk costs a few rounds, not a
// load per request.
template <int ROWS, Slice S>
struct ChunkItems {
  int r = 0;       // the request the walk stands at
  int before = 0;  // the items of the requests before r
  int tiles = 0;   // r's items

  // Query tiles of a request with q_len queries (0 where the Slice does not serve it).
  __device__ __forceinline__ static int tiles_of(const S& slice, const Packing& pk, int q_len) {
    return q_len > 0 && serves(slice, q_len) ? ((q_len << pk.group_shift) + ROWS - 1) / ROWS : 0;
  }

  // Warp-collective: moves the walk to the request that holds item i (i at
  // least the item asked before); false when i is past the batch's last item.
  __device__ __forceinline__ bool seek(const AttentionParams& p, const Packing& pk, const S& slice, int i) {
    const int lane = threadIdx.x % 32, num_requests = p.batch.num_requests;
    if (r < num_requests && i < before + tiles) return true;
    while (r < num_requests) {
      const int rr = r + lane;
      const int n = rr < num_requests
                        ? tiles_of(slice, pk, p.batch.query_start_loc[rr + 1] - p.batch.query_start_loc[rr])
                        : 0;
      int upto = n;  // the tiles of requests r .. rr
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, upto, d);
        if (lane >= d) upto += v;
      }
      const unsigned holds = __ballot_sync(0xffffffffu, rr < num_requests && i < before + upto);
      if (holds != 0) {
        const int l = __ffs(static_cast<int>(holds)) - 1;
        before += __shfl_sync(0xffffffffu, upto - n, l);
        tiles = __shfl_sync(0xffffffffu, n, l);
        r += l;
        return true;
      }
      before += __shfl_sync(0xffffffffu, upto, 31);
      r += 32;
      tiles = 0;
    }
    return false;
  }
  // The query tile of item i (after seek(i)): the request's last tile first, as
  // stage 03's grid orders them (the longest causal ranges start first).
  __device__ __forceinline__ int query_tile(int i) const { return before + tiles - 1 - i; }
};

// Grid: (chunk_programs, num_kv_heads). Dynamic shared memory: T::smem_bytes().
// slice: stage 03's Slice over whole contexts (the requests it serves; its
// query_tile() is not read: the walk gives each program its tiles).
template <class T, Slice S, class Producer>
__global__ void __launch_bounds__(T::NUM_THREADS, 1)
    persistent_chunks_kernel(const __grid_constant__ stage09::TmaMaps maps, AttentionParams p, Packing pk, S slice) {
  using namespace stage09;
  static_assert(!after_prior_grid<S>, "the chunks start with their grid");
  const SharedTiles<T> sh = shared_tiles<T>();
  const int warpgroup = warpgroup_index(), warp = threadIdx.x / 32 % 4;
  if (threadIdx.x == 0) sh.bar->init(Producer::FULL_ARRIVALS);
  __syncthreads();  // the program's only block-wide barrier: from here the roles part
  allow_dependent_grid();

  ChunkItems<T::ROWS, S> items;
  // The program's k-th item: round k of the items, in snake order (program j
  // takes item j of even rounds and item P - 1 - j of odd ones, P programs a
  // KV head), so that, as a request's tiles come longest first, the program
  // that takes a round's longest tile takes the next round's shortest.
  auto item = [&](int k) {
    const int j = static_cast<int>(blockIdx.x), P = static_cast<int>(gridDim.x);
    return k * P + (k % 2 == 0 ? j : P - 1 - j);
  };
  int first = 0;  // the ring position of the next query tile's first key tile
  // Item i's tile, keys and key tiles; false past the last item.
  auto next = [&](int i, QueryTile& qt, KeyRange& keys, int& num_tiles) {
    if (!items.seek(p, pk, slice, i)) return false;
    qt.init<T>(p, pk, items.query_tile(i), items.r);
    keys = tile_keys(slice, qt, pk);
    num_tiles = key_tiles<T>(keys);
    return true;
  };
  QueryTile qt;
  KeyRange keys;
  int num_tiles;
  if (warpgroup == 0) {
    setmaxnreg_dec<T::PRODUCER_REGS>();
    if (warp >= Producer::WARPS) return;
    for (int k = 0; next(item(k), qt, keys, num_tiles); ++k) {
      if (num_tiles == 0) continue;
      const KvLookup lookup(p, qt.r, qt.kv_head);
      Producer::template fill<T>(maps, p, pk, lookup, keys, num_tiles, sh.k_s, sh.v_s, *sh.bar, first);
      first += num_tiles;
    }
    return;
  }
  setmaxnreg_inc<T::CONSUMER_REGS>();
  const int c = warpgroup - 1;
  uint32_t q_parity = 0;  // q_ready's phase: one a query tile with keys
  if (c == T::CONSUMERS - 1) hand_over<T>(c);  // consumer 0 goes first
  for (int k = 0; next(item(k), qt, keys, num_tiles); ++k) {
    if (num_tiles == 0) {
      store_empty_rows<T>(p, pk, slice, qt, c);
      continue;
    }
    consume<T, Producer>(p, pk, slice, qt, keys, num_tiles, sh, c, first, q_parity);
    first += num_tiles;
    q_parity ^= 1u;
  }
  if (c == 0) take_turn(c);  // the last consumer's last hand-over
}

// Host: the chunks of p's batch that slice serves, on programs x num_kv_heads programs.
template <int HEAD_DIM, class Producer, Slice S>
void launch_persistent_chunks(const AttentionParams& p, const Packing& pk, const S& slice, int programs,
                              cudaStream_t stream) {
  using T = stage09::HopperTile<HEAD_DIM>;
  launch(persistent_chunks_kernel<T, S, Producer>, dim3(programs, p.kv.num_kv_heads), dim3(T::NUM_THREADS),
         T::smem_bytes(), stream, stage09::make_maps(p, T::TILE_K), p, pk, slice);
}

}  // namespace
}  // namespace pa::engine::detail
