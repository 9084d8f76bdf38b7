// Stage 03's kernel: GQA-packed attention tiles on tensor cores.
//
// Program (request r, query tile, KV head) owns a tile of ROWS = 16 * NUM_WARPS
// rows, and a row is a (token, query head) pair: the tile holds BLOCK_Q tokens x
// GROUP_PAD heads, all sharing one KV head,
//     row m  ->  token tile_first + m / GROUP_PAD,  query head kv_head * GROUP + m % GROUP_PAD,
// with GROUP = Hq / Hkv and GROUP_PAD the next power of two (rows of the padding
// heads 3, 5, 6, 7 -> 4, 8, 8, 8 are zero queries that are never written). So
// each K/V tile is loaded once for the whole group, and even a decode token
// brings GROUP_PAD rows to the 16-row tensor-core MMA.
//
// Each warp owns 16 consecutive rows and computes S = Q K^T and O += P V with
// mma.sync m16n8k16 (bf16 in, fp32 accumulate). K/V tiles stream through a ring
// of STAGES shared-memory buffers filled with 16-byte cp.async copies, so the
// loads of the next tiles are in flight while this one is computed. The rows of
// every shared tile are XOR-swizzled so that ldmatrix reads are conflict-free.
//
// The kernel lives in this header so that stage 04 (split-KV) runs the same
// tile: a `Slice` policy decides which keys a program reads and where its
// finished rows go. Stage 03 uses WholeContext (a tile's whole causal range,
// final out/lse); stage 04 plugs in one split of the context and a partial output.
// Two more policies are compile-time switches for later stages: `Kv` says how the
// cache stores K/V (bf16 here; stage 05's 8-bit codes + scales, dequantized in
// registers), `Mask` which keys a query sees (causal here; stage 06 adds the
// sliding window). Their bf16 / causal defaults compile to the stage 03 kernel.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>

#include "common/attention_params.h"
#include "common/cuda_compat.cuh"
#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "common/check.h"
#include "common/quant.cuh"
#include "common/todo.cuh"

namespace pa::stage03 {
// Internal linkage: stages 03 and 04 each instantiate this kernel in their own
// library, and the benchmark links both.
namespace {

constexpr int MAX_GROUP = 8;
constexpr float LOG2E = 1.4426950408889634f;
[[maybe_unused]] constexpr float LN2 = 0.6931471805599453f;  // unused by the skeleton's placeholders

// The shape of one program. Two are instantiated per head_dim (DecodeTiling,
// PrefillTiling below; 8-bit caches add a two-warp decode tile, DecodeTilingFor).
template <int HEAD_DIM_, int NUM_WARPS_, int TILE_K_, int STAGES_>
struct Tiling {
  static constexpr int HEAD_DIM = HEAD_DIM_;
  static constexpr int NUM_WARPS = NUM_WARPS_;
  static constexpr int NUM_THREADS = NUM_WARPS * 32;
  static constexpr int ROWS = NUM_WARPS * 16;  // tile rows: 16 per warp, the MMA's M
  static constexpr int TILE_K = TILE_K_;       // keys per K/V tile
  static constexpr int STAGES = STAGES_;       // K/V tiles in the shared-memory ring
  static constexpr int CHUNKS = HEAD_DIM / 8;  // 16-byte chunks per K, V or Q row
  static constexpr int Q_ELEMS = ROWS * HEAD_DIM;
  static constexpr int KV_ELEMS = TILE_K * HEAD_DIM;  // one K (or V) tile
  static constexpr size_t SMEM_BYTES = sizeof(bf16) * (Q_ELEMS + 2 * STAGES * KV_ELEMS);  // bf16 caches
  static constexpr int CODE_CHUNKS = HEAD_DIM / 16;  // 16-byte chunks per K or V row of 8-bit codes
  // 8-bit caches (stage 05): Q, one dequantized bf16 K and V tile, and the ring
  // of code tiles with their per-key scales.
  static constexpr size_t SMEM_BYTES_8BIT =
      sizeof(bf16) * (Q_ELEMS + 2 * KV_ELEMS) + 2 * STAGES * (KV_ELEMS + sizeof(float) * TILE_K);

