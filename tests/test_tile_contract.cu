// The tile contract (common/tile_contract.cuh) and the merge's PartialSource
// (common/merge.cuh), checked where they cannot be checked next to a type: the
// policies composed from several stages model their concepts, policies that
// lack a member or have one of the wrong shape do not, and the optional
// members' defaults hold. Most of it is static_asserts: this file compiling is
// the test; kernels run the serves() default and the merge's fold.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/device_buffer.h"
#include "common/launch.cuh"
#include "common/merge.cuh"
#include "common/tile_contract.cuh"
#include "going_further/batch_invariant.cuh"
#include "going_further/two_warp_decode.cuh"
#include "solutions/05_quantized_kv/quantized_tile.cuh"
#include "solutions/07_cascade/cascade.cuh"
#include "solutions/08_attention_sinks/attention_sinks.cuh"

// The policies below are only named in static_asserts: declared, never defined,
// and outside an anonymous namespace, where nvcc would warn that their members
// are never referenced.
namespace pa::test::contract {

using stage03::WholeContext;

// ---- The stages' policies, as the launchers compose them.
static_assert(Slice<stage07::PrefixSplits> && Slice<stage07::SuffixMerge> && Slice<stage07::SuffixSplits>);
static_assert(Slice<stage08::WithSinks<stage07::SuffixMerge>> && Slice<stage08::WithSinks<stage07::SuffixSplits>>);
static_assert(Slice<further::InvariantSplits<stage08::SinkTokenSplits>>);
static_assert(Slice<stage08::WithSinks<further::InvariantSplits<stage04::Splits>>>);
static_assert(Slice<stage08::WithSinks<further::ServesPrefills<WholeContext>>>);
static_assert(Mask<stage03::CausalMask> && Mask<stage06::SlidingWindow> && Mask<stage08::WindowWithSinkTokens>);
static_assert(TileFamily<stage03::Bf16Tiles> && TileFamily<further::Bf16SplitTiles> &&
              TileFamily<stage05::QuantizedTiles<KvFormat::int8>> &&
              TileFamily<stage05::QuantizedTiles<KvFormat::fp8_e4m3>>);

// ---- Slices that are not: each breaks one requirement of the concept.
struct StoreRowWithoutLse {
  __device__ int query_tile() const;
  __device__ KeyRange key_range(int, int) const;
  template <int O_TILES>
  __device__ void store_row(const AttentionParams&, size_t, const float (&)[O_TILES][4], int, int, float) const;
};
struct KeyRangeAsPair : WholeContext {
  __device__ int2 key_range(int, int) const;
};
struct ServesABatch : WholeContext {  // serves() of another shape would otherwise be ignored
  __device__ bool serves(const AttentionParams&) const;
};
struct ServesAnInt : WholeContext {
  __device__ int serves(int) const;
};
struct AfterPriorGridAtRunTime : WholeContext {
  static const bool AFTER_PRIOR_GRID;  // not a constant: launch_for_slice could not choose a launch
};
struct RequestAsPointer : WholeContext {  // request() must name an int
  __device__ const int* request() const;
};
struct OwnsMemory : WholeContext {
  std::vector<int> rows;  // a kernel argument is copied byte for byte
};
static_assert(Slice<WholeContext>);
static_assert(!Slice<StoreRowWithoutLse> && !Slice<KeyRangeAsPair> && !Slice<ServesABatch> && !Slice<ServesAnInt> &&
              !Slice<AfterPriorGridAtRunTime> && !Slice<RequestAsPointer> && !Slice<OwnsMemory>);

// ---- after_prior_grid: false unless a Slice declares it.
struct AfterPriorGrid : WholeContext {
  static constexpr bool AFTER_PRIOR_GRID = true;
};
struct NotAfterPriorGrid : WholeContext {
  static constexpr bool AFTER_PRIOR_GRID = false;
};
static_assert(Slice<AfterPriorGrid> && Slice<NotAfterPriorGrid>);
static_assert(after_prior_grid<AfterPriorGrid> && !after_prior_grid<NotAfterPriorGrid>);
static_assert(!after_prior_grid<WholeContext> && !after_prior_grid<stage04::Splits>);
static_assert(after_prior_grid<stage08::WithSinks<AfterPriorGrid>>);  // an adapter keeps it

// ---- Masks that are not.
struct FirstKeyOfAnObject : stage03::CausalMask {
  __device__ int first_key(const AttentionParams&, const Packing&, int) const;  // not static
};
struct ForWarpOfAnotherWarp : stage03::CausalMask {
  __device__ static stage06::SlidingWindow::Warp for_warp(const AttentionParams&, const int (&)[2], const WarpKeys&,
                                                          int);
};
struct WarpWithoutSkip {
  struct Warp {
    __device__ bool needs_mask(int, int) const;
    __device__ bool masked(int, int) const;
  };
  __device__ static int first_key(const AttentionParams&, const Packing&, int);
  __device__ static Warp for_warp(const AttentionParams&, const int (&)[2], const WarpKeys&, int);
};
static_assert(!Mask<FirstKeyOfAnObject> && !Mask<ForWarpOfAnotherWarp> && !Mask<WarpWithoutSkip>);

// ---- Tile families that are not.
struct DecodeOnly {
  template <int HEAD_DIM>
  using Decode = stage03::Bf16Tiles::Decode<HEAD_DIM>;
  template <class T>
  static constexpr size_t smem_bytes() {
    return stage03::Bf16Tiles::smem_bytes<T>();
  }
  template <class T, Slice S, Mask M>
  static void launch_tile(const AttentionParams&, const Packing&, const S&, dim3, cudaStream_t);
};
struct SmemAtRunTime : stage03::Bf16Tiles {
  template <class T>
  static size_t smem_bytes();  // stage 04 counts programs per SM at compile time
};
struct LaunchesOneSlice : stage03::Bf16Tiles {
  template <class T, class S, class M>
  static void launch_tile(const AttentionParams&, const Packing&, const WholeContext&, dim3, cudaStream_t);
};
struct PrefillAsDecode : stage03::Bf16Tiles {
  template <int HEAD_DIM>
  using Decode = stage03::Bf16Tiles::Prefill<HEAD_DIM>;  // stage 04's splits run one row warp
};
static_assert(!TileFamily<DecodeOnly> && !TileFamily<SmemAtRunTime> && !TileFamily<LaunchesOneSlice> &&
              !TileFamily<PrefillAsDecode>);

// ---- PartialSource (common/merge.cuh): the merge's sources, and sources that are not.
static_assert(PartialSource<stage04::SplitPartials> && PartialSource<further::InvariantPartials> &&
              PartialSource<stage07::CascadePartials>);
static_assert(!skips_empty<stage04::SplitPartials> && skips_empty<further::InvariantPartials> &&
              !skips_empty<stage07::CascadePartials>);
static_assert(DeclaresAfterPartials<stage07::CascadePartials> && !DeclaresAfterPartials<stage04::SplitPartials>);
struct NoCount {  // num_partials() missing
  using Row = MergeRow;
  __device__ Row row(const AttentionParams&, int, int) const;
  __device__ SoftmaxState<4> partial(const AttentionParams&, const Row&, int, const MergeChunk&) const;
};
struct PartialAsLseAndValues : stage04::SplitPartials {  // a partial is a state, not its parts
  __device__ float partial(const AttentionParams&, const Row&, int, const MergeChunk&) const;
};
struct RowOfItsOwn : stage04::SplitPartials {  // the kernel reads merges and q_row of a MergeRow
  struct Row {
    size_t q_row;
  };
  __device__ Row row(const AttentionParams&, int, int) const;
};
struct SkipsEmptyAtRunTime : stage04::SplitPartials {
  static const bool SKIPS_EMPTY;  // not a constant: the kernel's fold could not be chosen
};
struct AfterPartialsOfEightDims : stage04::SplitPartials {  // the hook of another shape would otherwise be ignored
  __device__ void after_partials(const AttentionParams&, const Row&, SoftmaxState<8>&, const MergeChunk&) const;
};
struct OwnsPartials : stage04::SplitPartials {
  std::vector<float> lse;  // a kernel argument is copied byte for byte
};
static_assert(!PartialSource<NoCount> && !PartialSource<PartialAsLseAndValues> && !PartialSource<RowOfItsOwn> &&
              !PartialSource<SkipsEmptyAtRunTime> && !PartialSource<AfterPartialsOfEightDims> &&
              !PartialSource<OwnsPartials>);

}  // namespace pa::test::contract

