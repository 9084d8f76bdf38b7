// Tests of the TMA tensor copy (common/tma.cuh): a ring of slots filled from a
// paged-like tensor [rows][heads][dims] of 2-byte elements, in 64-row and
// 16-row boxes, each box checked element by element against the layout it
// must land in (wgmma.cuh's sw128 for the 128-byte swizzle, dense rows
// without); boxes reaching outside the tensor (past its last row, negative
// coordinates) and the bytes they complete; the swizzle's dependence on the
// destination address; a swizzled box read by the tensor core (wgmma.cuh); and
// the map's argument checks. The same file builds with nvcc, so all of this
// also runs on a Hopper GPU. The misuse reports (a misaligned destination, a
// map that make_tma_map did not make, barrier and tx-count misuse, the tensor
// core reading bytes still in flight or through the wrong swizzle) exist only
// on the CPU runtime.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_params.h"
#include "common/check.h"
#include "common/launch.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "common/wgmma_wide.cuh"
#include "tests/runtime/device_array.h"

namespace {

using ::testing::HasSubstr;

using pa::TmaMap;
using pa::TmaSwizzle;
using pa::runtime_test::DeviceArray;
#if !defined(__CUDACC__)
using pa::runtime_test::ReverseOrder;
#endif

constexpr uint16_t kUnwritten = 0xFFFF;  // shared memory no copy wrote
constexpr uint16_t kPadding = 0xBEEF;    // the tensor's padding between heads: never copied

// The swizzle atoms are 1024-byte aligned: kernels round their dynamic shared
// memory up to it (and ask for 1024 bytes more).
__device__ __forceinline__ unsigned char* align_1024(unsigned char* p) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t{1023});
}

// ---------------------------------------------------------------- the host's model

// A paged-like tensor [rows][heads][dims] of 2-byte values, each head's row
// followed by `pad` elements of padding. Values are nonzero (zeros are what
// out-of-bounds elements land as) and differ within any box the tests take.
struct Tensor {
  int dims, heads, rows, pad;
  std::vector<uint16_t> data;

  Tensor(int d, int h, int r, int p) : dims(d), heads(h), rows(r), pad(p) {
    data.assign(static_cast<size_t>(rows) * heads * head_pitch(), kPadding);
    for (int row = 0; row < rows; ++row) {
      for (int head = 0; head < heads; ++head) {
        for (int i = 0; i < dims; ++i) {
          const uint32_t v = (static_cast<uint32_t>(row) * heads + head) * dims + i;
          data[index(row, head, i)] = static_cast<uint16_t>(1 + v % 65000);
        }
      }
    }
  }
  int head_pitch() const { return dims + pad; }
  size_t index(int row, int head, int i) const {
    return (static_cast<size_t>(row) * heads + head) * head_pitch() + i;
  }
  // Element (i, head, row) as the map names it, zero outside the tensor.
  uint16_t at(int64_t i, int64_t head, int64_t row) const {
    if (i < 0 || i >= dims || head < 0 || head >= heads || row < 0 || row >= rows) return 0;
    return data[index(static_cast<int>(row), static_cast<int>(head), static_cast<int>(i))];
  }
  // dims[0] = dims (contiguous), dims[1] = heads, dims[2] = rows.
  TmaMap map(const uint16_t* device_base, const uint32_t (&box)[3], TmaSwizzle swizzle) const {
    const uint64_t d[3] = {static_cast<uint64_t>(dims), static_cast<uint64_t>(heads), static_cast<uint64_t>(rows)};
    const uint64_t strides[2] = {static_cast<uint64_t>(head_pitch()) * 2,
                                 static_cast<uint64_t>(heads) * head_pitch() * 2};
    return pa::make_tma_map_2byte_3d(device_base, d, strides, box, swizzle);
  }
};

uint32_t box_bytes(const uint32_t (&box)[3]) { return box[0] * box[1] * box[2] * 2; }

// Where box element (x, y, z) lands, in elements from the destination. With
// b128 and a 1024-byte aligned destination, rows of 64 elements: wgmma.cuh's
// sw128, row z * box[1] + y. Otherwise the hardware's rule itself: the
// 16-byte chunk at shared address a lands at a ^ (((a >> 7) & 7) << 4), with
// the destination at `dst_mod` (its address mod 1024).
size_t landing(const uint32_t (&box)[3], TmaSwizzle swizzle, uint32_t dst_mod, uint32_t x, uint32_t y, uint32_t z) {
  const uint32_t row = z * box[1] + y;
  if (swizzle == TmaSwizzle::none) return static_cast<size_t>(row) * box[0] + x;
  if (dst_mod == 0 && box[0] == 64) return static_cast<size_t>(pa::sw128(static_cast<int>(row), static_cast<int>(x)));
  const uint32_t a = dst_mod + 2 * (row * box[0] + x);
  return ((a ^ (((a >> 7) & 7u) << 4)) - dst_mod) / 2;
}