  static_assert(TILE_K % 16 == 0, "keys are consumed 16 at a time (the k of P*V, two n-tiles of Q*K^T)");
  static_assert(HEAD_DIM % 64 == 0, "the swizzle XORs 3 bits of the chunk index: rows need >= 8 chunks");
  static_assert((TILE_K * CHUNKS) % NUM_THREADS == 0 && (ROWS * CHUNKS) % NUM_THREADS == 0,
                "every thread issues the same number of copies per tile");
  static_assert(STAGES >= 2, "the ring needs one buffer being read and one being filled");
  static_assert((TILE_K * CODE_CHUNKS) % NUM_THREADS == 0, "8-bit tiles: the same number of copies per thread");
};

// Decode-like batches (every request's tile fits 16 rows: decodes, short verify
// blocks) get one warp per program, so 64 decodes x 8 KV heads make 512 small
// programs. Each keeps 2 K/V tiles of 8 KB in flight (4096 bytes per K or V tile
// at every head_dim); its shared memory (Q + 3 stages: 50-56 KB) lets 4 programs
// share an SM. Stage 04 runs this tile too.
template <int HEAD_DIM>
using DecodeTiling = Tiling<HEAD_DIM, 1, 4096 / HEAD_DIM, 3>;
// 8-bit caches (stage 05) convert every code of every tile to bf16/fp16 in
// registers: 8192 codes per tile, 256 per lane for a lone warp, which then
// bounds the program instead of memory. Two warps share that work (the loads
// and conversions are spread over all threads; a warp without real rows skips
// only the math), and their programs still fit 4 per SM (Q 32 rows + one bf16
// K/V tile + the 8-bit ring: 47-49 KB for head_dim 64/128). Head_dim 256 keeps
// one warp: 32 rows of Q there would drop it to 3 programs per SM.
template <int HEAD_DIM, KvFormat F>
using DecodeTilingFor = std::conditional_t<(F == KvFormat::bf16 || HEAD_DIM > 128), DecodeTiling<HEAD_DIM>,
                                           Tiling<HEAD_DIM, 2, 4096 / HEAD_DIM, 3>>;
// Everything else gets 128-row programs with 64-key tiles (32 for head_dim 256);
// their registers (~220 per lane) allow one program per SM anyway, so the shared
// memory for a third stage (128 KB in all for head_dim 128) costs nothing.
template <int HEAD_DIM>
using PrefillTiling = Tiling<HEAD_DIM, 8, (HEAD_DIM <= 128 ? 64 : 32), 3>;

// Kernel arguments derived on the host once per launch (checked_packing()).
struct Packing {
  int group;        // query heads per KV head, 1..8
  int group_shift;  // log2(GROUP_PAD): row m holds token m >> group_shift, head m & (GROUP_PAD - 1)
  int block_shift;  // log2(block_size)
  float scale_log2;  // softmax_scale * log2(e): exp(scale * s) = exp2(scale_log2 * s)
};

// Smallest s with 2^s >= x.
inline int log2_ceil(int x) {
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

// What every launcher of this tile (stages 03-06) requires of the batch's
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
  PA_REQUIRE(p.kv.head_dim == 64 || p.kv.head_dim == 128 || p.kv.head_dim == 256,
             who + ": head_dim " + std::to_string(p.kv.head_dim) + " is not supported (64, 128, 256)");
  PA_REQUIRE(!is_quantized(p.kv.format) || (p.kv.k_codes && p.kv.v_codes && p.kv.k_scale && p.kv.v_scale),
             who + ": a " + name(p.kv.format) + " cache needs k_codes, v_codes, k_scale and v_scale");
  return Packing{group, log2_ceil(group), log2_ceil(p.kv.block_size), p.softmax_scale * LOG2E};
}

// Keys [begin, end) of one program; end <= begin: none (no tile is loaded).
struct KeyRange {
  int begin, end;
};

// The cache-format policy for bf16 caches: tiles are copied as they are and fed
// to the MMAs from the ring. Stage 05's 8-bit policy (QuantizedKv) also has
// decode16() and apply_scales().
struct Bf16Kv {
  static constexpr KvFormat FORMAT = KvFormat::bf16;
};

// The mask policy without a window: a query at q_pos sees keys [0, q_pos].
// Stage 06's SlidingWindow starts the key loop and each row's keys later.
struct CausalMask {
  static constexpr bool WINDOWED = false;
  // The first key a tile whose oldest query sits at oldest_q_pos must read.
  __device__ __forceinline__ static int first_key(const AttentionParams&, const Packing&, int) { return 0; }
  // The oldest key a query at q_pos sees.
  __device__ __forceinline__ static int row_kv_begin(const AttentionParams&, int) { return 0; }
};

// Shared memory of a program of tiling T over a cache of format F.
template <class T, KvFormat F>
constexpr size_t smem_bytes() {
  return F == KvFormat::bf16 ? T::SMEM_BYTES : T::SMEM_BYTES_8BIT;
}

// Stage 03's Slice policy: a program reads its query tile's whole causal range
// and writes the final output and lse. A Slice policy answers three questions
// (stage 04's split-KV policy answers them differently):
struct WholeContext {
  // Which query tile this program owns. Tiles are numbered from the end, so the
  // longest (last, most keys) causal tiles of a prompt start first and the short
  // ones fill in the tail.
  __device__ __forceinline__ int query_tile() const { return gridDim.x - 1 - blockIdx.x; }

