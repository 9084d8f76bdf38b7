// Exercise 03's tuner: times the engine's decode plan at every candidate split
// count, picks one per key with the exercise's rules (solution.cpp), writes the
// table engine::plan reads (engine/tuned_table.h), and times the default and
// the tuned plan side by side, all in one run.
//
//   exercise_03_autotune_tuner --table_out=tuned_table.json \
//       --benchmark_out=autotune.json --benchmark_out_format=json
//
// Keys (Qwen3-8B's layer: 32 q / 8 kv heads, head_dim 128, bf16, block 16, group 4):
//   decode batches 1, 2, 4, ..., 256 at 4096 keys, and 1, 2, 4, ..., 32 at 32768.
// Rows, in this order (names in autotune.h):
//   sweep/engine/...           every key x every candidate_splits() count, through a one-entry table,
//                              so a candidate runs exactly as the tuned plan would run it
//   plan/default/..., plan/tuned/...   per key, side by side: stage 04's rule, then the table
//                              chosen from this run's sweep (made when the first tuned row starts)
// Method and counters are bench_attention's (bench/timed_steps.h: one warm-up
// step, the L2 emptied before each iteration, device events around engine::run
// alone, the median): kv_bytes, ms_median, GBps, floor_fraction against the
// read probe of the same run (context read_bandwidth_GBps), num_splits (what the
// plan ran), batch, context, group, and for plan rows `tuned` (1 when a table
// entry chose the split count).
//
// In the CPU flavor the tuner runs a tiny smoke (2 requests at most, 512 keys,
// 3 candidates, one iteration) so CI proves it runs and writes both files; its
// times mean nothing.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autotune.h"
#include "bench/probe.h"
#include "bench/timed_steps.h"
#include "common/device_batch.h"
#include "common/device_buffer.h"
#include "common/problem.h"
#include "engine/engine.h"
#include "engine/tuned_table.h"

namespace {

using namespace pa;
using pa::exercise03::Key;

#if defined(PA_GPU_BUILD)
constexpr bool kGpu = true;
#else
constexpr bool kGpu = false;
#endif

const AttentionConfig kModel{};  // Qwen3-8B: Hq 32, Hkv 8, D 128, block 16, bf16
const engine::TunedShape kShape{kModel.num_kv_heads, kModel.head_dim, kModel.block_size, kModel.kv_format};
const int kGroup = kModel.num_q_heads / kModel.num_kv_heads;

struct Run {
  double read_gbps = 0.0;
  std::string device;
  std::string table_out = "tuned_table.json";
  std::map<Key, exercise03::KeyRows> swept;  // what the sweep measured, by key
  std::optional<engine::TunedTable> table;   // made from `swept` when the first tuned row starts
} g_run;

std::vector<Key> keys() {
  std::vector<Key> out;
  for (int b : kGpu ? std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256} : std::vector<int>{1, 2})
    out.push_back({b, kGpu ? 4096 : 128, kGroup});
  for (int b : kGpu ? std::vector<int>{1, 2, 4, 8, 16, 32} : std::vector<int>{1})
    out.push_back({b, kGpu ? 32768 : 512, kGroup});
  return out;
}

std::vector<int> candidates() {
  return kGpu ? exercise03::candidate_splits() : std::vector<int>{1, 2, 4};
}

int iterations(const Key& k) { return kGpu ? (k.context > 4096 ? 10 : 20) : 1; }

// The batch of the key being timed. Rows of one key run one after another, so
// one batch lives on the device at a time (256 x 4096 tokens is 4.3 GB).
struct Current {
  Key key{};
  std::unique_ptr<Problem> problem;
  std::unique_ptr<DeviceBatch> batch;
};
Current& batch_for(const Key& k) {
  static Current c;
  if (!c.batch || !(c.key == k)) {
    c.batch.reset();
    c.problem = std::make_unique<Problem>(
        make_problem(kModel, decode_requests(k.batch, k.context), {.seed = 1, .fill_values = false}));
    c.batch = std::make_unique<DeviceBatch>(*c.problem);
    c.key = k;
  }
  return c;
}

bench::L2Flush& flush() {
  static bench::L2Flush f;
  return f;
}

struct Timed {
  engine::Plan plan;
  double ms;
};

