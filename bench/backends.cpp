// backends: the course's main job. Runs every backend on the same batches and
// prints one JSON line per (case, backend): its largest error against the fp64
// oracle and, on a GPU, the median of event-timed runs with L2 flushed before
// each. Then the KV-cache bytes-per-token table for Qwen3-8B.
//
//   backends [--case mixed|long|all] [--scale auto|cpu|full] [--reps N] [--out FILE]
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
};

// Qwen3-8B attention shape. The CPU scale shrinks every context 8x so the job
// finishes in minutes on two cores.
std::vector<CaseSpec> make_cases(bool full) {
  const int s = full ? 1 : 8;
  return {
      {"mixed", "2 prefill chunks + 30 decodes", mixed_chunks_and_decodes(s)},
      {"long", "decode, 4 requests x 32768 tokens", decode_requests(4, 32768 / s)},
  };
}

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream o;
  o.precision(6);
  o << x;
  return o.str();
}

void usage() {
  std::cout << "usage: backends [--case mixed|long|all] [--scale auto|cpu|full] [--reps N] [--out FILE]\n"
               "\n"
               "Runs every attention backend on the same batches (Qwen3-8B attention shape: 32 query heads,\n"
               "8 KV heads, head_dim 128, bf16, block size 16) and prints one JSON line per (case, backend):\n"
               "  max_abs_error  largest |out - fp64 oracle| over all outputs\n"
               "  ms             median of --reps event-timed runs, L2 flushed before each (null on the CPU)\n"
               "  kv_gbps        KV bytes a read-once kernel needs / ms (null on the CPU)\n"
               "Then the KV-cache bytes per token for Qwen3-8B (36 layers) by cache format.\n"
               "--scale cpu shrinks contexts 8x (the default without a GPU); full uses real sizes.\n"
               "Progress goes to stderr; --out also writes the JSON lines to FILE.\n";
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
  if (which != "all" && which != "mixed" && which != "long") {
    std::cerr << "backends: --case must be mixed, long or all\n";
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
    for (const CaseSpec& c : make_cases(full)) {
      if (which != "all" && which != c.name) continue;
      std::cerr << "[backends] case " << c.name << " (" << c.what << (full ? "" : ", contexts / 8")
                << "): building inputs and the fp64 oracle...\n";
      const Problem shared_p = make_problem(cfg, c.requests, {.seed = 2024});
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
        if (b.configure) {
          AttentionConfig own_cfg = cfg;
          b.configure(own_cfg);
          own_p.emplace(make_problem(own_cfg, c.requests, {.seed = 2024}));
          own_want.emplace(reference_attention(*own_p));
          own_db.emplace(*own_p);
        }
        const Problem& p = own_p ? *own_p : shared_p;
        const OracleResult& want = own_want ? *own_want : shared_want;
        DeviceBatch& db = own_db ? *own_db : shared_db;
        if (const std::string why = b.unsupported(p); !why.empty()) {
          emit("{\"case\":\"" + c.name + "\",\"backend\":\"" + b.name + "\",\"skipped\":\"" + why + "\"}");
          continue;
        }
        db.poison_outputs();
        b.forward(p, db);
        const double err = max_abs_error(db.out_host(), want.out);
        double ms = NAN;
        if (gpu) {
          EventTimer timer;
          std::vector<double> times;
          b.forward(p, db);  // warm-up
          for (int rep = 0; rep < reps; ++rep) {
            flush();
            timer.start();
            b.forward(p, db);
            times.push_back(timer.stop());
          }
          ms = median(times);
        }
        const double gbps = p.kv_bytes_read() / (ms * 1e-3) / 1e9;
        std::ostringstream line;
        line << "{\"case\":\"" << c.name << "\",\"backend\":\"" << b.name << "\",\"device\":\"" << prop.name
             << "\",\"num_requests\":" << p.meta.num_requests() << ",\"num_tokens\":" << p.meta.num_tokens
             << ",\"kv_bytes\":" << p.kv_bytes_read() << ",\"max_abs_error\":" << json_number(err)
             << ",\"ms\":" << json_number(ms) << ",\"kv_gbps\":" << json_number(gbps) << "}";
        emit(line.str());
      }
    }

    // Bytes per cached token for Qwen3-8B: 36 layers x 8 KV heads x (K + V).
    // bf16 stores 128 x 2 bytes per head row; 8-bit formats 128 codes plus one
    // fp32 scale per (token, head).
    struct Format {
      const char* name;
      int bytes_per_head_row;
    };
    for (const Format f : {Format{"bf16", 128 * 2}, Format{"int8", 128 + 4}, Format{"fp8_e4m3", 128 + 4}}) {
      const long bytes = 36L * 8 * 2 * f.bytes_per_head_row;
      std::ostringstream line;
      line << "{\"table\":\"kv_bytes_per_token\",\"model\":\"Qwen3-8B\",\"layers\":36,\"kv_heads\":8,\"head_dim\":128,"
           << "\"format\":\"" << f.name << "\",\"bytes_per_token\":" << bytes
           << ",\"tokens_per_gb\":" << std::lround(1e9 / bytes) << "}";
      emit(line.str());
    }
  } catch (const std::exception& e) {
    std::cerr << "backends: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
