// backends: the course's main job. Runs every backend on the same batches and
// prints one JSON line per (case, backend): whether it matches the fp64 oracle
// (the tests' rule: common/compare.h), its largest error and, on a GPU, the
// median of event-timed runs with L2 flushed before each. Then the KV-cache
// bytes-per-token table for Qwen3-8B. Exits 1 when any backend is wrong.
//
//   backends [--case mixed|long|shared_prefix|all] [--scale auto|cpu|full] [--reps N] [--out FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/device_batch.h"
#include "common/oracle.h"
#include "common/problem.h"
#include "common/stages.h"
#include "common/timing.h"
#include "probe.h"
#include "registry.h"

namespace {

using namespace pa;
using pa::bench::Backend;

struct CaseSpec {
  std::string name;
  std::string what;
  std::vector<RequestShape> requests;
  std::vector<std::pair<std::vector<int>, int>> prefix_groups = {};  // (members, prefix_len) for share_prefixes
};

// 8 decodes whose contexts start with the same `prefix_len` cached positions,
// stored once (share_prefixes), each with its own 96 * (r + 1) / shrink
// positions after them.
CaseSpec shared_prefix_case(int shrink) {
  const int prefix_len = 4000 / shrink, members = 8;
  CaseSpec c{"shared_prefix",
             "decode, 8 requests sharing a " + std::to_string(prefix_len) + "-token prefix", {}, {{{}, prefix_len}}};
  for (int r = 0; r < members; ++r) {
    c.requests.push_back({1, prefix_len + 96 * (r + 1) / shrink + 1});
    c.prefix_groups[0].first.push_back(r);
  }
  return c;
}

// Qwen3-8B attention shape. The CPU scale shrinks every context 8x so the job
// finishes in minutes on two cores (the shared prefix then ends inside a block).
std::vector<CaseSpec> make_cases(bool full) {
  const int s = full ? 1 : 8;
  return {
      {"mixed", "2 prefill chunks + 30 decodes", mixed_chunks_and_decodes(s)},
      {"long", "decode, 4 requests x 32768 tokens", decode_requests(4, 32768 / s)},
      shared_prefix_case(s),
  };
}

// The case's Problem: its requests, with the shared prefixes stored once.
Problem build_problem(const AttentionConfig& cfg, const CaseSpec& c, std::vector<PrefixGroup>& groups) {
  Problem p = make_problem(cfg, c.requests, {.seed = 2024});
  groups = c.prefix_groups.empty() ? std::vector<PrefixGroup>{} : share_prefixes(p, c.prefix_groups);
  return p;
}

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream o;
  o.precision(6);
  o << x;
  return o.str();
}