// The shared memory a box at (c0, c1, c2) must leave behind: `elems` elements
// from the destination, kUnwritten where the box lands nothing.
std::vector<uint16_t> expected_box(const Tensor& t, const uint32_t (&box)[3], TmaSwizzle swizzle, uint32_t dst_mod,
                                   int c0, int c1, int c2, size_t elems) {
  std::vector<uint16_t> out(elems, kUnwritten);
  for (uint32_t z = 0; z < box[2]; ++z) {
    for (uint32_t y = 0; y < box[1]; ++y) {
      for (uint32_t x = 0; x < box[0]; ++x) {
        out.at(landing(box, swizzle, dst_mod, x, y, z)) = t.at(int64_t{c0} + x, int64_t{c1} + y, int64_t{c2} + z);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- the ring

struct RingParams {
  TmaMap map;
  uint32_t box[3];
  int copies;       // tensor copies per tile, side by side along dim 0: copy k at c0 = k * box[0]
  int head0;        // block b reads head (or heads) from head0 + b
  int row0;         // tile t's rows start at row0 + t * box[2]
  int num_tiles;
  uint32_t slot_bytes;  // the copies' boxes, rounded up to 1024 bytes
};

constexpr int kConsumerWarps = 2;
constexpr int kRingThreads = 32 * (1 + kConsumerWarps);  // warp 0 produces

// Thread 0 streams the tiles through STAGES slots, one expect_tx for a tile's
// copies on full[s]; the consumer warps copy each slot out as it landed (its
// raw shared layout), then release it on empty[s] (one arrival per warp).
template <int STAGES>
__global__ void tma_ring_kernel(const __grid_constant__ RingParams p,
                                uint16_t* out /* [gridDim.x][num_tiles][copies * box elements] */) {
  __shared__ pa::Mbarrier full[STAGES];
  __shared__ pa::Mbarrier empty[STAGES];
  unsigned char* ring = align_1024(pa::dynamic_smem<unsigned char>());
  const uint32_t bytes = p.box[0] * p.box[1] * p.box[2] * 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      full[s].init(1);
      empty[s].init(kConsumerWarps);
    }
    pa::fence_mbarrier_init();
  }
  __syncthreads();

  if (warp == 0) {
    if (lane == 0) {
      for (int t = 0; t < p.num_tiles; ++t) {
        const int s = t % STAGES;
        const uint32_t round = t / STAGES;
        empty[s].wait((round & 1u) ^ 1u);
        full[s].arrive_expect_tx(bytes * p.copies);
        for (int k = 0; k < p.copies; ++k) {
          pa::tma_load_3d(ring + s * p.slot_bytes + k * bytes, p.map, k * static_cast<int>(p.box[0]),
                          p.head0 + static_cast<int>(blockIdx.x), p.row0 + t * static_cast<int>(p.box[2]), full[s]);
        }
      }
    }
    return;  // nothing else waits for the producer warp
  }
  const int elems = static_cast<int>(bytes / 2) * p.copies;
  out += static_cast<size_t>(blockIdx.x) * p.num_tiles * elems;
  for (int t = 0; t < p.num_tiles; ++t) {
    const int s = t % STAGES;
    full[s].wait((t / STAGES) & 1u);
    const uint16_t* slot = reinterpret_cast<const uint16_t*>(ring + s * p.slot_bytes);
    for (int i = threadIdx.x - 32; i < elems; i += 32 * kConsumerWarps) out[static_cast<size_t>(t) * elems + i] = slot[i];
    __syncwarp();  // the whole warp has read the slot before its one arrival
    if (lane == 0) empty[s].arrive();
  }
}

struct RingCase {
  int dims, heads, rows, pad;
  uint32_t box[3];
  int copies;
  TmaSwizzle swizzle;
  int row0, num_tiles;
};

template <int STAGES>
void check_ring(const RingCase& c) {
  constexpr int kBlocks = 2;
  const Tensor t(c.dims, c.heads, c.rows, c.pad);
  DeviceArray<uint16_t> src(t.data);
  RingParams p{};
  p.map = t.map(src.ptr, c.box, c.swizzle);
  for (int i = 0; i < 3; ++i) p.box[i] = c.box[i];
  p.copies = c.copies;
  p.head0 = 1;
  p.row0 = c.row0;
  p.num_tiles = c.num_tiles;
  const uint32_t bytes = box_bytes(c.box);
  p.slot_bytes = (bytes * c.copies + 1023) / 1024 * 1024;
  const size_t elems = bytes / 2 * c.copies;
  DeviceArray<uint16_t> d_out(kBlocks * c.num_tiles * elems);
  pa::launch(tma_ring_kernel<STAGES>, dim3(kBlocks), dim3(kRingThreads), 1024 + STAGES * p.slot_bytes, nullptr, p,
             d_out.ptr);
  const std::vector<uint16_t> out = d_out.download();
  for (int b = 0; b < kBlocks; ++b) {
    for (int tile = 0; tile < c.num_tiles; ++tile) {
      for (int k = 0; k < c.copies; ++k) {
        const int c0 = k * static_cast<int>(c.box[0]), c1 = p.head0 + b, c2 = c.row0 + tile * static_cast<int>(c.box[2]);
        const std::vector<uint16_t> want = expected_box(t, c.box, c.swizzle, 0, c0, c1, c2, bytes / 2);
        const size_t at = (static_cast<size_t>(b) * c.num_tiles + tile) * elems + k * (bytes / 2);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(out[at + i], want[i]) << "block " << b << ", tile " << tile << ", copy " << k << ", element "
                                          << i << " of the slot (box at " << c0 << "," << c1 << "," << c2 << ")";
        }
      }
    }
  }
}

// 64 dims, one 64-row box a tile, the 128-byte swizzle: an Sw128 slab per
// tile. 300 rows: the last tile reaches past the tensor.
TEST(TmaRing, Swizzled64Rows64Dims) { check_ring<3>({64, 4, 300, 0, {64, 1, 64}, 1, TmaSwizzle::b128, 0, 5}); }

// 128 dims as two slabs of 64 (two copies per tile, c0 = 0 and 64), padded heads.
TEST(TmaRing, Swizzled64Rows128DimsInTwoSlabs) {
  check_ring<2>({128, 3, 200, 8, {64, 1, 64}, 2, TmaSwizzle::b128, 0, 4});
}

// 16-row boxes of whole 128-dim rows, dense; the first tile starts 20 rows
// before the tensor.
TEST(TmaRing, Dense16Rows128Dims) { check_ring<3>({128, 4, 150, 0, {128, 1, 16}, 1, TmaSwizzle::none, -20, 12}); }

// Two heads per box: box[2] planes of box[1] rows, row z * box[1] + y.
TEST(TmaRing, TwoHeadsPerBox16Rows) {
  check_ring<2>({64, 4, 100, 0, {64, 2, 16}, 1, TmaSwizzle::b128, 0, 8});
  check_ring<3>({64, 4, 100, 8, {64, 2, 16}, 1, TmaSwizzle::none, 0, 8});
}

#if !defined(__CUDACC__)
TEST(TmaRing, ReversedOrder) {
  ReverseOrder reversed(true);
  check_ring<3>({64, 4, 300, 0, {64, 1, 64}, 1, TmaSwizzle::b128, -8, 6});
}
#endif

// ---------------------------------------------------------------- one box

// One thread: fills `region` elements from the aligned base with kUnwritten,
// copies one box to base + dst_offset (announcing expect_bytes), and copies
// the region out after the wait. before[0] is the destination's first element
// read between the issue and the wait.
__global__ void one_box_kernel(const __grid_constant__ TmaMap map, int c0, int c1, int c2, uint32_t expect_bytes,
                               uint32_t dst_offset, int region, uint16_t* out /* [region] */,
                               uint16_t* before /* [1] */) {
  __shared__ pa::Mbarrier bar;
  unsigned char* base = align_1024(pa::dynamic_smem<unsigned char>());
  uint16_t* smem = reinterpret_cast<uint16_t*>(base);
  for (int i = 0; i < region; ++i) smem[i] = kUnwritten;
  bar.init(1);
  pa::fence_mbarrier_init();
  pa::fence_proxy_async_shared();  // the fill happens before the copy's writes
  bar.arrive_expect_tx(expect_bytes);
  pa::tma_load_3d(base + dst_offset, map, c0, c1, c2, bar);
  before[0] = smem[dst_offset / 2];
  bar.wait(0);
  for (int i = 0; i < region; ++i) out[i] = smem[i];
}

struct OneBox {
  std::vector<uint16_t> got, want;
  uint16_t before;
};

OneBox run_one_box(const Tensor& t, const uint32_t (&box)[3], TmaSwizzle swizzle, int c0, int c1, int c2,
                   uint32_t dst_offset = 0) {
  DeviceArray<uint16_t> src(t.data);
  const TmaMap map = t.map(src.ptr, box, swizzle);
  const uint32_t bytes = box_bytes(box);
  const int region = static_cast<int>((dst_offset + bytes + 1024) / 2);  // and a 1 KB margin after it
  DeviceArray<uint16_t> d_out(region), d_before(1);
  pa::launch(one_box_kernel, dim3(1), dim3(1), 1024 + 2 * region, nullptr, map, c0, c1, c2, bytes, dst_offset,
             region, d_out.ptr, d_before.ptr);
  OneBox r{d_out.download(), std::vector<uint16_t>(dst_offset / 2, kUnwritten), d_before.download()[0]};
  const std::vector<uint16_t> box_part =
      expected_box(t, box, swizzle, dst_offset % 1024, c0, c1, c2, region - dst_offset / 2);
  r.want.insert(r.want.end(), box_part.begin(), box_part.end());
  return r;
}

void expect_box(const OneBox& r, const std::string& what) {
  ASSERT_EQ(r.got.size(), r.want.size());
  for (size_t i = 0; i < r.got.size(); ++i) ASSERT_EQ(r.got[i], r.want[i]) << what << ": element " << i;
}

TEST(TmaBox, InsideTheTensor) {
  const Tensor t(64, 4, 100, 0);
  expect_box(run_one_box(t, {64, 1, 64}, TmaSwizzle::b128, 0, 3, 36), "b128 at (0,3,36)");
  expect_box(run_one_box(t, {64, 1, 64}, TmaSwizzle::none, 0, 3, 36), "none at (0,3,36)");
  expect_box(run_one_box(t, {32, 4, 8}, TmaSwizzle::none, 16, 0, 5), "none, half rows, every head");
}

// Outside the tensor, elements land as zeros and still count as the box's
// bytes: every launch announces the whole box, and a phase that missed any of
// them would never complete.
TEST(TmaBox, OutOfBoundsElementsAreZeros) {
  const Tensor t(64, 4, 100, 0);
  for (const TmaSwizzle sw : {TmaSwizzle::b128, TmaSwizzle::none}) {
    const std::string name = sw == TmaSwizzle::b128 ? "b128" : "none";
    expect_box(run_one_box(t, {64, 1, 64}, sw, 0, 1, 60), name + ": rows 100.. past the end");
    expect_box(run_one_box(t, {64, 1, 64}, sw, 0, 1, -16), name + ": rows -16..-1");
    expect_box(run_one_box(t, {64, 1, 16}, sw, 0, 1, -64), name + ": every row negative");
    expect_box(run_one_box(t, {64, 1, 16}, sw, 0, 1, 100), name + ": every row past the end");
    expect_box(run_one_box(t, {64, 2, 16}, sw, 0, -1, 10), name + ": head -1");
    expect_box(run_one_box(t, {64, 2, 16}, sw, 0, 3, 10), name + ": head 4 past the end");
    expect_box(run_one_box(t, {64, 1, 16}, sw, -8, 0, 10), name + ": dims -8..-1");
    expect_box(run_one_box(t, {64, 1, 16}, sw, 8, 0, 10), name + ": dims 64..71 past the end");
    expect_box(run_one_box(t, {64, 2, 16}, sw, -16, -1, -8), name + ": negative in every dim");
  }
}

// The swizzle follows the destination's shared address, not the box: only
// 128-byte aligned, a box lands with the pattern of its address's bits [7:9].
TEST(TmaBox, SwizzleFollowsTheSharedAddress) {
  const Tensor t(64, 2, 40, 0);
  for (const uint32_t offset : {128u, 384u, 896u}) {
    expect_box(run_one_box(t, {64, 1, 16}, TmaSwizzle::b128, 0, 1, 4, offset),
               "b128 at 1024-byte offset " + std::to_string(offset));
  }
}

#if !defined(__CUDACC__)
// The CPU lands a copy only when its barrier is waited on, like the slowest GPU.
TEST(TmaBox, LandsNoEarlierThanTheWait) {
  const Tensor t(64, 2, 40, 0);
  EXPECT_EQ(run_one_box(t, {64, 1, 16}, TmaSwizzle::b128, 0, 1, 4).before, kUnwritten)
      << "the copy landed before anyone waited on its barrier";
}
#endif

// ---------------------------------------------------------------- the tensor core reads a box

uint16_t bf16_bits(int v) {
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);  // exact: small integers
}

