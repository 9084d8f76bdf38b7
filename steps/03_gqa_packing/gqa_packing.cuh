// Stage 03's kernel: GQA-packed attention tiles on tensor cores.
//
// Program (request r, query tile, KV head) owns a tile of ROWS = 16 * ROW_WARPS
// rows, and a row is a (token, query head) pair: the tile holds BLOCK_Q tokens x
// GROUP_PAD heads, all sharing one KV head,
//     row m  ->  token tile_first + m / GROUP_PAD,  query head kv_head * GROUP + m % GROUP_PAD,
// with GROUP = Hq / Hkv and GROUP_PAD the next power of two (rows of the padding
// heads 3, 5, 6, 7 -> 4, 8, 8, 8 are zero queries that are never written). So
// each K/V tile is loaded once for the whole group, and even a decode token
// brings GROUP_PAD rows to the 16-row tensor-core MMA.
//
// Each warp owns 16 consecutive rows and computes S = Q K^T and O += P V with
// mma.sync m16n8k16 (bf16 in, fp32 accumulate); in stage 05's 8-bit decode
// tile several KV warps share the 16 rows and split each tile's keys. K/V tiles stream through a ring
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

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/attention_params.h"
#include "common/cuda_compat.cuh"
#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "common/check.h"
#include "common/quant.cuh"
#include "common/reduce.cuh"
#include "common/todo.cuh"

namespace pa::stage03 {
// Internal linkage: stages 03 and 04 each instantiate this kernel in their own
// library, and the benchmark links both.
namespace {

constexpr int MAX_GROUP = 8;
constexpr float LOG2E = 1.4426950408889634f;
[[maybe_unused]] constexpr float LN2 = 0.6931471805599453f;  // unused by the skeleton's placeholders

// The shape of one program: ROW_WARPS x KV_WARPS warps. Each row warp owns 16
// tile rows; the KV_WARPS warps of a row warp share those rows and split every
// K/V tile's keys between them (WARP_K each), and their partial softmax states
// are merged through shared memory at the end. Three shapes are instantiated per
// head_dim: DecodeTiling, DecodeTilingFor (8-bit caches) and PrefillTiling below.
template <int HEAD_DIM_, int ROW_WARPS_, int KV_WARPS_, int TILE_K_, int STAGES_, int MIN_PROGRAMS_PER_SM_ = 1>
struct Tiling {
  static constexpr int HEAD_DIM = HEAD_DIM_;
  // Programs an SM must be able to hold at once (__launch_bounds__): caps the
  // registers per thread at 65536 / (MIN_PROGRAMS_PER_SM * NUM_THREADS).
  static constexpr int MIN_PROGRAMS_PER_SM = MIN_PROGRAMS_PER_SM_;
  static constexpr int ROW_WARPS = ROW_WARPS_;
  static constexpr int KV_WARPS = KV_WARPS_;
  static constexpr int NUM_WARPS = ROW_WARPS * KV_WARPS;
  static constexpr int NUM_THREADS = NUM_WARPS * 32;
  static constexpr int ROWS = ROW_WARPS * 16;    // tile rows: 16 per row warp, the MMA's M
  static constexpr int TILE_K = TILE_K_;         // keys per K/V tile
  static constexpr int WARP_K = TILE_K / KV_WARPS;  // keys of a tile one warp computes
  static constexpr int STAGES = STAGES_;         // K/V tiles in the shared-memory ring
  static constexpr int CHUNKS = HEAD_DIM / 8;    // 16-byte chunks per K, V or Q row
  static constexpr int CODE_CHUNKS = HEAD_DIM / 16;  // 16-byte chunks per K or V row of 8-bit codes
  static constexpr int Q_ELEMS = ROWS * HEAD_DIM;
  static constexpr int KV_ELEMS = TILE_K * HEAD_DIM;  // one K (or V) tile
  // The merge of the KV warps' states (and, for 8-bit caches, the output's dims
  // put back in order) reuses the shared memory once the key loop is done:
  // fp32 o of every warp's 16 rows, rows padded by 8 floats against bank
  // conflicts, then m and l.
  static constexpr int O_STRIDE = HEAD_DIM + 8;
  static constexpr size_t MERGE_BYTES = sizeof(float) * NUM_WARPS * 16 * (O_STRIDE + 2);
  // bf16 caches: Q and the ring of K and V tiles.
  static constexpr size_t SMEM_BYTES =
      std::max(sizeof(bf16) * (Q_ELEMS + 2 * STAGES * KV_ELEMS), KV_WARPS > 1 ? MERGE_BYTES : size_t{0});
  // 8-bit caches (stage 05): Q and the ring of K and V code tiles with their per-key scales.
  static constexpr size_t SMEM_BYTES_8BIT =
      std::max(sizeof(bf16) * Q_ELEMS + 2 * STAGES * (KV_ELEMS + sizeof(float) * TILE_K), MERGE_BYTES);