namespace pa::test {
namespace {

using stage03::WholeContext;

// out[q_len] = serves(slice, q_len) for q_len 0, 1, 2.
template <Slice S>
__global__ void serves_kernel(S slice, int* out) {
  for (int q_len = 0; q_len < 3; ++q_len) out[q_len] = serves(slice, q_len);
}

template <Slice S>
std::vector<int> served(const S& slice) {
  DeviceBuffer<int> out(3);
  launch(serves_kernel<S>, dim3(1), dim3(1), 0, cudaStream_t{}, slice, out.data());
  return out.download();
}

TEST(TileContract, ASliceWithoutServesServesEveryRequest) {
  EXPECT_EQ(served(WholeContext{}), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(served(stage04::Splits{}), (std::vector<int>{1, 1, 1}));
}

TEST(TileContract, ServesIsTheSlicesOwnWhereItHasOne) {
  EXPECT_EQ(served(further::ServesPrefills<WholeContext>{}), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(served(further::InvariantSplits<stage04::Splits>{}), (std::vector<int>{0, 1, 0}));
  // An adapter that wraps the Slice keeps its serves().
  EXPECT_EQ(served(stage08::AddSinks{nullptr}(further::ServesPrefills<WholeContext>{})),
            (std::vector<int>{0, 0, 1}));
}

// out[b] = request_of(slice) in program b of a grid (2, 1, 3): blockIdx.z, or the Slice's own.
template <Slice S>
__global__ void request_kernel(S slice, int* out) {
  out[blockIdx.z * gridDim.x + blockIdx.x] = request_of(slice);
}
template <Slice S>
std::vector<int> requests(const S& slice) {
  DeviceBuffer<int> out(6);
  launch(request_kernel<S>, dim3(2, 1, 3), dim3(1), 0, cudaStream_t{}, slice, out.data());
  return out.download();
}
struct RequestFromX : WholeContext {  // as the engine's work list maps items to requests
  int offset;
  __device__ int request() const { return offset + static_cast<int>(blockIdx.x); }
};
static_assert(Slice<RequestFromX>);

TEST(TileContract, ARequestIsBlockIdxZUnlessTheSliceSaysOtherwise) {
  EXPECT_EQ(requests(WholeContext{}), (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(requests(RequestFromX{{}, 5}), (std::vector<int>{5, 6, 5, 6, 5, 6}));
  // An adapter that wraps the Slice keeps its request().
  EXPECT_EQ(requests(stage08::AddSinks{nullptr}(RequestFromX{{}, 1})), (std::vector<int>{1, 2, 1, 2, 1, 2}));
}

// ---- The merge's fold (common/merge.cuh), over partials from plain tables.

// `count` partials of one row per query head h (q_row h): lse [count, Hq], o [count, Hq, head_dim].
template <bool SKIP>
struct TableSource {
  const float* lse;  // [count, Hq]
  const float* o;    // [count, Hq, head_dim]
  int count;

  static constexpr bool SKIPS_EMPTY = SKIP;
  using Row = MergeRow;

  __device__ Row row(const AttentionParams&, int, int h) const { return {true, static_cast<size_t>(h)}; }
  __device__ int num_partials() const { return count; }
  __device__ SoftmaxState<4> partial(const AttentionParams& p, const Row& row, int i, const MergeChunk& chunk) const {
    const size_t part_row = static_cast<size_t>(i) * p.num_q_heads + row.q_row;
    float v[4];
    chunk.load(o + part_row * p.kv.head_dim, v);
    return SoftmaxState<4>::partial(lse[part_row], v);
  }
};
static_assert(PartialSource<TableSource<false>> && skips_empty<TableSource<true>>);

// After the partials, one more with lse 0 and every value 9.
struct WithNines : TableSource<false> {
  __device__ void after_partials(const AttentionParams&, const Row&, SoftmaxState<4>& acc, const MergeChunk&) const {
    const float nines[4] = {9.0f, 9.0f, 9.0f, 9.0f};
    acc.merge(SoftmaxState<4>::partial(0.0f, nines));
  }
};
static_assert(PartialSource<WithNines> && DeclaresAfterPartials<WithNines>);

// The merged rows of `src` over one request of num_q_heads rows of head_dim dims,
// with HEAD_DIM-dim tiles; out has 16 guard values past the last row.
template <int HEAD_DIM, int LANES, PartialSource Src>
std::vector<float> merged(Src src, int num_q_heads, int head_dim, std::vector<float>* lse_out = nullptr) {
  const size_t values = static_cast<size_t>(num_q_heads) * head_dim;
  DeviceBuffer<bf16> out(std::vector<bf16>(values + 16, __float2bfloat16(-1.0f)));
  DeviceBuffer<float> lse(num_q_heads);
  AttentionParams p{};
  p.out = out.data();
  p.lse = lse.data();
  p.kv.head_dim = head_dim;
  p.batch.num_requests = 1;
  p.num_q_heads = num_q_heads;
  launch_merge<HEAD_DIM, LANES>(p, src, cudaStream_t{});
  PA_CHECK(cudaDeviceSynchronize());
  if (lse_out != nullptr) *lse_out = lse.download();
  std::vector<float> v;
  for (bf16 x : out.download()) v.push_back(__bfloat162float(x));
  return v;
}

// Partials of equal lse 0 whose values are `values[i]` (+ h for head h) in every dim.
struct Tables {
  DeviceBuffer<float> lse, o;
  Tables(const std::vector<float>& part_lse, const std::vector<float>& values, int num_q_heads, int head_dim) {
    std::vector<float> l, v;
    for (size_t i = 0; i < values.size(); ++i) {
      for (int h = 0; h < num_q_heads; ++h) {
        l.push_back(part_lse[i]);
        for (int d = 0; d < head_dim; ++d) v.push_back(values[i] + h);
      }
    }
    lse.upload(l);
    o.upload(v);
  }
  template <bool SKIP>
  TableSource<SKIP> source(int count) const {
    return {lse.data(), o.data(), count};
  }
};

// Every partial is merged once, by any number of lanes; the dims past head_dim
// (48 of a 64-dim tile) are merged but never stored.
TEST(MergeContract, EveryPartialOnceAndOnlyRealDimsStored) {
  const Tables t({0, 0, 0, 0, 0}, {1, 2, 3, 4, 5}, 2, 48);
  for (const std::vector<float>& out : {merged<64, 1>(t.source<false>(5), 2, 48), merged<64, 4>(t.source<false>(5), 2, 48),
                                        merged<64, 8>(t.source<false>(5), 2, 48)}) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 48; ++d) ASSERT_EQ(out[h * 48 + d], 3.0f + h) << "head " << h << ", dim " << d;
    }
    for (int g = 0; g < 16; ++g) ASSERT_EQ(out[96 + g], -1.0f) << "guard value " << g << " written";
  }
}

// A source that skips empty partials never reads their values (NaN here).
TEST(MergeContract, SkippedEmptyPartialsAreLeftOut) {
  const Tables t({0, -INFINITY, 0}, {2, NAN, 4}, 1, 64);
  std::vector<float> lse;
  const std::vector<float> out = merged<64, 1>(t.source<true>(3), 1, 64, &lse);
  for (int d = 0; d < 64; ++d) ASSERT_EQ(out[d], 3.0f) << "dim " << d;
  EXPECT_NEAR(lse[0], std::log(2.0f), 1e-6f);
}

// The hook merges after the partials and the lanes, once.
TEST(MergeContract, TheHookRunsOnceAfterThePartials) {
  const Tables t({0, 0}, {1, 2}, 1, 64);
  for (const std::vector<float>& out : {merged<64, 1>(WithNines{t.source<false>(2)}, 1, 64),
                                        merged<64, 4>(WithNines{t.source<false>(2)}, 1, 64)}) {
    for (int d = 0; d < 64; ++d) ASSERT_EQ(out[d], 4.0f) << "dim " << d;  // (1 + 2 + 9) / 3
  }
}

}  // namespace
}  // namespace pa::test
