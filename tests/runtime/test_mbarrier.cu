// Tests of the mbarrier and bulk-copy wrappers (common/mbarrier.cuh,
// common/bulk_copy.cuh): a producer warp filling a ring of shared-memory tiles
// for consumer warps, phases over many wrap-arounds of the parity, counts of
// several arrivals. The same file builds with nvcc, so these semantic tests
// also run on a Hopper GPU. The misuse reports (a wrong expect_tx byte count,
// bad sizes and alignments, an uninitialized barrier) and the "old bytes
// before the wait" check exist only on the CPU runtime.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/bulk_copy.cuh"
#include "common/launch.cuh"
#include "common/mbarrier.cuh"
#include "tests/runtime/device_array.h"

namespace {

using ::testing::HasSubstr;

using pa::runtime_test::DeviceArray;
#if !defined(__CUDACC__)
using pa::runtime_test::launch_error;
using pa::runtime_test::ReverseOrder;
#endif

// ---------------------------------------------------------------- the ring

constexpr int kTileFloats = 256;  // 1 KiB a tile
constexpr uint32_t kTileBytes = kTileFloats * sizeof(float);
constexpr int kConsumerWarps = 2;
constexpr int kRingThreads = 32 * (1 + kConsumerWarps);  // warp 0 produces

// Warp 0's lane 0 streams num_tiles tiles through STAGES slots with bulk copies;
// warps 1.. copy each tile out in order. full[s] (count 1: the producer's
// arrive_expect_tx, plus the copy's bytes) says slot s holds its next tile;
// empty[s] (one arrival per consumer warp) says the consumers are done with it.
// Tile t goes to slot t % STAGES in round t / STAGES, and a barrier's phase
// number is the round: the producer waits for round - 1 of empty (passing the
// first round through the parity of phase -1), consumers for round of full.
// With CP_ASYNC, every lane of warp 0 fills the slot by 16-byte cp.async copies
// and arrives through arrive_on_cp_async (full[s]'s count is then 32): the
// arrival completes once the lane's copies have landed, so the producer never
// waits for its own copies.
template <int STAGES, bool CP_ASYNC = false>
__global__ void ring_kernel(const float* src /* [num_tiles, kTileFloats] */,
                            float* out /* [gridDim.x, num_tiles, kTileFloats] */, int num_tiles) {
  __shared__ __align__(128) float ring[STAGES][kTileFloats];
  __shared__ pa::Mbarrier full[STAGES];
  __shared__ pa::Mbarrier empty[STAGES];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      full[s].init(CP_ASYNC ? 32 : 1);
      empty[s].init(kConsumerWarps);
    }
    pa::fence_mbarrier_init();
  }
  __syncthreads();

  if (warp == 0 && CP_ASYNC) {
    for (int t = 0; t < num_tiles; ++t) {
      const int s = t % STAGES;
      const uint32_t round = t / STAGES;
      empty[s].wait((round & 1u) ^ 1u);
      for (int chunk = lane; chunk < kTileFloats / 4; chunk += 32) {
        pa::cp_async_16(&ring[s][4 * chunk], src + static_cast<size_t>(t) * kTileFloats + 4 * chunk);
      }
      full[s].arrive_on_cp_async();
    }
    return;
  }
  if (warp == 0) {
    if (lane == 0) {
      for (int t = 0; t < num_tiles; ++t) {
        const int s = t % STAGES;
        const uint32_t round = t / STAGES;
        empty[s].wait((round & 1u) ^ 1u);
        full[s].arrive_expect_tx(kTileBytes);
        pa::bulk_copy_g2s(ring[s], src + static_cast<size_t>(t) * kTileFloats, kTileBytes, full[s]);
      }
    }
    return;  // nothing else waits for the producer warp
  }
  const int c = threadIdx.x - 32;  // consumer thread, [0, 32 * kConsumerWarps)
  out += static_cast<size_t>(blockIdx.x) * num_tiles * kTileFloats;
  for (int t = 0; t < num_tiles; ++t) {
    const int s = t % STAGES;
    const uint32_t round = t / STAGES;
    full[s].wait(round & 1u);
    for (int i = c; i < kTileFloats; i += 32 * kConsumerWarps) {
      out[static_cast<size_t>(t) * kTileFloats + i] = ring[s][i];
    }
    __syncwarp();  // the whole warp has read the slot before its one arrival
    if (lane == 0) empty[s].arrive();
  }
}