  static_assert(WARP_K % 16 == 0 && WARP_K * KV_WARPS == TILE_K,
                "a warp's keys are consumed 16 at a time (the k of P*V, two n-tiles of Q*K^T)");
  static_assert(HEAD_DIM % 64 == 0, "the swizzle XORs 3 bits of the chunk index: rows need >= 8 chunks");
  static_assert((TILE_K * CHUNKS) % NUM_THREADS == 0, "every thread issues the same number of copies per tile");
  static_assert(STAGES >= 2, "the ring needs one buffer being read and one being filled");
};

// Decode-like batches (every request's tile fits 16 rows: decodes, short verify
// blocks) get one warp per program, so 64 decodes x 8 KV heads make 512 small
// programs. Each keeps 2 K/V tiles of 8 KB in flight (4096 bytes per K or V tile
// at every head_dim); its shared memory (Q + 3 stages: 50-56 KB) lets 4 programs
// share an SM. Stage 04 runs this tile too.
template <int HEAD_DIM>
using DecodeTiling = Tiling<HEAD_DIM, 1, 1, 4096 / HEAD_DIM, 3>;
// 8-bit caches (stage 05) turn every code into a 16-bit MMA operand in
// registers, and in a decode tile no other warp shares that work: a lone warp
// converting a whole tile would take far longer than memory takes to deliver
// it. So the 16 rows get 2 KV warps that split each 64-key tile, 32 keys each:
// 3 stages of 8 KB of K and V codes at head_dim 128, 54 KB in all, so 4
// programs share an SM (64 decodes x 8 KV heads run in one wave) with 255
// registers per lane. (4 warps of 16 keys under a 128-register cap ran 1.25x
// slower on the H200: each warp re-derived its addresses at every tile, and its
// dependent chains were half as long to overlap.) Head_dim 256 takes 2 warps of
// 16 keys and 2 stages, so that 4 programs fit.
template <int HEAD_DIM, KvFormat F>
using DecodeTilingFor = std::conditional_t<F == KvFormat::bf16, DecodeTiling<HEAD_DIM>,
                                           std::conditional_t<(HEAD_DIM <= 128), Tiling<HEAD_DIM, 1, 2, 64, 3, 1>,
                                                              Tiling<HEAD_DIM, 1, 2, 32, 2, 4>>>;
// Everything else gets 128-row programs with 64-key tiles (32 for head_dim 256);
// their registers (~220 per lane) allow one program per SM anyway, so the shared
// memory for a third stage (128 KB in all for head_dim 128) costs nothing.
template <int HEAD_DIM>
using PrefillTiling = Tiling<HEAD_DIM, 8, 1, (HEAD_DIM <= 128 ? 64 : 32), 3>;

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
// k_fragment(), v_fragment(), scale_scores() and weights_fragment().
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

// ---- 8-bit caches: codes stay 8-bit until they are in registers.
//
// With an 8-bit cache a lane builds its MMA operands straight from the code
// tiles (16-byte shared-memory loads): no 16-bit copy of a tile is ever written
// back, so shared memory carries each code twice (copied in, read out) instead of
// five times. That works because both MMAs sum over an index whose order is ours
// to choose, as long as both operands agree on it:
//  - S = Q K^T sums over dims. In k-step ks, lane (g, t4) supplies B's k = 2t4,
//    2t4+1, 2t4+8, 2t4+9 for key g. Let them be the 4 consecutive dims
//    qk_dim(ks, t4) + 0..3: one 32-bit word of key g's codes. Q's A fragment is
//    read in the same dim order (load_q_fragment), so S is unchanged.
//  - O += P V sums over keys. Lane (g, t4) supplies B's k = 2t4, 2t4+1, 2t4+8,
//    2t4+9 for dim n. Let them be keys 4t4 + 0..3 of the 16-key slice: the lane
//    reads those 4 key rows and pairs their bytes with byte permutes. P's A
//    fragment comes from S's accumulators, so S's columns must hold the keys in
//    that order: column_key(), which also decides which row each K load reads.
//  - O's dims are free too: V n-tile i, column n is dim (HEAD_DIM / 8) n + i, so
//    a lane's bytes of a V row are one contiguous run. The output is put back in
//    dim order through shared memory at the end.

// The key (of the warp's WARP_K keys in a tile) whose score is column c (0..7)
// of S's 8-key tile j. bf16: in order. 8-bit: ordered for P V as above (keys
// 4t4 + 0..3 of each 16-key slice sit in columns 2t4, 2t4 + 1 of tiles 2kk, 2kk + 1).
template <bool QUANTIZED>
__device__ __forceinline__ int column_key(int j, int c) {
  if constexpr (QUANTIZED) {
    return 16 * (j >> 1) + 4 * (c >> 1) + 2 * (j & 1) + (c & 1);
  } else {
    return 8 * j + c;
  }
}

// 8-bit caches: the first of the 4 dims that k = 2t4, 2t4+1, 2t4+8, 2t4+9 of
// Q K^T's k-step ks stand for. Word ks % 4 of 16-byte chunk t4 + 4 (ks / 4) of a key row.
__device__ __forceinline__ int qk_dim(int ks, int t4) { return 64 * (ks >> 2) + 16 * t4 + 4 * (ks & 3); }

// Byte offsets of (row, 16-byte chunk) in 8-bit code tiles [rows, HEAD_DIM],
// swizzled for the reads above (a 16-byte shared load is served 8 lanes at a
// time; those 8 must hit 8 different 16-byte bank groups of a 128-byte line).
//  - K: 8 lanes read chunks t4 (+ 4c) of two keys of different parity: XOR
//    chunk bit 2 with the parity. 64-byte rows (head_dim 64) need nothing.
//  - V: 8 lanes read the chunk(s) of their g (two values of g) in rows 4t4 + e,
//    t4 = 0..3: XOR the chunk with a function of t4 that separates the 4 rows.
//    (At head_dim 64 each row is only half a bank line, so 2 lanes share a group.)
template <int HEAD_DIM>
__device__ __forceinline__ int k_code_offset(int row, int chunk) {
  const int x = HEAD_DIM >= 128 ? (row & 1) << 2 : 0;
  return row * HEAD_DIM + 16 * (chunk ^ x);
}
template <int HEAD_DIM>
__device__ __forceinline__ int v_code_offset(int row, int chunk) {
  const int t = (row >> 2) & 3;
  const int x = HEAD_DIM == 64 ? t : HEAD_DIM == 128 ? 2 * t : (t & 1) | ((t & 2) << 1);
  return row * HEAD_DIM + 16 * (chunk ^ x);
}

// Grid: (query tiles or whatever Slice maps blockIdx.x to, num_kv_heads, num_requests).
// Dynamic shared memory: smem_bytes<T, Kv::FORMAT>().
template <class T, class Slice = WholeContext, class Kv = Bf16Kv, class Mask = CausalMask>
__global__ void __launch_bounds__(T::NUM_THREADS, T::MIN_PROGRAMS_PER_SM) gqa_packing_kernel(AttentionParams p, Packing pk, Slice slice) {
  constexpr int HEAD_DIM = T::HEAD_DIM, TILE_K = T::TILE_K, WARP_K = T::WARP_K, STAGES = T::STAGES;
  constexpr int CHUNKS = T::CHUNKS, KV_WARPS = T::KV_WARPS;
  constexpr int K_STEPS = HEAD_DIM / 16;  // 16-dim slices of Q*K^T
  constexpr int S_TILES = WARP_K / 8;     // 8-key column tiles of S
  constexpr int O_TILES = HEAD_DIM / 8;   // 8-dim column tiles of O
  // 8-bit caches: the ring holds codes and per-key scales instead of bf16 tiles.
  constexpr bool QUANTIZED = Kv::FORMAT != KvFormat::bf16;
  constexpr int CODE_CHUNKS = T::CODE_CHUNKS;
  // The KV warps' states are merged, and 8-bit outputs put back in dim order, in shared memory.
  constexpr bool MERGE = QUANTIZED || KV_WARPS > 1;
  bf16* q_s = dynamic_smem<bf16>();  // [ROWS, HEAD_DIM] swizzled
  // bf16 caches:
  bf16* k_s = q_s + T::Q_ELEMS;             // [STAGES, TILE_K, HEAD_DIM] swizzled
  bf16* v_s = k_s + STAGES * T::KV_ELEMS;   // [STAGES, TILE_K, HEAD_DIM] swizzled
  // 8-bit caches (the same bytes as k_s, v_s; never both):
  uint8_t* k_codes_s = reinterpret_cast<uint8_t*>(q_s + T::Q_ELEMS);             // [STAGES, TILE_K, HEAD_DIM]
  uint8_t* v_codes_s = k_codes_s + STAGES * T::KV_ELEMS;                          // [STAGES, TILE_K, HEAD_DIM]
  float* k_scale_s = reinterpret_cast<float*>(v_codes_s + STAGES * T::KV_ELEMS);  // [STAGES, TILE_K]
  float* v_scale_s = k_scale_s + STAGES * TILE_K;                                 // [STAGES, TILE_K]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // MMA fragment coordinates: this lane holds rows g and g + 8
  // This warp computes tile rows 16 row_warp.. for keys [key0, key0 + WARP_K) of every K/V tile.
  const int row_warp = warp / KV_WARPS, kv_warp = warp % KV_WARPS;
  const int key0 = kv_warp * WARP_K;

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
  for (int c = threadIdx.x; c < T::ROWS * CHUNKS; c += T::NUM_THREADS) {
    const int row = c / CHUNKS, chunk = c % CHUNKS;
    // TODO 1: the token and the query head of tile row `row`, and whether it is real (not past q_len, not a padding head)
    const int token = 0, head_in_group = 0;
    const bool real = false;  // placeholder: every row is a zero query
    if (c == 0) PA_TODO(1);
    const size_t q_row = static_cast<size_t>(row_begin + token) * p.num_q_heads + kv_head * pk.group + head_in_group;
    // A row that is not real is zero-filled (nothing is read): its scores are 0, finite, and it is never written.
    cp_async_16(q_s + swizzle<HEAD_DIM>(row, chunk), real ? p.q + q_row * HEAD_DIM + chunk * 8 : p.q, real);
  }
  cp_async_commit();

  // TODO 2: key ranges: [0, tile_kv_end) for the tile, [0, warp_kv_end) for this warp, unmasked below warp_unmasked_end
  const int tile_kv_end = 0, warp_kv_end = 0, warp_unmasked_end = 0;  // placeholder: no keys at all
  if (threadIdx.x == 0) PA_TODO(2);
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
    // TODO 3: which cache head row (slot * num_kv_heads + kv_head) holds key kv_pos, and whether kv_pos is in range
    in_range = false;  // placeholder: the tile stays zero
    head_row = 0;
    (void)table; (void)block_mask;
    if (kv_pos == kv_begin && threadIdx.x == 0) PA_TODO(3);
  };

