// Tests of the named barriers (common/named_barrier.cuh): two groups of warps
// that hand a turn to each other with bar.sync / bar.arrive, as stage 09's
// consumers hand over the tensor core, and a group barrier that a subset of the
// block meets at. The same file builds with nvcc, so the semantic tests also
// run on a GPU. The misuse reports (ids and counts, a count that changes, a
// deadlock, an unbalanced hand-over) exist only on the CPU runtime.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/launch.cuh"
#include "common/named_barrier.cuh"
#include "tests/runtime/device_array.h"

namespace {

using ::testing::HasSubstr;

using pa::runtime_test::DeviceArray;
#if !defined(__CUDACC__)
using pa::runtime_test::launch_error;
using pa::runtime_test::ReverseOrder;
#endif

// ---------------------------------------------------------------- the ping-pong

constexpr int kGroupThreads = 64;  // two warps a group, two groups
constexpr int kMaxRounds = 32;

// Group g's turns: it waits on barrier 1 + g (its own bar.sync and the other
// group's bar.arrive make the 128 arrivals of one completion), logs its number
// and hands the turn to the other group. Group 0 goes first: group 1 hands it
// the first turn, and skips its own last hand-over so that no arrival is left
// over. out[k]: the group that held the k-th turn.
__global__ void ping_pong_kernel(int* out /* [2 * rounds] */, int rounds) {
  __shared__ int log[2 * kMaxRounds];
  __shared__ int next;
  if (threadIdx.x == 0) next = 0;
  __syncthreads();
  const int g = threadIdx.x / kGroupThreads, other = 1 - g;
  const bool leader = threadIdx.x % kGroupThreads == 0;
  if (g == 1) pa::named_barrier_arrive(1 + other, 2 * kGroupThreads);
  for (int r = 0; r < rounds; ++r) {
    pa::named_barrier_sync(1 + g, 2 * kGroupThreads);
    if (leader) {
      log[next] = g;
      next = next + 1;
      __threadfence_block();  // the log is written before the other group's turn
    }
    if (g == 0 || r + 1 < rounds) pa::named_barrier_arrive(1 + other, 2 * kGroupThreads);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < 2 * rounds; k += blockDim.x) out[k] = log[k];
}

void check_ping_pong(int rounds) {
  DeviceArray<int> out(static_cast<size_t>(2 * rounds));
  pa::launch(ping_pong_kernel, dim3(3), dim3(2 * kGroupThreads), 0, nullptr, out.ptr, rounds);
  const std::vector<int> got = out.download();
  for (int k = 0; k < 2 * rounds; ++k) EXPECT_EQ(got[k], k % 2) << "turn " << k << " of " << 2 * rounds;
}

TEST(NamedBarrierPingPong, TurnsAlternate) { check_ping_pong(kMaxRounds); }
TEST(NamedBarrierPingPong, OneRound) { check_ping_pong(1); }

#if !defined(__CUDACC__)
TEST(NamedBarrierPingPong, ReversedOrder) {
  ReverseOrder reversed(true);
  check_ping_pong(kMaxRounds);
}
#endif

// Warps 1..3 meet at barrier 3 (96 threads) while warp 0 goes its own way: each
// of them writes its slot before the barrier and reads a neighbour's after it.
__global__ void subset_kernel(int* out /* [128] */) {
  __shared__ int slot[128];
  slot[threadIdx.x] = -1;
  __syncthreads();
  if (threadIdx.x < 32) {
    out[threadIdx.x] = 0;
    return;
  }
  slot[threadIdx.x] = static_cast<int>(threadIdx.x);
  pa::named_barrier_sync(3, 96);
  const int neighbour = 32 + (threadIdx.x - 32 + 37) % 96;
  out[threadIdx.x] = slot[neighbour];
}

TEST(NamedBarrier, ASubsetOfWarpsMeets) {
  DeviceArray<int> out(128);
  pa::launch(subset_kernel, dim3(2), dim3(128), 0, nullptr, out.ptr);
  const std::vector<int> got = out.download();
  for (int t = 32; t < 128; ++t) EXPECT_EQ(got[t], 32 + (t - 32 + 37) % 96) << "thread " << t;
}

// A block of 48 threads: its second warp has 16 lanes and counts as 32
// arrivals, as the hardware counts a warp, so a barrier for 64 threads (both
// warps) completes. Each thread then reads a slot another thread wrote.
__global__ void partial_warp_kernel(int* out /* [48] */) {
  __shared__ int slot[48];
  slot[threadIdx.x] = static_cast<int>(threadIdx.x) * 3;
  pa::named_barrier_sync(1, 64);
  out[threadIdx.x] = slot[(threadIdx.x + 32) % 48];
}

TEST(NamedBarrier, APartialWarpCountsAsAWholeOne) {
  DeviceArray<int> out(48);
  pa::launch(partial_warp_kernel, dim3(1), dim3(48), 0, nullptr, out.ptr);
  const std::vector<int> got = out.download();
  for (int t = 0; t < 48; ++t) EXPECT_EQ(got[t], (t + 32) % 48 * 3) << "thread " << t;
}

// ---------------------------------------------------------------- misuse (CPU only)

#if !defined(__CUDACC__)

std::string at_line(int line) { return "test_named_barrier.cu:" + std::to_string(line); }

class NamedBarrierErrors : public ::testing::Test {
  ReverseOrder forward_{false};
};

constexpr int kMisuseLine = __LINE__ + 5;
// A misuse picked by `which`, on a block of 128 threads.
__global__ void misuse_kernel(int which) {
  const int warp = threadIdx.x / 32;
  switch (which) {
    case 0: pa::named_barrier_sync(0, 128); break;
    case 1: pa::named_barrier_sync(16, 128); break;
    case 2: pa::named_barrier_sync(1, 48); break;
    case 3: pa::named_barrier_sync(1, 256); break;
    case 4:  // warp 0 opens a completion for 64 threads, warp 1 names 96
      if (warp == 0) pa::named_barrier_arrive(1, 64);
      if (warp == 1) pa::named_barrier_sync(1, 96);
      break;
    case 5:  // warps 0 and 1 wait for 128 threads; warps 2 and 3 never come
      if (warp < 2) pa::named_barrier_sync(2, 128);
      break;
    case 6:  // a hand-over that no one takes
      if (warp == 0) pa::named_barrier_arrive(4, 64);
      break;
    default:  // every thread: one completion
      pa::named_barrier_sync(5, 128);
      break;
  }
}

TEST_F(NamedBarrierErrors, MisuseIsReported) {
  auto error_of = [](int which) {
    return launch_error([&] { pa::launch(misuse_kernel, dim3(1), dim3(128), 0, nullptr, which); });
  };
  const std::string bad_id = error_of(0);
  EXPECT_THAT(bad_id, HasSubstr("block (0,0,0) thread (0,0,0): bar.sync ("));
  EXPECT_THAT(bad_id, HasSubstr(at_line(kMisuseLine) + ") on barrier 0: a named barrier's id is 1 to 15 (barrier 0 "
                                                      "is __syncthreads')"));
  EXPECT_THAT(error_of(1), HasSubstr("on barrier 16: a named barrier's id is 1 to 15"));
  EXPECT_THAT(error_of(2), HasSubstr("for 48 threads: the count is a positive multiple of 32"));
  EXPECT_THAT(error_of(3), HasSubstr("for 256 threads: the count is a positive multiple of 32 (warps arrive whole) "
                                     "and at most the block's 128 threads (its warps x 32)"));
  const std::string changed = error_of(4);
  EXPECT_THAT(changed, HasSubstr("block (0,0,0) thread (32,0,0): bar.sync ("));
  EXPECT_THAT(changed, HasSubstr(at_line(kMisuseLine + 6) + ") on barrier 1 for 96 threads, while the barrier's "
                                                            "current completion was opened for 64 (first arrival at"));
  EXPECT_THAT(changed, HasSubstr(at_line(kMisuseLine + 5) + ", 32 arrived)"));
  const std::string deadlock = error_of(5);
  EXPECT_THAT(deadlock, HasSubstr("deadlock in block (0,0,0)"));
  EXPECT_THAT(deadlock, HasSubstr("thread (0,0,0) at bar.sync ("));
  EXPECT_THAT(deadlock, HasSubstr(at_line(kMisuseLine + 9) + ") on barrier 2, 64 of 128 threads arrived"));
  EXPECT_THAT(deadlock, HasSubstr("a named barrier that cannot complete"));
  const std::string left_over = error_of(6);
  EXPECT_THAT(left_over, HasSubstr("block (0,0,0): the block ended with named barrier 4 holding 32 of its 64 "
                                   "arrivals (first at "));
  EXPECT_THAT(left_over, HasSubstr(at_line(kMisuseLine + 12) + "): an arrival that no completion took"));
  EXPECT_EQ(error_of(7), "(no error)");
}

TEST_F(NamedBarrierErrors, RuntimeKeepsWorkingAfterAnError) {
  launch_error([] { pa::launch(misuse_kernel, dim3(1), dim3(128), 0, nullptr, 5); });
  launch_error([] { pa::launch(misuse_kernel, dim3(1), dim3(128), 0, nullptr, 6); });
  check_ping_pong(8);
}

#endif  // !defined(__CUDACC__)

}  // namespace
