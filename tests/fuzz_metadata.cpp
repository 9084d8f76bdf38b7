// Fuzz target: batch metadata, well formed or not, through the host-side
// checks and on into the launchers.
//
// The input bytes drive a generator like the property test's: an attention
// config, requests, make_problem, maybe prefix groups (share_prefixes), then
// up to four mutations that break the metadata the way a buggy scheduler
// would: query_start_loc out of order or past num_tokens, seq_lens < q_len or
// negative or huge, block ids -1 / num_blocks / 2^28 / INT_MIN, slot_mapping
// off by one, maxima below the data, num_tokens too small, a table or tensor
// one element short or long, head counts not divisible, head_dim or
// block_size unsupported, an unknown cache format. A batch that
// DeviceBatch accepts then runs one stage (01-09, chosen by the bytes) with
// stage-level options from the bytes too: window, sink tokens, split counts,
// stage 07's force and prefix groups (valid or not).
//
// The property: nothing crashes, hangs or touches memory out of bounds (build
// with -fsanitize=address,undefined), and whatever is refused is refused with
// a pa::Error that has a message and is not a CUDA error (a failed launch). Any
// other exception aborts with the input in hex.
//
// Covered: make_problem's and validate()'s rules, DeviceBatch's tensor sizes,
// share_prefixes' and stage07::plan's group rules, each launcher's host-side
// checks of its options. Not covered: metadata changed on the device after
// DeviceBatch validated it (the launchers trust device memory: a block id
// written there later is read as is), AttentionParams put together by hand,
// and sizes too large to allocate (validation bounds shapes, not memory).
//
// Two ways to run it:
//   - libFuzzer (clang, -DPA_LIBFUZZER=ON): LLVMFuzzerTestOneInput below;
//   - anything else: this file's main() feeds seeded pseudo-random inputs
//       fuzz_metadata [--iterations N] [--seed S] [FILE...]
//     and FILE arguments replay saved inputs (e.g. a libFuzzer crash file).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/device_batch.h"
#include "common/problem.h"
#include "common/quant.cuh"
#include "common/stages.h"
#include "engine/engine.h"