struct WgmmaMaps {
  TmaMap q;   // [64 rows][1 head][64 dims], box {64, 1, 64}, b128
  TmaMap kv;  // [80 rows][2 heads][64 dims], box {64, 1, 64}, b128: rows 16..79 of head 1
};

// One warpgroup. Q and a K/V tile arrive by tensor copies as Sw128 slabs, then
// S = Q K^T (wgmma_ss_k_major, four k-steps) and O = A V[16..31] with A from
// registers (wgmma_mn_major, the slab's rows 16..31).
__global__ void tma_wgmma_kernel(const __grid_constant__ WgmmaMaps maps, const uint16_t* a_bits /* [64][16] */,
                                 float* s_out /* [64][64] */, float* o_out /* [64][64] */) {
  __shared__ pa::Mbarrier bar;
  unsigned char* base = align_1024(pa::dynamic_smem<unsigned char>());
  const pa::bf16* q_slab = reinterpret_cast<const pa::bf16*>(base);
  const pa::bf16* kv_slab = reinterpret_cast<const pa::bf16*>(base + 8192);
  if (threadIdx.x == 0) {
    bar.init(1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    bar.arrive_expect_tx(2 * 8192);
    pa::tma_load_3d(base, maps.q, 0, 0, 0, bar);
    pa::tma_load_3d(base + 8192, maps.kv, 0, 1, 16, bar);
  }
  bar.wait(0);

  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, r = 16 * (threadIdx.x / 32) + g;
  float s[8][4] = {};
  pa::wgmma_pin(s);
  pa::wgmma_fence();
  for (int ks = 0; ks < 4; ++ks) pa::wgmma_ss_k_major(s, q_slab, 16 * ks, kv_slab, 16 * ks);
  pa::wgmma_commit();
  pa::wgmma_wait<0>();
  pa::wgmma_pin(s);

  auto pair = [&](int row, int k) {
    return static_cast<uint32_t>(a_bits[row * 16 + k]) | (static_cast<uint32_t>(a_bits[row * 16 + k + 1]) << 16);
  };
  uint32_t a[1][4] = {{pair(r, 2 * t), pair(r + 8, 2 * t), pair(r, 2 * t + 8), pair(r + 8, 2 * t + 8)}};
  float o[8][4] = {};
  pa::wgmma_pin(o);
  pa::wgmma_pin(a);
  pa::wgmma_fence();
  pa::wgmma_mn_major(o, a[0], kv_slab, 16);
  pa::wgmma_commit();
  pa::wgmma_wait<0>();
  pa::wgmma_pin(o);

  for (int j = 0; j < 8; ++j) {
    for (int q = 0; q < 4; ++q) {
      const int row = r + (q >= 2 ? 8 : 0), col = 8 * j + 2 * t + (q & 1);
      s_out[row * 64 + col] = s[j][q];
      o_out[row * 64 + col] = o[j][q];
    }
  }
}

TEST(TmaWgmma, SwizzledBoxesFeedTheTensorCore) {
  auto small = [](int i) { return (i * 7 + 3) % 5 - 2; };  // -2..2: every sum exact in fp32
  Tensor q(64, 1, 64, 0), kv(64, 2, 80, 0);
  for (size_t i = 0; i < q.data.size(); ++i) q.data[i] = bf16_bits(small(static_cast<int>(i)));
  for (size_t i = 0; i < kv.data.size(); ++i) kv.data[i] = bf16_bits(small(static_cast<int>(i * 3 + 1)));
  std::vector<int> a(64 * 16);
  std::vector<uint16_t> a_bits(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = small(static_cast<int>(i * 11 + 2));
    a_bits[i] = bf16_bits(a[i]);
  }
  DeviceArray<uint16_t> d_q(q.data), d_kv(kv.data), d_a(a_bits);
  DeviceArray<float> d_s(64 * 64), d_o(64 * 64);
  const WgmmaMaps maps{q.map(d_q.ptr, {64, 1, 64}, TmaSwizzle::b128), kv.map(d_kv.ptr, {64, 1, 64}, TmaSwizzle::b128)};
  pa::launch(tma_wgmma_kernel, dim3(1), dim3(128), 1024 + 2 * 8192, nullptr, maps, d_a.ptr, d_s.ptr, d_o.ptr);
  const std::vector<float> s = d_s.download(), o = d_o.download();
  auto value = [](uint16_t bits) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 64; ++n) {
      float want_s = 0, want_o = 0;
      for (int d = 0; d < 64; ++d) want_s += value(q.at(d, 0, m)) * value(kv.at(d, 1, 16 + n));
      for (int k = 0; k < 16; ++k) want_o += static_cast<float>(a[m * 16 + k]) * value(kv.at(n, 1, 32 + k));
      ASSERT_EQ(s[m * 64 + n], want_s) << "S[" << m << "][" << n << "]";
      ASSERT_EQ(o[m * 64 + n], want_o) << "O[" << m << "][" << n << "]";
    }
  }
}

