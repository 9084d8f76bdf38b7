// Stage 04: split-KV (Flash-Decoding) for decode batches.
//
// A decode batch has one query token per request, so stage 02/03's grid has
// only requests x KV heads programs: 4 requests x 8 KV heads = 32 programs for
// 132 SMs, each walking 32k keys alone. Here a third grid dimension cuts each
// context into block-aligned splits. Program (request r, KV head, split) reads
// the split's keys once for all GROUP query heads of its KV head and writes a
// normalized partial output with its log-sum-exp; a second kernel merges the
// splits with SoftmaxState::merge. With one split the first kernel writes the
// final output itself and no merge runs.
//
// Inside a program (NUM_THREADS = 128): a K/V row of HEAD_DIM bf16 is
// LANES_PER_KEY = HEAD_DIM / 8 threads x 16 bytes, so the block reads
// NUM_SLOTS = 128 / LANES_PER_KEY keys side by side ("slots"). Each thread
// issues the K and V loads of KEYS_PER_SLOT consecutive keys before using the
// first, so 2 x KEYS_PER_SLOT 16-byte loads per thread are in flight. Every slot
// keeps its own online-softmax state per query head over the keys it saw; the
// slots are merged in shared memory at the end. No barrier in the key loop.
#include <algorithm>
#include <string>
#include <vector>

#include "common/batch_ops.h"
#include "common/cuda_compat.cuh"
#include "common/launch.cuh"
#include "common/online_softmax.cuh"
#include "common/stages.h"
#include "common/todo.cuh"