// Times engine::run with the plan `options` give at key k.
Timed time_plan(benchmark::State& state, const Key& k, const engine::Options& options) {
  Current& c = batch_for(k);
  const AttentionParams params = c.batch->params();
  const engine::Plan pl = engine::plan(params, engine::bounds_of(params.batch), options);
  DeviceBuffer<unsigned char> workspace(pl.workspace_bytes);
  const double ms = bench::timed_median_ms(
      state, flush(), [&] { engine::run(pl, params, workspace.data(), pl.workspace_bytes); });
  const double kv_bytes = static_cast<double>(c.problem->kv_bytes_read());
  state.counters["kv_bytes"] = kv_bytes;
  state.counters["ms_median"] = ms;
  state.counters["GBps"] = kv_bytes / (ms * 1e-3) / 1e9;
  state.counters["floor_fraction"] = g_run.read_gbps > 0 ? (kv_bytes / (g_run.read_gbps * 1e9)) / (ms * 1e-3) : 0.0;
  state.counters["num_splits"] = pl.num_splits;
  state.counters["batch"] = k.batch;
  state.counters["context"] = k.context;
  state.counters["group"] = k.group;
  return {pl, ms};
}

// A benchmark body that reports a pa::Error as the row's error instead of
// unwinding through Google Benchmark.
template <class F>
void guarded(benchmark::State& state, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void sweep_row(benchmark::State& state, Key k, int num_splits) {
  guarded(state, [&] {
    const engine::TunedTable one(kShape, {{k.batch, k.context, k.group, num_splits}});
    const Timed t = time_plan(state, k, {.tuned = &one});
    exercise03::KeyRows& rows = g_run.swept[k];
    rows.key = k;
    // The rule's choice, for the tie rule: a plan without a table (no timing needed).
    const AttentionParams params = batch_for(k).batch->params();
    rows.default_splits = engine::plan(params, engine::bounds_of(params.batch)).num_splits;
    rows.candidates.push_back({t.plan.num_splits, t.ms});
  });
}

const engine::TunedTable& tuned_table() {
  if (!g_run.table) {
    std::vector<exercise03::KeyRows> rows;
    for (const auto& [k, r] : g_run.swept) rows.push_back(r);
    PA_REQUIRE(!rows.empty(), "no sweep rows ran before the tuned rows (is --benchmark_filter leaving them out?)");
    g_run.table = exercise03::make_table(exercise03::choose_all(rows), kShape, g_run.device);
    std::ofstream out(g_run.table_out);
    out << g_run.table->to_json();
    PA_REQUIRE(out.good(), "cannot write the tuned table to " + g_run.table_out);
    std::fprintf(stderr, "[tuner] wrote %s:\n%s", g_run.table_out.c_str(), g_run.table->to_json().c_str());
  }
  return *g_run.table;
}

void plan_row(benchmark::State& state, Key k, bool tuned) {
  guarded(state, [&] {
    const Timed t = time_plan(state, k, {.tuned = tuned ? &tuned_table() : nullptr});
    state.counters["tuned"] = t.plan.tuned ? 1 : 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag, taken out before Google Benchmark reads the rest.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--table_out=", 12) == 0) {
      g_run.table_out = argv[i] + 12;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  try {
    cudaDeviceProp prop{};
    PA_CHECK(cudaGetDeviceProperties(&prop, 0));
    g_run.device = prop.name;
    const bench::ProbeResult probe =
        bench::measure_read_bandwidth(kGpu ? (size_t{2} << 30) : (size_t{16} << 20), kGpu ? 20 : 2);
    g_run.read_gbps = probe.gbps;
    std::fprintf(stderr, "[tuner] %s, %d SMs: read probe %.1f GB/s\n", prop.name, prop.multiProcessorCount, probe.gbps);
    benchmark::AddCustomContext("device", prop.name);
    benchmark::AddCustomContext("num_sms", std::to_string(prop.multiProcessorCount));
    benchmark::AddCustomContext("read_bandwidth_GBps", std::to_string(probe.gbps));
    benchmark::AddCustomContext("flavor", kGpu ? "gpu" : "cpu-smoke");
    benchmark::AddCustomContext("l2_flush", bench::L2Flush::mode_name(bench::L2Flush::dirty_from_env()));
    benchmark::AddCustomContext("tie_margin", std::to_string(exercise03::TIE_MARGIN));
    benchmark::AddCustomContext("table_out", g_run.table_out);
    auto add = [](const std::string& name, const Key& k, auto body) {
      benchmark::RegisterBenchmark(name.c_str(), body)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(iterations(k));
    };
    for (const Key& k : keys())
      for (int s : candidates())
        add(exercise03::sweep_name(k, s), k, [k, s](benchmark::State& st) { sweep_row(st, k, s); });
    for (const Key& k : keys()) {
      add(exercise03::plan_name(k, false), k, [k](benchmark::State& st) { plan_row(st, k, false); });
      add(exercise03::plan_name(k, true), k, [k](benchmark::State& st) { plan_row(st, k, true); });
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    PA_REQUIRE(g_run.table.has_value(), "no tuned row ran, so no table was written");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exercise_03_autotune_tuner: %s\n", e.what());
    return 1;
  }
  return 0;
}