// ---------------------------------------------------------------- the map's rules (both flavors)

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const pa::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TmaMapRules, EachViolationIsNamed) {
  DeviceArray<uint16_t> buf(64 * 4 * 100);
  const uint16_t* base = buf.ptr;
  struct Args {
    const void* base;
    uint64_t dims[3];
    uint64_t strides[2];
    uint32_t box[3];
    TmaSwizzle swizzle;
  };
  const Args good{base, {64, 4, 100}, {128, 512}, {64, 1, 64}, TmaSwizzle::b128};
  auto with = [&](auto change) {
    Args a = good;
    change(a);
    return error_of([&] { pa::make_tma_map_2byte_3d(a.base, a.dims, a.strides, a.box, a.swizzle); });
  };
  EXPECT_EQ(with([](Args&) {}), "(no error)");
  EXPECT_EQ(with([](Args& a) { a.box[0] = 128; a.swizzle = TmaSwizzle::none; }), "(no error)");
  EXPECT_EQ(with([](Args& a) { a.box[0] = 8; a.box[1] = 4; a.box[2] = 100; }), "(no error)");
  EXPECT_EQ(with([](Args& a) { a.strides[0] = 144; a.strides[1] = 144 * 4; }), "(no error)");  // padded heads

  EXPECT_THAT(with([](Args& a) { a.swizzle = static_cast<TmaSwizzle>(7); }),
              HasSubstr("make_tma_map_2byte_3d: swizzle 7 is neither TmaSwizzle::none nor TmaSwizzle::b128"));
  EXPECT_THAT(with([](Args& a) { a.base = nullptr; }), HasSubstr("make_tma_map_2byte_3d: the base address is null"));
  EXPECT_THAT(with([&](Args& a) { a.base = reinterpret_cast<const char*>(base) + 8; }),
              HasSubstr("is not 16-byte aligned"));
  EXPECT_THAT(with([](Args& a) { a.dims[1] = 0; }), HasSubstr("dims[1] = 0: a dimension holds 1 to 2^32 elements"));
  EXPECT_THAT(with([](Args& a) { a.dims[2] = (uint64_t{1} << 32) + 1; }),
              HasSubstr("dims[2] = 4294967297: a dimension holds 1 to 2^32 elements"));
  EXPECT_THAT(with([](Args& a) { a.strides[0] = 136; }),
              HasSubstr("strides_bytes[0] = 136: a stride is a multiple of 16 bytes"));
  EXPECT_THAT(with([](Args& a) { a.strides[1] = uint64_t{1} << 40; }),
              HasSubstr("strides_bytes[1] = 1099511627776: a stride is below 2^40 bytes"));
  EXPECT_THAT(with([](Args& a) { a.strides[0] = 64; }),
              HasSubstr("strides_bytes[0] = 64: a stride is at least a row of dims[0] = 64 elements (128 bytes), "
                        "or rows would overlap"));
  EXPECT_THAT(with([](Args& a) { a.box[2] = 0; }),
              HasSubstr("box[2] = 0: a box takes 1 to 256 elements along each dimension"));
  EXPECT_THAT(with([](Args& a) { a.box[1] = 257; }),
              HasSubstr("box[1] = 257: a box takes 1 to 256 elements along each dimension"));
  EXPECT_THAT(with([](Args& a) { a.box[0] = 12; }),
              HasSubstr("box[0] = 12: a box's rows (box[0] * 2 bytes) are a multiple of 16 bytes"));
  EXPECT_THAT(with([](Args& a) { a.box[0] = 128; }),
              HasSubstr("box[0] = 128 with TmaSwizzle::b128: the 128-byte swizzle takes rows of at most 128 bytes "
                        "(64 elements)"));
}