namespace pa::stage04 {
namespace {

constexpr int NUM_THREADS = 128;
constexpr int MAX_GROUP = 8;             // query heads per KV head this stage serves
constexpr int MAX_SPLITS = 64;           // partials per row stay small next to the cache
constexpr int MIN_KEYS_PER_SPLIT = 256;  // below this a split costs more in merge than it saves

// The partials of a launch with num_splits > 1: written by split_kv_kernel,
// read by merge_splits_kernel. Rows are the batch's flattened token rows.
struct Partials {
  float* o;            // [num_splits, num_tokens, num_q_heads, head_dim]  o_s / l_s (0 for an empty split)
  float* lse;          // [num_splits, num_tokens, num_q_heads]            m_s + log(l_s) (-inf when empty)
  int num_splits;
  int keys_per_split;  // blocks_per_split * block_size: splits start on a cache block
};

// 8 bf16 (one 16-byte load) to fp32. bf16 is the top half of an fp32, and the
// element at the lower address sits in the low 16 bits (little endian).
__device__ __forceinline__ void bf16x8_to_float(const uint4& raw, float (&f)[8]) {
  const unsigned int w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Programs an SM must hold at once: 3 keep 12 warps' loads in flight and cap a
// thread at 170 registers (65536 / (3 x 128)), which groups up to 6 fit without
// spilling; groups 7 and 8 hold 2 x 64 query and output registers and get 2.
template <int GROUP>
constexpr int min_programs_per_sm() {
  return GROUP <= 6 ? 3 : 2;
}

template <int HEAD_DIM, int GROUP>
__global__ void __launch_bounds__(NUM_THREADS, min_programs_per_sm<GROUP>())
    split_kv_kernel(AttentionParams p, Partials part) {
  constexpr int LANES_PER_KEY = HEAD_DIM / 8;           // threads per K/V row: 8, 16, 32
  constexpr int NUM_SLOTS = NUM_THREADS / LANES_PER_KEY;  // keys read side by side: 16, 8, 4
  // Keys whose loads a thread issues before the first use. Larger groups hold
  // more query and output registers (2 x 8 x GROUP), so they keep fewer keys in
  // flight; chosen so that no variant spills under min_programs_per_sm.
  constexpr int KEYS_PER_SLOT = GROUP <= 3 ? 8 : (GROUP == 4 ? 6 : 4);
  constexpr int TILE_K = NUM_SLOTS * KEYS_PER_SLOT;     // keys per step of the whole block
  static_assert(HEAD_DIM % 8 == 0 && NUM_THREADS % LANES_PER_KEY == 0 && LANES_PER_KEY <= 32, "row split");
  __shared__ float m_s[NUM_SLOTS][GROUP];                           // each slot's running max
  __shared__ float l_s[NUM_SLOTS][GROUP];                           // each slot's running sum
  __shared__ __align__(16) float o_s[NUM_SLOTS][GROUP][HEAD_DIM];  // each slot's unnormalized output

  const int r = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int row = p.batch.query_start_loc[r];
  if (p.batch.query_start_loc[r + 1] == row) return;  // q_len 0: no query to answer (the whole block leaves)
  const int seq_len = p.batch.seq_lens[r];
  const int slot = threadIdx.x / LANES_PER_KEY;  // which key of a step this thread reads
  const int lane = threadIdx.x % LANES_PER_KEY;  // which 8 dims: [lane * 8, lane * 8 + 8)

  // TODO 1: this split's keys [kv_start, kv_end): starts on a split boundary, clipped to seq_len (may be empty)
  const int kv_start = 0, kv_end = 0;  // placeholder: no keys at all
  (void)split, (void)seq_len;
  if (threadIdx.x == 0) PA_TODO(1);

  // The decode query of each head of the group, this thread's 8 dims, scaled.
  float q[GROUP][8];  // [GROUP][8 dims]
  const bf16* q_ptr = p.q + (static_cast<size_t>(row) * p.num_q_heads + kv_head * GROUP) * HEAD_DIM + lane * 8;
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    bf16x8_to_float(*reinterpret_cast<const uint4*>(q_ptr + g * HEAD_DIM), q[g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] *= p.softmax_scale;
  }

  SoftmaxState<8> state[GROUP];  // this slot's keys so far, one state per query head
#pragma unroll
  for (int g = 0; g < GROUP; ++g) state[g].init();

  const int* table = p.batch.block_table + static_cast<size_t>(r) * p.batch.max_blocks_per_seq;  // [max_blocks]
  const size_t slot_stride = static_cast<size_t>(p.kv.num_kv_heads) * HEAD_DIM;  // elements per cache slot
  const bf16* k_head = p.kv.k_cache + kv_head * HEAD_DIM + lane * 8;  // + slot * slot_stride: this thread's 16 B
  const bf16* v_head = p.kv.v_cache + kv_head * HEAD_DIM + lane * 8;
  // block_size is a power of two: shift and mask instead of an integer division per key.
  const int block_shift = __ffs(p.kv.block_size) - 1, block_mask = p.kv.block_size - 1;

  // The loop bound is the same for every thread of the block, so all lanes of a
  // warp reach the shuffles together; keys past kv_end are masked, not skipped.
  for (int tile_start = kv_start; tile_start < kv_end; tile_start += TILE_K) {
    const int key0 = tile_start + slot * KEYS_PER_SLOT;  // this slot's keys: [key0, key0 + KEYS_PER_SLOT)
    uint4 k_raw[KEYS_PER_SLOT], v_raw[KEYS_PER_SLOT];    // 16 B of each K and V row, all loads issued first
    // TODO 2: load the K and V rows of keys key0 + u through the block table (zeros past kv_end: never read them)
    for (int u = 0; u < KEYS_PER_SLOT; ++u) k_raw[u] = v_raw[u] = make_uint4(0, 0, 0, 0);
    (void)key0, (void)table, (void)slot_stride, (void)k_head, (void)v_head, (void)block_shift, (void)block_mask;
    if (threadIdx.x == 0 && tile_start == kv_start) PA_TODO(2);

    float s[KEYS_PER_SLOT][GROUP];  // scores of this slot's keys, every lane of the slot holds all of them
    // TODO 3: s[u][g] = q_g . k_u: partial dot over this thread's 8 dims, summed over the LANES_PER_KEY lanes; -inf past kv_end
    for (int u = 0; u < KEYS_PER_SLOT; ++u)
      for (int g = 0; g < GROUP; ++g) s[u][g] = -INFINITY;  // placeholder: every key masked
    if (threadIdx.x == 0 && tile_start == kv_start) PA_TODO(3);

    // TODO 4: online softmax per head: raise the max once for the step's keys, weight each key, add to l and o
    (void)v_raw;
    if (threadIdx.x == 0 && tile_start == kv_start) PA_TODO(4);
  }

  // Merge the slots: the same rule that merges splits, inside the block.
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    *reinterpret_cast<float4*>(&o_s[slot][g][lane * 8]) =
        make_float4(state[g].o[0], state[g].o[1], state[g].o[2], state[g].o[3]);
    *reinterpret_cast<float4*>(&o_s[slot][g][lane * 8 + 4]) =
        make_float4(state[g].o[4], state[g].o[5], state[g].o[6], state[g].o[7]);
    if (lane == 0) {
      m_s[slot][g] = state[g].m;
      l_s[slot][g] = state[g].l;
    }
  }
  __syncthreads();
  // One item = (query head g of the group, 8 dims c): GROUP * LANES_PER_KEY items.
  for (int item = threadIdx.x; item < GROUP * LANES_PER_KEY; item += NUM_THREADS) {
    const int g = item / LANES_PER_KEY, c = item % LANES_PER_KEY;
    SoftmaxState<8> acc;
    acc.init();
    for (int sl = 0; sl < NUM_SLOTS; ++sl) {
      SoftmaxState<8> b;
      b.m = m_s[sl][g];
      b.l = l_s[sl][g];
#pragma unroll
      for (int i = 0; i < 8; ++i) b.o[i] = o_s[sl][g][c * 8 + i];
      acc.merge(b);
    }
    const size_t q_row = static_cast<size_t>(row) * p.num_q_heads + kv_head * GROUP + g;  // row of [num_tokens * Hq]
    // TODO 5: finish: o / l and lse (empty -> 0 and -inf); one split writes out and lse, several write their partial
    (void)q_row;
    if (item == 0) PA_TODO(5);
  }
}

// Program (request r, query head h) merges the num_splits partials of r's
// decode row. Thread (split lane, chunk) owns 4 dims and the splits
// split_lane, split_lane + SPLIT_LANES, ...; it loads BATCH splits before
// merging them so their loads overlap; the split lanes merge in shared memory.
template <int HEAD_DIM>
__global__ void __launch_bounds__(NUM_THREADS) merge_splits_kernel(AttentionParams p, Partials part) {
  constexpr int CHUNKS = HEAD_DIM / 4;              // float4 per row: 16, 32, 64
  constexpr int SPLIT_LANES = NUM_THREADS / CHUNKS;  // splits read side by side: 8, 4, 2
  constexpr int BATCH = 4;                           // splits per thread in flight
  __shared__ float m_s[SPLIT_LANES];
  __shared__ __align__(16) float o_s[SPLIT_LANES][HEAD_DIM];
  __shared__ float l_s[SPLIT_LANES];

  const int r = blockIdx.x, h = blockIdx.y;
  const int row = p.batch.query_start_loc[r];
  if (p.batch.query_start_loc[r + 1] == row) return;  // no decode row: nothing to merge
  const int split_lane = threadIdx.x / CHUNKS, chunk = threadIdx.x % CHUNKS;
  const size_t q_row = static_cast<size_t>(row) * p.num_q_heads + h;            // row of [num_tokens * Hq]
  const size_t split_stride = static_cast<size_t>(p.batch.num_tokens) * p.num_q_heads;  // rows per split

  SoftmaxState<4> acc;  // this thread's splits so far, dims [chunk * 4, chunk * 4 + 4)
  acc.init();
  // TODO 6: merge the partials with SoftmaxState::merge: split s is the state (m = lse_s, l = 1, o = o_s)
  (void)split_stride, (void)BATCH;
  if (threadIdx.x == 0) PA_TODO(6);

  *reinterpret_cast<float4*>(&o_s[split_lane][chunk * 4]) = make_float4(acc.o[0], acc.o[1], acc.o[2], acc.o[3]);
  if (chunk == 0) {
    m_s[split_lane] = acc.m;
    l_s[split_lane] = acc.l;
  }
  __syncthreads();
  if (split_lane != 0) return;  // no barrier follows
  for (int sl = 1; sl < SPLIT_LANES; ++sl) {
    SoftmaxState<4> b;
    b.m = m_s[sl];
    b.l = l_s[sl];
#pragma unroll
    for (int i = 0; i < 4; ++i) b.o[i] = o_s[sl][chunk * 4 + i];
    acc.merge(b);
  }
  // All splits empty cannot happen for a decode row (seq_len >= 1), but the
  // empty-state rule would still give exact zeros and lse -inf.
  const float inv_l = acc.inv_l();
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(p.out + q_row * HEAD_DIM + chunk * 4);
  dst[0] = __floats2bfloat162_rn(acc.o[0] * inv_l, acc.o[1] * inv_l);
  dst[1] = __floats2bfloat162_rn(acc.o[2] * inv_l, acc.o[3] * inv_l);
  if (p.lse != nullptr && chunk == 0) p.lse[q_row] = acc.lse();
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The SM count of the current device, read once per device and host thread.
int sm_count() {
  thread_local int cached_device = -1, cached_count = 0;
  int device = 0;
  PA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    PA_CHECK(cudaDeviceGetAttribute(&cached_count, cudaDevAttrMultiProcessorCount, device));
    cached_device = device;
  }
  return cached_count;
}

// The partials live in one workspace per host thread that only grows. Growing
// calls cudaFree, which waits for the device, so no launch still reads the old
// one. Limitation (kept for simplicity): two streams driven from one host thread
// must not run split launches at the same time, as they would share it.
struct Workspace {
  DeviceBuffer<float> o;    // [num_splits, num_tokens, Hq, D]
  DeviceBuffer<float> lse;  // [num_splits, num_tokens, Hq]
};
Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// Throws, before any launch, when a request has more than one query. The host
// flags decide in the common case; when max_query_len is only a loose bound the
// query starts are read back to name the request (or to find there is none).
void require_decode_batch(const AttentionParams& p) {
  if (p.batch.decode_only || p.batch.max_query_len <= 1) return;
  std::vector<int> starts(p.batch.num_requests + 1);
  PA_CHECK(cudaMemcpy(starts.data(), p.batch.query_start_loc, starts.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int r = 0; r < p.batch.num_requests; ++r) {
    const int q_len = starts[r + 1] - starts[r];
    PA_REQUIRE(q_len <= 1, "stage 04 (split-KV) serves decode batches only (every q_len <= 1): request " +
                               std::to_string(r) + " has " + std::to_string(q_len) +
                               " queries; run prefill chunks and prompts through stage 02 or 03");
  }
}

template <int HEAD_DIM, int GROUP>
void launch_group(const AttentionParams& p, const Partials& part, cudaStream_t stream) {
  const dim3 grid(p.batch.num_requests, p.kv.num_kv_heads, part.num_splits);
  launch(split_kv_kernel<HEAD_DIM, GROUP>, grid, dim3(NUM_THREADS), 0, stream, p, part);
  if (part.num_splits > 1) {
    launch(merge_splits_kernel<HEAD_DIM>, dim3(p.batch.num_requests, p.num_q_heads), dim3(NUM_THREADS), 0, stream,
           p, part);
  }
}

template <int HEAD_DIM>
void launch_head_dim(const AttentionParams& p, int group, const Partials& part, cudaStream_t stream) {
  switch (group) {
    case 1: launch_group<HEAD_DIM, 1>(p, part, stream); break;
    case 2: launch_group<HEAD_DIM, 2>(p, part, stream); break;
    case 3: launch_group<HEAD_DIM, 3>(p, part, stream); break;
    case 4: launch_group<HEAD_DIM, 4>(p, part, stream); break;
    case 5: launch_group<HEAD_DIM, 5>(p, part, stream); break;
    case 6: launch_group<HEAD_DIM, 6>(p, part, stream); break;
    case 7: launch_group<HEAD_DIM, 7>(p, part, stream); break;
    case 8: launch_group<HEAD_DIM, 8>(p, part, stream); break;
    default: throw Error("stage 04: group " + std::to_string(group) + " is not supported (1..8)");
  }
}

int max_blocks(const AttentionParams& p) { return std::max(1, ceil_div(p.batch.max_seq_len, p.kv.block_size)); }

}  // namespace

SplitPlan plan_fixed(const AttentionParams& p, int num_splits) {
  PA_REQUIRE(num_splits >= 1 && num_splits <= MAX_SPLITS,
             "stage 04: num_splits " + std::to_string(num_splits) + " is outside 1.." + std::to_string(MAX_SPLITS));
  return SplitPlan{num_splits, ceil_div(max_blocks(p), num_splits)};
}

SplitPlan plan(const AttentionParams& p, int num_sms) {
  const int num_blocks = max_blocks(p);
  const int programs = std::max(1, p.batch.num_requests * p.kv.num_kv_heads);  // without splitting
  // TODO 7: the dispatch rule: enough splits for two waves, each >= MIN_KEYS_PER_SPLIT keys, at most MAX_SPLITS
  (void)num_blocks, (void)programs, (void)num_sms, (void)MIN_KEYS_PER_SPLIT;
  PA_TODO_HOST(7, "04_split_kv");
}

void forward(const AttentionParams& p, cudaStream_t stream) { forward(p, stream, 0); }

void forward(const AttentionParams& p, cudaStream_t stream, int num_splits) {
  PA_REQUIRE(p.window == 0 && p.sinks == nullptr,
             "stage 04 implements plain causal decode attention: no sliding window, no sinks");
  PA_REQUIRE(p.kv.num_kv_heads > 0 && p.num_q_heads % p.kv.num_kv_heads == 0,
             "stage 04: num_q_heads must be a multiple of num_kv_heads");
  const int group = p.num_q_heads / p.kv.num_kv_heads;
  PA_REQUIRE(group >= 1 && group <= MAX_GROUP,
             "stage 04: group " + std::to_string(group) + " is not supported (1.." + std::to_string(MAX_GROUP) + ")");
  require_decode_batch(p);
  const SplitPlan sp = num_splits == 0 ? plan(p, sm_count()) : plan_fixed(p, num_splits);

  Partials part{nullptr, nullptr, sp.num_splits, sp.blocks_per_split * p.kv.block_size};
  if (sp.num_splits > 1) {
    const size_t rows = static_cast<size_t>(sp.num_splits) * p.batch.num_tokens * p.num_q_heads;
    Workspace& ws = workspace();
    ws.o.resize(rows * p.kv.head_dim);
    ws.lse.resize(rows);
    part.o = ws.o.data();
    part.lse = ws.lse.data();
  }
  switch (p.kv.head_dim) {
    case 64: launch_head_dim<64>(p, group, part, stream); break;
    case 128: launch_head_dim<128>(p, group, part, stream); break;
    case 256: launch_head_dim<256>(p, group, part, stream); break;
    default: throw Error("stage 04: head_dim " + std::to_string(p.kv.head_dim) + " is not supported (64, 128, 256)");
  }
  clear_padding_rows(p, stream);
  PA_CHECK_TODOS("04_split_kv");
}

}  // namespace pa::stage04