  // Which keys it reads, given the tile's range [tile_kv_begin, tile_kv_end)
  // (tile_kv_begin is 0 without a sliding window).
  __device__ __forceinline__ KeyRange key_range(int tile_kv_begin, int tile_kv_end) const {
    return {tile_kv_begin, tile_kv_end};
  }

  // Where a finished row goes: this lane's part of row q_row (of [num_tokens *
  // Hq]) is dims 8j + 2 t4 and 8j + 2 t4 + 1, held in o[j][2 half] and
  // o[j][2 half + 1] (the MMA accumulator layout), still to be scaled by inv_l.
  template <int O_TILES>
  __device__ __forceinline__ void store_row(const AttentionParams& p, size_t q_row, const float (&o)[O_TILES][4],
                                            int half, int t4, float inv_l, float lse) const {
    bf16* out_row = p.out + q_row * (8 * O_TILES);  // [HEAD_DIM]
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(out_row + 8 * j + 2 * t4) =
          __floats2bfloat162_rn(o[j][2 * half] * inv_l, o[j][2 * half + 1] * inv_l);
    }
    if (p.lse != nullptr && t4 == 0) p.lse[q_row] = lse;
  }
};

// Element offset of (row, 16-byte chunk) in a shared tile with HEAD_DIM-element
// rows. ldmatrix reads one chunk from each of 8 consecutive rows; unswizzled, rows
// 128/256/512 bytes apart all start on bank 0 and the 8 reads serialize. XORing
// the chunk index with row % 8 puts the 8 chunks on 8 different bank quads.
template <int HEAD_DIM>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * HEAD_DIM + ((chunk ^ (row & 7)) * 8);
}

