// Google Benchmark suite for stage 07: decode batches whose requests share a
// cached prefix. B requests share a P-token prefix (one group), each has S
// cached positions of its own after it, then one decode token: seq_len =
// P + S + 1, block size 16.
//
// Layouts:
//   shared   the prefix is stored once (share_prefixes): every member's block
//            table starts with the same blocks, so a plain kernel reads those
//            bytes B times, partly from the L2
//   private  the same batch without share_prefixes: each request has its own
//            copy of the prefix, as without prefix caching
// Backends:
//   07_cascade      stage07::plan(force 1): the prefix pass (stage 03's tiles) reads the prefix
//                   once for the group
//   07_plain        stage07::plan(force 0): the same kernels, each request reading the prefix itself
//   07_auto         stage07::plan(force -1): the cost model (choose_path) picks per group
//   engine_cascade  engine::plan_cascade(force 1) + engine::run_cascade: stage 09's tile (TMA,
//                   mbarriers, wgmma) as the prefix pass and the two-warp suffix tile
//   engine_auto     the same with force -1: the engine's cost model picks per group
//   04_split_kv     stage 04 on the same batch, for reference
// Plans are built once per batch, before the timed iterations, as a serving
// engine plans a step.
//
// Families:
//   cascade_grid  Qwen3-8B shape (32 q / 8 kv heads, D 128), shared layout:
//                 P in {128, 512, 2048, 4000, 16384} x B in {8, 64, 256} x S in {1, 128, 512}
//   cascade_main  64 requests sharing a 4000-token prefix, S in {1, 128, 512}, in the
//                 Qwen3-8B shape and an MHA shape (32 q / 32 kv heads, D 128); engine_cascade,
//                 engine_auto and 07_cascade on the shared layout, 04_split_kv on both
//   cascade_fit   the MHA shape at B = 64, P in {512, 2048, 4000, 16384} x S in {1, 128, 512},
//                 engine_cascade only: with cascade_grid, what plot_cascade.py's time model fits
// Names: family/backend/shape:S[/layout:L]/P:n/B:n/S:n, e.g.
//   cascade_grid/07_cascade/shape:qwen3/P:4000/B:64/S:128
//   cascade_main/04_split_kv/shape:mha/layout:private/P:4000/B:64/S:128
//
// Method as bench_attention's: device events around the forward call alone, a
// read of twice the L2 before each iteration (bench/probe.h, L2Flush), the
// probe's read bandwidth in the JSON context. Counters:
//   kv_bytes         the cascade floor: (P + B * (S + 1)) * kv_token_bytes, the prefix
//                    once and every request's own positions
//   plain_kv_bytes   B * (P + S + 1) * kv_token_bytes: the prefix read per request
//   ms_median        median iteration time
//   GBps             kv_bytes / ms_median
//   floor_fraction   (kv_bytes / probe bandwidth) / ms_median, for every backend: 1.0 =
//                    the cascade's floor reached
//   plain_floor_fraction  the same with plain_kv_bytes (a plain kernel's own floor)
//   plain_read_fraction   (median time of a plain streaming read of kv_bytes, same
//                    method) / ms_median: the floor plus a launch and its ramp-up
//   prefix_len, batch, suffix_len
//   cascaded_groups  07_* and engine_* only: groups the plan put on the cascade path (of num_groups = 1)
// Each benchmark builds its own batch; the cache is allocated at the private
// layout's size either way (share_prefixes only redirects block tables), and a
// batch whose device memory would pass kMaxDeviceBytes is skipped with the reason.
//
// In the CPU flavor the suite runs a tiny smoke mode (P 64, B 4, small head
// counts, one iteration) so CI proves it works; CPU timings mean nothing.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/device_batch.h"
#include "common/problem.h"
#include "common/stages.h"
#include "engine/engine.h"
#include "probe.h"
#include "timed_steps.h"