void usage() {
  std::cout << "usage: backends [--case mixed|long|shared_prefix|all] [--scale auto|cpu|full] [--reps N] [--out FILE]\n"
               "\n"
               "Runs every attention backend on the same batches (Qwen3-8B attention shape: 32 query heads,\n"
               "8 KV heads, head_dim 128, bf16, block size 16) and prints one JSON line per (case, backend):\n"
               "  ok             true when out (and lse) match the fp64 oracle within the tests' per-dtype\n"
               "                 tolerance (common/compare.h: atol + rtol*|want| per element, NaN fails)\n"
               "  max_abs_error  largest |out - fp64 oracle| over all outputs\n"
               "  max_lse_error  largest |lse - fp64 oracle| (null where the backend returns no lse)\n"
               "                 An error that is not finite (a NaN counts as +inf) prints as null, with ok false.\n"
               "  ms             median of --reps event-timed runs, L2 flushed before each (null on the CPU)\n"
               "  kv_gbps        KV bytes a read-once kernel needs / ms (null on the CPU); on shared_prefix\n"
               "                 the prefix counts once per request, as a kernel without cascade reads it\n"
               "Cases: mixed (2 prefill chunks + 30 decodes), long (4 decodes x 32768 tokens), shared_prefix\n"
               "(8 decodes sharing a 4000-token prefix stored once: every backend reads it through its block\n"
               "table; 07_cascade reads it once for the group). On batches without shared prefixes 07_cascade\n"
               "has no groups and runs its plain path (each request reads its whole context).\n"
               "Backends that change the configuration are judged against an oracle of their own: 05_* on\n"
               "their 8-bit cache, 06_sliding_window with window 4096, 08_attention_sinks with learned sinks\n"
               "(one logit per query head), 08_sinks_window with learned sinks, window 128 and 4 sink tokens.\n"
               "Then the KV-cache bytes per token for Qwen3-8B (36 layers) by cache format.\n"
               "--scale cpu shrinks contexts 8x (the default without a GPU); full uses real sizes.\n"
               "Progress goes to stderr; --out also writes the JSON lines to FILE.\n"
               "A backend that does not match the oracle is named on stderr with its first mismatch, and\n"
               "the exit status is 1 (skipped cases are not failures).\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all", scale = "auto", out_path;
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "backends: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else if (a == "--case") {
      which = value();
    } else if (a == "--scale") {
      scale = value();
    } else if (a == "--reps") {
      reps = std::max(1, std::stoi(value()));
    } else if (a == "--out") {
      out_path = value();
    } else {
      std::cerr << "backends: unknown option " << a << " (see --help)\n";
      return 2;
    }
  }
  if (which != "all" && which != "mixed" && which != "long" && which != "shared_prefix") {
    std::cerr << "backends: --case must be mixed, long, shared_prefix or all\n";
    return 2;
  }
#if defined(PA_GPU_BUILD)
  constexpr bool gpu = true;
#else
  constexpr bool gpu = false;
