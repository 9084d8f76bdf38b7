// The tile contract (common/tile_contract.cuh), checked where it cannot be
// checked next to a type: the policies composed from several stages model
// their concepts, policies that lack a member or have one of the wrong shape do
// not, and the optional members' defaults hold. Most of it is static_asserts:
// this file compiling is the test; one kernel runs the serves() default.
#include <gtest/gtest.h>

#include <vector>

#include "common/device_buffer.h"
#include "common/launch.cuh"
#include "common/tile_contract.cuh"
#include "going_further/batch_invariant.cuh"
#include "going_further/two_warp_decode.cuh"
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
struct OwnsMemory : WholeContext {
  std::vector<int> rows;  // a kernel argument is copied byte for byte
};
static_assert(Slice<WholeContext>);
static_assert(!Slice<StoreRowWithoutLse> && !Slice<KeyRangeAsPair> && !Slice<ServesABatch> && !Slice<ServesAnInt> &&
              !Slice<AfterPriorGridAtRunTime> && !Slice<OwnsMemory>);

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

}  // namespace
}  // namespace pa::test