template <int STAGES, bool CP_ASYNC = false>
void check_ring(int num_tiles) {
  std::vector<float> src(static_cast<size_t>(num_tiles) * kTileFloats);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;  // exact in fp32
  // Several blocks: on the CPU runtime they reuse one worker's shared memory,
  // so each must start from its own barriers, not the previous block's.
  constexpr int kBlocks = 3;
  DeviceArray<float> d_src(src), d_out(kBlocks * src.size());
  pa::launch(ring_kernel<STAGES, CP_ASYNC>, dim3(kBlocks), dim3(kRingThreads), 0, nullptr, d_src.ptr, d_out.ptr, num_tiles);
  const std::vector<float> out = d_out.download();
  for (int b = 0; b < kBlocks; ++b) {
    for (int t = 0; t < num_tiles; ++t) {
      for (int i = 0; i < kTileFloats; ++i) {
        const size_t at = static_cast<size_t>(t) * kTileFloats + i;
        ASSERT_EQ(out[b * src.size() + at], src[at])
            << "block " << b << ", tile " << t << ", element " << i << " (" << STAGES << " stages)";
      }
    }
  }
}

TEST(MbarrierRing, TwoStages) { check_ring<2>(64); }
TEST(MbarrierRing, ThreeStages) { check_ring<3>(64); }
TEST(MbarrierRing, FourStages) { check_ring<4>(64); }
TEST(MbarrierRing, FewerTilesThanStages) { check_ring<4>(3); }
TEST(MbarrierRing, CpAsyncFillsArriveOnTheBarrier) { check_ring<2, true>(64); }
TEST(MbarrierRing, CpAsyncFillsArriveOnTheBarrier_FourStages) { check_ring<4, true>(64); }

#if !defined(__CUDACC__)
TEST(MbarrierRing, ReversedOrder) {
  ReverseOrder reversed(true);
  check_ring<3>(64);
  check_ring<3, true>(64);
}
#endif

// ---------------------------------------------------------------- phases and counts

constexpr int kPingPongRounds = 1000;  // 500 times round the parity

// Thread 0 (warp 0) hands a value to thread 32 (warp 1) through `ping` and gets
// it back, plus one, through `pong`: each barrier goes through kPingPongRounds
// phases, so a waiter must read the parity right after every wrap-around.
// fresh[0] is try_wait(1) on a fresh barrier (phase -1 counts as complete),
// errors[0] counts values that arrived out of step.
__global__ void ping_pong_kernel(int* errors /* [1] */, int* fresh /* [1] */) {
  __shared__ pa::Mbarrier ping, pong;
  __shared__ int value;
  if (threadIdx.x == 0) {
    ping.init(1);
    pong.init(1);
    pa::fence_mbarrier_init();
    fresh[0] = ping.try_wait(1) ? 1 : 0;
  }
  __syncthreads();
  int wrong = 0;
  for (int r = 0; r < kPingPongRounds; ++r) {
    const uint32_t parity = r & 1;
    if (threadIdx.x == 0) {
      value = 2 * r;
      ping.arrive();
      pong.wait(parity);
      wrong += value != 2 * r + 1;
    } else if (threadIdx.x == 32) {
      ping.wait(parity);
      wrong += value != 2 * r;
      value = 2 * r + 1;
      pong.arrive();
    }
  }
  if (threadIdx.x == 0 || threadIdx.x == 32) atomicAdd(errors, wrong);
}

TEST(Mbarrier, ParityWrapsAroundOverManyPhases) {
  DeviceArray<int> errors(1), fresh(1);
  pa::launch(ping_pong_kernel, dim3(2), dim3(64), 0, nullptr, errors.ptr, fresh.ptr);
  EXPECT_EQ(errors.download()[0], 0);
  EXPECT_EQ(fresh.download()[0], 1) << "a fresh barrier's parity 1 (phase -1) must count as complete";
}

constexpr int kCountThreads = 128;
constexpr int kCountPhases = 3;