  // With one row warp (the decode tiles) warp w's lanes copy exactly the key
  // rows warp w computes: rows [key0, key0 + WARP_K) of every tile (a bf16
  // decode tile is one warp). Then a warp barrier is enough inside the key loop,
  // and the KV warps run their rings independently instead of waiting for the
  // slowest of them at every tile.
  constexpr bool WARP_PRIVATE_ROWS = T::ROW_WARPS == 1 && (QUANTIZED || T::NUM_WARPS == 1);
  // 8-bit tiles are copied by COPIERS threads (a warp of a decode tile, else the
  // whole program) that share COPY_ROWS key rows. Consecutive threads take
  // consecutive 16-byte chunks of a row, so one copy instruction of a warp asks
  // L2 for whole 128-byte lines (a K or V row at head_dim 128): L2 serves
  // requests, not bytes, at a limited rate, and a warp whose lanes each ask for
  // a 32-byte piece of a different row would make 4x as many of them.
  constexpr int COPIERS = WARP_PRIVATE_ROWS ? 32 : T::NUM_THREADS;
  constexpr int COPY_ROWS = WARP_PRIVATE_ROWS ? WARP_K : TILE_K;
  constexpr int ROWS_PER_COPY = COPIERS / CODE_CHUNKS;  // rows of one copy instruction
  constexpr int COPIES = COPY_ROWS / ROWS_PER_COPY;     // copy instructions per thread per tile (K, and V)
  static_assert(!QUANTIZED || (COPIERS % CODE_CHUNKS == 0 && COPY_ROWS % ROWS_PER_COPY == 0 &&
                               (2 * COPY_ROWS <= COPIERS || (WARP_PRIVATE_ROWS && COPY_ROWS == COPIERS))),
                "8-bit tiles: whole rows per copy instruction; scales: one per thread, or one row's two per lane");
  const int copier = WARP_PRIVATE_ROWS ? lane : static_cast<int>(threadIdx.x);
  const int copy_row0 = WARP_PRIVATE_ROWS ? key0 : 0;  // the copiers' first row of a tile
  // 8-bit decode tiles read the block table ahead: lane l fetches the block
  // entry of row copy_row0 + l % COPY_ROWS of the next tile while this one is
  // computed, and the copy instructions take their rows' slots from the owner
  // lanes with a shuffle (a lookup at copy time would stall the warp for a
  // memory round trip before its first copy could issue). One tile ahead is
  // not enough when the entry's line of the table is not in L2 yet: with the
  // memory system saturated a DRAM round trip outlasts a tile (Nsight Compute:
  // 10% of the warps' stall samples waited on that entry). So the line is also
  // prefetched into L2 four tiles ahead. (Two entries in flight per lane would
  // cost a register move at every tile, and the move waits for the load.)
  [[maybe_unused]] auto prefetch_entry = [&](int tile) {
    const int kv_pos = kv_begin + tile * TILE_K + copy_row0 + copier % COPY_ROWS;
    return kv_pos < kv_end ? table[kv_pos >> pk.block_shift] : 0;
  };