namespace {

using namespace pa;

#if defined(PA_GPU_BUILD)
constexpr bool kGpu = true;
#else
constexpr bool kGpu = false;
#endif

constexpr int kBlockSize = 16;
constexpr double kMaxDeviceBytes = 100e9;  // leaves room on a 141 GB H200 for the flush buffer and workspaces

double g_read_gbps = 0.0;  // measured by the probe before any benchmark runs
bool g_failed = false;     // a backend threw: the run exits 1

double plain_read_ms_for(size_t bytes, bench::L2Flush& flush) {
  static std::map<size_t, double> cache;
  auto it = cache.find(bytes);
  if (it == cache.end()) it = cache.emplace(bytes, bench::plain_read_ms(bytes, kGpu ? 20 : 1, flush)).first;
  return it->second;
}

struct Shape {
  std::string name;  // qwen3 | mha
  int num_q_heads;
  int num_kv_heads;
};

// The CPU smoke mode keeps each shape's group (4 and 1) with fewer heads.
Shape qwen3() { return kGpu ? Shape{"qwen3", 32, 8} : Shape{"qwen3", 8, 2}; }
Shape mha() { return kGpu ? Shape{"mha", 32, 32} : Shape{"mha", 2, 2}; }

enum class Runner {
  stage07,  // stage07::plan with `force`, then stage07::forward
  engine,   // engine::plan_cascade with `force`, then engine::run_cascade
  stage04,  // stage04::forward on the same batch
};

struct Variant {
  std::string name;
  Runner runner;
  int force;  // the plan's force: 1 cascade, 0 plain, -1 cost model
};

const Variant k07Cascade{"07_cascade", Runner::stage07, 1};
const Variant k07Plain{"07_plain", Runner::stage07, 0};
const Variant k07Auto{"07_auto", Runner::stage07, -1};
const Variant kEngineCascade{"engine_cascade", Runner::engine, 1};
const Variant kEngineAuto{"engine_auto", Runner::engine, -1};
const Variant k04SplitKv{"04_split_kv", Runner::stage04, 0};

struct Cell {
  std::string family;  // cascade_grid | cascade_main | cascade_fit
  Shape shape;
  bool shared;         // shared layout (share_prefixes), else private copies
  bool name_layout;    // the name carries layout:... (cascade_main)
  int prefix_len, batch, suffix_len;
  int iterations;