namespace pa::fuzz {
namespace {

// The fuzzer's bytes as a stream of choices; past the end every read is 0,
// which always means "the plain, valid choice".
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t u32() {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i) x = x << 8 | byte();
    return x;
  }
  int range(int lo, int hi) {  // [lo, hi], from as few bytes as the span needs
    const uint32_t span = static_cast<uint32_t>(hi - lo) + 1;
    const uint32_t x = span <= 256 ? byte() : span <= 65536 ? (byte() << 8 | byte()) : u32();
    return lo + static_cast<int>(x % span);
  }
  bool one_in(int n) { return byte() % n == n - 1; }  // 0 (the end of input) is never a hit
  template <class T>
  T pick(std::initializer_list<T> xs) { return xs.begin()[byte() % xs.size()]; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Values that sit on some rule's edge.
int edge_int(Bytes& in) {
  return in.pick<int>({0, 1, -1, 2, 3, 7, 15, 16, 17, 255, 256, 257, 1 << 28, INT_MAX, INT_MIN, INT_MAX - 1,
                       -256, 1 << 16, in.range(-300, 300)});
}

// x moved by at most `by` either way, clamped to int (x may already sit at an edge).
int nudge(int x, Bytes& in, int by) {
  const long long y = static_cast<long long>(x) + in.range(-by, by);
  return static_cast<int>(std::clamp<long long>(y, INT_MIN, INT_MAX));
}

const uint8_t* g_data = nullptr;
size_t g_size = 0;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_metadata: %s\ninput (%zu bytes):", what.c_str(), g_size);
  for (size_t i = 0; i < g_size; ++i) std::fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", g_data[i]);
  std::fprintf(stderr, "\n");
  std::abort();
}

// Where each input ended, for the driver's summary: "ran stage 05", or the
// check that refused it and the start of its message.
std::map<std::string, long>& outcomes() {
  static std::map<std::string, long> m;
  return m;
}

// A refusal must be a pa::Error with a message, and not a failed launch.
void refused(const char* by, const Error& e) {
  const std::string msg = e.what();
  if (msg.empty()) fail(std::string(by) + " threw a pa::Error with an empty message");
  if (msg.find("CUDA error") != std::string::npos) fail(std::string(by) + ": a launch or copy failed:\n" + msg);
  // Numbers vary from input to input; the summary counts kinds of refusal.
  std::string kind;
  for (const char c : msg.substr(0, 70)) {
    const bool digit = (c >= '0' && c <= '9') || c == '-';
    if (!digit) kind += c;
    else if (kind.empty() || kind.back() != '#') kind += '#';
  }
  ++outcomes()[kind.rfind(by, 0) == 0 ? kind : std::string(by) + ": " + kind];
}

template <class T>
void resize_by_one(std::vector<T>& v, Bytes& in) {
  if (in.one_in(2) || v.empty()) {
    v.push_back(v.empty() ? T{} : v.back());
  } else {
    v.pop_back();
  }
}

AttentionConfig draw_config(Bytes& in) {
  AttentionConfig c;
  const int group = in.one_in(8) ? in.range(9, 80) : in.range(1, 8);
  c.num_kv_heads = in.one_in(16) ? in.pick<int>({0, -1, 3, 64, 65}) : in.range(1, 3);
  c.num_q_heads = in.one_in(16) ? in.pick<int>({0, -2, 5, 7, 96, 128}) : group * c.num_kv_heads;
  c.head_dim = in.one_in(4) ? in.pick<int>({80, 96, 192, 0, -64, 32, 63, 65, 512}) : in.pick<int>({64, 128, 256});
  c.block_size = in.one_in(8) ? in.pick<int>({0, -16, 3, 24, 100, 512, 1 << 28}) : 1 << in.range(0, 8);
  c.window = in.one_in(3) ? (in.one_in(4) ? edge_int(in) : in.range(1, 64)) : 0;
  c.sink_tokens = in.one_in(4) ? (in.one_in(4) ? edge_int(in) : in.range(1, 8)) : 0;
  c.with_sinks = in.one_in(3);
  const uint8_t f = in.byte();
  c.kv_format = f < 160 ? KvFormat::bf16 : f < 200 ? KvFormat::int8 : f < 240 ? KvFormat::fp8_e4m3
                                                                      : static_cast<KvFormat>(f % 8);
  return c;
}

std::vector<RequestShape> draw_requests(Bytes& in) {
  std::vector<RequestShape> out;
  const int n = in.range(0, 6);
  for (int r = 0; r < n; ++r) {
    if (in.one_in(16)) {  // a shape make_problem must refuse (or accept, when it happens to be fine)
      out.push_back({in.range(-3, 8), in.range(-3, 8)});
      continue;
    }
    const int q_len = in.pick<int>({1, 1, 0, 2, 5, 16});
    out.push_back({q_len, q_len + in.range(0, 200)});
  }
  return out;
}

// share_prefixes with groups from the bytes: mostly members that exist and a
// prefix inside their history, sometimes anything.
std::vector<PrefixGroup> draw_groups(Problem& p, Bytes& in) {
  const int R = p.meta.num_requests();
  std::vector<std::pair<std::vector<int>, int>> spec;
  const int num_groups = in.range(0, 2);
  for (int g = 0; g < num_groups; ++g) {
    std::vector<int> members;
    const int n = in.range(0, 3);
    for (int i = 0; i < n; ++i) members.push_back(in.one_in(8) ? edge_int(in) : in.range(0, std::max(R - 1, 0)));
    spec.push_back({members, in.one_in(8) ? edge_int(in) : in.range(1, 64)});
  }
  return share_prefixes(p, spec);
}

// One mutation of the metadata, the config or a tensor's size.
void mutate(Problem& p, Bytes& in) {
  BatchMeta& m = p.meta;
  auto any_index = [&](size_t n) { return static_cast<size_t>(in.u32() % std::max<size_t>(n, 1)); };
  switch (in.range(0, 13)) {
    case 0:
      if (!m.query_start_loc.empty()) {
        int& x = m.query_start_loc[any_index(m.query_start_loc.size())];
        x = in.one_in(2) ? nudge(x, in, 2) : edge_int(in);
      }
      break;
    case 1:
      if (!m.seq_lens.empty()) {
        int& x = m.seq_lens[any_index(m.seq_lens.size())];
        x = in.one_in(2) ? nudge(x, in, 2) : edge_int(in);
      }
      break;
    case 2:
      if (!m.block_table.empty()) {
        m.block_table[any_index(m.block_table.size())] =
            in.pick<int>({-1, p.num_blocks, p.num_blocks + 1, 1 << 28, INT_MAX, INT_MIN, in.range(0, p.num_blocks)});
      }
      break;
    case 3:
      if (!m.slot_mapping.empty()) {
        int& x = m.slot_mapping[any_index(m.slot_mapping.size())];
        x = in.one_in(2) ? nudge(x, in, 2) : edge_int(in);
      }
      break;
    case 4:
      if (in.one_in(2) || m.query_start_loc.empty()) {
        m.num_tokens = nudge(m.num_tokens, in, 3);
      } else {  // one row short of the last request's queries
        m.num_tokens = std::max(m.query_start_loc.back(), INT_MIN + 1) - 1;
      }
      break;
    case 5: m.max_query_len = in.one_in(2) ? nudge(m.max_query_len, in, 2) : edge_int(in); break;
    case 6: m.max_seq_len = in.one_in(2) ? nudge(m.max_seq_len, in, 2) : edge_int(in); break;
    case 7: m.decode_only = !m.decode_only; break;
    case 8: p.num_blocks = nudge(p.num_blocks, in, 2); break;
    case 9: m.max_blocks_per_seq = nudge(m.max_blocks_per_seq, in, 1); break;
    case 10:
      switch (in.range(0, 3)) {
        case 0: resize_by_one(m.query_start_loc, in); break;
        case 1: resize_by_one(m.seq_lens, in); break;
        case 2: resize_by_one(m.block_table, in); break;
        default: resize_by_one(m.slot_mapping, in); break;
      }
      break;
    case 11:
      switch (in.range(0, 9)) {
        case 0: resize_by_one(p.q, in); break;
        case 1: resize_by_one(p.k_new, in); break;
        case 2: resize_by_one(p.v_new, in); break;
        case 3: resize_by_one(p.k_cache, in); break;
        case 4: resize_by_one(p.v_cache, in); break;
        case 5: resize_by_one(p.k_codes, in); break;
        case 6: resize_by_one(p.v_codes, in); break;
        case 7: resize_by_one(p.k_scale, in); break;
        case 8: resize_by_one(p.v_scale, in); break;
        default: resize_by_one(p.sinks, in); break;
      }
      break;
    case 12: {
      // The config changes after the tensors were sized for it.
      AttentionConfig& c = p.cfg;
      switch (in.range(0, 5)) {
        case 0: c.num_q_heads = nudge(c.num_q_heads, in, 1); break;
        case 1: c.num_kv_heads = nudge(c.num_kv_heads, in, 1); break;
        case 2: c.head_dim = in.pick<int>({64, 128, 256, 80, 0}); break;
        case 3: c.block_size = in.pick<int>({1, 2, 16, 256, 0, 3}); break;
        case 4: c.with_sinks = !c.with_sinks; break;
        default: c.kv_format = static_cast<KvFormat>(in.byte() % 4); break;
      }
      break;
    }
    default: {
      // A valid table entry pointed at another request's page: pages shared
      // where new tokens may be written (slot_mapping follows the table, so
      // validation still holds; the kernels must stay in bounds).
      // Only on metadata that still validates: the slot loop below trusts it.
      try {
        validate(m, p.cfg, p.num_blocks);
      } catch (const Error&) {
        break;
      }
      if (m.block_table.size() >= 2) {
        m.block_table[any_index(m.block_table.size())] = m.block_table[any_index(m.block_table.size())];
        for (int r = 0; r < m.num_requests(); ++r) {
          for (int i = 0; i < m.q_len(r); ++i) {
            const int pos = m.seq_lens[r] - m.q_len(r) + i;
            m.slot_mapping[m.query_start_loc[r] + i] =
                m.block_id(r, pos, p.cfg.block_size) * p.cfg.block_size + pos % p.cfg.block_size;
          }
        }
      }
      break;
    }
  }
}

// Runs one stage on the validated batch, with stage-level options from the bytes.
// The stage options come from the input's first bytes (see run_one), so that
// every input picks its stage, however much of the rest the batch consumed.
void run_stage(const Problem& p, DeviceBatch& db, const std::vector<PrefixGroup>& valid_groups, Bytes& in) {
  const int stage = in.range(1, 9);
  AttentionParams params = db.params();
  if (in.one_in(4)) params.window = in.one_in(2) ? edge_int(in) : in.range(1, 64);
  if (in.one_in(4)) params.sink_tokens = in.one_in(2) ? edge_int(in) : in.range(1, 8);
  // Sinks only where the buffer holds one per query head.
  if (in.one_in(4)) params.sinks = params.sinks ? nullptr : (db.sinks.size() >= static_cast<size_t>(p.cfg.num_q_heads) && p.cfg.num_q_heads > 0 ? db.sinks.data() : nullptr);
  const int num_splits = in.one_in(4) ? edge_int(in) : in.pick<int>({0, 1, 2, 3, 8, 64});
  const int force = in.one_in(8) ? edge_int(in) : in.range(-1, 1);
  std::vector<PrefixGroup> groups = valid_groups;
  if (in.one_in(4)) {
    // Groups share_prefixes never made: members out of range or repeated,
    // blocks that are not the members' first pages, prefixes longer than history.
    PrefixGroup g;
    const int n = in.range(0, 3);
    for (int i = 0; i < n; ++i) g.members.push_back(in.one_in(4) ? edge_int(in) : in.range(0, std::max(p.meta.num_requests() - 1, 0)));
    g.prefix_len = in.one_in(4) ? edge_int(in) : in.range(0, 64);
    const int nb = in.range(0, 4);
    for (int i = 0; i < nb; ++i) g.blocks.push_back(in.one_in(4) ? edge_int(in) : in.range(0, std::max(p.num_blocks - 1, 0)));
    groups.push_back(g);
  }
  const char* names[] = {"", "stage 01", "stage 02", "stage 03", "stage 04", "stage 05", "stage 06", "stage 07", "stage 08", "stage 09", "engine cascade"};
  int label = stage;  // names[label]: what ran
  try {
    switch (stage) {
      case 1: {
        stage01::Workspace ws;
        stage01::forward(params, p.meta, ws);
        break;
      }
      case 2: stage02::forward(params); break;
      case 3: stage03::forward(params); break;
      case 4: stage04::forward(params, nullptr, num_splits); break;
      case 5: stage05::forward(params, nullptr, num_splits); break;
      case 6: stage06::forward(params, nullptr, num_splits); break;
      case 7: stage07::forward(params, stage07::plan(params, p.meta, groups, force)); break;
      case 9: stage09::forward(params); break;
      default:
        if (in.one_in(2)) {
          label = 10;  // the engine's cascade: stage 08's sinks over stage 07's plan
          engine::run_cascade(engine::plan_cascade(params, p.meta, groups, force), params);
        } else {
          stage08::forward(params, nullptr, num_splits);
        }
        break;
    }
    PA_CHECK(cudaDeviceSynchronize());
  } catch (const Error& e) {
    refused(names[label], e);
    return;
  }
  ++outcomes()[std::string("ran ") + names[label]];
}

void run_one(const uint8_t* data, size_t size) {
  g_data = data;
  g_size = size;
  // The first kOptionBytes choose the stage and its options, the rest the batch.
  constexpr size_t kOptionBytes = 24;
  Bytes options(data, std::min(size, kOptionBytes));
  Bytes in(data + std::min(size, kOptionBytes), size - std::min(size, kOptionBytes));
  try {
    const AttentionConfig cfg = draw_config(in);
    const std::vector<RequestShape> requests = draw_requests(in);
    BuildOptions opt;
    opt.seed = in.u32();
    opt.padding_rows = in.one_in(16) ? in.pick<int>({-1, -5}) : in.range(0, 3);
    opt.shuffle_blocks = !in.one_in(4);
    opt.fill_values = !in.one_in(8);
    Problem p;
    try {
      p = make_problem(cfg, requests, opt);
    } catch (const Error& e) {
      refused("make_problem", e);
      return;
    }
    std::vector<PrefixGroup> groups;
    if (in.one_in(3)) {
      try {
        groups = draw_groups(p, in);
      } catch (const Error& e) {
        refused("share_prefixes", e);  // leaves p as it was: go on with no groups
      }
    }
    const int num_mutations = in.pick<int>({0, 0, 0, 1, 1, 2, 3, 4});
    for (int i = 0; i < num_mutations; ++i) mutate(p, in);
    std::unique_ptr<DeviceBatch> db;
    try {
      db = std::make_unique<DeviceBatch>(p);
    } catch (const Error& e) {
      refused("DeviceBatch", e);
      return;
    }
    run_stage(p, *db, groups, options);
  } catch (const std::exception& e) {
    fail(std::string("a non-pa exception: ") + e.what());
  }
}

}  // namespace
}  // namespace pa::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pa::fuzz::run_one(data, size);
  return 0;
}