  auto load_kv_tile = [&](int tile, int stage, [[maybe_unused]] int entry) {
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
      uint8_t* k_dst = k_codes_s + stage * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
      uint8_t* v_dst = v_codes_s + stage * T::KV_ELEMS;  // [TILE_K, HEAD_DIM]
      const int chunk = copier % CODE_CHUNKS;
      const int tile_pos = kv_begin + tile * TILE_K;  // the tile's first key
      // Decode tiles: the slot of this thread's row (from the prefetched entry).
      [[maybe_unused]] uint32_t own_slot = 0;
      if constexpr (WARP_PRIVATE_ROWS) {
        own_slot = (static_cast<uint32_t>(entry) << pk.block_shift) + ((tile_pos + copy_row0 + copier % COPY_ROWS) & block_mask);
        const uint32_t slot_bytes = static_cast<uint32_t>(p.kv.num_kv_heads) * HEAD_DIM;  // codes of one slot, all heads
        const size_t fixed = static_cast<size_t>(kv_head) * HEAD_DIM + chunk * 16;  // this head's row, this chunk
        // Each copy takes its row's slot from the owner lane.
#pragma unroll
        for (int i = 0; i < COPIES; ++i) {
          const int j = copy_row0 + i * ROWS_PER_COPY + copier / CODE_CHUNKS;
          const uint32_t slot = __shfl_sync(0xffffffffu, own_slot, j - copy_row0);  // (every lane takes part)
          const bool in_range = tile_pos + j < kv_end;
          const size_t offset = static_cast<size_t>(slot) * slot_bytes + fixed;  // bytes from the codes' base
          cp_async_16(k_dst + k_code_offset<HEAD_DIM>(j, chunk), p.kv.k_codes + offset, in_range);
          cp_async_16(v_dst + v_code_offset<HEAD_DIM>(j, chunk), p.kv.v_codes + offset, in_range);
        }
      } else {
        // The same copies with a block-table lookup per row (prefill tiles: the
        // many row warps' MMAs hide its latency).
#pragma unroll
        for (int i = 0; i < COPIES; ++i) {
          const int j = i * ROWS_PER_COPY + copier / CODE_CHUNKS;
          bool in_range;
          size_t head_row;
          find_kv_row(tile_pos + j, in_range, head_row);
          const size_t offset = head_row * HEAD_DIM + chunk * 16;  // bytes from the codes' base
          cp_async_16(k_dst + k_code_offset<HEAD_DIM>(j, chunk), p.kv.k_codes + offset, in_range);
          cp_async_16(v_dst + v_code_offset<HEAD_DIM>(j, chunk), p.kv.v_codes + offset, in_range);
        }
      }
      // The rows' scales, each thread those of row j: with 2 * COPY_ROWS
      // copiers or more, the first COPY_ROWS the k scales and the next
      // COPY_ROWS the v scales; with as many copiers as rows, both. A key out of
      // range gets scale 0 AND code 0 (both zero-filled): its slot may hold NaN
      // scales, and P = 0 times a NaN is NaN.
      const int j = copy_row0 + copier % COPY_ROWS;
      if (copier < 2 * COPY_ROWS) {
        bool in_range;
        size_t head_row;
        if constexpr (WARP_PRIVATE_ROWS) {
          in_range = tile_pos + j < kv_end;
          head_row = static_cast<size_t>(own_slot) * p.kv.num_kv_heads + kv_head;
        } else {
          find_kv_row(tile_pos + j, in_range, head_row);
        }
        if constexpr (2 * COPY_ROWS <= COPIERS) {
          const bool is_k = copier < COPY_ROWS;
          const float* scale = is_k ? p.kv.k_scale : p.kv.v_scale;  // [num_slots * Hkv]
          cp_async_4((is_k ? k_scale_s : v_scale_s) + stage * TILE_K + j, scale + head_row, in_range);
        } else {
          cp_async_4(k_scale_s + stage * TILE_K + j, p.kv.k_scale + head_row, in_range);
          cp_async_4(v_scale_s + stage * TILE_K + j, p.kv.v_scale + head_row, in_range);
        }
      }
    }
  };

