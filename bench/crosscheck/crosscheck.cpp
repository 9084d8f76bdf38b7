// crosscheck: does the CPU flavor compute what the GPU computes, bit for bit?
//
// A fixed, seeded set of small batches runs through every stage (01-09) and the
// engine; each
// output (out as bf16 bits, lse as fp32 bits) is written to, or compared with, a
// binary reference file. The committed reference (bench/crosscheck/cpu_reference.bin)
// comes from the CPU flavor; the GPU flavor compares against it.
//
//   crosscheck --write FILE              run every case, write the outputs (CPU flavor: the reference)
//   crosscheck --compare FILE [--strict] run every case, compare bit for bit with FILE; a report,
//                                        exit 0 unless --strict and something differs
//   crosscheck --list                    the cases
//
// Plans that depend on the device are pinned so both flavors run the same
// arithmetic: split counts are forced, stage 07 plans with force 0/1, and the
// CPU flavor pretends to have an H200's 132 SMs (it sets CPUCUDA_SMS=132:
// stage 07's prefix-split plan reads the SM count).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "common/check.h"
#include "common/device_batch.h"
#include "common/problem.h"
#include "common/quant.cuh"
#include "common/stages.h"

namespace pa {
namespace {

constexpr int kH200Sms = 132;
constexpr int kEngine = 10;  // XCase::stage of the engine's cases (after the stages)
constexpr char kMagic[8] = {'P', 'A', 'X', 'C', 'H', 'K', '0', '1'};

// Adversarial key data (stage 05's hard cases): applied to the full-precision
// history and this step's new keys; 8-bit caches are re-quantized from it.
enum class Keys { plain, outlier100, times1e4 };

struct XCase {
  std::string name;
  int stage;
  AttentionConfig cfg;
  std::vector<RequestShape> requests;
  int num_splits = 0;  // stages 04-08: 0 = the stage's own dispatch (only used where it cannot split)
  Keys keys = Keys::plain;
  int padding_rows = 0;
  uint64_t seed = 1;
  std::vector<std::pair<std::vector<int>, int>> prefixes;  // stage 07/08 cascade: (members, prefix_len)
  int force = 1;                                           // stage 07 plan: 0 plain, 1 cascade
};

AttentionConfig cfg_of(int hq, int hkv, int d, int bs, KvFormat f = KvFormat::bf16, int window = 0, bool sinks = false,
                       int sink_tokens = 0) {
  AttentionConfig c;
  c.num_q_heads = hq;
  c.num_kv_heads = hkv;
  c.head_dim = d;
  c.block_size = bs;
  c.kv_format = f;
  c.window = window;
  c.with_sinks = sinks;
  c.sink_tokens = sink_tokens;
  return c;
}

const char* fmt_tag(KvFormat f) { return f == KvFormat::bf16 ? "bf16" : f == KvFormat::int8 ? "int8" : "fp8"; }

void scale_keys(std::vector<bf16>& k, int D, Keys keys) {
  for (size_t i = 0; i < k.size(); ++i) {
    const float x = __bfloat162float(k[i]);
    if (keys == Keys::times1e4) k[i] = __float2bfloat16(x * 1e4f);
    if (keys == Keys::outlier100 && i % D == 5) k[i] = __float2bfloat16(x * 100.0f);
  }
}

Problem build(const XCase& c, std::vector<PrefixGroup>* groups) {
  BuildOptions opt;
  opt.seed = c.seed;
  opt.padding_rows = c.padding_rows;
  Problem p = make_problem(c.cfg, c.requests, opt);
  if (c.keys != Keys::plain) {
    const int D = c.cfg.head_dim;
    scale_keys(p.k_cache, D, c.keys);
    scale_keys(p.k_new, D, c.keys);
    if (is_quantized(c.cfg.kv_format)) {
      for (size_t row = 0; row < p.k_scale.size(); ++row) {
        if (std::isnan(p.k_scale[row])) continue;  // an unused slot stays poisoned
        p.k_scale[row] = quantize_row(c.cfg.kv_format, &p.k_cache[row * D], D, &p.k_codes[row * D]);
      }
    }
  }
  if (!c.prefixes.empty()) *groups = share_prefixes(p, c.prefixes);
  return p;
}

// The outputs of one case, as bits.
struct Record {
  std::vector<uint16_t> out;
  std::vector<uint32_t> lse;
  std::string error;  // non-empty: the stage refused or failed (the message)
};

Record run_case(const XCase& c) {
  Record rec;
  try {
    std::vector<PrefixGroup> groups;
    const Problem p = build(c, &groups);
    DeviceBatch db(p);
    const AttentionParams a = db.params();
    switch (c.stage) {
      case 1: {
        stage01::Workspace ws;
        stage01::forward(a, p.meta, ws);
        break;
      }
      case 2: stage02::forward(a); break;
      case 3: stage03::forward(a); break;
      case 4: stage04::forward(a, nullptr, c.num_splits); break;
      case 5: stage05::forward(a, nullptr, c.num_splits); break;
      case 6: stage06::forward(a, nullptr, c.num_splits); break;
      case 7: stage07::forward(a, stage07::plan(a, p.meta, groups, c.force)); break;
      case 8: stage08::forward(a, nullptr, c.num_splits); break;
      case 9: stage09::forward(a); break;
      case kEngine:  // the engine: what the stages teach apart, composed
        if (!groups.empty()) {
          engine::run_cascade(engine::plan_cascade(a, p.meta, groups, c.force), a);
        } else {
          engine::forward(a, nullptr, engine::Options{.num_splits = c.num_splits});
        }
        break;
      default: throw Error("no stage " + std::to_string(c.stage));
    }
    PA_CHECK(cudaDeviceSynchronize());
    const std::vector<bf16> out = db.out.download();
    const std::vector<float> lse = db.lse.download();
    rec.out.resize(out.size());
    rec.lse.resize(lse.size());
    std::memcpy(rec.out.data(), out.data(), out.size() * sizeof(uint16_t));
    std::memcpy(rec.lse.data(), lse.data(), lse.size() * sizeof(uint32_t));
  } catch (const std::exception& e) {
    rec.error = e.what();
    if (rec.error.empty()) rec.error = "error";
  }
  return rec;
}

// ---- the fixed set of cases -------------------------------------------------

std::vector<XCase> all_cases() {
  using F = KvFormat;
  std::vector<XCase> v;
  const std::vector<RequestShape> decodes = {{1, 70}, {1, 130}, {1, 1}, {1, 33}};
  const std::vector<RequestShape> long_decodes = {{1, 300}, {1, 129}};
  const std::vector<RequestShape> small_mixed = {{12, 40}, {9, 9}, {1, 70}, {0, 0}, {1, 9}};
  const std::vector<RequestShape> prefill = {{21, 21}};

  // Stage 01 (cheap on both sides at these sizes).
  v.push_back({"milestone_g4_d128_b16", 1, cfg_of(8, 2, 128, 16), milestone_requests()});
  v.push_back({"decodes_g1_d64_b1", 1, cfg_of(4, 4, 64, 1), decodes});

  // Stages 02 and 03: bf16 only.
  for (int s : {2, 3}) {
    v.push_back({"milestone_g4_d128_b16", s, cfg_of(8, 2, 128, 16), milestone_requests()});
    v.push_back({"mixed_g3pad_d128_b16", s, cfg_of(6, 2, 128, 16), small_mixed, 0, Keys::plain, 3});
    v.push_back({"mixed_g1_d64_b1", s, cfg_of(4, 4, 64, 1), small_mixed});
    v.push_back({"decodes_g8_d256_b16", s, cfg_of(8, 1, 256, 16), decodes});
    v.push_back({"prefill_g4_d64_b16", s, cfg_of(8, 2, 64, 16), prefill});
    v.push_back({"decodes_g4_d128_b16_keys1e4", s, cfg_of(8, 2, 128, 16), decodes, 0, Keys::times1e4});
  }

  // Stage 09: the same tile on TMA copies and wgmma; a prompt long enough for
  // several key tiles through the ring, head_dims 64 / 128 / 256.
  v.push_back({"milestone_g4_d128_b16", 9, cfg_of(8, 2, 128, 16), milestone_requests()});
  v.push_back({"mixed_g3pad_d128_b16", 9, cfg_of(6, 2, 128, 16), small_mixed, 0, Keys::plain, 3});
  v.push_back({"mixed_g1_d64_b1", 9, cfg_of(4, 4, 64, 1), small_mixed});
  v.push_back({"decodes_g8_d256_b16", 9, cfg_of(8, 1, 256, 16), decodes});
  v.push_back({"prefill300_g4_d128_b64", 9, cfg_of(8, 2, 128, 64), {{300, 300}}});
  v.push_back({"prefill_g4_d256_b16_keys1e4", 9, cfg_of(8, 2, 256, 16), prefill, 0, Keys::times1e4});

  // Stage 04: bf16 decodes, 1 and several splits.
  for (int n : {1, 5}) {
    const std::string sp = "_s" + std::to_string(n);
    v.push_back({"decodes_g4_d128_b16" + sp, 4, cfg_of(8, 2, 128, 16), long_decodes, n});
    v.push_back({"decodes_g3pad_d64_b1" + sp, 4, cfg_of(6, 2, 64, 1), decodes, n, Keys::plain, 2});
    v.push_back({"decodes_g8_d256_b16" + sp, 4, cfg_of(8, 1, 256, 16), long_decodes, n});
    v.push_back({"decodes_g4_d128_b16_outlier100" + sp, 4, cfg_of(8, 2, 128, 16), long_decodes, n, Keys::outlier100});
  }

  // Stage 05: the 8-bit formats; decodes with 1 and 5 splits, the adversarial
  // keys, and mixed / prefill batches (tiles). The same cases in bf16 run the
  // engine, which serves every format.
  for (F f : {F::bf16, F::int8, F::fp8_e4m3}) {
    const int st = f == F::bf16 ? kEngine : 5;
    const std::string t = std::string("_") + fmt_tag(f);
    for (int n : {1, 5}) {
      const std::string sp = "_s" + std::to_string(n);
      v.push_back({"decodes_g4_d128_b16" + t + sp, st, cfg_of(8, 2, 128, 16, f), long_decodes, n});
      v.push_back({"decodes_g4_d128_b16_outlier100" + t + sp, st, cfg_of(8, 2, 128, 16, f), long_decodes, n,
                   Keys::outlier100});
      v.push_back({"decodes_g4_d128_b16_keys1e4" + t + sp, st, cfg_of(8, 2, 128, 16, f), long_decodes, n,
                   Keys::times1e4});
    }
    v.push_back({"decodes_g8_d256_b1" + t + "_s3", st, cfg_of(8, 1, 256, 1, f), decodes, 3});
    v.push_back({"decodes_g1_d64_b16" + t + "_s2", st, cfg_of(4, 4, 64, 16, f), decodes, 2});
    v.push_back({"mixed_g4_d128_b16" + t, st, cfg_of(8, 2, 128, 16, f), small_mixed, 0, Keys::plain, 2});
    v.push_back({"mixed_g3pad_d64_b16_outlier100" + t, st, cfg_of(6, 2, 64, 16, f), small_mixed, 0, Keys::outlier100});
    v.push_back({"prefill_g4_d256_b16_keys1e4" + t, st, cfg_of(8, 2, 256, 16, f), prefill, 0, Keys::times1e4});
  }

  // Windows, over each format (stage 06: bf16; the engine: 8-bit); decodes split 1 and 5, and mixed tiles.
  for (F f : {F::bf16, F::int8, F::fp8_e4m3}) {
    const std::string t = std::string("_") + fmt_tag(f);
    const int stage = f == F::bf16 ? 6 : kEngine;
    for (int n : {1, 5}) {
      const std::string sp = "_s" + std::to_string(n);
      v.push_back({"window40_decodes_g4_d128_b16" + t + sp, stage, cfg_of(8, 2, 128, 16, f, 40), long_decodes, n});
      v.push_back({"window5_decodes_g4_d64_b1_outlier100" + t + sp, stage, cfg_of(8, 2, 64, 1, f, 5), decodes, n,
                   Keys::outlier100});
    }
    v.push_back({"window20_mixed_g4_d128_b16" + t, stage, cfg_of(8, 2, 128, 16, f, 20), small_mixed, 0, Keys::plain, 2});
    v.push_back({"window20_mixed_g3pad_d128_b16_keys1e4" + t, stage, cfg_of(6, 2, 128, 16, f, 20), small_mixed, 0,
                 Keys::times1e4});
  }

  // Stage 07: shared prefixes, cascaded and plain, bf16; with 8-bit caches the
  // cascade is the engine's composition.
  {
    XCase c{"prefix64_decodes_g4_d128_b16_cascade", 7, cfg_of(8, 2, 128, 16), shared_prefix_decodes(3, 64, 8, 16)};
    c.prefixes = {{{0, 1, 2}, 64}};
    v.push_back(c);
    c.name = "prefix64_decodes_g4_d128_b16_plain";
    c.force = 0;
    v.push_back(c);
    XCase k{"prefix40_chunks_g4_d64_b16_int8_cascade", kEngine, cfg_of(8, 2, 64, 16, F::int8),
            shared_prefix_requests(2, 40, min_suffix_len(40, 16) + 4, 6, 16)};
    k.prefixes = {{{0, 1}, 40}};
    v.push_back(k);
    XCase l{"prefix600_decodes_g2_d64_b16_cascade", 7, cfg_of(4, 2, 64, 16), shared_prefix_decodes(2, 600, 8, 16)};
    l.prefixes = {{{0, 1}, 600}};
    v.push_back(l);
    XCase o{"prefix64_decodes_g4_d128_b16_fp8_outlier100_cascade", kEngine, cfg_of(8, 2, 128, 16, F::fp8_e4m3),
            shared_prefix_decodes(3, 64, 8, 16), 0, Keys::outlier100};
    o.prefixes = {{{0, 1, 2}, 64}};
    v.push_back(o);
  }

  // Stage 08 (bf16) and the engine (int8): learned sinks and sink tokens, with
  // and without a window, on every path; the engine's cascade with sinks.
  for (F f : {F::bf16, F::int8}) {
    const std::string t = std::string("_") + fmt_tag(f);
    const int stage = f == F::bf16 ? 8 : kEngine;
    for (int n : {1, 3}) {
      const std::string sp = "_s" + std::to_string(n);
      v.push_back({"sinks_decodes_g4_d128_b16" + t + sp, stage, cfg_of(8, 2, 128, 16, f, 0, true), long_decodes, n});
      v.push_back({"sinks_window40_sinktok4_decodes_g4_d64_b16" + t + sp, stage, cfg_of(8, 2, 64, 16, f, 40, true, 4),
                   long_decodes, n});
    }
    v.push_back({"sinks_mixed_g3pad_d128_b16" + t, stage, cfg_of(6, 2, 128, 16, f, 0, true), small_mixed, 0, Keys::plain,
                 2});
    v.push_back({"window20_sinktok4_mixed_g4_d64_b1" + t, stage, cfg_of(8, 2, 64, 1, f, 20, false, 4), small_mixed});
  }
  {
    XCase c{"sinks_prefix64_decodes_g4_d128_b16_cascade", kEngine, cfg_of(8, 2, 128, 16, F::bf16, 0, true),
            shared_prefix_decodes(3, 64, 8, 16)};
    c.prefixes = {{{0, 1, 2}, 64}};
    v.push_back(c);
  }
  return v;
}

std::string stage_name(int stage) {
  if (stage == kEngine) return "engine";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%02d", stage);
  return buf;
}

std::string key_of(const XCase& c) { return stage_name(c.stage) + "/" + c.name; }

// "stage 05", or "engine": how the report names a case's code.
std::string shown(int stage) { return stage == kEngine ? "engine" : "stage " + stage_name(stage); }

// ---- the file: magic, count, then per case: key, error, out bits, lse bits ----

void put_u32(std::ostream& os, uint32_t x) { os.write(reinterpret_cast<const char*>(&x), 4); }
uint32_t get_u32(std::istream& is) {
  uint32_t x = 0;
  is.read(reinterpret_cast<char*>(&x), 4);
  return x;
}
void put_str(std::ostream& os, const std::string& s) {
  put_u32(os, static_cast<uint32_t>(s.size()));
  os.write(s.data(), static_cast<std::streamsize>(s.size()));
}
std::string get_str(std::istream& is) {
  std::string s(get_u32(is), '\0');
  is.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

void write_file(const std::string& path, const std::vector<std::pair<std::string, Record>>& recs) {
  std::ofstream os(path, std::ios::binary);
  PA_REQUIRE(os.good(), "crosscheck: cannot write " + path);
  os.write(kMagic, sizeof kMagic);
  put_u32(os, static_cast<uint32_t>(recs.size()));
  for (const auto& [key, r] : recs) {
    put_str(os, key);
    put_str(os, r.error);
    put_u32(os, static_cast<uint32_t>(r.out.size()));
    os.write(reinterpret_cast<const char*>(r.out.data()), static_cast<std::streamsize>(r.out.size() * 2));
    put_u32(os, static_cast<uint32_t>(r.lse.size()));
    os.write(reinterpret_cast<const char*>(r.lse.data()), static_cast<std::streamsize>(r.lse.size() * 4));
  }
  PA_REQUIRE(os.good(), "crosscheck: write to " + path + " failed");
}

std::map<std::string, Record> read_file(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  PA_REQUIRE(is.good(), "crosscheck: cannot read " + path);
  char magic[sizeof kMagic];
  is.read(magic, sizeof magic);
  PA_REQUIRE(is.good() && std::memcmp(magic, kMagic, sizeof kMagic) == 0,
             "crosscheck: " + path + " is not a crosscheck reference (bad magic)");
  std::map<std::string, Record> recs;
  const uint32_t n = get_u32(is);
  for (uint32_t i = 0; i < n && is.good(); ++i) {
    const std::string key = get_str(is);
    Record r;
    r.error = get_str(is);
    r.out.resize(get_u32(is));
    is.read(reinterpret_cast<char*>(r.out.data()), static_cast<std::streamsize>(r.out.size() * 2));
    r.lse.resize(get_u32(is));
    is.read(reinterpret_cast<char*>(r.lse.data()), static_cast<std::streamsize>(r.lse.size() * 4));
    recs[key] = std::move(r);
  }
  PA_REQUIRE(is.good(), "crosscheck: " + path + " is truncated");
  return recs;
}

// ---- comparison ---------------------------------------------------------------

// Distance in units in the last place between two values of a sign-magnitude
// format of `bits` bits: the count of representable values between them.
int64_t ordered(uint32_t u, int bits) {
  const uint32_t sign = 1u << (bits - 1);
  return (u & sign) ? -static_cast<int64_t>(u & (sign - 1)) : static_cast<int64_t>(u);
}

struct Diff {
  size_t count = 0, n = 0;
  int64_t max_ulp = 0;
  double max_abs = 0.0;
  bool size_mismatch = false;
};

template <class Bits>
Diff diff_bits(const std::vector<Bits>& a, const std::vector<Bits>& b, int nbits, const std::function<float(Bits)>& val) {
  Diff d;
  d.n = a.size();
  if (a.size() != b.size()) {
    d.size_mismatch = true;
    return d;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    ++d.count;
    const float x = val(a[i]), y = val(b[i]);
    if (std::isnan(x) || std::isnan(y)) {
      d.max_ulp = INT64_MAX;
      d.max_abs = NAN;
      continue;
    }
    const int64_t u = std::llabs(ordered(a[i], nbits) - ordered(b[i], nbits));
    if (u > d.max_ulp) d.max_ulp = u;
    const double ad = std::fabs(static_cast<double>(x) - y);
    if (!(d.max_abs >= ad)) d.max_abs = std::isnan(d.max_abs) ? d.max_abs : ad;
  }
  return d;
}

float bf16_val(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float f32_val(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::string describe(const Diff& d, const char* what) {
  char buf[200];
  if (d.size_mismatch) {
    std::snprintf(buf, sizeof buf, "%s: different sizes", what);
  } else if (d.max_ulp == INT64_MAX) {
    std::snprintf(buf, sizeof buf, "%s %zu of %zu differ (NaN on one side)", what, d.count, d.n);
  } else {
    std::snprintf(buf, sizeof buf, "%s %zu of %zu differ (max %lld ulp, max abs %.3g)", what, d.count, d.n,
                  static_cast<long long>(d.max_ulp), d.max_abs);
  }
  return buf;
}

int usage() {
  std::fprintf(stderr,
               "usage: crosscheck --write FILE | --compare FILE [--strict] | --list\n"
               "  --write FILE    run the fixed cases, write every output (bf16 bits) and lse (fp32 bits)\n"
               "  --compare FILE  run them and compare bit for bit with FILE (a report: exit 0)\n"
               "  --strict        with --compare: exit 1 when anything differs\n");
  return 2;
}

// Which exp2 the kernels were built with: compare a build with the reference of its own mode.
#if defined(PA_BIT_EXACT) && PA_BIT_EXACT
constexpr const char* BUILD_MODE = "bit-exact (PA_BIT_EXACT: exp2 from FMAs, no contraction; reference cpu_reference_bit_exact.bin)";
#else
constexpr const char* BUILD_MODE = "default (the GPU's exp2f is ex2.approx; reference cpu_reference.bin)";
#endif

int main_impl(int argc, char** argv) {
  std::string mode, file;
  bool strict = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--write" || a == "--compare") && i + 1 < argc) {
      mode = a;
      file = argv[++i];
    } else if (a == "--strict") {
      strict = true;
    } else if (a == "--list") {
      mode = a;
    } else {
      return usage();
    }
  }
  if (mode.empty()) return usage();

  const std::vector<XCase> cases = all_cases();
  if (mode == "--list") {
    for (const XCase& c : cases) std::printf("%s (%s)\n", key_of(c).c_str(), c.cfg.describe().c_str());
    return 0;
  }

  cudaDeviceProp prop{};
  PA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("crosscheck on %s (%d SMs), %zu cases\n", prop.name, prop.multiProcessorCount, cases.size());
  if (prop.multiProcessorCount != kH200Sms) {
    std::printf("note: %d SMs, not an H200's %d: stage 07's prefix-split plan may differ from the reference's\n",
                prop.multiProcessorCount, kH200Sms);
  }

  std::vector<std::pair<std::string, Record>> recs;
  for (const XCase& c : cases) recs.emplace_back(key_of(c), run_case(c));

  if (mode == "--write") {
    write_file(file, recs);
    int errors = 0;
    for (const auto& [key, r] : recs) {
      if (!r.error.empty()) {
        ++errors;
        std::printf("%s: refused/failed: %s\n", key.c_str(), r.error.c_str());
      }
    }
    std::printf("wrote %zu cases to %s (%d refused or failed)\n", recs.size(), file.c_str(), errors);
    return errors ? 1 : 0;
  }

  const std::map<std::string, Record> ref = read_file(file);
  struct StageSum {
    int identical = 0, total = 0;
  };
  std::map<int, StageSum> sums;
  bool any_diff = false;
  for (size_t i = 0; i < recs.size(); ++i) {
    const auto& [key, got] = recs[i];
    StageSum& s = sums[cases[i].stage];
    ++s.total;
    const auto it = ref.find(key);
    std::string line;
    if (it == ref.end()) {
      line = "missing from the reference (regenerate it)";
    } else if (!got.error.empty() || !it->second.error.empty()) {
      if (got.error == it->second.error) {
        line = "identical (both refused: " + got.error + ")";
      } else {
        line = "error here: [" + got.error + "], in the reference: [" + it->second.error + "]";
      }
    } else {
      const Diff o = diff_bits<uint16_t>(got.out, it->second.out, 16, bf16_val);
      const Diff l = diff_bits<uint32_t>(got.lse, it->second.lse, 32, f32_val);
      if (!o.size_mismatch && !l.size_mismatch && o.count == 0 && l.count == 0) {
        line = "identical";
      } else {
        line = describe(o, "out") + "; " + describe(l, "lse");
      }
    }
    const bool same = line.rfind("identical", 0) == 0;
    s.identical += same;
    any_diff = any_diff || !same;
    std::printf("%-8s %-56s %s\n", shown(cases[i].stage).c_str(), cases[i].name.c_str(), line.c_str());
  }
  for (const auto& [key, r] : ref) {
    bool found = false;
    for (const auto& g : recs) found = found || g.first == key;
    if (!found) {
      any_diff = true;
      std::printf("%s: in the reference but no longer a case (regenerate it)\n", key.c_str());
    }
  }
  std::printf("\n");
  for (const auto& [stage, s] : sums) {
    std::printf("%s: bitwise identical on %d of %d cases\n", shown(stage).c_str(), s.identical, s.total);
  }
  std::printf("build: %s\n", BUILD_MODE);
  if (any_diff && strict) {
    std::printf(
        "\ncrosscheck --strict: outputs differ from %s. If a kernel or common/ changed on purpose, regenerate the\n"
        "reference in the CPU flavor and commit it (both builds' references: the default and the bit-exact one):\n"
        "  build/cpu/bench/crosscheck/crosscheck --write bench/crosscheck/cpu_reference.bin\n"
        "  build/cpu-bit-exact/bench/crosscheck/crosscheck --write bench/crosscheck/cpu_reference_bit_exact.bin\n",
        file.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pa

int main(int argc, char** argv) {
#if !defined(PA_GPU_BUILD)
  // Stage 07's prefix-split plan reads the SM count: pretend to be an H200, as the GPU run is.
  setenv("CPUCUDA_SMS", "132", 1);
#endif
  try {
    return pa::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crosscheck: %s\n", e.what());
    return 2;
  }
}