// ---------------------------------------------------------------- misuse (CPU only)

#if !defined(__CUDACC__)

// The report names a source file by the path the compiler saw; the
// expectations name it by its file name alone.
std::string without_directories(std::string msg) {
  const std::string file = "test_tma.cu";
  for (size_t at = msg.find(file); at != std::string::npos; at = msg.find(file, at + 1)) {
    size_t from = at;
    while (from > 0 && msg[from - 1] != ' ' && msg[from - 1] != '(') --from;
    msg.erase(from, at - from);
    at = from;
  }
  return msg;
}

// The shared launch_error's report, its source paths cut to file names.
template <class F>
std::string launch_error(F&& launch) {
  return without_directories(pa::runtime_test::launch_error(std::forward<F>(launch)));
}

std::string at_line(int line) { return "test_tma.cu:" + std::to_string(line); }

// Which thread reports an error depends on the fiber order: pin it to forward.
class TmaErrors : public ::testing::Test {
  ReverseOrder forward_{false};
};

struct MisuseParams {
  TmaMap map;    // box {64, 1, 16}: 2048 bytes
  TmaMap huge;   // box {64, 128, 128}: 2 MiB
  int which;
};

constexpr int kMisuseCopyLine = __LINE__ + 11;
constexpr int kMisuseWaitLine = __LINE__ + 25;
// A misuse picked by `which`, each the first error of its launch.
__global__ void misuse_kernel(const __grid_constant__ MisuseParams p) {
  __shared__ pa::Mbarrier bar;
  __shared__ pa::Mbarrier never_initialized;
  unsigned char* base = align_1024(pa::dynamic_smem<unsigned char>());
  bar.init(1);
  pa::fence_mbarrier_init();
  const TmaMap blank{};
  switch (p.which) {
    case 0: pa::tma_load_3d(base + 64, p.map, 0, 0, 0, bar); break;  // 64-byte aligned only
    case 1: pa::tma_load_3d(base, blank, 0, 0, 0, bar); break;       // not a map
    case 2: pa::tma_load_3d(base, p.map, 0, 0, 0, never_initialized); break;
    case 3: pa::tma_load_3d(base, p.huge, 0, 0, 0, bar); break;      // more than a phase's tx-count
    case 7: pa::tma_load_3d(base, p.map, 3, 0, 2, bar); break;       // rows start mid-chunk
    case 8: pa::tma_load_3d(base, p.map, -4, 1, 2, bar); break;      // the same, before the tensor
    default: {
      // 4: announces a row more than the box, 5: the box without its
      // out-of-bounds rows (it starts 8 rows before the tensor), 6: right.
      const uint32_t announced = p.which == 4 ? 2048 + 128 : p.which == 5 ? 2048 - 8 * 128 : 2048;
      bar.arrive_expect_tx(announced);
      pa::tma_load_3d(base, p.map, 0, 0, -8, bar);
      break;
    }
  }
  bar.wait(0);
}

