// Exercise 02's report: every format of the table against full precision,
// printed as a Markdown table and written as JSON for plot_quant_quality.py.
//   exercise_02_kv_quant_quality_report [out.json]   (default quant_quality.json)
#include <cstdio>
#include <exception>
#include <string>

#include "measure.h"

int main(int argc, char** argv) {
  using namespace pa::exercise02;
  const std::string path = argc > 1 ? argv[1] : "quant_quality.json";
  try {
    const QualityBench bench{Workload{}};
    const Workload& w = bench.workload();
    std::FILE* json = std::fopen(path.c_str(), "w");
    if (!json) throw std::runtime_error("cannot write " + path);
    std::fprintf(json,
                 "{\n  \"workload\": {\"num_kv_heads\": %d, \"num_queries\": %d, \"num_keys\": %d, \"head_dim\": %d, "
                 "\"group_tokens\": %d, \"seed\": %llu},\n  \"formats\": [\n",
                 w.num_kv_heads, w.num_queries, w.num_keys, w.head_dim, w.group_tokens,
                 static_cast<unsigned long long>(w.seed));
    std::printf("%d KV heads x %d queries x %d keys, head_dim %d, outlier key channels x", w.num_kv_heads,
                w.num_queries, w.num_keys, w.head_dim);
    for (float m : w.outlier_magnitudes) std::printf(" %g", m);
    std::printf(", per-channel groups of %d tokens\n\n", w.group_tokens);
    std::printf("| format | bits/value | output rel. L2 | lse abs. err (mean / max) | KL nats (mean / max) |\n");
    std::printf("|---|---|---|---|---|\n");
    const auto formats = standard_formats();
    for (size_t i = 0; i < formats.size(); ++i) {
      const Format& f = formats[i];
      const Metrics m = bench.measure(f);
      std::printf("| %s | %.3g | %.3g | %.2g / %.2g | %.2g / %.2g |\n", f.name.c_str(), m.bits_per_value,
                  m.out_rel_l2, m.lse_abs_mean, m.lse_abs_max, m.kl_mean, m.kl_max);
      std::fprintf(json,
                   "    {\"name\": \"%s\", \"family\": \"%s\", \"bits\": %d, \"bits_per_value\": %.6g, "
                   "\"out_rel_l2\": %.6g, \"lse_abs_mean\": %.6g, \"lse_abs_max\": %.6g, \"kl_mean\": %.6g, "
                   "\"kl_max\": %.6g}%s\n",
                   f.name.c_str(), f.family.c_str(), f.bits, m.bits_per_value, m.out_rel_l2, m.lse_abs_mean,
                   m.lse_abs_max, m.kl_mean, m.kl_max, i + 1 < formats.size() ? "," : "");
    }
    std::fprintf(json, "  ]\n}\n");
    if (std::fclose(json) != 0) throw std::runtime_error("cannot write " + path);
    std::printf("\nwrote %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
