// Google Benchmark suites for every backend: decode batch sweep, long contexts,
// the mixed batch, and causal prefill. Stage 07 (shared prefixes, which these
// batches lack) has its own suite, bench_cascade.
//
// Names are family/backend/label. Families:
//   decode   decode batches of 1..256 requests x 4096 tokens (Qwen3-8B shape: 32 q / 8 kv heads, D 128)
//   long     1..32 requests x 32768 tokens
//   window   4 and 64 requests x 32768 tokens, windowed backends only, each at window 4096
//            (08_sinks_window keeps its 4 sink tokens and learned sinks)
//   mixed    2 prefill chunks + 30 decodes; also the engine with its chunks on n programs of
//            stage 09's tile per KV head (engine::Options::chunk_programs, backends
//            engine_chunks_n, an sm_90 GPU only) and on one program per query tile
//            (engine_tile_grid): the sweep the plan's own count is checked against
//   mixed_shapes  the chunk-program sweep in two other balances of tensor-core work and
//            reads (engine, engine_tile_grid and engine_chunks_n only, an sm_90 GPU only): one 512-token chunk at
//            context 4096 beside 62 decodes of 4096 tokens, and 4 such chunks beside 12
//   skewed   1 decode of 32768 tokens beside 63 of 512
//   prefill  one causal prompt of 4096 or 16384 tokens; at 4096 also in two
//            other shapes (model:g16-d64: 64 q / 4 kv heads, D 64; model:g16-d256:
//            32 q / 2 kv heads, D 256), on 64-token blocks (block:64) and on
//            256-token blocks, shuffled (block:256) and in one contiguous run
//            (block:256/contiguous)
//   checked  what checked launches cost (AttentionParams::checked: one validation kernel
//            and a host synchronisation before the attention kernels): 04_split_kv at
//            decode 64 x 4096 and 1 x 4096, labels .../checked:off and .../checked:on
//   invariant what batch-invariant mode costs (AttentionParams::batch_invariant,
//            going_further/batch_invariant.cuh, which the engine runs): decode 64 x 4096 and
//            4 x 32768 for engine, engine_int8 and engine_sinks, and the mixed batch for the
//            last two, labels .../invariant:off and .../invariant:on
//   gptoss   gpt-oss's attention shape (64 q / 8 kv heads, D 64), 64 decodes x 4096 tokens:
//              layer:full       08_attention_sinks (learned sinks), 04_split_kv beside it
//              layer:window128  window 128: 08_sinks_window (sinks + 4 sink tokens),
//                               06_sliding_window at window 128 beside it
//   shapes   64 decodes x 4096 tokens in other models' shapes (issue #14's targets, >= 0.85 of the floor):
//              model:qwen3-235b   64 q / 4 kv heads, D 128: GQA group 16, a decode tile's 16 rows full
//              model:phi3-mini    32 q / 32 kv heads, D 96: a head size between the tile's, rows padded to 128
// Stage 08's targets, read from one run by plots/summarize.py: learned sinks cost
// at most 2% (08_attention_sinks / 04_split_kv time at decode batch:64/ctx:4096
// <= 1.02), and the gpt-oss full layer reaches >= 0.85 of its floor.
//
// Every other case runs with checked launches and batch-invariant mode off.
//
// Method: each iteration is timed with device events around the forward call
// alone (manual time); before each, a buffer twice the L2 size is read so K/V
// come from HBM, as in a real decode step, and the L2 holds no dirty lines the
// kernel would pay to write back (bench/probe.h, L2Flush). Counters per benchmark:
//   kv_bytes        K/V bytes a read-once kernel must load (sum of seq_lens x 4 KiB for Qwen3-8B)
//   ms_median       median iteration time
//   GBps            kv_bytes / ms_median
//   floor_fraction  (kv_bytes / probe bandwidth) / ms_median: 1.0 = reads each byte once at full speed
//   plain_read_fraction  (median time of a plain streaming read of kv_bytes, timed the
//                   same way) / ms_median: how close to a bare copy of that size, whose
//                   launch and ramp-up the floor leaves out; 1.0 is the practical limit
//   TFLOPs          prefill only: 4 * head_dim * Hq * attended (query, key) pairs / ms_median
// The probe bandwidth (bench/probe.cu) is measured first, in the same run, and
// stored in the JSON context as read_bandwidth_GBps.
//
// In the CPU flavor the suites run in a tiny smoke mode (small sizes, one
// iteration) so CI proves they work; CPU timings mean nothing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/device_batch.h"
#include "common/problem.h"
#include "probe.h"
#include "timed_steps.h"
#include "registry.h"