// Two floats as the bf16x2 register an MMA operand expects (lo in the low half).
[[maybe_unused]] __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// Grid: (query tiles or whatever Slice maps blockIdx.x to, num_kv_heads, num_requests).
// Dynamic shared memory: smem_bytes<T, Kv::FORMAT>().
template <class T, class Slice = WholeContext, class Kv = Bf16Kv, class Mask = CausalMask>
__global__ void __launch_bounds__(T::NUM_THREADS) gqa_packing_kernel(AttentionParams p, Packing pk, Slice slice) {
  constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K, STAGES = T::STAGES, CHUNKS = T::CHUNKS;
  constexpr int K_STEPS = HEAD_DIM / 16;  // 16-dim slices of Q*K^T
  constexpr int S_TILES = TILE_K / 8;     // 8-key column tiles of S
  constexpr int O_TILES = HEAD_DIM / 8;   // 8-dim column tiles of O
  // 8-bit caches: the ring holds codes and scales; each tile is dequantized into
  // ONE bf16 K/V tile that the MMAs read exactly as they read a bf16 ring buffer.
  constexpr bool QUANTIZED = Kv::FORMAT != KvFormat::bf16;
  constexpr int KV_BUFS = QUANTIZED ? 1 : STAGES;  // bf16 K/V tiles in shared memory
  constexpr int CODE_CHUNKS = T::CODE_CHUNKS;
  bf16* q_s = dynamic_smem<bf16>();           // [ROWS, HEAD_DIM] swizzled
  bf16* k_s = q_s + T::Q_ELEMS;               // [KV_BUFS, TILE_K, HEAD_DIM] swizzled
  bf16* v_s = k_s + KV_BUFS * T::KV_ELEMS;    // [KV_BUFS, TILE_K, HEAD_DIM] swizzled
  // 8-bit only (past the bf16 tiles; unused and never touched for bf16):
  uint8_t* k_codes_s = reinterpret_cast<uint8_t*>(v_s + KV_BUFS * T::KV_ELEMS);  // [STAGES, TILE_K, HEAD_DIM]
  uint8_t* v_codes_s = k_codes_s + STAGES * T::KV_ELEMS;                         // [STAGES, TILE_K, HEAD_DIM]
  float* k_scale_s = reinterpret_cast<float*>(v_codes_s + STAGES * T::KV_ELEMS);  // [STAGES, TILE_K]
  float* v_scale_s = k_scale_s + STAGES * TILE_K;                                 // [STAGES, TILE_K]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // MMA fragment coordinates: this lane holds rows g and g + 8

  const int r = blockIdx.z, kv_head = blockIdx.y;
  const int tile_idx = slice.query_tile();
  const int block_q = T::ROWS >> pk.group_shift;  // tokens per tile
  const int row_begin = p.batch.query_start_loc[r];
  const int q_len = p.batch.query_start_loc[r + 1] - row_begin;
  const int tile_first = tile_idx * block_q;  // first token (within the request) of this tile
  if (tile_first >= q_len) return;            // the grid is sized for the longest request
  const int seq_len = p.batch.seq_lens[r];
  const int pos0 = seq_len - q_len;  // position of the request's query 0
  const int pad_mask = (1 << pk.group_shift) - 1;

  // ---- Q tile -> shared memory (one cp.async group)
  for (int i = 0; i < T::ROWS * CHUNKS / T::NUM_THREADS; ++i) {
    const int c = threadIdx.x + i * T::NUM_THREADS;
    const int row = c / CHUNKS, chunk = c % CHUNKS;
    //@ TODO 1: the token and the query head of tile row `row`, and whether it is real (not past q_len, not a padding head)
    const int token = tile_first + (row >> pk.group_shift);
    const int head_in_group = row & pad_mask;
    const bool real = token < q_len && head_in_group < pk.group;
    //@ skeleton
    //@ const int token = 0, head_in_group = 0;
    //@ const bool real = false;  // placeholder: every row is a zero query
    //@ if (c == 0) PA_TODO(1);
    //@ end
    const size_t q_row = static_cast<size_t>(row_begin + token) * p.num_q_heads + kv_head * pk.group + head_in_group;
    // A row that is not real is zero-filled (nothing is read): its scores are 0, finite, and it is never written.
    cp_async_16(q_s + swizzle<HEAD_DIM>(row, chunk), real ? p.q + q_row * HEAD_DIM + chunk * 8 : p.q, real);
  }
  cp_async_commit();

  //@ TODO 2: key ranges: [0, tile_kv_end) for the tile, [0, warp_kv_end) for this warp, unmasked below warp_unmasked_end
  const int tile_last = min(q_len, tile_first + block_q) - 1;
  const int tile_kv_end = pos0 + tile_last + 1;  // keys after the tile's last query are masked for every row
  // A warp's 16 rows span a few tokens: it needs keys up to its last real token's
  // position and masks nothing below its first token's position.
  const int warp_first_tok = tile_first + ((warp * 16) >> pk.group_shift);
  const int warp_last_tok = min(q_len - 1, tile_first + ((warp * 16 + 15) >> pk.group_shift));
  const int warp_kv_end = warp_first_tok < q_len ? pos0 + warp_last_tok + 1 : 0;  // 0: only padding rows
  const int warp_unmasked_end = pos0 + warp_first_tok + 1;
  //@ skeleton
  //@ const int tile_kv_end = 0, warp_kv_end = 0, warp_unmasked_end = 0;  // placeholder: no keys at all
  //@ if (threadIdx.x == 0) PA_TODO(2);
  //@ end
  // The keys this program reads, [kv_begin, kv_end): all of [0, tile_kv_end) in
  // stage 03, one split of it in stage 04, from the window's first block on in
  // stage 06 (Mask::first_key is 0 without a window). Keys at or past kv_end are masked.
  const int tile_kv_begin = Mask::first_key(p, pk, pos0 + tile_first);
  const KeyRange keys = slice.key_range(tile_kv_begin, tile_kv_end);
  const int kv_begin = keys.begin, kv_end = keys.end;

  // ---- K/V tile `tile` -> ring buffer `stage`, 16 bytes per copy, each key's
  // row found through the block table. Keys at or past kv_end are zero-filled:
  // the slots past seq_len may hold anything (NaN in the tests), and 0 * NaN = NaN.
  const int* table = p.batch.block_table + static_cast<size_t>(r) * p.batch.max_blocks_per_seq;
  const int block_mask = (1 << pk.block_shift) - 1;
  // Key kv_pos of this program's KV head is cache head row `head_row` (of
  // [num_blocks * block_size * Hkv], head_dim values each); out of range: no row.
  auto find_kv_row = [&](int kv_pos, bool& in_range, size_t& head_row) {
    //@ TODO 3: which cache head row (slot * num_kv_heads + kv_head) holds key kv_pos, and whether kv_pos is in range
    in_range = kv_pos < kv_end;
    head_row = 0;
    if (in_range) {
      const size_t slot = (static_cast<size_t>(table[kv_pos >> pk.block_shift]) << pk.block_shift) + (kv_pos & block_mask);
      head_row = slot * p.kv.num_kv_heads + kv_head;
    }
    //@ skeleton
    //@ in_range = false;  // placeholder: the tile stays zero
    //@ head_row = 0;
    //@ (void)table; (void)block_mask;
    //@ if (kv_pos == kv_begin && threadIdx.x == 0) PA_TODO(3);
    //@ end
  };
  auto load_kv_tile = [&](int tile, int stage) {
    if constexpr (!QUANTIZED) {
      bf16* k_dst = k_s + stage * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
      bf16* v_dst = v_s + stage * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
#pragma unroll
      for (int i = 0; i < TILE_K * CHUNKS / T::NUM_THREADS; ++i) {
        const int c = threadIdx.x + i * T::NUM_THREADS;
        const int j = c / CHUNKS, chunk = c % CHUNKS;
        bool in_range;
        size_t head_row;
        find_kv_row(kv_begin + tile * TILE_K + j, in_range, head_row);
        const size_t offset = head_row * HEAD_DIM + chunk * 8;  // elements from the cache base
        cp_async_16(k_dst + swizzle<HEAD_DIM>(j, chunk), p.kv.k_cache + offset, in_range);
        cp_async_16(v_dst + swizzle<HEAD_DIM>(j, chunk), p.kv.v_cache + offset, in_range);
      }
    } else {
      // 16 codes per copy, unswizzled: the thread that copies a chunk is the one
      // that dequantizes it (same c), so only its own cp.async wait is needed.
      uint8_t* k_dst = k_codes_s + stage * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
      uint8_t* v_dst = v_codes_s + stage * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
#pragma unroll
      for (int i = 0; i < TILE_K * CODE_CHUNKS / T::NUM_THREADS; ++i) {
        const int c = threadIdx.x + i * T::NUM_THREADS;
        const int j = c / CODE_CHUNKS, chunk = c % CODE_CHUNKS;
        bool in_range;
        size_t head_row;
        find_kv_row(kv_begin + tile * TILE_K + j, in_range, head_row);
        const size_t offset = head_row * HEAD_DIM + chunk * 16;  // bytes from the codes' base
        cp_async_16(k_dst + j * HEAD_DIM + chunk * 16, p.kv.k_codes + offset, in_range);
        cp_async_16(v_dst + j * HEAD_DIM + chunk * 16, p.kv.v_codes + offset, in_range);
      }
      // One scale per key. A key out of range gets scale 0 AND code 0 (both
      // zero-filled): its slot may hold NaN scales, and P = 0 times a NaN is NaN.
      for (int j = threadIdx.x; j < TILE_K; j += T::NUM_THREADS) {
        bool in_range;
        size_t head_row;
        find_kv_row(kv_begin + tile * TILE_K + j, in_range, head_row);
        cp_async_4(k_scale_s + stage * TILE_K + j, p.kv.k_scale + head_row, in_range);
        cp_async_4(v_scale_s + stage * TILE_K + j, p.kv.v_scale + head_row, in_range);
      }
    }
  };

  // Prologue: the first STAGES - 1 tiles in flight. Every thread commits one
  // group per slot even when there is no tile, so group counting stays uniform.
  const int num_kv_tiles = (kv_end - kv_begin + TILE_K - 1) / TILE_K;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < num_kv_tiles) load_kv_tile(s, s);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 1>();  // the Q group (the oldest) has landed
  __syncthreads();

  // This warp's 16 rows of Q as MMA A fragments, kept in registers for the whole
  // key loop when they fit: with head_dim 256 the output alone takes 128
  // registers per lane, so Q is re-read from shared memory at every tile instead.
  constexpr bool Q_IN_REGISTERS = HEAD_DIM <= 128;
  auto load_q_fragment = [&](uint32_t(&a)[4], int ks) {
    // Matrices 0..3 = (rows 0-7, dims lo), (rows 8-15, dims lo), (rows 0-7, dims hi), (rows 8-15, dims hi).
    const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldmatrix_x4(a, q_s + swizzle<HEAD_DIM>(row, 2 * ks + (lane >> 4)));
  };
  uint32_t q_frag[Q_IN_REGISTERS ? K_STEPS : 1][4];  // [16-dim slice][a0..a3]
  if constexpr (Q_IN_REGISTERS) {
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) load_q_fragment(q_frag[ks], ks);
  }

  // Online softmax per row (common/online_softmax.cuh's math), kept in the MMA
  // fragment layout: this lane holds rows g (index 0) and g + 8 (index 1). m is in
  // raw score units; weights are exp2(s * scale_log2 - m * scale_log2). l holds
  // only this lane's columns until the end, when the 4 lanes of a row add up.
  float o[O_TILES][4];  // [8-dim tile][c0..c3]: rows g (c0, c1), g + 8 (c2, c3), dims 8j + 2t4 (+1)