  std::string name(const Variant& v) const {
    const std::string layout = !name_layout ? "" : shared ? "/layout:shared" : "/layout:private";
    return family + "/" + v.name + "/shape:" + shape.name + layout + "/P:" + std::to_string(prefix_len) +
           "/B:" + std::to_string(batch) + "/S:" + std::to_string(suffix_len);
  }
};

// The benchmark body; run_cell reports what it throws.
void time_cell(benchmark::State& state, const Variant& v, const Cell& c) {
  AttentionConfig cfg;
  cfg.num_q_heads = c.shape.num_q_heads;
  cfg.num_kv_heads = c.shape.num_kv_heads;
  cfg.head_dim = 128;
  cfg.block_size = kBlockSize;
  Problem p = make_problem(cfg, shared_prefix_decodes(c.batch, c.prefix_len, c.suffix_len, kBlockSize),
                           {.seed = 1, .fill_values = false});
  const double cache_bytes = static_cast<double>(p.num_blocks) * kBlockSize * p.kv_token_bytes();
  const double q_bytes = static_cast<double>(p.meta.num_tokens) * cfg.num_q_heads * cfg.head_dim * sizeof(bf16);
  if (cache_bytes + 2 * q_bytes > kMaxDeviceBytes) {
    state.SkipWithError(("not run: the batch needs " + std::to_string(static_cast<long long>(cache_bytes / 1e9)) +
                         " GB of cache, over the suite's " + std::to_string(static_cast<int>(kMaxDeviceBytes / 1e9)) +
                         " GB budget")
                            .c_str());
    return;
  }
  std::vector<int> members(c.batch);
  for (int r = 0; r < c.batch; ++r) members[r] = r;
  const std::vector<PrefixGroup> groups =
      c.shared ? share_prefixes(p, {{members, c.prefix_len}}) : std::vector<PrefixGroup>{};

  DeviceBatch db(p);
  db.set_checked(false);  // the launches as a serving step runs them (bench_attention's family checked has the cost)
  const AttentionParams params = db.params();
  stage07::Cascade plan;
  if (v.runner == Runner::stage07) plan = stage07::plan(params, p.meta, groups, v.force);
  if (v.runner == Runner::engine) plan = engine::plan_cascade(params, p.meta, groups, v.force);
  auto step = [&] {
    if (v.runner == Runner::stage07) {
      stage07::forward(params, plan);
    } else if (v.runner == Runner::engine) {
      engine::run_cascade(plan, params);
    } else {
      stage04::forward(params);
    }
  };
  bench::L2Flush flush;
  const double ms = bench::timed_median_ms(state, flush, step);
  const size_t token_bytes = p.kv_token_bytes();
  const size_t kv_bytes = (static_cast<size_t>(c.prefix_len) + static_cast<size_t>(c.batch) * (c.suffix_len + 1)) *
                          token_bytes;
  const double plain_kv_bytes = static_cast<double>(p.kv_bytes_read());  // B * (P + S + 1) * token_bytes
  const double floor_s = g_read_gbps > 0 ? kv_bytes / (g_read_gbps * 1e9) : 0.0;
  state.counters["kv_bytes"] = static_cast<double>(kv_bytes);
  state.counters["plain_kv_bytes"] = plain_kv_bytes;
  state.counters["ms_median"] = ms;
  state.counters["GBps"] = kv_bytes / (ms * 1e-3) / 1e9;
  state.counters["floor_fraction"] = floor_s / (ms * 1e-3);
  state.counters["plain_floor_fraction"] = floor_s * (plain_kv_bytes / kv_bytes) / (ms * 1e-3);
  state.counters["plain_read_fraction"] = ms > 0 ? plain_read_ms_for(kv_bytes, flush) / ms : 0.0;
  state.counters["prefix_len"] = c.prefix_len;
  state.counters["batch"] = c.batch;
  state.counters["suffix_len"] = c.suffix_len;
  state.counters["kv_token_bytes"] = static_cast<double>(token_bytes);
  // Each member's decode query attends every prefix position: Q K^T and P V,
  // 2 FLOPs per multiply-add each, for all query heads (the prefix pass's work).
  state.counters["prefix_flops"] = 4.0 * cfg.num_q_heads * cfg.head_dim * static_cast<double>(c.batch) * c.prefix_len;
  if (v.runner == Runner::stage07 || v.runner == Runner::engine) {
    int cascaded = 0;
    for (const stage07::Path path : plan.paths) cascaded += path == stage07::Path::cascade;
    state.counters["cascaded_groups"] = cascaded;
    state.counters["num_groups"] = static_cast<double>(groups.size());
  }
}

void run_cell(benchmark::State& state, const Variant& v, const Cell& c) {
  try {
    time_cell(state, v, c);
  } catch (const std::exception& e) {
    g_failed = true;
    state.SkipWithError(("failed: " + std::string(e.what())).c_str());
  }
}

std::vector<std::pair<Variant, Cell>> benchmarks() {
  std::vector<std::pair<Variant, Cell>> out;
  const int grid_iters = kGpu ? 20 : 1, main_iters = kGpu ? 30 : 1;
  const std::vector<int> prefixes = kGpu ? std::vector<int>{128, 512, 2048, 4000, 16384} : std::vector<int>{64};
  const std::vector<int> batches = kGpu ? std::vector<int>{8, 64, 256} : std::vector<int>{4};
  const std::vector<int> suffixes = kGpu ? std::vector<int>{1, 128, 512} : std::vector<int>{1, 8};
  for (int P : prefixes) {
    for (int B : batches) {
      for (int S : suffixes) {
        const Cell cell{"cascade_grid", qwen3(), /*shared=*/true, /*name_layout=*/false, P, B, S, grid_iters};
        for (const Variant& v : {k07Cascade, k07Plain, k07Auto, kEngineCascade, kEngineAuto, k04SplitKv}) {
          out.push_back({v, cell});
        }
      }
    }
  }
  // The MHA shape's own slice of the grid, cascade only, for the time model of
  // plot_cascade.py (a fixed part + a cost per prefix and per suffix position):
  // the main case's B across the prefix lengths the grid fits over.
  for (int P : kGpu ? std::vector<int>{512, 2048, 4000, 16384} : std::vector<int>{64}) {
    for (int S : suffixes) {
      out.push_back({kEngineCascade, Cell{"cascade_fit", mha(), true, false, P, kGpu ? 64 : 4, S, grid_iters}});
    }
  }
  const int main_P = kGpu ? 4000 : 64, main_B = kGpu ? 64 : 4;
  for (const Shape& shape : {qwen3(), mha()}) {
    for (int S : kGpu ? std::vector<int>{1, 128, 512} : std::vector<int>{8}) {
      const Cell shared{"cascade_main", shape, true, true, main_P, main_B, S, main_iters};
      Cell priv = shared;
      priv.shared = false;
      for (const Variant& v : {kEngineCascade, kEngineAuto, k07Cascade, k04SplitKv}) {
        out.push_back({v, shared});
      }
      out.push_back({k04SplitKv, priv});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  try {
    cudaDeviceProp prop{};
    PA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const bench::ProbeResult probe =
        bench::measure_read_bandwidth(kGpu ? (size_t{2} << 30) : (size_t{16} << 20), kGpu ? 20 : 2);
    g_read_gbps = probe.gbps;
    std::fprintf(stderr, "[bench_cascade] %s: read probe %.1f GB/s (%zu MB, median %.3f ms)\n", prop.name, probe.gbps,
                 probe.bytes >> 20, probe.median_ms);
    benchmark::AddCustomContext("device", prop.name);
    benchmark::AddCustomContext("read_bandwidth_GBps", std::to_string(probe.gbps));
    benchmark::AddCustomContext("num_sms", std::to_string(prop.multiProcessorCount));
    benchmark::AddCustomContext("flavor", kGpu ? "gpu" : "cpu-smoke");
    benchmark::AddCustomContext("l2_flush", bench::L2Flush::mode_name(bench::L2Flush::dirty_from_env()));
    for (const auto& [v, c] : benchmarks()) {
      benchmark::RegisterBenchmark(c.name(v).c_str(), [v, c](benchmark::State& st) { run_cell(st, v, c); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(c.iterations);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cascade: %s\n", e.what());
    return 1;
  }
  if (g_failed) {
    std::fprintf(stderr, "bench_cascade: some benchmarks failed (their entries say why)\n");
    return 1;
  }
  return 0;
}