#if !defined(PA_LIBFUZZER)
namespace {

std::vector<uint8_t> read_file(const char* path) {
  std::vector<uint8_t> bytes;
  if (FILE* f = std::fopen(path, "rb")) {
    int c;
    while ((c = std::fgetc(f)) != EOF) bytes.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
  } else {
    std::fprintf(stderr, "fuzz_metadata: cannot read %s\n", path);
    std::exit(2);
  }
  return bytes;
}

void write_file(const char* path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path, "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "fuzz_metadata: cannot write %s\n", path);
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 2000;
  uint64_t seed = 1;
  const char* keep = nullptr;
  std::vector<const char*> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atol(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--keep" && i + 1 < argc) {
      keep = argv[++i];
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--iterations N] [--seed S] [--keep FILE] [FILE...]\n"
                  "  --keep FILE  write each input to FILE before running it: after a crash, FILE replays it\n",
                  argv[0]);
      return 0;
    } else {
      files.push_back(argv[i]);
    }
  }
  if (!files.empty()) {
    for (const char* path : files) {
      const std::vector<uint8_t> bytes = read_file(path);
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      std::printf("%s: ok\n", path);
    }
    return 0;
  }
  // Inputs of 0..255 random bytes: every choice the generator makes costs at
  // most a few bytes, so that covers a config, six requests, groups, four
  // mutations and the stage's options.
  std::mt19937_64 gen(seed);
  std::vector<uint8_t> bytes;
  for (long it = 0; it < iterations; ++it) {
    bytes.resize(gen() % 256);
    for (auto& b : bytes) b = static_cast<uint8_t>(gen());
    if (keep) write_file(keep, bytes);
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("fuzz_metadata: %ld inputs from seed %llu, none crashed. Where they ended:\n", iterations,
              static_cast<unsigned long long>(seed));
  for (const auto& [what, n] : pa::fuzz::outcomes()) std::printf("  %6ld  %s\n", n, what.c_str());
  return 0;
}
#endif