#pragma unroll
  for (int j = 0; j < O_TILES; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  const int q_pos[2] = {pos0 + tile_first + ((warp * 16 + g) >> pk.group_shift),
                        pos0 + tile_first + ((warp * 16 + g + 8) >> pk.group_shift)};
  // Row i sees keys below row_kv_end[i]: causal, and inside this program's range.
  const int row_kv_end[2] = {min(q_pos[0] + 1, kv_end), min(q_pos[1] + 1, kv_end)};
  // Below this every row of the warp sees every key: those tiles need no mask.
  const int unmasked_end = min(warp_unmasked_end, kv_end);
  // Sliding window (compiled away without one): row i sees keys from
  // row_kv_begin[i] on. From window_unmasked_begin on every row of the warp sees
  // every key (the window of its newest token starts there); a tile wholly below
  // window_skip_end is outside every row's window (that of its oldest token).
  [[maybe_unused]] int row_kv_begin[2] = {0, 0};
  [[maybe_unused]] int window_unmasked_begin = 0, window_skip_end = 0;
  if constexpr (Mask::WINDOWED) {
    row_kv_begin[0] = Mask::row_kv_begin(p, q_pos[0]);
    row_kv_begin[1] = Mask::row_kv_begin(p, q_pos[1]);
    const int oldest_tok = tile_first + ((warp * 16) >> pk.group_shift);                      // the warp's first token
    const int newest_tok = min(q_len - 1, tile_first + ((warp * 16 + 15) >> pk.group_shift));  // and last real one
    window_unmasked_begin = Mask::row_kv_begin(p, pos0 + newest_tok);
    window_skip_end = Mask::row_kv_begin(p, pos0 + oldest_tok);
  }

  for (int tile = 0; tile < num_kv_tiles; ++tile) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of `tile` have landed ...
    __syncthreads();              // ... everyone's have, and everyone is done with tile - 1's buffer
    {
      const int next = tile + STAGES - 1;  // refills the buffer tile - 1 used
      if (next < num_kv_tiles) load_kv_tile(next, next % STAGES);
      cp_async_commit();
    }
    const int kv_start = kv_begin + tile * TILE_K;
    // Warp-uniform: a tile wholly above this warp's diagonal (or a warp of padding
    // rows) costs no math; the warp still takes part in the loads and barriers.
    if constexpr (QUANTIZED) {
      // Codes -> the 16-bit tiles (K bf16, V fp16: see Kv::weights_fragment),
      // in registers, 16 codes at a time: this thread's
      // own chunks (its wait above covered them). The barrier publishes the tile;
      // the one at the top of the next step keeps it until every warp is done.
      const uint8_t* k_codes = k_codes_s + (tile % STAGES) * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
      const uint8_t* v_codes = v_codes_s + (tile % STAGES) * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
#pragma unroll
      for (int i = 0; i < TILE_K * CODE_CHUNKS / T::NUM_THREADS; ++i) {
        const int c = threadIdx.x + i * T::NUM_THREADS;
        const int j = c / CODE_CHUNKS, chunk = c % CODE_CHUNKS;
        uint4 vals[2];  // 16 values: 16-byte chunks 2 chunk and 2 chunk + 1 of row j
        Kv::template decode16<false>(*reinterpret_cast<const uint4*>(k_codes + j * HEAD_DIM + chunk * 16), vals);
        *reinterpret_cast<uint4*>(k_s + swizzle<HEAD_DIM>(j, 2 * chunk)) = vals[0];
        *reinterpret_cast<uint4*>(k_s + swizzle<HEAD_DIM>(j, 2 * chunk + 1)) = vals[1];
        Kv::template decode16<true>(*reinterpret_cast<const uint4*>(v_codes + j * HEAD_DIM + chunk * 16), vals);
        *reinterpret_cast<uint4*>(v_s + swizzle<HEAD_DIM>(j, 2 * chunk)) = vals[0];
        *reinterpret_cast<uint4*>(v_s + swizzle<HEAD_DIM>(j, 2 * chunk + 1)) = vals[1];
      }
      __syncthreads();
    }
    if (kv_start >= warp_kv_end) continue;
    if constexpr (Mask::WINDOWED) {
      if (kv_start + TILE_K <= window_skip_end) continue;  // older than every row's window
    }
    const bf16* k_tile = k_s + (QUANTIZED ? 0 : tile % STAGES) * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
    const bf16* v_tile = v_s + (QUANTIZED ? 0 : tile % STAGES) * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]

    // S = Q K^T: B[k][n] = K[key n][dim k], so K's rows are B's columns and a
    // plain ldmatrix of 8 key rows gives the col-major B fragment.
    float s[S_TILES][4];  // [8-key tile][c0..c3], layout as o
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
      uint32_t(&qa)[4] = q_frag[Q_IN_REGISTERS ? ks : 0];
      if constexpr (!Q_IN_REGISTERS) load_q_fragment(qa, ks);