namespace {

using namespace pa;
using pa::bench::Backend;

#if defined(PA_GPU_BUILD)
constexpr bool kGpu = true;
#else
constexpr bool kGpu = false;
#endif

double g_read_gbps = 0.0;  // measured by the probe before any benchmark runs

// The plain read of the same size, measured once per byte count.
double plain_read_ms_for(size_t bytes, bench::L2Flush& flush) {
  static std::map<size_t, double> cache;
  auto it = cache.find(bytes);
  if (it == cache.end()) it = cache.emplace(bytes, bench::plain_read_ms(bytes, kGpu ? 20 : 1, flush)).first;
  return it->second;
}

struct BenchCase {
  std::string family;  // decode | long | window | mixed | skewed | prefill | gptoss | ...
  std::string label;   // e.g. batch:64/ctx:4096
  std::vector<RequestShape> requests;
  int iterations;
  // The case's own model settings, applied after the backend's configure, so
  // it sees what the backend chose (e.g. resets the window of windowed
  // backends only). Null = the Qwen3-8B shape as the backend leaves it.
  std::function<void(AttentionConfig&)> configure = nullptr;
  // Run windowed backends only (after both configures, window > 0).
  bool windowed_only = false;
  // The backends this case compares; empty = every backend. The others are
  // not registered, like unwindowed backends on a windowed-only case.
  std::vector<std::string> only = {};
  bool checked = false;          // AttentionParams::checked
  bool batch_invariant = false;  // AttentionParams::batch_invariant
  bool contiguous = false;       // block tables are the identity (BuildOptions::shuffle_blocks off)
  size_t kv_tokens() const {
    size_t n = 0;
    for (auto r : requests) n += r.seq_len;
    return n;
  }
};

std::vector<BenchCase> cases() {
  std::vector<BenchCase> out;
  const std::vector<int> sweep = kGpu ? std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256} : std::vector<int>{1, 4};
  const int ctx = kGpu ? 4096 : 128;
  for (int b : sweep)
    out.push_back({"decode", "batch:" + std::to_string(b) + "/ctx:" + std::to_string(ctx), decode_requests(b, ctx),
                   kGpu ? 20 : 1});
  const std::vector<int> longs = kGpu ? std::vector<int>{1, 2, 4, 8, 16, 32} : std::vector<int>{1, 2};
  const int long_ctx = kGpu ? 32768 : 512;
  for (int b : longs)
    out.push_back({"long", "batch:" + std::to_string(b) + "/ctx:" + std::to_string(long_ctx),
                   decode_requests(b, long_ctx), kGpu ? 10 : 1});
  // Window 4096 on 32768-token decodes: reads 1/8 of each context, so compare
  // with decode batch:4 and batch:64 at ctx 4096.
  const auto window_4096 = [](AttentionConfig& c) {
    if (c.window > 0) c.window = 4096;
  };
  for (int b : kGpu ? std::vector<int>{4, 64} : std::vector<int>{2})
    out.push_back({"window", "batch:" + std::to_string(b) + "/ctx:" + std::to_string(long_ctx) + "/window:4096",
                   decode_requests(b, long_ctx), kGpu ? 10 : 1, window_4096, /*windowed_only=*/true});
  const int s = kGpu ? 1 : 32;
  out.push_back({"mixed", "chunks:2/decodes:30", mixed_chunks_and_decodes(s), kGpu ? 10 : 1});
  // The same sweep where the chunks' share of the step is smaller and larger:
  // where its minimum lies must follow that share for a default to exist.
  if (kGpu) {
    for (const auto& [chunks, decodes] : {std::pair{1, 62}, std::pair{4, 12}}) {
      std::vector<RequestShape> batch(chunks, RequestShape{512, 4096});
      for (int i = 0; i < decodes; ++i) batch.push_back({1, 4096});
      out.push_back({"mixed_shapes",
                     "chunks:" + std::to_string(chunks) + "x512/decodes:" + std::to_string(decodes) + "/ctx:4096",
                     batch, 10, nullptr, false, {"engine"}});
    }
  }
  // One long context beside many short ones: a grid shaped by the batch (one
  // split count for every request) idles while the long one finishes.
  {
    const int long_len = kGpu ? 32768 : 512, short_len = kGpu ? 512 : 32, shorts = kGpu ? 63 : 7;
    std::vector<RequestShape> skewed = decode_requests(shorts, short_len);
    skewed.insert(skewed.begin(), RequestShape{1, long_len});
    out.push_back({"skewed", "long:1x" + std::to_string(long_len) + "/decodes:" + std::to_string(shorts) + "x" +
                                 std::to_string(short_len),
                   skewed, kGpu ? 20 : 1});
  }
  for (int n : kGpu ? std::vector<int>{4096, 16384} : std::vector<int>{64})
    out.push_back({"prefill", "batch:1/len:" + std::to_string(n), {{n, n}}, kGpu ? 5 : 1});
  // The prefill tiles in other shapes (GQA group 16 at head_dim 64 and 256),
  // and the paged cache's cost: the same prompt on 256-token blocks in a
  // shuffled table and in one contiguous run (the identity table).
  {
    const int n = kGpu ? 4096 : 64;
    const std::string len = "batch:1/len:" + std::to_string(n);
    const std::vector<std::string> tiles = {"03_gqa_packing", "09_hopper_pipeline", "engine", "engine_cp_async",
                                            "vendor_cudnn"};
    const auto heads = [](int hq, int hkv, int d) {
      return [=](AttentionConfig& c) {
        c.num_q_heads = hq;
        c.num_kv_heads = hkv;
        c.head_dim = d;
      };
    };
    out.push_back({"prefill", len + "/model:g16-d64", {{n, n}}, kGpu ? 5 : 1, heads(64, 4, 64), false, tiles});
    out.push_back({"prefill", len + "/model:g16-d256", {{n, n}}, kGpu ? 5 : 1, heads(32, 2, 256), false, tiles});
    const auto block_64 = [](AttentionConfig& c) { c.block_size = 64; };
    out.push_back({"prefill", len + "/block:64", {{n, n}}, kGpu ? 5 : 1, block_64, false, tiles});
    const auto block_256 = [](AttentionConfig& c) { c.block_size = 256; };
    out.push_back({"prefill", len + "/block:256", {{n, n}}, kGpu ? 5 : 1, block_256, false, tiles});
    BenchCase contiguous{"prefill", len + "/block:256/contiguous", {{n, n}}, kGpu ? 5 : 1, block_256, false, tiles};
    contiguous.contiguous = true;
    out.push_back(contiguous);
  }
  // gpt-oss alternates full-attention and window-128 layers; both with learned
  // sinks. Same shape at CPU size (its heads are small), fewer and shorter requests.
  const int oss_batch = kGpu ? 64 : 2, oss_ctx = kGpu ? 4096 : 320;
  const std::string oss_shape = "batch:" + std::to_string(oss_batch) + "/ctx:" + std::to_string(oss_ctx);
  const auto gptoss = [](AttentionConfig& c) {
    c.num_q_heads = 64;
    c.num_kv_heads = 8;
    c.head_dim = 64;
  };
  out.push_back({"gptoss", "layer:full/" + oss_shape, decode_requests(oss_batch, oss_ctx), kGpu ? 20 : 1, gptoss,
                 /*windowed_only=*/false, {"04_split_kv", "08_attention_sinks"}});
  out.push_back({"gptoss", "layer:window128/" + oss_shape, decode_requests(oss_batch, oss_ctx), kGpu ? 20 : 1,
                 [gptoss](AttentionConfig& c) {
                   gptoss(c);
                   if (c.window > 0) c.window = 128;
                 },
                 /*windowed_only=*/true, {"06_sliding_window", "08_sinks_window"}});
  // Other models' shapes, same batch as gpt-oss's.
  const auto shape = [](int hq, int hkv, int d) {
    return [=](AttentionConfig& c) {
      c.num_q_heads = hq;
      c.num_kv_heads = hkv;
      c.head_dim = d;
    };
  };
  // The price of checked launches and of batch-invariant mode, each beside the
  // same case without it (same family, so they run one after the other).
  const auto on_off = [](bool on) { return std::string(on ? "on" : "off"); };
  for (const int b : kGpu ? std::vector<int>{64, 1} : std::vector<int>{2}) {
    for (const bool on : {false, true}) {
      const std::string label = "batch:" + std::to_string(b) + "/ctx:" + std::to_string(ctx) + "/checked:" + on_off(on);
      BenchCase c{"checked", label, decode_requests(b, ctx), kGpu ? 20 : 1, nullptr, false, {"04_split_kv"}};
      c.checked = on;
      out.push_back(c);
    }
  }
  const std::vector<std::string> invariant_backends = {"engine", "engine_int8", "engine_sinks"};
  using Decodes = std::vector<std::pair<int, int>>;  // (requests, context)
  for (const auto& [b, len] : kGpu ? Decodes{{64, 4096}, {4, 32768}} : Decodes{{2, 128}, {1, 512}}) {
    for (const bool on : {false, true}) {
      const std::string label = "batch:" + std::to_string(b) + "/ctx:" + std::to_string(len) + "/invariant:" + on_off(on);
      BenchCase c{"invariant", label, decode_requests(b, len), kGpu ? 20 : 1, nullptr, false, invariant_backends};
      c.batch_invariant = on;
      out.push_back(c);
    }
  }
  for (const bool on : {false, true}) {
    BenchCase c{"invariant", "chunks:2/decodes:30/invariant:" + on_off(on), mixed_chunks_and_decodes(s),
                kGpu ? 10 : 1, nullptr, false, {"engine_int8", "engine_sinks"}};
    c.batch_invariant = on;
    out.push_back(c);
  }
  out.push_back({"shapes", "model:qwen3-235b/" + oss_shape, decode_requests(oss_batch, oss_ctx), kGpu ? 20 : 1,
                 shape(64, 4, 128), /*windowed_only=*/false, {"04_split_kv", "05_quantized_kv_int8", "vendor_cudnn"}});
  out.push_back({"shapes", "model:phi3-mini/" + oss_shape, decode_requests(oss_batch, oss_ctx), kGpu ? 20 : 1,
                 shape(32, 32, 96), /*windowed_only=*/false, {"04_split_kv", "05_quantized_kv_int8", "vendor_cudnn"}});
  return out;
}