TEST_F(TmaErrors, MisuseIsReported) {
  const Tensor t(64, 2, 40, 0);
  DeviceArray<uint16_t> src(t.data);
  MisuseParams p{};
  p.map = t.map(src.ptr, {64, 1, 16}, TmaSwizzle::b128);
  p.huge = t.map(src.ptr, {64, 128, 128}, TmaSwizzle::none);
  auto error_of = [&](int which) {
    p.which = which;
    return launch_error([&] { pa::launch(misuse_kernel, dim3(1), dim3(1), 4096, nullptr, p); });
  };
  EXPECT_THAT(error_of(0), HasSubstr("block (0,0,0) thread (0,0,0): cp.async.bulk.tensor (" +
                                     at_line(kMisuseCopyLine) +
                                     ") of the box at (0,0,0): the shared-memory destination is not 128-byte "
                                     "aligned"));
  EXPECT_THAT(error_of(1), HasSubstr(at_line(kMisuseCopyLine + 1) + ") of the box at (0,0,0): the map was not "
                                                                    "made by make_tma_map_2byte_3d"));
  EXPECT_THAT(error_of(2), HasSubstr("cp.async.bulk.tensor (" + at_line(kMisuseCopyLine + 2) +
                                     ") on an mbarrier that this block has not initialized"));
  EXPECT_THAT(error_of(3), HasSubstr("its box of 2097152 bytes is more than the tx-count of one mbarrier phase "
                                     "can wait for (at most 1048575 bytes)"));
  const std::string more = error_of(4);
  EXPECT_THAT(more, HasSubstr("deadlock in block (0,0,0)"));
  EXPECT_THAT(more, HasSubstr("thread (0,0,0) at mbarrier wait (" + at_line(kMisuseWaitLine)));
  EXPECT_THAT(more, HasSubstr("still needs 0 of 1 arrivals and 128 bytes; this phase expect_tx announced 2176 "
                              "bytes"));
  EXPECT_THAT(more, HasSubstr("bulk copies delivered 2048"));
  EXPECT_THAT(error_of(5), HasSubstr("the tensor copy of 2048 bytes issued at " + at_line(kMisuseCopyLine + 11) +
                                     " delivers more bytes than the phase of mbarrier #0"));
  EXPECT_EQ(error_of(6), "(no error)");
  // A first coordinate off a 16-byte chunk: the CPU could land it, an H100
  // stops the kernel with an illegal instruction (the whole-chunk ones, -8 and
  // 8 among them, land: TmaBox.OutOfBoundsElementsAreZeros).
  const std::string rule = ": the first coordinate must be a multiple of 8 elements (its bytes a multiple of 16";
  EXPECT_THAT(error_of(7), HasSubstr(at_line(kMisuseCopyLine + 4) + ") of the box at (3,0,2)" + rule));
  EXPECT_THAT(error_of(8), HasSubstr(at_line(kMisuseCopyLine + 5) + ") of the box at (-4,1,2)" + rule));
}