#endif
  if (scale != "auto" && scale != "cpu" && scale != "full") {
    std::cerr << "backends: --scale must be auto, cpu or full\n";
    return 2;
  }
  const bool full = scale == "full" || (scale == "auto" && gpu);

  try {
    cudaDeviceProp prop{};
    PA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::ofstream file;
    if (!out_path.empty()) {
      file.open(out_path);
      if (!file) throw Error("backends: cannot write " + out_path);
    }
    auto emit = [&](const std::string& line) {
      std::cout << line << "\n" << std::flush;
      if (file) file << line << "\n";
    };

    // Empties the L2 before each timed run, so every run reads K/V from HBM as
    // a real decode step would (the benchmark's method: bench/probe.h).
    pa::bench::L2Flush flush;

    AttentionConfig cfg;  // Qwen3-8B defaults
    std::vector<std::string> failures;  // "case/backend" of each result that differs from the oracle
    for (const CaseSpec& c : make_cases(full)) {
      if (which != "all" && which != c.name) continue;
      std::cerr << "[backends] case " << c.name << " (" << c.what << (full ? "" : ", contexts / 8")
                << "): building inputs and the fp64 oracle...\n";
      std::vector<PrefixGroup> shared_groups;
      const Problem shared_p = build_problem(cfg, c, shared_groups);
      const OracleResult shared_want = reference_attention(shared_p);
      DeviceBatch shared_db(shared_p);
      for (const Backend& b : pa::bench::backends()) {
        std::cerr << "[backends]   " << b.name << "\n";
        // A backend that adjusts the configuration (8-bit cache, window) gets
        // its own Problem, oracle and device batch; the error is against the
        // oracle on what its cache holds (dequantized codes), bytes its own.
        std::optional<Problem> own_p;
        std::optional<OracleResult> own_want;
        std::optional<DeviceBatch> own_db;
        std::vector<PrefixGroup> own_groups;
        if (b.configure) {
          AttentionConfig own_cfg = cfg;
          b.configure(own_cfg);
          own_p.emplace(build_problem(own_cfg, c, own_groups));
          own_want.emplace(reference_attention(*own_p));
          own_db.emplace(*own_p);
        }
        const Problem& p = own_p ? *own_p : shared_p;
        const OracleResult& want = own_want ? *own_want : shared_want;
        DeviceBatch& db = own_db ? *own_db : shared_db;
        db.set_checked(false);  // timed below, as a serving step would run it; the tests check launches
        const std::vector<PrefixGroup>& groups = own_p ? own_groups : shared_groups;
        if (const std::string why = b.unsupported(p); !why.empty()) {
          emit("{\"case\":\"" + c.name + "\",\"backend\":\"" + b.name + "\",\"skipped\":\"" + why + "\"}");
          continue;
        }
        // A planned backend (stage 07) plans here, once per batch and untimed.
        const Backend::Step step = pa::bench::make_step(b, p, db, groups);
        db.poison_outputs();
        step();
        // Judged like the tests judge the stages; the lse too, where the backend is given one to write.
        const std::vector<float> lse = db.params().lse ? db.lse_host() : std::vector<float>{};
        const AttentionCheck check =
            check_attention(p, want, db.out_host(), db.params().lse ? &lse : nullptr, /*max_reported=*/1);
        if (!check.ok()) {
          failures.push_back(c.name + "/" + b.name);
          std::cerr << "[backends] FAIL " << b.name << " on case " << c.name << " (" << p.cfg.describe()
                    << "): " << check.report();
        }
        double ms = NAN;
        if (gpu) {
          EventTimer timer;
          std::vector<double> times;
          step();  // warm-up
          for (int rep = 0; rep < reps; ++rep) {
            flush();
            timer.start();
            step();
            times.push_back(timer.stop());
          }
          ms = median(times);
        }
        const double gbps = p.kv_bytes_read() / (ms * 1e-3) / 1e9;
        std::ostringstream line;
        line << "{\"case\":\"" << c.name << "\",\"backend\":\"" << b.name << "\",\"device\":\"" << prop.name
             << "\",\"num_requests\":" << p.meta.num_requests() << ",\"num_tokens\":" << p.meta.num_tokens
             << ",\"kv_bytes\":" << p.kv_bytes_read() << ",\"ok\":" << (check.ok() ? "true" : "false")
             << ",\"max_abs_error\":" << json_number(check.out.max_abs_error)
             << ",\"max_lse_error\":" << (check.lse ? json_number(check.lse->max_abs_error) : "null")
             << ",\"ms\":" << json_number(ms) << ",\"kv_gbps\":" << json_number(gbps) << "}";
        emit(line.str());
      }
    }

    // Bytes per cached token for Qwen3-8B: its layers times one layer's K + V
    // in each cache format, by the rule the benchmarks' byte counts use.
    constexpr int kQwen3Layers = 36;
    struct Format {
      KvFormat format;
      const char* name;
    };
    for (const Format f : {Format{KvFormat::bf16, "bf16"}, Format{KvFormat::int8, "int8"},
                           Format{KvFormat::fp8_e4m3, "fp8_e4m3"}}) {
      AttentionConfig fmt = cfg;
      fmt.kv_format = f.format;
      const size_t bytes = kQwen3Layers * fmt.kv_token_bytes();
      std::ostringstream line;
      line << "{\"table\":\"kv_bytes_per_token\",\"model\":\"Qwen3-8B\",\"layers\":" << kQwen3Layers
           << ",\"kv_heads\":" << fmt.num_kv_heads << ",\"head_dim\":" << fmt.head_dim << ",\"format\":\""
           << f.name << "\",\"bytes_per_token\":" << bytes << ",\"tokens_per_gb\":" << std::lround(1e9 / bytes)
           << "}";
      emit(line.str());
    }

    if (!failures.empty()) {
      std::cerr << "backends: " << failures.size() << " result(s) differ from the fp64 oracle:";
      for (const std::string& f : failures) std::cerr << " " << f;
      std::cerr << "\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "backends: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