#pragma unroll
      for (int jp = 0; jp < S_TILES / 2; ++jp) {
        // Matrices 0..3 = (keys 0-7, dims lo), (keys 0-7, dims hi), (keys 8-15, dims lo), (keys 8-15, dims hi).
        uint32_t kb[4];
        const int key = jp * 16 + (lane & 7) + (lane >> 4) * 8;
        ldmatrix_x4(kb, k_tile + swizzle<HEAD_DIM>(key, 2 * ks + ((lane >> 3) & 1)));
        const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        mma_m16n8k16_bf16(s[2 * jp], qa, b0, s[2 * jp]);
        mma_m16n8k16_bf16(s[2 * jp + 1], qa, b1, s[2 * jp + 1]);
      }
    }
    // 8-bit caches: the MMA multiplied Q by the codes; column j of S still needs key j's k scale.
    if constexpr (QUANTIZED) Kv::scale_scores(s, k_scale_s + (tile % STAGES) * TILE_K, t4);
    // Mask, only on tiles that reach past the warp's first query position (the
    // diagonal) or past kv_end (the zero-filled keys would score 0, not -inf),
    // or, with a sliding window, below the window of the warp's newest token.
    bool needs_mask = kv_start + TILE_K > unmasked_end;
    if constexpr (Mask::WINDOWED) needs_mask = needs_mask || kv_start < window_unmasked_begin;
    if (needs_mask) {
#pragma unroll
      for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kv_start + 8 * j + 2 * t4 + (e & 1);
          bool masked = key >= row_kv_end[e >> 1];
          if constexpr (Mask::WINDOWED) masked = masked || key < row_kv_begin[e >> 1];
          if (masked) s[j][e] = -INFINITY;
        }
      }
    }

    //@ TODO 4: online softmax on the fragments: row max over the 4 lanes of a row, rescale o and l, weights exp2(s*scale_log2 - m*scale_log2)
    float m_tile[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
      m_tile[0] = fmaxf(m_tile[0], fmaxf(s[j][0], s[j][1]));
      m_tile[1] = fmaxf(m_tile[1], fmaxf(s[j][2], s[j][3]));
    }
    float m_scaled[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // The 4 lanes t4 = 0..3 of a quad hold the columns of the same row.
      m_tile[i] = fmaxf(m_tile[i], __shfl_xor_sync(0xffffffffu, m_tile[i], 1));
      m_tile[i] = fmaxf(m_tile[i], __shfl_xor_sync(0xffffffffu, m_tile[i], 2));
      // Empty-state rule: a row that has seen only masked keys keeps m = -inf; use
      // 0 as its reference so that exp2(-inf - ref) = 0 and never -inf - -inf.
      m_scaled[i] = m_tile[i] == -INFINITY ? 0.0f : m_tile[i] * pk.scale_log2;
      const float alpha = exp2f(m[i] * pk.scale_log2 - m_scaled[i]);  // SoftmaxState::rescale: 0 from -inf
      m[i] = m_tile[i];
      l[i] *= alpha;
#pragma unroll
      for (int j = 0; j < O_TILES; ++j) {
        o[j][2 * i] *= alpha;
        o[j][2 * i + 1] *= alpha;
      }
    }
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(fmaf(s[j][e], pk.scale_log2, -m_scaled[e >> 1]));  // masked: exp2(-inf) = 0
        l[e >> 1] += s[j][e];
      }
    }
    //@ skeleton
    //@ for (int j = 0; j < S_TILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;  // placeholder: every weight 0
    //@ if (lane == 0) PA_TODO(4);
    //@ end

    // O += P V. The S accumulators of key tiles 2kk, 2kk+1 are exactly the A
    // fragment of P's 16-key slice kk (same rows, columns 2t4.. and 2t4+8..), so P
    // goes from registers to the tensor core without touching shared memory.