struct ReadParams {
  TmaMap b128;  // box {64, 1, 64}: one Sw128 slab of 8 KB
  TmaMap none;  // the same box, dense rows
  int which;
};

constexpr int kReadCopyBLine = __LINE__ + 20;
constexpr int kReadCopyALine = __LINE__ + 20;
constexpr int kReadMmaLine = __LINE__ + 33;
// One warpgroup: thread 0 copies slab B (then slab A) by tensor copies, the
// warpgroup multiplies, rightly or not (`which`).
__global__ void tensor_core_read_kernel(const __grid_constant__ ReadParams p, const uint16_t* src /* 8 KB */) {
  __shared__ pa::Mbarrier bar_a, bar_b;
  unsigned char* base = align_1024(pa::dynamic_smem<unsigned char>());
  pa::bf16* b_slab = reinterpret_cast<pa::bf16*>(base);
  pa::bf16* a_slab = reinterpret_cast<pa::bf16*>(base + 8192);
  if (threadIdx.x == 0) {
    bar_a.init(1);
    bar_b.init(1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  const bool dense = p.which == 1 || p.which == 4 || p.which == 7;
  if (threadIdx.x == 0) {
    bar_b.arrive_expect_tx(8192);
    bar_a.arrive_expect_tx(8192);
    pa::tma_load_3d(b_slab, dense ? p.none : p.b128, 0, 0, 0, bar_b);
    pa::tma_load_3d(a_slab, p.b128, 0, 0, 0, bar_a);
  }
  __syncthreads();
  if (p.which != 0 && p.which != 5) bar_b.wait(0);
  if (p.which != 2 && p.which != 6) bar_a.wait(0);
  if (p.which == 4) {  // cp.async overwrites the dense slab: its bytes are ordinary bytes again
    for (int c = threadIdx.x; c < 8192 / 16; c += blockDim.x) pa::cp_async_16(b_slab + 8 * c, src + 8 * c);
    pa::cp_async_commit();
    pa::cp_async_wait<0>();
    __syncthreads();
  }
  float d[8][4] = {};
  const uint32_t a[4] = {0, 0, 0, 0};
  if (p.which == 2 || p.which == 3) {
    pa::wgmma_ss_k_major(d, a_slab, 0, b_slab, 0);
  } else if (p.which < 5) {
    pa::wgmma_mn_major(d, a, b_slab, 16);
  } else if (p.which == 5) {  // stage 09's wide products (common/wgmma_wide.cuh), through their operands
    pa::wgmma_rs_n_major<64>(d, a, pa::Sw128Operand::n_major(b_slab, 64 * 64).rows(16));
  } else {
    pa::wgmma_ss_k_major_n<64>(d, pa::Sw128Operand::k_major(a_slab).cols(16), pa::Sw128Operand::k_major(b_slab));
  }
}

TEST_F(TmaErrors, TheTensorCoreReadsOnlyLandedBytesOfItsSwizzle) {
  const Tensor t(64, 1, 64, 0);
  DeviceArray<uint16_t> src(t.data);
  ReadParams p{};
  p.b128 = t.map(src.ptr, {64, 1, 64}, TmaSwizzle::b128);
  p.none = t.map(src.ptr, {64, 1, 64}, TmaSwizzle::none);
  auto error_of = [&](int which) {
    p.which = which;
    return launch_error(
        [&] { pa::launch(tensor_core_read_kernel, dim3(1), dim3(128), 1024 + 2 * 8192, nullptr, p, src.ptr); });
  };
  // 0: B is read before its wait.
  const std::string early = error_of(0);
  EXPECT_THAT(early, HasSubstr("wgmma_mn_major's B operand (" + at_line(kReadMmaLine + 2) +
                               ") reads shared memory that the tensor copy of 8192 bytes issued at " +
                               at_line(kReadCopyBLine) + " (to mbarrier #"));
  EXPECT_THAT(early, HasSubstr(") is still writing: read before its mbarrier phase completed: wait on it first"));
  // 1: B landed with dense rows, the descriptor says 128B.
  EXPECT_THAT(error_of(1), HasSubstr("wgmma_mn_major's B operand (" + at_line(kReadMmaLine + 2) +
                                     ") reads shared memory that the tensor copy issued at " +
                                     at_line(kReadCopyBLine) +
                                     " wrote: the descriptor's swizzle (128B) does not match the copy's (none)"));
  // 2: A of wgmma_ss_k_major is read before its wait.
  EXPECT_THAT(error_of(2), HasSubstr("wgmma_ss_k_major's A operand (" + at_line(kReadMmaLine) +
                                     ") reads shared memory that the tensor copy of 8192 bytes issued at " +
                                     at_line(kReadCopyALine)));
  EXPECT_EQ(error_of(3), "(no error)");
  EXPECT_EQ(error_of(4), "(no error)") << "cp.async's bytes are not the tensor copy's any more";
  // 5-8: the same rules for the wide products, whose operands are made once
  // and moved (Sw128Operand): the checked bytes are the moved operand's.
  EXPECT_THAT(error_of(5), HasSubstr("wgmma_rs_n_major's B operand (" + at_line(kReadMmaLine + 4) +
                                     ") reads shared memory that the tensor copy of 8192 bytes issued at " +
                                     at_line(kReadCopyBLine)));
  EXPECT_THAT(error_of(6), HasSubstr("wgmma_ss_k_major_n's A operand (" + at_line(kReadMmaLine + 6) +
                                     ") reads shared memory that the tensor copy of 8192 bytes issued at " +
                                     at_line(kReadCopyALine)));
  EXPECT_THAT(error_of(7), HasSubstr("wgmma_ss_k_major_n's B operand (" + at_line(kReadMmaLine + 6) +
                                     ") reads shared memory that the tensor copy issued at " +
                                     at_line(kReadCopyBLine) +
                                     " wrote: the descriptor's swizzle (128B) does not match the copy's (none)"));
  EXPECT_EQ(error_of(8), "(no error)");
}

TEST_F(TmaErrors, RuntimeKeepsWorkingAfterAnError) {
  const Tensor t(64, 2, 40, 0);
  DeviceArray<uint16_t> src(t.data);
  MisuseParams p{};
  p.map = t.map(src.ptr, {64, 1, 16}, TmaSwizzle::b128);
  p.huge = p.map;
  p.which = 0;
  launch_error([&] { pa::launch(misuse_kernel, dim3(1), dim3(1), 4096, nullptr, p); });
  check_ring<2>({64, 4, 100, 0, {64, 1, 64}, 1, TmaSwizzle::b128, 0, 3});
}

#endif  // !defined(__CUDACC__)

}  // namespace