  // Prologue: the first STAGES - 1 tiles in flight. Every thread commits one
  // group per slot even when there is no tile, so group counting stays uniform.
  // (8-bit decode tiles read the block entries of all STAGES first tiles before
  // any copy waits on one: one memory round trip at the start instead of one per tile.)
  const int num_kv_tiles = (kv_end - kv_begin + TILE_K - 1) / TILE_K;
  [[maybe_unused]] int first_entries[STAGES] = {};  // [tile]
  if constexpr (QUANTIZED && WARP_PRIVATE_ROWS) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) first_entries[s] = s < num_kv_tiles ? prefetch_entry(s) : 0;
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < num_kv_tiles) load_kv_tile(s, s, first_entries[s]);
    cp_async_commit();
  }
  [[maybe_unused]] int next_entry = first_entries[STAGES - 1];  // the entry of this lane's row of the next tile to load
  cp_async_wait<STAGES - 1>();  // the Q group (the oldest) has landed
  __syncthreads();

  // This warp's 16 rows of Q as MMA A fragments, kept in registers for the whole
  // key loop when they fit: with head_dim 256 the output alone takes 128
  // registers per lane, so there (and in any tile whose registers are capped to
  // fit several programs per SM) Q is re-read from shared memory at every tile.
  constexpr bool Q_IN_REGISTERS = HEAD_DIM <= 128 && T::MIN_PROGRAMS_PER_SM == 1;
  auto load_q_fragment = [&](uint32_t(&a)[4], int ks) {
    if constexpr (QUANTIZED) {
      // Dims qk_dim(ks, t4) + 0..3 of rows g and g + 8: a0, a2 and a1, a3 (see above).
      const int d = qk_dim(ks, t4);
      const uint2 lo = *reinterpret_cast<const uint2*>(q_s + swizzle<HEAD_DIM>(row_warp * 16 + g, d >> 3) + (d & 7));
      const uint2 hi = *reinterpret_cast<const uint2*>(q_s + swizzle<HEAD_DIM>(row_warp * 16 + g + 8, d >> 3) + (d & 7));
      a[0] = lo.x, a[1] = hi.x, a[2] = lo.y, a[3] = hi.y;
    } else {
      // Matrices 0..3 = (rows 0-7, dims lo), (rows 8-15, dims lo), (rows 0-7, dims hi), (rows 8-15, dims hi).
      const int row = row_warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      ldmatrix_x4(a, q_s + swizzle<HEAD_DIM>(row, 2 * ks + (lane >> 4)));
    }
  };
  // 8-bit caches: Q K^T runs in fp16 (the codes become fp16 operands more
  // cheaply than bf16 ones: common/quant.cuh), so Q is scaled into fp16's range
  // by 2^-q_exp, exactly: q_exp puts the row warp's largest |q| in [2^14, 2^15),
  // and every bf16 value from 2^-28 of that largest one up stays exact. The
  // scores are scaled back by score_factor = 2^q_exp with the keys' scales.
  [[maybe_unused]] float q_mul = 1.0f, score_factor = 1.0f;
  if constexpr (QUANTIZED) {
    float amax = 0.0f;
    for (int c = lane; c < 16 * CHUNKS; c += 32) {
      const uint4 x = *reinterpret_cast<const uint4*>(q_s + swizzle<HEAD_DIM>(row_warp * 16 + c / CHUNKS, c % CHUNKS));
      __nv_bfloat162 v[4];
      memcpy(v, &x, sizeof(v));  // (a pointer cast would break C++'s aliasing rules, and g++ -O2 acts on it)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(v[i]);
        amax = nan_max(amax, nan_max(fabsf(f.x), fabsf(f.y)));
      }
    }
    amax = warp_nan_max(amax);
    // 0 (no real row), NaN and inf keep q_exp 0: a NaN or inf query stays one in fp16.
    const int q_exp = amax > 0.0f && amax <= 3.4e38f ? ilogbf(amax) - 14 : 0;
    q_mul = ldexpf(1.0f, -q_exp);
    score_factor = ldexpf(1.0f, q_exp);
  }
  // A bf16 A fragment -> the fp16 one of Q * 2^-q_exp (8-bit caches).
  [[maybe_unused]] auto to_half = [&](uint32_t(&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 v;
      memcpy(&v, &a[i], sizeof(v));
      const float2 f = __bfloat1622float2(v);
      const __half2 h = __floats2half2_rn(f.x * q_mul, f.y * q_mul);
      memcpy(&a[i], &h, sizeof(h));
    }
  };
  uint32_t q_frag[Q_IN_REGISTERS ? K_STEPS : 1][4];  // [16-dim slice][a0..a3]
  if constexpr (Q_IN_REGISTERS) {
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
      load_q_fragment(q_frag[ks], ks);
      if constexpr (QUANTIZED) to_half(q_frag[ks]);
    }
  } else if constexpr (QUANTIZED) {
    // 8-bit caches re-read Q at every tile, and a fragment gathered from the
    // dim-ordered tile lands in registers in the wrong order (moves before each
    // MMA). So rewrite Q once, in place, as fp16 fragments in fragment order:
    // [row warp][k-step][lane][a0..a3], one 16-byte load per k-step. The KV
    // warps of a row warp share the k-steps.
    constexpr int PER_WARP = K_STEPS / KV_WARPS;
    static_assert(K_STEPS % KV_WARPS == 0, "the k-steps split evenly over the KV warps");
    uint32_t a[PER_WARP][4];
#pragma unroll
    for (int i = 0; i < PER_WARP; ++i) {
      load_q_fragment(a[i], kv_warp + KV_WARPS * i);
      to_half(a[i]);
    }
    __syncthreads();  // every warp has read the dim-ordered tile
#pragma unroll
    for (int i = 0; i < PER_WARP; ++i) {
      const int ks = kv_warp + KV_WARPS * i;
      *reinterpret_cast<uint4*>(q_s + ((row_warp * K_STEPS + ks) * 32 + lane) * 8) = make_uint4(a[i][0], a[i][1], a[i][2], a[i][3]);
    }
    // A barrier before the key loop publishes it.
  }
  // Q's A fragment of k-step ks inside the key loop.
  auto q_fragment = [&](uint32_t(&a)[4], int ks) {
    if constexpr (Q_IN_REGISTERS) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = q_frag[ks][i];
    } else if constexpr (QUANTIZED) {
      const uint4 x = *reinterpret_cast<const uint4*>(q_s + ((row_warp * K_STEPS + ks) * 32 + lane) * 8);
      a[0] = x.x, a[1] = x.y, a[2] = x.z, a[3] = x.w;
    } else {
      load_q_fragment(a, ks);
    }
  };

  // Online softmax per row (common/online_softmax.cuh's math), kept in the MMA
  // fragment layout: this lane holds rows g (index 0) and g + 8 (index 1). m is in
  // raw score units; weights are exp2(s * scale_log2 - m * scale_log2). l holds
  // only this lane's columns until the end, when the 4 lanes of a row add up.
  float o[O_TILES][4];  // [8-dim tile][c0..c3]: rows g (c0, c1), g + 8 (c2, c3), dims 8j + 2t4 (+1)