// A barrier of count 128, every thread arrives once a phase: no phase completes
// before the last arrival, so after each wait every thread sees all the
// values of that phase, like after a __syncthreads.
__global__ void count_kernel(int* wrong /* [kCountThreads] */) {
  __shared__ pa::Mbarrier bar;
  __shared__ int slot[kCountPhases][kCountThreads];
  const int t = threadIdx.x;
  if (t == 0) {
    bar.init(kCountThreads);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  int bad = 0;
  for (int p = 0; p < kCountPhases; ++p) {
    slot[p][t] = 1000 * p + t;
    bar.arrive();
    bar.wait(p & 1);
    for (int i = 0; i < kCountThreads; ++i) bad += slot[p][i] != 1000 * p + i;
  }
  wrong[t] = bad;
}

TEST(Mbarrier, CountOfManyArrivals) {
  DeviceArray<int> wrong(kCountThreads);
  pa::launch(count_kernel, dim3(2), dim3(kCountThreads), 0, nullptr, wrong.ptr);
  EXPECT_EQ(wrong.download(), std::vector<int>(kCountThreads, 0));
}

// One thread: a bulk copy into a buffer of -1s, read before and after the wait.
__global__ void before_wait_kernel(const float* src /* [64] */, float* out /* [64] */, float* before /* [1] */) {
  __shared__ __align__(16) float buf[64];
  __shared__ pa::Mbarrier bar;
  for (int i = 0; i < 64; ++i) buf[i] = -1.0f;
  bar.init(1);
  pa::fence_mbarrier_init();
  pa::fence_proxy_async_shared();  // the -1 stores happen before the copy's writes
  bar.arrive_expect_tx(64 * sizeof(float));
  pa::bulk_copy_g2s(buf, src, 64 * sizeof(float), bar);
  before[0] = buf[0];
  bar.wait(0);
  for (int i = 0; i < 64; ++i) out[i] = buf[i];
}

TEST(BulkCopy, DataVisibleAfterWait) {
  std::vector<float> src(64);
  for (int i = 0; i < 64; ++i) src[i] = static_cast<float>(i) + 0.25f;
  DeviceArray<float> d_src(src), d_out(64), d_before(1);
  pa::launch(before_wait_kernel, dim3(1), dim3(1), 0, nullptr, d_src.ptr, d_out.ptr, d_before.ptr);
  EXPECT_EQ(d_out.download(), src);
#if !defined(__CUDACC__)
  // The CPU lands a copy only when its barrier is waited on, like the slowest GPU.
  EXPECT_EQ(d_before.download()[0], -1.0f) << "the copy landed before anyone waited on its barrier";
#endif
}

// ---------------------------------------------------------------- misuse (CPU only)

#if !defined(__CUDACC__)

std::string at_line(int line) { return "test_mbarrier.cu:" + std::to_string(line); }

// Which thread reports an error depends on the fiber order: pin it to forward.
class MbarrierErrors : public ::testing::Test {
  ReverseOrder forward_{false};
};

constexpr int kWrongTxInitLine = __LINE__ + 10;
constexpr int kWrongTxExpectLine = __LINE__ + 15;
constexpr int kWrongTxWaitLine = __LINE__ + 18;
// Thread 0 announces tx_bytes for a copy of 1 KiB; warp 1 waits for the phase.
__global__ void wrong_tx_kernel(const float* src /* [256] */, float* out /* [256] */, uint32_t tx_bytes) {
  __shared__ __align__(16) float buf[256];
  __shared__ pa::Mbarrier bars[2];
  pa::Mbarrier& bar = bars[1];  // #1 of the barriers initialized at kWrongTxInitLine
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      bars[b].init(1);
    }
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    bar.arrive_expect_tx(tx_bytes);
    pa::bulk_copy_g2s(buf, src, 256 * sizeof(float), bar);
  }
  if (threadIdx.x >= 32) {
    bar.wait(0);
    out[threadIdx.x] = buf[threadIdx.x];
  }
}

TEST_F(MbarrierErrors, ExpectTxAboveTheCopiedBytesIsADeadlock) {
  DeviceArray<float> src(256), out(256);
  const std::string msg = launch_error(
      [&] { pa::launch(wrong_tx_kernel, dim3(1), dim3(64), 0, nullptr, src.ptr, out.ptr, 1024u + 16u); });
  EXPECT_THAT(msg, HasSubstr("deadlock in block (0,0,0)"));
  EXPECT_THAT(msg, HasSubstr("thread (32,0,0) at mbarrier wait ("));
  EXPECT_THAT(msg, HasSubstr(at_line(kWrongTxWaitLine) + ") for parity 0 of mbarrier #1 initialized at"));
  EXPECT_THAT(msg, HasSubstr(at_line(kWrongTxInitLine) + " (count 1): phase 0 (parity 0) still needs 0 of 1 "
                                                         "arrivals and 16 bytes; this phase expect_tx announced "
                                                         "1040 bytes (last at"));
  EXPECT_THAT(msg, HasSubstr(at_line(kWrongTxExpectLine) + ") and bulk copies delivered 1024"));
  EXPECT_THAT(msg, HasSubstr("delivered 1024"));
}

TEST_F(MbarrierErrors, ExpectTxBelowTheCopiedBytesIsReported) {
  DeviceArray<float> src(256), out(256);
  const std::string msg = launch_error(
      [&] { pa::launch(wrong_tx_kernel, dim3(1), dim3(64), 0, nullptr, src.ptr, out.ptr, 1024u - 16u); });
  EXPECT_THAT(msg, HasSubstr("block (0,0,0) thread (0,0,0)"));  // the copy's issuer
  EXPECT_THAT(msg, HasSubstr("the bulk copy of 1024 bytes issued at "));
  EXPECT_THAT(msg, HasSubstr(at_line(kWrongTxExpectLine + 1) + " delivers more bytes than the phase of mbarrier #1"));
  EXPECT_THAT(msg, HasSubstr("announced 1008 bytes and its copies delivered 1024"));
}

