// The cascade cost models against H200 grids (maintainers' test): stage 07's
// own model (stage07::choose_path) and the engine's, with stage 09's tile as
// the prefix pass (engine::cascade_path). A grid is one GPU's measurements on one day, so
// these judge the fitted constants, with slack, not a learner's TODO 4, whose
// properties stage 07's tests check.
#include <algorithm>
#include <cstdio>
#include <functional>

#include "engine/engine.h"
#include "tests/harness.h"

namespace pa::test {
namespace {

using stage07::Path;
using Model = std::function<Path(const AttentionParams&, int, int, int, int, int)>;
constexpr int kH200Sms = 132;  // the H100 SXM has as many

// A grid cell of issue #12 as an H200 measured it: Qwen3-8B shape, block 16,
// B decodes sharing a P-token prefix, S own positions each; ms_median of
// 07_cascade and 07_plain in µs (bench_cascade's cascade_grid). Measured facts of
// that GPU, so the model is asked with num_sms = 132. Where one path is more
// than 10% slower, the model must pick the other (a wrong pick there costs
// more than 1.10x); overall it must pick the faster path in at least 39 of the
// 45 cells: slack for a refit or a grid measured on another day.
struct GridCell {
  int P, B, S;
  double cascade_us, plain_us;
};

template <size_t N>
void expect_model_picks_faster(const GridCell (&cells)[N], const Model& model, const char* gpu, int far_misses_allowed = 0) {
  int right = 0, far_misses = 0;
  for (const GridCell& c : cells) {
    const AttentionParams p = decode_plan_sizes(c.B, c.P + c.S + 1);
    const Path got = model(p, c.B, c.P, 1, c.S, kH200Sms);
    const Path faster = c.cascade_us < c.plain_us ? Path::cascade : Path::plain;
    right += got == faster;
    const double ratio = std::max(c.cascade_us, c.plain_us) / std::min(c.cascade_us, c.plain_us);
    if (ratio > 1.10 && got != faster) {
      ++far_misses;
      std::printf("P %d, B %d, S %d: cascade %.1f us, plain %.1f us on the %s, the model picks the slower path\n",
                  c.P, c.B, c.S, c.cascade_us, c.plain_us, gpu);
    }
  }
  EXPECT_LE(far_misses, far_misses_allowed) << "cells where the model's pick costs more than 1.10x (listed above)";
  EXPECT_GE(right, 39) << "the faster path in " << right << " of " << N << " cells";
}

// Measured on 2026-11-30 with stage 03's tiles for the prefix pass (stage 07's
// own model, stage07::choose_path) and the two-warp decode tile, the grid its
// constants were fitted on. The decode tiles have since become faster over
// shared pages (block-table entries read a tile ahead); on the 2026-12-01
// 22:40 UTC grid these constants score 39 of 45, worst 1.14x (stage README).
TEST(CascadeModelGrid, Stage07PicksTheFasterPath) {
  const GridCell cells[] = {
      {128, 8, 1, 18.3, 12.7}, {128, 8, 128, 23.6, 18.4}, {128, 8, 512, 30.7, 23.0},
      {128, 64, 1, 20.5, 14.3}, {128, 64, 128, 29.9, 21.6}, {128, 64, 512, 54.4, 44.7},
      {128, 256, 1, 40.4, 45.8}, {128, 256, 128, 77.4, 73.4}, {128, 256, 512, 168.1, 164.8},
      {512, 8, 1, 22.8, 20.7}, {512, 8, 128, 27.6, 23.1}, {512, 8, 512, 32.4, 20.9},
      {512, 64, 1, 26.3, 33.0}, {512, 64, 128, 36.8, 40.3}, {512, 64, 512, 63.4, 63.6},
      {512, 256, 1, 46.6, 118.4}, {512, 256, 128, 83.4, 145.7}, {512, 256, 512, 173.8, 236.3},
      {2048, 8, 1, 30.6, 24.1}, {2048, 8, 128, 34.4, 24.1}, {2048, 8, 512, 35.9, 27.5},
      {2048, 64, 1, 32.7, 105.7}, {2048, 64, 128, 43.9, 112.5}, {2048, 64, 512, 70.4, 134.9},
      {2048, 256, 1, 74.3, 405.7}, {2048, 256, 128, 113.1, 430.6}, {2048, 256, 512, 201.8, 519.1},
      {4000, 8, 1, 33.0, 35.2}, {4000, 8, 128, 37.2, 36.5}, {4000, 8, 512, 38.7, 38.4},
      {4000, 64, 1, 41.7, 197.6}, {4000, 64, 128, 53.6, 203.2}, {4000, 64, 512, 79.1, 224.9},
      {4000, 256, 1, 109.6, 769.6}, {4000, 256, 128, 147.0, 788.0}, {4000, 256, 512, 249.3, 870.8},
      {16384, 8, 1, 51.9, 108.9}, {16384, 8, 128, 55.9, 108.8}, {16384, 8, 512, 57.1, 112.1},
      {16384, 64, 1, 96.4, 773.2}, {16384, 64, 128, 108.6, 776.5}, {16384, 64, 512, 137.4, 798.8},
      {16384, 256, 1, 323.3, 3059.0}, {16384, 256, 128, 361.3, 3088.3}, {16384, 256, 512, 464.3, 3162.1},
  };
  expect_model_picks_faster(cells, stage07::choose_path, "H200");
}

// Measured on an H100 (132 SMs, as the H200) on 2026-12-07 (10:52 UTC) with
// the engine's cascade (engine_cascade, 20 iterations a cell): stage 09's tile
// as the prefix pass and the suffix pass after it as its dependent launch, or
// beside it where fused_merge_pays says no; the plain path is stage 07's
// (07_plain). The model's figures were fitted on the H200 for the engine's
// earlier prefix kernel (a one- or two-warpgroup wgmma pass without TMA) and
// kept, with the query gather's launch added (stage 09 reads a gathered copy
// of Q). On this grid they pick the faster path in at least 39 of 45 cells;
// one pick costs more than 1.10x: P 2048, B 8, S 128 (cascade 25.9 us, plain
// 23.2), where the model's cascade is within 2% and its plain estimate, stage
// 07's H200 figures for the two-warp tile, 19% high. Refitting both on one
// H200 grid of this kernel is the way to zero.
TEST(CascadeModelGrid, EnginePrefixPassPicksTheFasterPath) {
  const GridCell cells[] = {
      {128, 8, 1, 17.2, 14.4}, {128, 8, 128, 19.0, 19.7}, {128, 8, 512, 24.7, 25.2},
      {128, 64, 1, 19.6, 14.8}, {128, 64, 128, 31.8, 25.2}, {128, 64, 512, 70.4, 59.0},
      {128, 256, 1, 40.5, 47.6}, {128, 256, 128, 76.0, 82.7}, {128, 256, 512, 206.1, 206.3},
      {512, 8, 1, 18.1, 23.2}, {512, 8, 128, 19.0, 25.5}, {512, 8, 512, 27.6, 23.0},
      {512, 64, 1, 22.1, 31.1}, {512, 64, 128, 32.1, 42.0}, {512, 64, 512, 66.0, 75.1},
      {512, 256, 1, 41.9, 110.9}, {512, 256, 128, 81.5, 146.2}, {512, 256, 512, 210.4, 267.8},
      {2048, 8, 1, 23.0, 23.6}, {2048, 8, 128, 25.9, 23.2}, {2048, 8, 512, 32.9, 26.1},
      {2048, 64, 1, 29.3, 93.6}, {2048, 64, 128, 42.2, 104.7}, {2048, 64, 512, 77.9, 137.6},
      {2048, 256, 1, 56.2, 359.8}, {2048, 256, 128, 100.1, 395.4}, {2048, 256, 512, 254.1, 518.5},
      {4000, 8, 1, 26.4, 32.4}, {4000, 8, 128, 29.1, 33.6}, {4000, 8, 512, 32.3, 35.2},
      {4000, 64, 1, 33.3, 172.6}, {4000, 64, 128, 46.0, 184.0}, {4000, 64, 512, 81.8, 217.2},
      {4000, 256, 1, 71.5, 677.4}, {4000, 256, 128, 115.2, 714.2}, {4000, 256, 512, 269.1, 834.4},
      {16384, 8, 1, 48.9, 95.2}, {16384, 8, 128, 46.5, 95.4}, {16384, 8, 512, 52.1, 97.7},
      {16384, 64, 1, 61.2, 685.7}, {16384, 64, 128, 76.3, 695.9}, {16384, 64, 512, 115.6, 729.0},
      {16384, 256, 1, 168.3, 2689.9}, {16384, 256, 128, 208.1, 2713.2}, {16384, 256, 512, 362.7, 2849.1},
  };
  expect_model_picks_faster(cells, engine::cascade_path, "H100", /*far_misses_allowed=*/1);
}

}  // namespace
}  // namespace pa::test