#pragma unroll
  for (int j = 0; j < O_TILES; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  const int q_pos[2] = {pos0 + tile_first + ((row_warp * 16 + g) >> pk.group_shift),
                        pos0 + tile_first + ((row_warp * 16 + g + 8) >> pk.group_shift)};
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
    const int oldest_tok = tile_first + ((row_warp * 16) >> pk.group_shift);                      // the warp's first token
    const int newest_tok = min(q_len - 1, tile_first + ((row_warp * 16 + 15) >> pk.group_shift));  // and last real one
    window_unmasked_begin = Mask::row_kv_begin(p, pos0 + newest_tok);
    window_skip_end = Mask::row_kv_begin(p, pos0 + oldest_tok);
  }

  // 8-bit caches: where this lane's code loads fall in a tile, relative to the
  // warp's first key row. The swizzles depend only on the row modulo 16 and the
  // warp's rows start at a multiple of 16, so these hold for every tile.
  constexpr int V_LANE_BYTES = HEAD_DIM / 8;                         // a lane's run of one V row
  constexpr int V_PIECE = V_LANE_BYTES < 16 ? V_LANE_BYTES : 16;     // bytes per load
  constexpr int K_LOADS = QUANTIZED ? HEAD_DIM / 64 : 1, V_LOADS = QUANTIZED ? V_LANE_BYTES / V_PIECE : 1;
  [[maybe_unused]] int k_lane_offset[QUANTIZED ? S_TILES : 1][K_LOADS];  // [8-key tile j][chunk t4 + 4c]
  [[maybe_unused]] int v_lane_offset[4][V_LOADS];                         // [row 4t4 + e][piece]
  if constexpr (QUANTIZED) {
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
      for (int c = 0; c < K_LOADS; ++c) k_lane_offset[j][c] = k_code_offset<HEAD_DIM>(column_key<true>(j, g), t4 + 4 * c);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
#pragma unroll
      for (int piece = 0; piece < V_LOADS; ++piece) {
        const int byte = V_LANE_BYTES * g + V_PIECE * piece;
        v_lane_offset[e][piece] = v_code_offset<HEAD_DIM>(4 * t4 + e, byte >> 4) + (byte & 15);
      }
    }
  }

  if constexpr (WARP_PRIVATE_ROWS && QUANTIZED && !Q_IN_REGISTERS) __syncthreads();  // publishes the Q fragments

  // Operands with a bias (int8 codes become 1152 + code: common/quant.cuh) add
  // bias * sum_d q[row][d] to every score and bias * sum_j p[row][j] to every
  // output dim. Both are taken off with the tensor cores, against an operand
  // that is the bias everywhere: the first once, by starting each tile's score
  // accumulators at -bias * sum(q) (q_bias, rows g and g + 8); the second with
  // one more MMA per 16 keys into p_bias, rescaled with o and subtracted at the
  // end. Every product is exact in fp32, and the subtractions cost a few bits of
  // o's fp32 accumulators (|bias * sum(p)| <= 1152 / 127 * l * v_max), far below bf16's.
  constexpr float OPERAND_BIAS = pa::OPERAND_BIAS<Kv::FORMAT>;  // 0 for bf16 and e4m3
  [[maybe_unused]] float q_bias[2] = {0.0f, 0.0f};
  [[maybe_unused]] float p_bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // [c0..c3] of an MMA whose columns all hold bias * sum(p)
  [[maybe_unused]] uint32_t bias_b[2] = {0u, 0u};  // B fragment with every element fp16(OPERAND_BIAS)
  if constexpr (OPERAND_BIAS != 0.0f) {
    const uint32_t h = half_bits(OPERAND_BIAS);
    bias_b[0] = bias_b[1] = h | (h << 16);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
      uint32_t qa[4];
      q_fragment(qa, ks);
      mma_m16n8k16_f16(acc, qa, bias_b, acc);
    }
    q_bias[0] = acc[0], q_bias[1] = acc[2];
  }

  for (int tile = 0; tile < num_kv_tiles; ++tile) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of `tile` have landed ...
    // ... everyone's have, and everyone is done with tile - 1's buffer.
    if constexpr (WARP_PRIVATE_ROWS) {
      __syncwarp();
    } else {
      __syncthreads();
    }
    {
      const int next = tile + STAGES - 1;  // refills the buffer tile - 1 used
      if (next < num_kv_tiles) {
        // 8-bit decode tiles: the entry for the tile after `next` (used one
        // iteration later) is read BEFORE this tile's copies are issued: a load
        // issued after them returns after their data, a DRAM round trip later.
        [[maybe_unused]] int entry_after = 0;
        if constexpr (QUANTIZED && WARP_PRIVATE_ROWS) {
          if (next + 1 < num_kv_tiles) entry_after = prefetch_entry(next + 1);
        }
        load_kv_tile(next, next % STAGES, next_entry);
        if constexpr (QUANTIZED && WARP_PRIVATE_ROWS) {
          next_entry = entry_after;
          // ... and the line of the table that tile next + 4 will read is asked into L2 now.
          const int ahead = kv_begin + (next + 4) * TILE_K + copy_row0;
          if (lane == 0 && ahead < kv_end) prefetch_l2(table + (ahead >> pk.block_shift));
        }
      }
      cp_async_commit();
    }
    const int stage = tile % STAGES;
    const int kv_start = kv_begin + tile * TILE_K + key0;  // this warp's first key
    // Warp-uniform: keys wholly above this warp's diagonal (or a warp of padding
    // rows) cost no math; the warp still takes part in the loads and barriers.
    if (kv_start >= warp_kv_end) continue;
    if constexpr (Mask::WINDOWED) {
      if (kv_start + WARP_K <= window_skip_end) continue;  // older than every row's window
    }

    // S = Q K^T for this warp's WARP_K keys.
    float s[S_TILES][4];  // [8-key tile][c0..c3], layout as o; column c of tile j is key column_key(j, c)
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
      s[j][0] = s[j][1] = -q_bias[0];  // 0 unless the operands carry a bias
      s[j][2] = s[j][3] = -q_bias[1];
    }
    if constexpr (QUANTIZED) {
      // Lane (g, t4) reads column g's key row, 16 codes per chunk t4 + 4c: one
      // word per k-step, turned into the B fragment by the Kv policy.
      // Lane (g, t4) reads column g's key row for each 8-key tile j, 16 codes per
      // chunk t4 + 4c: word w of a chunk is k-step 4c + w's B fragment, turned
      // into fp16 pairs by the Kv policy. The odd k-steps accumulate apart
      // (s_odd) so that each MMA waits on half as many before it: a decode warp
      // has only 2 column tiles to interleave.
      const uint8_t* k_codes = k_codes_s + stage * T::KV_ELEMS + key0 * HEAD_DIM;  // [WARP_K, HEAD_DIM] (k_code_offset)
      float s_odd[S_TILES][4];
#pragma unroll
      for (int j = 0; j < S_TILES; ++j) s_odd[j][0] = s_odd[j][1] = s_odd[j][2] = s_odd[j][3] = 0.0f;
#pragma unroll
      for (int c = 0; c < HEAD_DIM / 64; ++c) {
        uint4 codes[S_TILES];  // [8-key tile j]: 16 codes of column g's key
#pragma unroll
        for (int j = 0; j < S_TILES; ++j) {
          codes[j] = *reinterpret_cast<const uint4*>(k_codes + k_lane_offset[j][c]);  // key column_key(j, g), chunk t4 + 4c
        }
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          uint32_t qa[4];
          q_fragment(qa, 4 * c + w);
#pragma unroll
          for (int j = 0; j < S_TILES; ++j) {
            const uint32_t word = w == 0 ? codes[j].x : w == 1 ? codes[j].y : w == 2 ? codes[j].z : codes[j].w;
            uint32_t kb[2];
            Kv::k_fragment(word, kb);
            float(&acc)[4] = w % 2 == 0 ? s[j] : s_odd[j];
            mma_m16n8k16_f16(acc, qa, kb, acc);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] += s_odd[j][e];
      }
      // The MMA multiplied Q * 2^-q_exp by the codes: each score still needs its key's k scale and 2^q_exp.
      Kv::scale_scores(s, k_scale_s + stage * TILE_K + key0, score_factor, t4);
    } else {
      // B[k][n] = K[key n][dim k], so K's rows are B's columns and a plain
      // ldmatrix of 8 key rows gives the col-major B fragment.
      const bf16* k_tile = k_s + stage * T::KV_ELEMS + key0 * HEAD_DIM;  // [WARP_K, HEAD_DIM] swizzled
#pragma unroll
      for (int ks = 0; ks < K_STEPS; ++ks) {
        uint32_t qa[4];
        q_fragment(qa, ks);
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
    }
    // Mask, only on keys that reach past the warp's first query position (the
    // diagonal) or past kv_end (the zero-filled keys would score 0, not -inf),
    // or, with a sliding window, below the window of the warp's newest token.
    bool needs_mask = kv_start + WARP_K > unmasked_end;
    if constexpr (Mask::WINDOWED) needs_mask = needs_mask || kv_start < window_unmasked_begin;
    if (needs_mask) {
#pragma unroll
      for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kv_start + column_key<QUANTIZED>(j, 2 * t4 + (e & 1));
          bool masked = key >= row_kv_end[e >> 1];
          if constexpr (Mask::WINDOWED) masked = masked || key < row_kv_begin[e >> 1];
          if (masked) s[j][e] = -INFINITY;
        }
      }
    }

    // TODO 4: online softmax on the fragments: row max over the 4 lanes of a row, rescale o and l, weights exp2(s*scale_log2 - m*scale_log2)
    for (int j = 0; j < S_TILES; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;  // placeholder: every weight 0
    if (lane == 0) PA_TODO(4);

    // O += P V. The S accumulators of key tiles 2kk, 2kk+1 are exactly the A
    // fragment of P's 16-key slice kk (same rows, columns 2t4.. and 2t4+8..), so P
    // goes from registers to the tensor core without touching shared memory.
#pragma unroll
    for (int kk = 0; kk < WARP_K / 16; ++kk) {
      if constexpr (QUANTIZED) {
        // O = sum_j (p_j * v_scale_j) codes_j: P's fragment comes from the Kv
        // policy, in fp16 against fp16 codes (l above summed the plain p_j).
        uint32_t pv[4];
        Kv::weights_fragment(s, kk, v_scale_s + stage * TILE_K + key0, t4, pv);
        if constexpr (OPERAND_BIAS != 0.0f) mma_m16n8k16_f16(p_bias, pv, bias_b, p_bias);
        // This lane's bytes of V rows key0 + 16kk + 4t4 + e (e = 0..3): dims
        // [V_LANE_BYTES g, V_LANE_BYTES (g + 1)), read V_PIECE bytes per row at a time.
        const uint8_t* v_codes = v_codes_s + stage * T::KV_ELEMS + (key0 + 16 * kk) * HEAD_DIM;  // [16, HEAD_DIM]
#pragma unroll
        for (int piece = 0; piece < V_LOADS; ++piece) {
          constexpr int PIECE = V_PIECE;
          uint32_t words[4][PIECE / 4];  // [key e][4 dims each]
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint8_t* src = v_codes + v_lane_offset[e][piece];
            if constexpr (PIECE == 16) {
              const uint4 x = *reinterpret_cast<const uint4*>(src);
              words[e][0] = x.x, words[e][1] = x.y, words[e][2] = x.z, words[e][3] = x.w;
            } else {
              const uint2 x = *reinterpret_cast<const uint2*>(src);
              words[e][0] = x.x, words[e][1] = x.y;
            }
          }
#pragma unroll
          for (int w = 0; w < PIECE / 4; ++w) {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
              // n-tile i: column g is dim V_LANE_BYTES g + i, byte b of word w.
              const int i = PIECE * piece + 4 * w + b;
              const uint32_t vb[2] = {Kv::v_fragment(words[0][w], words[1][w], b),
                                      Kv::v_fragment(words[2][w], words[3][w], b)};
              mma_m16n8k16_f16(o[i], pv, vb, o[i]);
            }
          }
        }
      } else {
        // TODO 5: P's A fragment for keys 16kk..16kk+15, straight from the S accumulators (rounded to bf16)
        const uint32_t pa[4] = {0, 0, 0, 0};  // placeholder: P = 0
        if (lane == 0) PA_TODO(5);
        const bf16* v_tile = v_s + stage * T::KV_ELEMS + key0 * HEAD_DIM;  // [WARP_K, HEAD_DIM] swizzled
#pragma unroll
        for (int jp = 0; jp < O_TILES / 2; ++jp) {
          // B[k][n] = V[key k][dim n] is V row-major: ldmatrix .trans of 8 key rows.
          // Matrices 0..3 = (keys 0-7, dims lo), (keys 8-15, dims lo), (keys 0-7, dims hi), (keys 8-15, dims hi).
          uint32_t vb[4];
          const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldmatrix_x4_trans(vb, v_tile + swizzle<HEAD_DIM>(key, 2 * jp + (lane >> 4)));
          const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
          mma_m16n8k16_bf16(o[2 * jp], pa, b0, o[2 * jp]);
          mma_m16n8k16_bf16(o[2 * jp + 1], pa, b1, o[2 * jp + 1]);
        }
      }
    }
  }
  cp_async_wait<0>();  // only empty groups are left; retire them before the block ends
  if constexpr (OPERAND_BIAS != 0.0f) {
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] -= p_bias[e];
    }
  }

  // The row sums: add the 4 lanes of each row.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }

  if constexpr (MERGE) {
    // Every warp is past its last tile, so the ring and Q are free: each warp
    // writes its state (o in dim order), then the first KV warp of each row warp
    // merges its row warp's KV_WARPS states with SoftmaxState::merge's rule.
    __syncthreads();
    float* o_s = dynamic_smem<float>();                  // [NUM_WARPS, 16, O_STRIDE]
    float* m_s = o_s + T::NUM_WARPS * 16 * T::O_STRIDE;  // [NUM_WARPS, 16]
    float* l_s = m_s + T::NUM_WARPS * 16;                // [NUM_WARPS, 16]
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 2 * t4 + (e & 1);  // of n-tile j
        const int dim = QUANTIZED ? (HEAD_DIM / 8) * col + j : 8 * j + col;
        o_s[(warp * 16 + g + 8 * (e >> 1)) * T::O_STRIDE + dim] = o[j][e];
      }
    }
    if (t4 == 0) {
      m_s[warp * 16 + g] = m[0], m_s[warp * 16 + g + 8] = m[1];
      l_s[warp * 16 + g] = l[0], l_s[warp * 16 + g + 8] = l[1];
    }
    __syncthreads();
    if (kv_warp != 0) return;  // no barrier follows
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = g + 8 * i;
      float m_max = -INFINITY;