// The configuration backend b runs case c with: Qwen3-8B, then the backend's
// settings, then the case's.
AttentionConfig config_for(const Backend& b, const BenchCase& c) {
  AttentionConfig cfg;  // Qwen3-8B: Hq 32, Hkv 8, D 128, block 16
  if (b.configure) b.configure(cfg);  // 8-bit cache, window, sinks: kv_bytes is then the backend's own floor
  if (c.configure) c.configure(cfg);
  return cfg;
}

// Why b is not part of case c's comparison; empty = it is. Decided at
// registration: such pairs get no benchmark.
std::string not_compared(const Backend& b, const BenchCase& c) {
  if (c.windowed_only && config_for(b, c).window == 0) return "the case runs windowed backends only";
  if (!c.only.empty() && std::find(c.only.begin(), c.only.end(), b.name) == c.only.end())
    return "the case compares other backends";
  return {};
}

// The reference backend is slow by design; keep its runs to sizes where it
// finishes in seconds, and say so in the output.
std::string over_budget(const Backend& b, const BenchCase& c) {
  if (b.name.rfind("01_", 0) != 0 || !kGpu) return {};
  if (c.kv_tokens() > 64u * 4096u) return "the reference backend is only timed up to 64 x 4096 tokens";
  if (c.family == "prefill" && c.requests[0].seq_len > 4096) return "the reference backend is not timed on 16k prefill";
  return {};
}