#pragma unroll
    for (int kk = 0; kk < TILE_K / 16; ++kk) {
      //@ TODO 5: P's A fragment for keys 16kk..16kk+15, straight from the S accumulators (rounded to bf16)
      const uint32_t pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      //@ skeleton
      //@ const uint32_t pa[4] = {0, 0, 0, 0};  // placeholder: P = 0
      //@ if (lane == 0) PA_TODO(5);
      //@ end
      // 8-bit caches: O = sum_j (p_j * v_scale_j) codes_j. P's fragment is built
      // by the Kv policy instead (in fp16, against the fp16 V tile of codes; l
      // above summed the plain p_j). Unused for bf16.
      [[maybe_unused]] uint32_t pv[4];
      if constexpr (QUANTIZED) Kv::weights_fragment(s, kk, v_scale_s + (tile % STAGES) * TILE_K, t4, pv);
#pragma unroll
      for (int jp = 0; jp < O_TILES / 2; ++jp) {
        // B[k][n] = V[key k][dim n] is V row-major: ldmatrix .trans of 8 key rows.
        // Matrices 0..3 = (keys 0-7, dims lo), (keys 8-15, dims lo), (keys 0-7, dims hi), (keys 8-15, dims hi).
        uint32_t vb[4];
        const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(vb, v_tile + swizzle<HEAD_DIM>(key, 2 * jp + (lane >> 4)));
        const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        if constexpr (QUANTIZED) {
          mma_m16n8k16_f16(o[2 * jp], pv, b0, o[2 * jp]);
          mma_m16n8k16_f16(o[2 * jp + 1], pv, b1, o[2 * jp + 1]);
        } else {
          mma_m16n8k16_bf16(o[2 * jp], pa, b0, o[2 * jp]);
          mma_m16n8k16_bf16(o[2 * jp + 1], pa, b1, o[2 * jp + 1]);
        }
      }
    }
  }
  cp_async_wait<0>();  // only empty groups are left; retire them before the block ends

  // The row sums: add the 4 lanes of each row.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }

  // Only real rows are stored; padding heads and tokens past q_len never are.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = warp * 16 + g + 8 * i;
    const int token = tile_first + (row >> pk.group_shift);
    const int head_in_group = row & pad_mask;
    if (token >= q_len || head_in_group >= pk.group) continue;
    const size_t q_row = static_cast<size_t>(row_begin + token) * p.num_q_heads + kv_head * pk.group + head_in_group;
    //@ TODO 6: finish row i: inv_l = 1 / l (exact 0 for an empty row), lse = m * scale + log(l) (-inf when empty)
    const float inv_l = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    const float lse = l[i] > 0.0f ? (m[i] * pk.scale_log2 + log2f(l[i])) * LN2 : -INFINITY;
    //@ skeleton
    //@ (void)m;
    //@ const float inv_l = 0.0f, lse = 0.0f;  // placeholder: zero rows
    //@ if (lane == 0) PA_TODO(6);
    //@ end
    slice.store_row(p, q_row, o, i, t4, inv_l, lse);
  }
}