#pragma unroll
      for (int kw = 0; kw < KV_WARPS; ++kw) m_max = fmaxf(m_max, m_s[(warp + kw) * 16 + row]);
      const float ref = m_max == -INFINITY ? 0.0f : m_max * pk.scale_log2;  // the empty-state rule
      float weight[KV_WARPS];
      float l_sum = 0.0f;
#pragma unroll
      for (int kw = 0; kw < KV_WARPS; ++kw) {
        weight[kw] = exp2f(m_s[(warp + kw) * 16 + row] * pk.scale_log2 - ref);  // 0 for an empty warp
        l_sum += weight[kw] * l_s[(warp + kw) * 16 + row];
      }
      m[i] = m_max;
      l[i] = l_sum;
#pragma unroll
      for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float sum = 0.0f;
#pragma unroll
          for (int kw = 0; kw < KV_WARPS; ++kw) {
            sum += weight[kw] * o_s[((warp + kw) * 16 + row) * T::O_STRIDE + 8 * j + 2 * t4 + h];
          }
          o[j][2 * i + h] = sum;
        }
      }
    }
  }

  // Only real rows are stored; padding heads and tokens past q_len never are.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row_warp * 16 + g + 8 * i;
    const int token = tile_first + (row >> pk.group_shift);
    const int head_in_group = row & pad_mask;
    if (token >= q_len || head_in_group >= pk.group) continue;
    const size_t q_row = static_cast<size_t>(row_begin + token) * p.num_q_heads + kv_head * pk.group + head_in_group;
    // TODO 6: finish row i: inv_l = 1 / l (exact 0 for an empty row), lse = m * scale + log(l) (-inf when empty)
    (void)m;
    const float inv_l = 0.0f, lse = 0.0f;  // placeholder: zero rows
    if (lane == 0) PA_TODO(6);
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

// The 16-row decode tile (one warp; two KV warps for 8-bit caches) when every
// request's tile fits its rows, so a decode batch has many small programs; the
// 128-row tile for everything else.
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