void run_case(benchmark::State& state, const Backend& b, const BenchCase& c) {
  if (std::string why = not_compared(b, c); !why.empty()) {
    state.SkipWithError(("unsupported: " + why).c_str());
    return;
  }
  Problem p = make_problem(config_for(b, c), c.requests,
                           {.seed = 1, .shuffle_blocks = !c.contiguous, .fill_values = false});
  if (p.cfg.with_sinks && p.sinks.empty()) {
    // make_problem draws the sinks with the values, which benchmarks make on
    // the device instead; without sinks the batch would time the sink-free path.
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    p.sinks.resize(p.cfg.num_q_heads);
    for (float& s : p.sinks) s = normal(gen);
  }
  if (std::string why = b.unsupported(p); !why.empty()) {
    state.SkipWithError(("unsupported: " + why).c_str());
    return;
  }
  if (std::string why = over_budget(b, c); !why.empty()) {
    state.SkipWithError(("not run: " + why).c_str());
    return;
  }
  DeviceBatch db(p);
  db.set_checked(c.checked);
  db.set_batch_invariant(c.batch_invariant);
  const Backend::Step step = bench::make_step(b, p, db, {});
  bench::L2Flush flush;
  const double ms = bench::timed_median_ms(state, flush, step);
  const double kv_bytes = static_cast<double>(p.kv_bytes_read());
  state.counters["kv_bytes"] = kv_bytes;
  state.counters["ms_median"] = ms;
  state.counters["GBps"] = kv_bytes / (ms * 1e-3) / 1e9;
  state.counters["floor_fraction"] = g_read_gbps > 0 ? (kv_bytes / (g_read_gbps * 1e9)) / (ms * 1e-3) : 0.0;
  state.counters["plain_read_fraction"] = ms > 0 ? plain_read_ms_for(p.kv_bytes_read(), flush) / ms : 0.0;
  state.counters["batch"] = static_cast<double>(c.requests.size());
  if (c.family == "prefill") {
    // Two matmuls (QK^T, PV) of 2 FLOPs per multiply-add over the pairs the
    // softmax really covers: half the square when causal, less with a window.
    const double flops = 4.0 * p.cfg.head_dim * p.cfg.num_q_heads * p.attended_pairs();
    state.counters["TFLOPs"] = flops / (ms * 1e-3) / 1e12;
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  try {
    cudaDeviceProp prop{};
    PA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const bench::ProbeResult probe = bench::measure_read_bandwidth(kGpu ? (size_t{2} << 30) : (size_t{16} << 20), kGpu ? 20 : 2);
    g_read_gbps = probe.gbps;
    std::fprintf(stderr, "[bench] %s: read probe %.1f GB/s (%zu MB, median %.3f ms)\n", prop.name, probe.gbps,
                 probe.bytes >> 20, probe.median_ms);
    benchmark::AddCustomContext("device", prop.name);
    benchmark::AddCustomContext("read_bandwidth_GBps", std::to_string(probe.gbps));
    benchmark::AddCustomContext("flavor", kGpu ? "gpu" : "cpu-smoke");
    benchmark::AddCustomContext("l2_flush", bench::L2Flush::mode_name(bench::L2Flush::dirty_from_env()));
    for (const BenchCase& c : cases()) {
      for (const Backend& b : bench::backends()) {
        // Stage 07 exists for shared prefixes, which these cases lack:
        // bench_cascade measures it.
        if (b.for_shared_prefixes) continue;
        if (!not_compared(b, c).empty()) continue;
        benchmark::RegisterBenchmark((c.family + "/" + b.name + "/" + c.label).c_str(),
                                     [&b, c](benchmark::State& st) { run_case(st, b, c); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(c.iterations);
      }
      if ((c.family != "mixed" && c.family != "mixed_shapes") || !kGpu) continue;
      BenchCase swept = c;
      swept.only.clear();  // `only` names the case's backends of backends(); the sweep's are its own
      for (const Backend& b : bench::chunk_program_sweep()) {
        benchmark::RegisterBenchmark((c.family + "/" + b.name + "/" + c.label).c_str(),
                                     [&b, swept](benchmark::State& st) { run_case(st, b, swept); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(c.iterations);
      }
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