TEST_F(MbarrierErrors, TheRightByteCountPasses) {
  std::vector<float> host(256);
  for (int i = 0; i < 256; ++i) host[i] = static_cast<float>(i);
  DeviceArray<float> src(host), out(256);
  pa::launch(wrong_tx_kernel, dim3(1), dim3(64), 0, nullptr, src.ptr, out.ptr, 1024u);
  const std::vector<float> got = out.download();
  for (int t = 32; t < 64; ++t) EXPECT_EQ(got[t], host[t]);
}

constexpr int kMissingArrivalWaitLine = __LINE__ + 9;
// A count of 3 and two arrivals.
__global__ void missing_arrival_kernel() {
  __shared__ pa::Mbarrier bar;
  if (threadIdx.x == 0) bar.init(3);
  __syncthreads();
  if (threadIdx.x < 2) {
    bar.arrive();
  } else {
    bar.wait(0);
  }
}

TEST_F(MbarrierErrors, FewerArrivalsThanTheCountIsADeadlock) {
  const std::string msg = launch_error([] { pa::launch(missing_arrival_kernel, dim3(1), dim3(4), 0, nullptr); });
  EXPECT_THAT(msg, HasSubstr("deadlock in block (0,0,0)"));
  EXPECT_THAT(msg, HasSubstr("thread (2,0,0) at mbarrier wait ("));
  EXPECT_THAT(msg, HasSubstr(at_line(kMissingArrivalWaitLine) + ") for parity 0 of mbarrier #0"));
  EXPECT_THAT(msg, HasSubstr("still needs 1 of 3 arrivals"));
}

// A misuse picked by `which`, each the first error of its launch.
__global__ void misuse_kernel(const float* src /* [64] */, int which) {
  __shared__ __align__(16) float buf[64];
  __shared__ pa::Mbarrier bar;
  __shared__ pa::Mbarrier never_initialized;
  bar.init(which == 0 ? 0u : 1u);
  switch (which) {
    case 1: pa::bulk_copy_g2s(buf, src, 40, bar); break;          // not a multiple of 16
    case 2: pa::bulk_copy_g2s(buf + 1, src, 64, bar); break;      // destination misaligned
    case 3: pa::bulk_copy_g2s(buf, src + 2, 64, bar); break;      // source misaligned
    case 4: pa::bulk_copy_g2s(buf, src, 64, never_initialized); break;
    case 5: never_initialized.wait(0); break;
    case 6: bar.wait(2); break;
    case 7:
      bar.arrive_expect_tx(64);
      bar.arrive();  // the phase's one arrival is in, it waits for bytes
      break;
    default: break;
  }
}

TEST_F(MbarrierErrors, MisuseIsReported) {
  DeviceArray<float> src(64);
  auto error_of = [&](int which) {
    return launch_error([&] { pa::launch(misuse_kernel, dim3(1), dim3(1), 0, nullptr, src.ptr, which); });
  };
  EXPECT_THAT(error_of(0), HasSubstr("with count 0: the count of arrivals per phase must be 1 to 1048575"));
  EXPECT_THAT(error_of(1), HasSubstr("of 40 bytes: the size must be a positive multiple of 16 bytes"));
  EXPECT_THAT(error_of(2), HasSubstr("the shared-memory destination is not 16-byte aligned"));
  EXPECT_THAT(error_of(3), HasSubstr("the global source is not 16-byte aligned"));
  EXPECT_THAT(error_of(4), HasSubstr("cp.async.bulk"));
  EXPECT_THAT(error_of(4), HasSubstr("on an mbarrier that this block has not initialized"));
  EXPECT_THAT(error_of(5), HasSubstr("mbarrier wait"));
  EXPECT_THAT(error_of(5), HasSubstr("on an mbarrier that this block has not initialized"));
  EXPECT_THAT(error_of(6), HasSubstr("with parity 2: a parity is 0 or 1"));
  EXPECT_THAT(error_of(7), HasSubstr("more than the count allows in one phase"));
  EXPECT_EQ(error_of(8), "(no error)");
}

TEST_F(MbarrierErrors, RuntimeKeepsWorkingAfterAnError) {
  DeviceArray<float> src(256), out(256);
  launch_error([&] { pa::launch(wrong_tx_kernel, dim3(1), dim3(64), 0, nullptr, src.ptr, out.ptr, 1040u); });
  check_ring<2>(16);
}

#endif  // !defined(__CUDACC__)

}  // namespace