// ---- Host side: launching the kernel over whole query tiles (stage 03; stages
// 05 and 06 reuse it with their Kv / Mask policies).

template <class T, class Kv, class Mask>
void run_whole_context(const AttentionParams& p, const Packing& pk, cudaStream_t stream) {
  const int block_q = T::ROWS >> pk.group_shift;
  const dim3 grid((p.batch.max_query_len + block_q - 1) / block_q, p.kv.num_kv_heads, p.batch.num_requests);
  launch(gqa_packing_kernel<T, WholeContext, Kv, Mask>, grid, dim3(T::NUM_THREADS), smem_bytes<T, Kv::FORMAT>(),
         stream, p, pk, WholeContext{});
}

// The one-warp decode tile (two warps for 8-bit caches) when every request's
// tile fits its rows, so a decode batch has many small programs; the 128-row
// tile for everything else.
template <int HEAD_DIM, class Kv = Bf16Kv, class Mask = CausalMask>
void dispatch_whole_context(const AttentionParams& p, const Packing& pk, cudaStream_t stream) {
  using Decode = DecodeTilingFor<HEAD_DIM, Kv::FORMAT>;
  if ((p.batch.max_query_len << pk.group_shift) <= Decode::ROWS) {
    run_whole_context<Decode, Kv, Mask>(p, pk, stream);
  } else {
    run_whole_context<PrefillTiling<HEAD_DIM>, Kv, Mask>(p, pk, stream);
  }
}

}  // namespace
}  // namespace pa::stage03
