// The scheduler of the CPU runtime: CUDA threads as fibers, blocks on worker
// threads, barriers, warp collectives and the tensor-core / cp.async emulation.
//
// Scheduling, in one paragraph: a worker runs one block at a time. Every CUDA
// thread of the block is a fiber with its own stack. Fibers switch DIRECTLY to
// the next ready fiber (one jump_fcontext, a few ns, no syscall, no allocation)
// when they wait at a barrier or warp collective or return; the last fiber to
// arrive at a barrier or collective does the work for everyone (releases them,
// computes all lanes' shuffle/mma results) and keeps running without a switch.
// Control returns to the worker's own context only when the block is finished,
// failed, or deadlocked (no ready fiber while some have not returned).
// An mbarrier wait suspends its fiber like a barrier does; the phase's
// completion (an arrive, or a bulk copy landing) makes its waiters ready. Bulk
// copies land when someone waits on their barrier, or when no fiber is ready;
// a TMA tensor copy is a bulk copy that gathers its box when it lands.
#include "cpu_runtime.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CPUCUDA_ASAN 1
#else
#define CPUCUDA_ASAN 0
#endif

namespace cpucuda {
namespace fc = boost::context::detail;

namespace detail {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr int kMaxWarpGroups = 4;  // concurrent collectives of disjoint lane sets in one warp

enum class State : uint8_t { kReady, kAtBarrier, kAtWarpOp, kAtMbarrier, kAtNamedBarrier, kDone };

constexpr int kNamedBarriers = 16;  // bar.sync / bar.arrive ids; 0 is __syncthreads'

struct CopyOp {
  void* dst;
  unsigned char bytes[16];
  int size = 16;  // 16 (cp.async.cg) or 4 (cp.async.ca, e.g. one fp32 scale)
};

struct Fiber : FiberInfo {
  fc::fcontext_t ctx = nullptr;
  unsigned char* stack_lo = nullptr;  // lowest usable byte, just above the guard page
  size_t stack_size = 0;
  State state = State::kReady;
  uint32_t lane = 0;
  uint32_t warp = 0;
  // Where the fiber waits, for error reports.
  const char* wait_what = nullptr;
  const char* wait_file = nullptr;
  int wait_line = 0;
  // cp.async: copies issued and not yet retired (in issue order); group_ends[i]
  // is the end index in `copies` of committed group i; groups before
  // `retired_groups` have landed. Vectors keep their capacity across blocks.
  std::vector<CopyOp> copies;
  std::vector<size_t> group_ends;
  size_t retired_groups = 0;
  size_t retired_copies = 0;
  // The mbarrier (index into Worker::mbars) and parity this fiber waits for.
  int32_t mbar_wait = -1;
  uint32_t mbar_parity = 0;
  // The named barrier this fiber waits at (bar.sync), or -1.
  int named_wait = -1;
#if CPUCUDA_ASAN
  void* fake_stack = nullptr;
#endif
};

// One mbarrier of the running block. Its 8 bytes of shared memory hold a handle
// (kMbarMagic, the block's generation, the index of this record), so a barrier
// left over from an earlier block, or never initialized, is recognised.
struct Mbar {
  uint64_t* addr = nullptr;
  uint32_t count = 0;    // arrivals every phase starts with
  uint32_t pending = 0;  // arrivals the current phase still needs
  int64_t tx = 0;        // bytes announced minus bytes delivered, current phase
  uint32_t phase = 0;    // completed phases; the current phase's parity is phase & 1
  uint32_t in_flight = 0;  // bulk copies issued to it and not landed
  // For reports: where it was initialized (the ordinal-th init at that line),
  // and this phase's announced and delivered bytes.
  const char* init_file = nullptr;
  int init_line = 0;
  uint32_t ordinal = 0;
  uint64_t announced = 0, delivered = 0;
  const char* expect_file = nullptr;
  int expect_line = 0;
  std::vector<Fiber*> waiters;
};

// The runtime's description of a TMA map (common/tma.cuh): what
// tma_encode_3d writes into the map's 128 bytes. The magic word tells a map
// that make_tma_map_2byte_3d made from any other 128 bytes.
struct TmaDesc {
  uint64_t magic;
  const unsigned char* base;
  uint64_t dims[3];     // elements; dims[0] is the contiguous one
  uint64_t strides[2];  // bytes between consecutive indices of dims 1 and 2
  uint32_t box[3];      // elements a copy takes along each dim
  uint32_t swizzle;     // 0 none, 1 the 128-byte swizzle
};
static_assert(sizeof(TmaDesc) <= kTmaMapBytes, "the description fits in a TmaMap");

// A bulk copy issued and not landed yet (the source is read when it lands).
// A tensor copy carries its map's description (copied at issue: the map may
// live on the issuing thread's stack, which is gone once it returns) and its
// box's coordinates instead of a source.
struct BulkCopy {
  void* dst;
  const void* src;
  uint32_t bytes;
  int32_t bar;
  const Fiber* issuer;
  const char* file;
  int line;
  bool tensor = false;
  TmaDesc map{};
  int coord[3] = {0, 0, 0};
};

// Shared memory a tensor copy wrote (landed), with the copy's swizzle and
// issue site: what the tensor core's reads are checked against.
struct TensorBytes {
  uintptr_t lo, hi;
  uint32_t swizzle;
  const char* file;
  int line;
};

// One named barrier of the running block: the count its current completion was
// opened with (by its first arrival, at file:line), the arrivals counted so far
// (32 for each warp whose lanes have all arrived, as the hardware counts them)
// and the lanes of warps still arriving.
struct NamedBar {
  bool open = false;
  int threads = 0;
  int arrived = 0;
  uint32_t lanes[kMaxWarps] = {};
  const char* file = nullptr;
  int line = 0;
  std::vector<Fiber*> waiters;
  // The threads arrived toward the current completion, for reports.
  int threads_in() const {
    int n = arrived;
    for (uint32_t l : lanes) n += std::popcount(l);
    return n;
  }
};

struct WarpGroup {
  uint32_t mask;
  uint32_t arrived;
  int kind;
  const char* what;
  const char* file;
  int line;
};

// What one lane hands to a warp collective; the last lane to arrive fills `out`.
struct LaneSlot {
  uint64_t in;
  uint64_t out;
  int arg;
  const void* p0;
  const void* p1;
  const void* p2;
  void* p_out;
};

struct Warp {
  uint32_t valid;   // lanes that exist (a partial last warp has fewer)
  uint32_t exited;  // lanes that returned from the kernel
  uint32_t active_groups;
  WarpGroup groups[kMaxWarpGroups];
  LaneSlot slot[32];
};

struct Job {
  Invoker invoke;
  const void* params;
  dim3 grid, block;
  size_t smem_bytes;
  uint64_t num_blocks;
  bool reverse;
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::string error;
};

struct Worker {
  std::unique_ptr<Fiber[]> fibers{new Fiber[kMaxThreads]};
  Warp warps[kMaxWarps];
  Fiber* queue[kMaxThreads];  // ring buffer of ready fibers; each fiber is in it at most once
  uint32_t q_head = 0, q_count = 0;
  fc::fcontext_t main_ctx = nullptr;
  BlockInfo info{};
  Job* job = nullptr;
  uint32_t num_threads = 0;
  uint32_t done_count = 0;
  bool reverse = false;
  // The barrier in progress.
  uint32_t bar_arrived = 0;
  const char* bar_file = nullptr;
  int bar_line = 0;
  int bar_acc = 0;
  int bar_result = 0;
  const Fiber* first_exited = nullptr;
  // Set by a fiber that found an error, read by the worker's own context.
  bool failed = false;
  std::string error;
  // The block's mbarriers and its bulk copies in flight (issue order); the
  // generation tells this block's barrier handles from earlier blocks'.
  std::vector<Mbar> mbars;
  std::vector<BulkCopy> bulk;
  NamedBar named[kNamedBarriers];
  // The shared memory that tensor copies of this block wrote, disjoint
  // ranges (a newer copy replaces the parts of older ones it overwrites; a
  // bulk copy or cp.async landing on them drops them). A ring keeps about one
  // per slot.
  std::vector<TensorBytes> tensor_bytes;
  uint32_t generation = 0;
  // Dynamic shared memory, grown on demand.
  unsigned char* smem = nullptr;
  size_t smem_capacity = 0;
  size_t stack_bytes = 0;
#if CPUCUDA_ASAN
  void* main_fake_stack = nullptr;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
#endif
  ~Worker() {
    for (int i = 0; i < kMaxThreads; ++i) {
      if (fibers[i].stack_lo) munmap(fibers[i].stack_lo - page_size(), fibers[i].stack_size + page_size());
    }
    std::free(smem);
  }
  static size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
};

constinit thread_local Worker* tl_worker = nullptr;

inline Fiber* current_fiber() { return const_cast<Fiber*>(static_cast<const Fiber*>(tl_fiber)); }

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return (end && *end == '\0' && n > 0) ? static_cast<size_t>(n) : fallback;
}

std::string fmt3(unsigned x, unsigned y, unsigned z) {
  return "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
}

std::string site(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

std::string who(const Worker& w, const Fiber* f) {
  return "block " + fmt3(w.info.block_idx.x, w.info.block_idx.y, w.info.block_idx.z) + " thread " +
         fmt3(f->thread_idx.x, f->thread_idx.y, f->thread_idx.z);
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

bool same_site(const char* f1, int l1, const char* f2, int l2) {
  return l1 == l2 && (f1 == f2 || std::strcmp(f1, f2) == 0);
}

// ---- switching

inline void push_ready(Worker& w, Fiber* f) {
  f->state = State::kReady;
  w.queue[(w.q_head + w.q_count) % kMaxThreads] = f;
  ++w.q_count;
}

inline Fiber* pop_ready(Worker& w) {
  if (w.q_count == 0) return nullptr;
  Fiber* f = w.queue[w.q_head];
  w.q_head = (w.q_head + 1) % kMaxThreads;
  --w.q_count;
  return f;
}

// Leaves `self` for `to` (nullptr: the worker's own context). Returns when some
// other fiber makes `self` ready again and picks it. `final` marks a fiber that
// will never be resumed (it returned or failed), so ASan can drop its fake stack.
inline void jump(Worker& w, Fiber* self, Fiber* to, bool final) {
  tl_fiber = to;
  fc::fcontext_t target = to ? to->ctx : w.main_ctx;
#if CPUCUDA_ASAN
  if (to) {
    __sanitizer_start_switch_fiber(final ? nullptr : &self->fake_stack, to->stack_lo, to->stack_size);
  } else {
    __sanitizer_start_switch_fiber(final ? nullptr : &self->fake_stack, w.main_stack_bottom,
                                   w.main_stack_size);
  }
#else
  (void)final;
#endif
  fc::transfer_t t = fc::jump_fcontext(target, &self->ctx);
  *static_cast<fc::fcontext_t*>(t.data) = t.fctx;
#if CPUCUDA_ASAN
  __sanitizer_finish_switch_fiber(self->fake_stack, nullptr, nullptr);
#endif
  tl_fiber = self;
}

void land_bulk_copies(Worker& w, Fiber* self, int32_t bar);

// The next fiber to run. With none ready, the copy engine catches up: the bulk
// copies in flight land, which may complete phases and wake their waiters.
inline Fiber* next_ready(Worker& w, Fiber* self) {
  Fiber* f = pop_ready(w);
  if (!f && !w.bulk.empty()) {
    land_bulk_copies(w, self, -1);
    f = pop_ready(w);
  }
  return f;
}

inline void switch_out(Worker& w, Fiber* self) {
  Fiber* to = next_ready(w, self);
  if (to == self) return;  // a landing copy completed the phase self waits for
  jump(w, self, to, false);
}

// Records the first error of the block. The message is built in its own
// statement so that its temporaries are destroyed before the fiber is abandoned
// (an abandoned fiber never runs its pending destructors: that would leak).
void set_error(Worker& w, const Fiber* named, const std::string& message) {
  w.failed = true;
  w.error = who(w, named) + ": " + message;
}

// Leaves the failed fiber for good: the block stops, the worker's context
// reports the error and takes no further blocks.
[[noreturn]] void abandon(Worker& w, Fiber* self) {
  jump(w, self, nullptr, true);
  std::abort();  // unreachable: a failed fiber is never resumed
}

#define CPUCUDA_FAIL_AS(w, self, named, message) \
  do {                                           \
    set_error((w), (named), (message));          \
    abandon((w), (self));                        \
  } while (0)
#define CPUCUDA_FAIL(w, self, message) CPUCUDA_FAIL_AS(w, self, self, message)

// ---- fiber body

void fiber_entry(fc::transfer_t t) {
  *static_cast<fc::fcontext_t*>(t.data) = t.fctx;
#if CPUCUDA_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  bool threw = false;
  try {
    w.job->invoke(w.job->params);
  } catch (const std::exception& e) {
    threw = true;
    w.error = std::string("exception thrown in the kernel: ") + e.what();
  } catch (...) {
    threw = true;
    w.error = "exception of unknown type thrown in the kernel";
  }
  self = current_fiber();
  if (threw) {
    {
      std::string what = std::move(w.error);
      if (self->wait_file) what += " (after its last barrier or warp operation at " + site(self->wait_file, self->wait_line) + ")";
      set_error(w, self, what);
    }
    abandon(w, self);
  }

  // The thread returned. Anyone still waiting for it can never be released.
  self->state = State::kDone;
  ++w.done_count;
  if (w.bar_arrived > 0) {
    CPUCUDA_FAIL(w, self,
         "returned from the kernel while " + std::to_string(w.bar_arrived) +
             " thread(s) of its block wait at __syncthreads (" + site(w.bar_file, w.bar_line) +
             "); every thread of a block must reach every __syncthreads (an early return before a barrier?)");
  }
  Warp& wp = w.warps[self->warp];
  const uint32_t bit = 1u << self->lane;
  wp.exited |= bit;
  for (int g = 0; g < kMaxWarpGroups; ++g) {
    if ((wp.active_groups >> g & 1u) && (wp.groups[g].mask & bit)) {
      CPUCUDA_FAIL(w, self,
           "returned from the kernel while other lanes of its warp wait at " + std::string(wp.groups[g].what) +
               " (" + site(wp.groups[g].file, wp.groups[g].line) + ") with mask " + hex(wp.groups[g].mask) +
               ", which includes this lane (" + std::to_string(self->lane) + ")");
    }
  }
  if (!w.first_exited) w.first_exited = self;
  jump(w, self, next_ready(w, self), true);
  std::abort();  // unreachable
}

// ---- barriers

int barrier(const char* file, int line, int pred) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  if (w.first_exited) {
    CPUCUDA_FAIL(w, self,
         "waits at __syncthreads (" + site(file, line) + ") but thread " +
             fmt3(w.first_exited->thread_idx.x, w.first_exited->thread_idx.y, w.first_exited->thread_idx.z) +
             " of its block has already returned from the kernel; every thread of a block must reach "
             "every __syncthreads (an early return before a barrier?)");
  }
  if (w.bar_arrived == 0) {
    w.bar_file = file;
    w.bar_line = line;
    w.bar_acc = 0;
  } else if (!same_site(file, line, w.bar_file, w.bar_line)) {
    CPUCUDA_FAIL(w, self,
         "waits at __syncthreads (" + site(file, line) + ") while other threads of its block wait at a different "
             "__syncthreads (" + site(w.bar_file, w.bar_line) +
             "); all threads of a block must meet at the same barrier (a barrier inside divergent code?)");
  }
  w.bar_acc += pred;
  if (++w.bar_arrived == w.num_threads) {
    // Last to arrive: release everyone else and keep running (no switch).
    w.bar_arrived = 0;
    w.bar_result = w.bar_acc;
    const uint32_t n = w.num_threads;
    for (uint32_t i = 0; i < n; ++i) {
      Fiber* f = &w.fibers[w.reverse ? n - 1 - i : i];
      if (f != self) push_ready(w, f);
    }
    return w.bar_result;
  }
  self->state = State::kAtBarrier;
  self->wait_what = "__syncthreads";
  self->wait_file = file;
  self->wait_line = line;
  switch_out(w, self);
  return w.bar_result;
}

// Named barriers (bar.sync / bar.arrive). A completion takes `threads`
// arrivals, counted per thread: bar.sync and bar.arrive are .aligned, every
// thread of a warp executes them (the hardware counts a warp as 32 arrivals).
void named_barrier_impl(int id, int threads, bool wait, const char* file, int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  // A function, not a string: nothing on the fiber's stack may own memory when
  // a failure abandons it (its destructors never run).
  auto what = [&] { return std::string(wait ? "bar.sync" : "bar.arrive") + " (" + site(file, line) + ")"; };
  if (id < 1 || id >= kNamedBarriers) {
    CPUCUDA_FAIL(w, self,
                 what() + " on barrier " + std::to_string(id) + ": a named barrier's id is 1 to " +
                     std::to_string(kNamedBarriers - 1) + " (barrier 0 is __syncthreads')");
  }
  const uint32_t warp_slots = 32 * ((w.num_threads + 31) / 32);  // a partial last warp counts 32
  if (threads <= 0 || threads % 32 != 0 || static_cast<uint32_t>(threads) > warp_slots) {
    CPUCUDA_FAIL(w, self,
                 what() + " on barrier " + std::to_string(id) + " for " + std::to_string(threads) +
                     " threads: the count is a positive multiple of 32 (warps arrive whole) and at most the "
                     "block's " + std::to_string(warp_slots) + " threads (its warps x 32)");
  }
  NamedBar& b = w.named[id];
  if (!b.open) {
    b.open = true;
    b.threads = threads;
    b.file = file;
    b.line = line;
  } else if (b.threads != threads) {
    CPUCUDA_FAIL(w, self,
                 what() + " on barrier " + std::to_string(id) + " for " + std::to_string(threads) +
                     " threads, while the barrier's current completion was opened for " + std::to_string(b.threads) +
                     " (first arrival at " + site(b.file, b.line) + ", " + std::to_string(b.threads_in()) +
                     " arrived); every arrival of one completion names the same count");
  }
  // A warp counts once all of its lanes (those that have not returned) have arrived.
  const Warp& wp = w.warps[self->warp];
  uint32_t& lanes = b.lanes[self->warp];
  lanes |= 1u << self->lane;
  if (lanes == (wp.valid & ~wp.exited)) {
    lanes = 0;
    b.arrived += 32;
  }
  if (b.arrived == b.threads) {
    // The last arrival completes the barrier: its waiters go on, the caller too.
    b.open = false;
    b.arrived = 0;
    const size_t n = b.waiters.size();
    for (size_t i = 0; i < n; ++i) push_ready(w, b.waiters[w.reverse ? n - 1 - i : i]);
    b.waiters.clear();
    return;
  }
  if (!wait) return;
  self->state = State::kAtNamedBarrier;
  self->wait_what = "bar.sync";
  self->wait_file = file;
  self->wait_line = line;
  self->named_wait = id;
  b.waiters.push_back(self);
  switch_out(w, self);
  self->named_wait = -1;
}

// ---- warp collectives

// Every lane of `mask` deposits its input in its slot, then calls this. The last
// lane to arrive runs compute(warp, mask) for all of them. Returns the caller's slot.
template <class Compute>
LaneSlot& warp_collective(const char* what, int kind, uint32_t mask, const char* file, int line, Compute&& compute) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  Warp& wp = w.warps[self->warp];
  const uint32_t bit = 1u << self->lane;
  const uint32_t eff = mask & wp.valid;
  if (!(eff & bit)) {
    CPUCUDA_FAIL(w, self,
         std::string(what) + " (" + site(file, line) + ") with mask " + hex(mask) +
             ", which does not include the calling lane " + std::to_string(self->lane));
  }
  if (eff & wp.exited) {
    const int lane = std::countr_zero(eff & wp.exited);
    const Fiber& gone = w.fibers[self->warp * 32 + lane];
    CPUCUDA_FAIL(w, self,
         std::string(what) + " (" + site(file, line) + ") with mask " + hex(mask) + ", but lane " +
             std::to_string(lane) + " (thread " + fmt3(gone.thread_idx.x, gone.thread_idx.y, gone.thread_idx.z) +
             ") has already returned from the kernel");
  }
  WarpGroup* g = nullptr;
  int free_group = -1;
  for (int i = 0; i < kMaxWarpGroups; ++i) {
    if (wp.active_groups >> i & 1u) {
      if (wp.groups[i].mask & eff) {
        g = &wp.groups[i];
        break;
      }
    } else if (free_group < 0) {
      free_group = i;
    }
  }
  if (g) {
    if (g->mask != eff || g->kind != kind || !same_site(file, line, g->file, g->line)) {
      const int other = std::countr_zero(g->arrived);
      CPUCUDA_FAIL(w, self,
           std::string(what) + " (" + site(file, line) + ", mask " + hex(mask) + ") while lane " +
               std::to_string(other) + " of its warp waits at " + g->what + " (" + site(g->file, g->line) +
               ", mask " + hex(g->mask) +
               "); the lanes of a mask must all reach the same warp operation (divergent warp operations?)");
    }
  } else {
    if (free_group < 0) CPUCUDA_FAIL(w, self, std::string(what) + ": too many concurrent warp operations in one warp");
    g = &wp.groups[free_group];
    *g = WarpGroup{eff, 0u, kind, what, file, line};
    wp.active_groups |= 1u << free_group;
  }
  g->arrived |= bit;
  if (g->arrived == eff) {
    compute(wp, eff);
    wp.active_groups &= ~(1u << (g - wp.groups));
    const uint32_t others = eff & ~bit;
    for (int i = 0; i < 32; ++i) {
      const int lane = w.reverse ? 31 - i : i;
      if (others >> lane & 1u) push_ready(w, &w.fibers[self->warp * 32 + lane]);
    }
    return wp.slot[self->lane];
  }
  self->state = State::kAtWarpOp;
  self->wait_what = what;
  self->wait_file = file;
  self->wait_line = line;
  switch_out(w, self);
  return w.warps[self->warp].slot[self->lane];
}

enum Kind : int { kSyncwarp = 10, kShfl = 11, kVote = 15, kMma = 20, kLdmatrix = 30 };

}  // namespace

// ---- public entry points of the header

void syncthreads(const char* file, int line) { barrier(file, line, 0); }

void named_barrier(int id, int threads, bool wait, const char* file, int line) {
  named_barrier_impl(id, threads, wait, file, line);
}

int syncthreads_reduce(const char* file, int line, int op, int pred) {
  const int count = barrier(file, line, pred != 0 ? 1 : 0);
  const int n = static_cast<int>(tl_worker->num_threads);
  if (op == 0) return count;
  if (op == 1) return count == n ? 1 : 0;
  return count > 0 ? 1 : 0;
}

void syncwarp(const char* file, int line, unsigned mask) {
  warp_collective("__syncwarp", kSyncwarp, mask, file, line, [](Warp&, uint32_t) {});
}

uint64_t shfl(const char* file, int line, int mode, unsigned mask, uint64_t bits, int b, int width) {
  static const char* const names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync"};
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    CPUCUDA_FAIL(w, self, std::string(names[mode]) + " (" + site(file, line) + ") with width " + std::to_string(width) +
                      "; width must be a power of two from 1 to 32");
  }
  LaneSlot& mine = w.warps[self->warp].slot[self->lane];
  mine.in = bits;
  mine.arg = b;
  const char* what = names[mode];
  LaneSlot& out = warp_collective(what, kShfl + mode, mask, file, line, [&](Warp& wp, uint32_t eff) {
    // The PTX shfl.sync rules: a lane reads lane j of its own segment of `width`
    // lanes; a j outside the segment's allowed range returns the lane's own value.
    for (uint32_t lanes = eff; lanes; lanes &= lanes - 1) {
      const int l = std::countr_zero(lanes);
      const int arg = wp.slot[l].arg;
      const int min_lane = l & ~(width - 1);
      const int max_lane = min_lane + width - 1;
      int j = l;
      bool read = true;
      switch (mode) {
        case kShflIdx: j = min_lane + (arg & (width - 1)); break;
        case kShflUp: j = l - arg; read = j >= min_lane; break;
        case kShflDown: j = l + arg; read = j <= max_lane; break;
        default: j = l ^ (arg & 31); read = j <= max_lane; break;
      }
      if (!read) j = l;
      if (!(eff >> j & 1u)) {
        const Fiber& reader = w.fibers[self->warp * 32 + l];
        CPUCUDA_FAIL_AS(w, self, &reader,
             std::string(what) + " (" + site(file, line) + ") reads lane " + std::to_string(j) +
                 ", which is not in the mask " + hex(mask) + " (its value is undefined on a GPU)");
      }
      wp.slot[l].out = wp.slot[j].in;
    }
  });
  return out.out;
}

unsigned vote(const char* file, int line, int op, unsigned mask, bool pred) {
  static const char* const names[] = {"__ballot_sync", "__any_sync", "__all_sync"};
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  w.warps[self->warp].slot[self->lane].in = pred ? 1u : 0u;
  LaneSlot& out = warp_collective(names[op], kVote + op, mask, file, line, [&](Warp& wp, uint32_t eff) {
    uint32_t ballot = 0;
    for (uint32_t lanes = eff; lanes; lanes &= lanes - 1) {
      const int l = std::countr_zero(lanes);
      if (wp.slot[l].in) ballot |= 1u << l;
    }
    const uint64_t result = op == 0 ? ballot : op == 1 ? (ballot != 0) : (ballot == eff);
    for (uint32_t lanes = eff; lanes; lanes &= lanes - 1) wp.slot[std::countr_zero(lanes)].out = result;
  });
  return static_cast<unsigned>(out.out);
}

unsigned activemask() {
  const Fiber* self = current_fiber();
  const Warp& wp = tl_worker->warps[self->warp];
  return wp.valid & ~wp.exited;
}

// ---- tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
// Fragment layouts from the PTX ISA (g = lane / 4, t = lane % 4; each 32-bit
// register holds two 16-bit elements, the lower column / k index in the low half):
//   A (16x16, row): a0 (g, 2t..2t+1)  a1 (g+8, 2t..2t+1)  a2 (g, 2t+8..2t+9)  a3 (g+8, 2t+8..2t+9)
//   B (16x8, col):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8..2t+9, n g)
//   C, D (16x8):    c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1)
// One output of mma.sync m16n8k16 with fp32 accumulation: C + sum_k a[k] * B[k][col],
// with the tensor core's alignment and truncation (see mma_m16n8k16 below).
float mma_dot16(const float (&a)[16], const float (&B)[16][8], int col, float c) {
  double prod[16];
  int prod_exp[16];
  bool special = !std::isfinite(c);
  int e_max = INT_MIN;
  for (int k = 0; k < 16; ++k) {
    const float x = a[k], y = B[k][col];
    prod[k] = static_cast<double>(x) * y;  // exact: 11 (or 8) significant bits each
    special = special || !std::isfinite(x) || !std::isfinite(y);
    prod_exp[k] = INT_MIN;
    if (x != 0.0f && y != 0.0f) {
      int ex, ey;
      std::frexp(x, &ex);
      std::frexp(y, &ey);
      prod_exp[k] = (ex - 1) + (ey - 1);
      e_max = std::max(e_max, prod_exp[k]);
    }
  }
  if (special) {  // inf / NaN: IEEE semantics of the plain sum
    double acc = c;
    for (int k = 0; k < 16; ++k) acc += prod[k];
    return static_cast<float>(acc);
  }
  if (c != 0.0f) {
    int ec;
    std::frexp(c, &ec);
    e_max = std::max(e_max, ec - 1);
  }
  if (e_max == INT_MIN) return c + 0.0f;  // every term zero
  const double unit = std::ldexp(1.0, e_max - 25);
  int64_t sum = static_cast<int64_t>(std::trunc(c / unit));
  for (int k = 0; k < 16; ++k) sum += static_cast<int64_t>(std::trunc(prod[k] / unit));
  const double exact = static_cast<double>(sum) * unit;  // |sum| < 2^32: exact
  float r = static_cast<float>(exact);
  if (std::fabs(static_cast<double>(r)) > std::fabs(exact)) r = std::nextafter(r, 0.0f);  // toward zero
  return r;
}

void mma_m16n8k16(int dtype, float* d, const uint32_t* a, const uint32_t* b, const float* c, const char* file,
                  int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  LaneSlot& mine = w.warps[self->warp].slot[self->lane];
  mine.p0 = a;
  mine.p1 = b;
  mine.p2 = c;
  mine.p_out = d;
  const char* what = dtype == 0 ? "mma.sync m16n8k16 bf16" : "mma.sync m16n8k16 f16";
  if (w.warps[self->warp].valid != 0xffffffffu) {
    CPUCUDA_FAIL(w, self, std::string(what) + " (" + site(file, line) + ") needs a full warp of 32 threads");
  }
  warp_collective(what, kMma + dtype, 0xffffffffu, file, line, [&](Warp& wp, uint32_t) {
    auto elem = [dtype](uint32_t reg, int half) {
      const uint16_t bits = static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu);
      return dtype == 0 ? std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) : half_bits_to_float(bits);
    };
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      const uint32_t* ra = static_cast<const uint32_t*>(wp.slot[l].p0);
      const uint32_t* rb = static_cast<const uint32_t*>(wp.slot[l].p1);
      const float* rc = static_cast<const float*>(wp.slot[l].p2);
      for (int h = 0; h < 2; ++h) {
        A[g][2 * t + h] = elem(ra[0], h);
        A[g + 8][2 * t + h] = elem(ra[1], h);
        A[g][2 * t + 8 + h] = elem(ra[2], h);
        A[g + 8][2 * t + 8 + h] = elem(ra[3], h);
        B[2 * t + h][g] = elem(rb[0], h);
        B[2 * t + 8 + h][g] = elem(rb[1], h);
        C[g][2 * t + h] = rc[h];
        C[g + 8][2 * t + h] = rc[2 + h];
      }
    }
    // The tensor core's arithmetic, as measured on an H200 (bench/crosscheck/mma_probe.cu:
    // 262,144 outputs of random, int8-like and wide-exponent f16 and bf16 inputs, all
    // bit for bit): the 16 products are exact; the largest exponent E among C's
    // (floor(log2|C|)) and the products' (the SUM of the two operands' exponents,
    // not the product's own, which can be one higher) sets a grid 2^(E - 25); C and
    // every product are truncated toward zero onto that grid, summed exactly, and
    // the sum goes to fp32 rounding toward zero. Not round-to-nearest of the exact
    // sum: with operands like stage 05's (1152 + code) the low bits of small terms
    // are dropped, and a CPU that kept them would pass where the GPU fails.
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      float* rd = static_cast<float*>(wp.slot[l].p_out);
      for (int q = 0; q < 4; ++q) {
        const int row = g + (q >= 2 ? 8 : 0), col = 2 * t + (q & 1);
        rd[q] = mma_dot16(A[row], B, col, C[row][col]);
      }
    }
  });
}

// ---- ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16
// Lanes 8j..8j+7 give the row addresses of matrix j (16 bytes each). Without
// .trans, register j of lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of
// matrix j; with .trans it holds rows 2(l%4) and 2(l%4)+1 of column l/4.
void ldmatrix(int num, bool trans, uint32_t* r, const void* smem_row, const char* file, int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  LaneSlot& mine = w.warps[self->warp].slot[self->lane];
  mine.p0 = smem_row;
  mine.p_out = r;
  const char* what = trans ? "ldmatrix .trans" : "ldmatrix";
  if (w.warps[self->warp].valid != 0xffffffffu) {
    CPUCUDA_FAIL(w, self, std::string(what) + " (" + site(file, line) + ") needs a full warp of 32 threads");
  }
  if (static_cast<int>(self->lane) < 8 * num && (reinterpret_cast<uintptr_t>(smem_row) & 15u) != 0) {
    CPUCUDA_FAIL(w, self, std::string(what) + " (" + site(file, line) + "): row address is not 16-byte aligned");
  }
  warp_collective(what, kLdmatrix + num * 2 + (trans ? 1 : 0), 0xffffffffu, file, line, [&](Warp& wp, uint32_t) {
    for (int l = 0; l < 32; ++l) {
      uint32_t* out = static_cast<uint32_t*>(wp.slot[l].p_out);
      for (int j = 0; j < num; ++j) {
        uint16_t lo, hi;
        if (!trans) {
          const uint16_t* row = static_cast<const uint16_t*>(wp.slot[j * 8 + (l >> 2)].p0);
          lo = row[2 * (l & 3)];
          hi = row[2 * (l & 3) + 1];
        } else {
          const uint16_t* r0 = static_cast<const uint16_t*>(wp.slot[j * 8 + 2 * (l & 3)].p0);
          const uint16_t* r1 = static_cast<const uint16_t*>(wp.slot[j * 8 + 2 * (l & 3) + 1].p0);
          lo = r0[l >> 2];
          hi = r1[l >> 2];
        }
        out[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
      }
    }
  });
}

// ---- cp.async: the source is read at issue, the destination written when a
// wait retires the group, so a kernel that forgets the wait sees stale data.
static void cp_async_n(void* smem_dst, const void* gmem_src, bool pred, int size) {
  Fiber* self = current_fiber();
  CopyOp op;
  op.dst = smem_dst;
  op.size = size;
  if (pred) {
    std::memcpy(op.bytes, gmem_src, size);
  } else {
    std::memset(op.bytes, 0, size);  // src-size 0: the destination is zero-filled
  }
  self->copies.push_back(op);
}

void cp_async_16(void* smem_dst, const void* gmem_src, bool pred) { cp_async_n(smem_dst, gmem_src, pred, 16); }
void cp_async_4(void* smem_dst, const void* gmem_src, bool pred) { cp_async_n(smem_dst, gmem_src, pred, 4); }

void cp_async_commit() {
  Fiber* self = current_fiber();
  self->group_ends.push_back(self->copies.size());
}

namespace {
void forget_tensor_bytes(Worker& w, uintptr_t lo, uintptr_t hi);
}  // namespace

// cp.async writes that land on bytes a tensor copy wrote make them ordinary
// bytes again (see forget_tensor_bytes).
void cp_async_wait(int max_pending) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  while (self->group_ends.size() - self->retired_groups > static_cast<size_t>(max_pending < 0 ? 0 : max_pending)) {
    const size_t end = self->group_ends[self->retired_groups++];
    for (; self->retired_copies < end; ++self->retired_copies) {
      const CopyOp& op = self->copies[self->retired_copies];
      std::memcpy(op.dst, op.bytes, op.size);
      if (!w.tensor_bytes.empty()) {
        const uintptr_t lo = reinterpret_cast<uintptr_t>(op.dst);
        forget_tensor_bytes(w, lo, lo + static_cast<uintptr_t>(op.size));
      }
    }
  }
  if (self->retired_groups == self->group_ends.size() && self->retired_groups > 0) {
    // Every committed group landed: drop them, keep the uncommitted tail.
    self->copies.erase(self->copies.begin(), self->copies.begin() + static_cast<std::ptrdiff_t>(self->retired_copies));
    self->group_ends.clear();
    self->retired_groups = 0;
    self->retired_copies = 0;
  }
}

// cp.async.mbarrier.arrive.noinc: every copy of this thread lands (the
// uncommitted tail too), then an ordinary arrival. Landing them at the arrival
// is one schedule the hardware may take; a reader that does not wait on the
// barrier reads before the producer fiber has run, so it sees stale bytes.
void cp_async_arrive(uint64_t* bar, const char* file, int line) {
  Fiber* self = current_fiber();
  if (self->retired_copies < self->copies.size()) cp_async_commit();
  cp_async_wait(0);
  mbarrier_arrive(bar, 0, file, line);
}

// ---- mbarriers and cp.async.bulk (common/mbarrier.cuh, common/bulk_copy.cuh)

namespace {

constexpr uint64_t kMbarMagic = 0x4d42;  // the handle's top 16 bits
constexpr int64_t kMbarMaxTx = (1 << 20) - 1;
constexpr uint32_t kMbarMaxCount = (1u << 20) - 1;

uint64_t mbar_handle(const Worker& w, uint32_t index) {
  return (kMbarMagic << 48) | (static_cast<uint64_t>(w.generation & 0xffffffu) << 24) | index;
}

// The record of a valid handle of this block at `bar`, or -1.
int32_t mbar_lookup(const Worker& w, const uint64_t* bar) {
  const uint64_t v = *bar;
  const uint32_t index = static_cast<uint32_t>(v & 0xffffffu);
  if ((v >> 48) != kMbarMagic || ((v >> 24) & 0xffffffu) != (w.generation & 0xffffffu)) return -1;
  if (index >= w.mbars.size() || w.mbars[index].addr != bar) return -1;
  return static_cast<int32_t>(index);
}

// A barrier is named by where it was initialized: `full[s].init(1)` in a loop
// over s names full[s] "#s".
std::string mbar_name(const Mbar& m) {
  return "mbarrier #" + std::to_string(m.ordinal) + " initialized at " + site(m.init_file, m.init_line) + " (count " +
         std::to_string(m.count) + ")";
}

std::string mbar_state(const Mbar& m) {
  std::string s = "phase " + std::to_string(m.phase) + " (parity " + std::to_string(m.phase & 1u) + ") still needs " +
                  std::to_string(m.pending) + " of " + std::to_string(m.count) + " arrivals";
  if (m.tx > 0) s += " and " + std::to_string(m.tx) + " bytes";
  if (m.tx < 0) s += ", and its copies delivered " + std::to_string(-m.tx) + " bytes more than announced";
  s += "; this phase expect_tx announced " + std::to_string(m.announced) + " bytes";
  if (m.expect_file) s += " (last at " + site(m.expect_file, m.expect_line) + ")";
  s += " and bulk copies delivered " + std::to_string(m.delivered);
  if (m.in_flight) s += ", " + std::to_string(m.in_flight) + " copies in flight";
  return s;
}

int32_t mbar_index(Worker& w, Fiber* self, uint64_t* bar, const char* what, const char* file, int line) {
  if (reinterpret_cast<uintptr_t>(bar) & 7u) {
    CPUCUDA_FAIL(w, self, std::string(what) + " (" + site(file, line) + "): the mbarrier is not 8-byte aligned");
  }
  const int32_t index = mbar_lookup(w, bar);
  if (index < 0) {
    CPUCUDA_FAIL(w, self,
                 std::string(what) + " (" + site(file, line) +
                     ") on an mbarrier that this block has not initialized (or whose 8 bytes were overwritten "
                     "since): one thread calls init(count), then fence_mbarrier_init() and __syncthreads(), "
                     "before any thread arrives, waits or copies");
  }
  return index;
}

// Completes the phase once nothing is missing: the parity flips, the waiters run.
void mbar_try_complete(Worker& w, Mbar& m) {
  if (m.pending != 0 || m.tx != 0) return;
  ++m.phase;
  m.pending = m.count;
  m.announced = m.delivered = 0;
  m.expect_file = nullptr;
  const size_t n = m.waiters.size();
  for (size_t i = 0; i < n; ++i) {
    Fiber* f = m.waiters[w.reverse ? n - 1 - i : i];
    f->mbar_wait = -1;
    push_ready(w, f);
  }
  m.waiters.clear();
}

// ---- TMA tensor copies (common/tma.cuh)

constexpr uint64_t kTmaMagic = 0x4433'5041'4d54'4150;  // the bytes "PATMAP3D": made by tma_encode_3d

const char* swizzle_name(uint32_t swizzle) { return swizzle ? "128B" : "none"; }

// The shared memory a copy writes. A swizzled box may move a chunk of its last
// row within that row's 128-byte segment (rows shorter than 128 bytes), so its
// bytes are the whole segments it touches (its destination is 128-byte aligned).
uintptr_t copy_lo(const BulkCopy& c) { return reinterpret_cast<uintptr_t>(c.dst); }
uintptr_t copy_hi(const BulkCopy& c) {
  const uintptr_t bytes = c.tensor && c.map.swizzle ? (c.bytes + 127u) / 128u * 128u : c.bytes;
  return copy_lo(c) + bytes;
}

// Bytes [lo, hi) are written anew: the recorded ranges keep only what lies
// outside them.
void overwrite_tensor_bytes(Worker& w, uintptr_t lo, uintptr_t hi) {
  std::vector<TensorBytes>& v = w.tensor_bytes;
  const size_t n = v.size();
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    TensorBytes r = v[i];
    if (r.hi <= lo || r.lo >= hi) {
      v[kept++] = r;
      continue;
    }
    if (r.lo < lo) {
      TensorBytes head = r;
      head.hi = lo;
      v[kept++] = head;
    }
    if (r.hi > hi) {  // after the n already read: this loop never reads it
      r.lo = hi;
      v.push_back(r);
    }
  }
  v.erase(v.begin() + static_cast<std::ptrdiff_t>(kept), v.begin() + static_cast<std::ptrdiff_t>(n));
}

// cp.async stores 16 bytes at a time, often in a swizzled order: trimming a
// range per store could cut it into hundreds of pieces, so any range a store
// touches is dropped whole. That only forgets checks, it never invents one.
void forget_tensor_bytes(Worker& w, uintptr_t lo, uintptr_t hi) {
  std::erase_if(w.tensor_bytes, [&](const TensorBytes& r) { return r.lo < hi && lo < r.hi; });
}

// The box of tensor copy c lands: rows of box[0] elements, box[1] rows for each
// of box[2] planes, row-major from c.dst; an element outside the tensor (any
// coordinate below 0 or at least its dim) lands as zero. With the 128-byte
// swizzle, the 16-byte chunk whose unswizzled shared address is a lands at
// a ^ (((a >> 7) & 7) << 4): within each 128-byte segment, chunk c of the
// segment at bits [7:9] = r goes to chunk c ^ r, which is common/wgmma.cuh's
// sw128(row, col) for a box of 64-element rows starting 1024-byte aligned.
// The source is read now, not at issue (as a bulk copy's is).
void gather_box(const BulkCopy& c) {
  const TmaDesc& m = c.map;
  const int64_t dim0 = static_cast<int64_t>(m.dims[0]);
  const uintptr_t dst = reinterpret_cast<uintptr_t>(c.dst);
  uintptr_t row_at = dst;  // the row's unswizzled address
  for (uint32_t z = 0; z < m.box[2]; ++z) {
    const int64_t i2 = static_cast<int64_t>(c.coord[2]) + z;
    for (uint32_t y = 0; y < m.box[1]; ++y, row_at += m.box[0] * 2u) {
      const int64_t i1 = static_cast<int64_t>(c.coord[1]) + y;
      const bool row_in = i2 >= 0 && i2 < static_cast<int64_t>(m.dims[2]) && i1 >= 0 &&
                          i1 < static_cast<int64_t>(m.dims[1]);
      const unsigned char* row = row_in ? m.base + static_cast<uint64_t>(i1) * m.strides[0] +
                                              static_cast<uint64_t>(i2) * m.strides[1]
                                        : nullptr;
      for (uint32_t x = 0; x < m.box[0]; x += 8) {  // one 16-byte chunk: 8 elements
        unsigned char chunk[16];
        const int64_t i0 = static_cast<int64_t>(c.coord[0]) + x;
        if (row_in && i0 >= 0 && i0 + 8 <= dim0) {
          std::memcpy(chunk, row + i0 * 2, 16);
        } else {
          for (int e = 0; e < 8; ++e) {
            const int64_t i = i0 + e;
            if (row_in && i >= 0 && i < dim0) {
              std::memcpy(chunk + 2 * e, row + i * 2, 2);
            } else {
              chunk[2 * e] = chunk[2 * e + 1] = 0;
            }
          }
        }
        uintptr_t a = row_at + x * 2u;
        if (m.swizzle) a ^= ((a >> 7) & 7u) << 4;
        std::memcpy(reinterpret_cast<void*>(a), chunk, 16);
      }
    }
  }
}

std::string copy_name(const BulkCopy& c) {
  return std::string(c.tensor ? "the tensor copy" : "the bulk copy") + " of " + std::to_string(c.bytes) +
         " bytes issued at " + site(c.file, c.line);
}

// The copy engine delivers: the copies in flight to barrier `bar` (all of them
// for -1), in issue order. Each writes its bytes and completes them on its barrier.
void land_bulk_copies(Worker& w, Fiber* self, int32_t bar) {
  size_t kept = 0;
  for (size_t i = 0; i < w.bulk.size(); ++i) {
    const BulkCopy c = w.bulk[i];
    if (bar >= 0 && c.bar != bar) {
      w.bulk[kept++] = c;
      continue;
    }
    if (c.tensor) {
      gather_box(c);
      overwrite_tensor_bytes(w, copy_lo(c), copy_hi(c));
      w.tensor_bytes.push_back(TensorBytes{copy_lo(c), copy_hi(c), c.map.swizzle, c.file, c.line});
    } else {
      std::memcpy(c.dst, c.src, c.bytes);
      if (!w.tensor_bytes.empty()) overwrite_tensor_bytes(w, copy_lo(c), copy_hi(c));
    }
    Mbar& m = w.mbars[static_cast<size_t>(c.bar)];
    --m.in_flight;
    m.tx -= c.bytes;
    m.delivered += c.bytes;
    if (m.pending == 0 && m.tx < 0) {
      CPUCUDA_FAIL_AS(w, self, c.issuer,
                      copy_name(c) + " delivers more bytes than the phase of " + mbar_name(m) +
                          " expects: this phase expect_tx announced " + std::to_string(m.announced) +
                          " bytes and its copies delivered " + std::to_string(m.delivered) +
                          " (on a GPU the phase completes early, with bytes still landing); announce exactly the "
                          "bytes the copies deliver");
    }
    mbar_try_complete(w, m);
  }
  w.bulk.resize(kept);
}

}  // namespace

void mbarrier_init(uint64_t* bar, uint32_t count, const char* file, int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  if (reinterpret_cast<uintptr_t>(bar) & 7u) {
    CPUCUDA_FAIL(w, self, "mbarrier init (" + site(file, line) + "): the mbarrier is not 8-byte aligned");
  }
  if (count == 0 || count > kMbarMaxCount) {
    CPUCUDA_FAIL(w, self,
                 "mbarrier init (" + site(file, line) + ") with count " + std::to_string(count) +
                     ": the count of arrivals per phase must be 1 to " + std::to_string(kMbarMaxCount));
  }
  int32_t index = mbar_lookup(w, bar);
  if (index >= 0) {
    const Mbar& old = w.mbars[static_cast<size_t>(index)];
    if (!old.waiters.empty() || old.in_flight) {
      CPUCUDA_FAIL(w, self,
                   "mbarrier init (" + site(file, line) + ") re-initializes " + mbar_name(old) + " while " +
                       std::to_string(old.waiters.size()) + " thread(s) wait on it and " +
                       std::to_string(old.in_flight) + " bulk copies to it are in flight");
    }
  } else {
    index = static_cast<int32_t>(w.mbars.size());
    w.mbars.emplace_back();
  }
  uint32_t ordinal = 0;
  for (size_t i = 0; i < w.mbars.size(); ++i) {
    const Mbar& o = w.mbars[i];
    if (static_cast<int32_t>(i) != index && o.init_file && same_site(o.init_file, o.init_line, file, line)) ++ordinal;
  }
  Mbar& m = w.mbars[static_cast<size_t>(index)];
  if (!(m.init_file && same_site(m.init_file, m.init_line, file, line))) m.ordinal = ordinal;
  m.addr = bar;
  m.count = count;
  m.pending = count;
  m.tx = 0;
  m.phase = 0;
  m.in_flight = 0;
  m.init_file = file;
  m.init_line = line;
  m.announced = m.delivered = 0;
  m.expect_file = nullptr;
  *bar = mbar_handle(w, static_cast<uint32_t>(index));
}

void mbarrier_arrive(uint64_t* bar, uint32_t tx_bytes, const char* file, int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  const char* what = tx_bytes ? "mbarrier arrive_expect_tx" : "mbarrier arrive";
  Mbar& m = w.mbars[static_cast<size_t>(mbar_index(w, self, bar, what, file, line))];
  if (m.pending == 0) {
    CPUCUDA_FAIL(w, self,
                 std::string(what) + " (" + site(file, line) + ") on " + mbar_name(m) + ", whose " + mbar_state(m) +
                     ": its phase already has all its arrivals, so this one is more than the count allows in "
                     "one phase (a slot filled again before its phase completed: a missing wait on the "
                     "barrier that releases it?)");
  }
  if (tx_bytes) {
    m.tx += tx_bytes;
    m.announced += tx_bytes;
    m.expect_file = file;
    m.expect_line = line;
    if (m.tx > kMbarMaxTx) {
      CPUCUDA_FAIL(w, self,
                   std::string(what) + " (" + site(file, line) + ") of " + std::to_string(tx_bytes) + " bytes on " +
                       mbar_name(m) + ": the phase's tx-count would reach " + std::to_string(m.tx) +
                       " bytes, above its limit of " + std::to_string(kMbarMaxTx));
    }
  }
  --m.pending;
  if (m.pending == 0 && m.tx < 0) {
    CPUCUDA_FAIL(w, self,
                 std::string(what) + " (" + site(file, line) + ") is the last arrival of the phase of " +
                     mbar_name(m) + ", but its bulk copies delivered " + std::to_string(m.delivered) +
                     " bytes, more than the " + std::to_string(m.announced) +
                     " bytes expect_tx announced; announce exactly the bytes the copies deliver");
  }
  mbar_try_complete(w, m);
}

bool mbarrier_try_wait(uint64_t* bar, uint32_t parity, const char* file, int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  if (parity > 1) {
    CPUCUDA_FAIL(w, self,
                 "mbarrier wait (" + site(file, line) + ") with parity " + std::to_string(parity) +
                     ": a parity is 0 or 1 (the phase's number & 1)");
  }
  const int32_t index = mbar_index(w, self, bar, "mbarrier wait", file, line);
  if ((w.mbars[static_cast<size_t>(index)].phase & 1u) != parity) return true;
  // The phase is not complete: its copies land now (as late as they may), and
  // if that does not complete it, the fiber sleeps until a completion wakes it.
  if (w.mbars[static_cast<size_t>(index)].in_flight) {
    land_bulk_copies(w, self, index);
    if ((w.mbars[static_cast<size_t>(index)].phase & 1u) != parity) return true;
  }
  self->state = State::kAtMbarrier;
  self->wait_what = "mbarrier wait";
  self->wait_file = file;
  self->wait_line = line;
  self->mbar_wait = index;
  self->mbar_parity = parity;
  w.mbars[static_cast<size_t>(index)].waiters.push_back(self);
  switch_out(w, self);
  // Woken by the completion of the phase it waited for (which later phases,
  // run before this fiber resumed, cannot undo).
  return true;
}

void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar, const char* file, int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  // A function, not a string: nothing on the fiber's stack may own memory when
  // a failure abandons the fiber.
  auto at = [&] { return "cp.async.bulk (" + site(file, line) + ") of " + std::to_string(bytes) + " bytes"; };
  if (bytes == 0 || bytes % 16 != 0) CPUCUDA_FAIL(w, self, at() + ": the size must be a positive multiple of 16 bytes");
  if (bytes > kMbarMaxTx) {
    CPUCUDA_FAIL(w, self,
                 at() + ": at most " + std::to_string(kMbarMaxTx) + " bytes (the tx-count of one mbarrier phase)");
  }
  if (reinterpret_cast<uintptr_t>(smem_dst) & 15u) {
    CPUCUDA_FAIL(w, self, at() + ": the shared-memory destination is not 16-byte aligned");
  }
  if (reinterpret_cast<uintptr_t>(gmem_src) & 15u) {
    CPUCUDA_FAIL(w, self, at() + ": the global source is not 16-byte aligned");
  }
  const int32_t index = mbar_index(w, self, bar, "cp.async.bulk", file, line);
  w.bulk.push_back(BulkCopy{smem_dst, gmem_src, bytes, index, self, file, line});
  ++w.mbars[static_cast<size_t>(index)].in_flight;
}

void tma_encode_3d(void* map, const void* base, const uint64_t* dims, const uint64_t* strides_bytes,
                   const uint32_t* box, int swizzle) {
  TmaDesc d{};
  d.magic = kTmaMagic;
  d.base = static_cast<const unsigned char*>(base);
  for (int i = 0; i < 3; ++i) {
    d.dims[i] = dims[i];
    d.box[i] = box[i];
  }
  d.strides[0] = strides_bytes[0];
  d.strides[1] = strides_bytes[1];
  d.swizzle = swizzle ? 1u : 0u;
  std::memset(map, 0, kTmaMapBytes);
  std::memcpy(map, &d, sizeof d);
}

void tma_load_3d(void* smem_dst, const void* map, int c0, int c1, int c2, uint64_t* bar, const char* file, int line) {
  Worker& w = *tl_worker;
  Fiber* self = current_fiber();
  BulkCopy c{smem_dst, nullptr, 0, -1, self, file, line};
  c.tensor = true;
  std::memcpy(&c.map, map, sizeof c.map);
  c.coord[0] = c0;
  c.coord[1] = c1;
  c.coord[2] = c2;
  auto at = [&] {
    return "cp.async.bulk.tensor (" + site(file, line) + ") of the box at (" + std::to_string(c0) + "," +
           std::to_string(c1) + "," + std::to_string(c2) + ")";
  };
  if (c.map.magic != kTmaMagic) {
    CPUCUDA_FAIL(w, self,
                 at() + ": the map was not made by make_tma_map_2byte_3d (its 128 bytes hold no map: a "
                        "TmaMap made on the host, passed in the kernel's parameters?)");
  }
  if (reinterpret_cast<uintptr_t>(smem_dst) & 127u) {
    CPUCUDA_FAIL(w, self, at() + ": the shared-memory destination is not 128-byte aligned");
  }
  // A GPU traps on a first coordinate off a 16-byte chunk (common/tma.cuh's rules).
  if ((static_cast<int64_t>(c0) * 2) % 16 != 0) {
    CPUCUDA_FAIL(w, self,
                 at() + ": the first coordinate must be a multiple of 8 elements (its bytes a multiple of 16, "
                        "as the box's row is); a GPU stops the kernel with an illegal instruction here");
  }
  const uint64_t bytes = uint64_t{c.map.box[0]} * c.map.box[1] * c.map.box[2] * 2u;
  if (bytes > static_cast<uint64_t>(kMbarMaxTx)) {
    CPUCUDA_FAIL(w, self,
                 at() + ": its box of " + std::to_string(bytes) + " bytes is more than the tx-count of one "
                        "mbarrier phase can wait for (at most " + std::to_string(kMbarMaxTx) + " bytes)");
  }
  c.bytes = static_cast<uint32_t>(bytes);
  c.bar = mbar_index(w, self, bar, "cp.async.bulk.tensor", file, line);
  w.bulk.push_back(c);
  ++w.mbars[static_cast<size_t>(c.bar)].in_flight;
}

void check_tensor_core_read(const void* smem, size_t bytes, int swizzle, const char* what, const char* file,
                            int line) {
  Worker& w = *tl_worker;
  if (w.bulk.empty() && w.tensor_bytes.empty()) return;  // the common case: one branch
  Fiber* self = current_fiber();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(smem), hi = lo + bytes;
  for (const BulkCopy& c : w.bulk) {
    if (copy_lo(c) < hi && lo < copy_hi(c)) {
      CPUCUDA_FAIL(w, self,
                   std::string(what) + " (" + site(file, line) + ") reads shared memory that " + copy_name(c) +
                       " (to " + mbar_name(w.mbars[static_cast<size_t>(c.bar)]) +
                       ") is still writing: read before its mbarrier phase completed: wait on it first");
    }
  }
  for (const TensorBytes& r : w.tensor_bytes) {
    if (r.lo < hi && lo < r.hi && r.swizzle != static_cast<uint32_t>(swizzle)) {
      CPUCUDA_FAIL(w, self,
                   std::string(what) + " (" + site(file, line) + ") reads shared memory that the tensor copy "
                       "issued at " + site(r.file, r.line) + " wrote: the descriptor's swizzle (" +
                       swizzle_name(static_cast<uint32_t>(swizzle)) + ") does not match the copy's (" +
                       swizzle_name(r.swizzle) + "); make the map with the descriptor's swizzle");
    }
  }
}

namespace {

// ---- running a block on a worker

void ensure_stack(Worker& w, Fiber& f) {
  if (f.stack_lo && f.stack_size == w.stack_bytes) return;
  const size_t page = Worker::page_size();
  if (f.stack_lo) munmap(f.stack_lo - page, f.stack_size + page);
  void* base = mmap(nullptr, w.stack_bytes + page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) throw KernelError("cpucuda: cannot map a fiber stack (CPUCUDA_STACK_KB too large?)");
  mprotect(base, page, PROT_NONE);  // guard page: an overflow faults instead of corrupting a neighbour
  f.stack_lo = static_cast<unsigned char*>(base) + page;
  f.stack_size = w.stack_bytes;
}

void prepare_smem(Worker& w, size_t bytes) {
  // ASan: keep at least 64 poisoned bytes past the end to catch overruns.
  const size_t want = ((bytes + 63) / 64) * 64 + (CPUCUDA_ASAN ? 64 : 0);
  if (want > w.smem_capacity) {
#if CPUCUDA_ASAN
    if (w.smem) __asan_unpoison_memory_region(w.smem, w.smem_capacity);
#endif
    std::free(w.smem);
    w.smem = static_cast<unsigned char*>(std::aligned_alloc(64, want));
    if (!w.smem) throw KernelError("cpucuda: cannot allocate dynamic shared memory");
    w.smem_capacity = want;
  }
#if CPUCUDA_ASAN
  __asan_unpoison_memory_region(w.smem, w.smem_capacity);
  std::memset(w.smem, 0xff, bytes);  // uninitialized shared memory reads as NaN/-1, not as zeros
  __asan_poison_memory_region(w.smem + bytes, w.smem_capacity - bytes);
#endif
  w.info.dynamic_smem = w.smem;
  w.info.dynamic_smem_bytes = bytes;
}

std::string deadlock_report(const Worker& w) {
  std::string msg = "deadlock in block " + fmt3(w.info.block_idx.x, w.info.block_idx.y, w.info.block_idx.z) +
                    ": no thread can continue and " + std::to_string(w.num_threads - w.done_count) + " of " +
                    std::to_string(w.num_threads) + " have not returned. Waiting:";
  int shown = 0;
  std::vector<int32_t> mbars_waited;
  for (uint32_t i = 0; i < w.num_threads; ++i) {
    const Fiber& f = w.fibers[i];
    if (f.state == State::kDone) continue;
    if (f.state == State::kAtMbarrier &&
        std::find(mbars_waited.begin(), mbars_waited.end(), f.mbar_wait) == mbars_waited.end()) {
      mbars_waited.push_back(f.mbar_wait);
    }
    if (shown == 8) continue;
    msg += "\n  thread " + fmt3(f.thread_idx.x, f.thread_idx.y, f.thread_idx.z) + " at " + f.wait_what + " (" +
           site(f.wait_file, f.wait_line) + ")";
    if (f.state == State::kAtMbarrier) {
      msg += " for parity " + std::to_string(f.mbar_parity) + " of " +
             mbar_name(w.mbars[static_cast<size_t>(f.mbar_wait)]);
    }
    if (f.state == State::kAtNamedBarrier) {
      const NamedBar& b = w.named[f.named_wait];
      msg += " on barrier " + std::to_string(f.named_wait) + ", " + std::to_string(b.threads_in()) + " of " +
             std::to_string(b.threads) + " threads arrived";
    }
    ++shown;
  }
  if (w.num_threads - w.done_count > static_cast<uint32_t>(shown)) msg += "\n  ...";
  for (const int32_t b : mbars_waited) {
    const Mbar& m = w.mbars[static_cast<size_t>(b)];
    msg += "\n" + mbar_name(m) + ": " + mbar_state(m);
  }
  bool at_named = false;
  for (uint32_t i = 0; i < w.num_threads; ++i) at_named |= w.fibers[i].state == State::kAtNamedBarrier;
  if (at_named) {
    msg += "\n(a named barrier that cannot complete: fewer threads reach it than its count, a bar.sync whose "
           "partner's bar.arrive never comes, or a warp some of whose threads skip it?)";
  } else if (!mbars_waited.empty()) {
    msg += "\n(an mbarrier phase that cannot complete: fewer arrivals than its count, or an expect_tx that "
           "announced more bytes than its bulk copies deliver? or a wait for the wrong parity?)";
  } else {
    msg += "\n(a warp operation whose lanes wait at __syncthreads, or a barrier some threads never reach?)";
  }
  return msg;
}

// Runs one block to completion; returns false (with w.error set) on an error.
bool run_block(Worker& w, uint64_t linear_block) {
  const Job& job = *w.job;
  const uint64_t gx = job.grid.x, gy = job.grid.y;
  w.info.block_idx = uint3{static_cast<unsigned>(linear_block % gx), static_cast<unsigned>((linear_block / gx) % gy),
                           static_cast<unsigned>(linear_block / (gx * gy))};
  w.info.block_dim = job.block;
  w.info.grid_dim = job.grid;
  prepare_smem(w, job.smem_bytes);
  tl_block = &w.info;

  const uint32_t bx = job.block.x, by = job.block.y;
  const uint32_t n = job.block.x * job.block.y * job.block.z;
  w.num_threads = n;
  w.done_count = 0;
  w.bar_arrived = 0;
  w.first_exited = nullptr;
  w.failed = false;
  w.reverse = job.reverse;
  w.q_head = 0;
  w.q_count = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Fiber& f = w.fibers[i];
    ensure_stack(w, f);
    // Stacks are page-aligned, so every fiber's hot top-of-stack frames would map
    // to the same L1 cache sets; a per-fiber offset (up to 4 KiB) spreads them.
    const size_t skew = (i % 32) * 128;
    f.ctx = fc::make_fcontext(f.stack_lo + f.stack_size - skew, f.stack_size - skew, fiber_entry);
    f.thread_idx = uint3{i % bx, (i / bx) % by, i / (bx * by)};
    f.warp = i / 32;
    f.lane = i % 32;
    f.wait_what = nullptr;
    f.wait_file = nullptr;
    f.wait_line = 0;
    f.copies.clear();
    f.group_ends.clear();
    f.retired_groups = 0;
    f.retired_copies = 0;
    f.mbar_wait = -1;
    f.named_wait = -1;
  }
  for (NamedBar& b : w.named) {
    b.open = false;
    b.arrived = 0;
    std::fill(std::begin(b.lanes), std::end(b.lanes), 0u);
    b.waiters.clear();
  }
  w.mbars.clear();
  w.bulk.clear();
  w.tensor_bytes.clear();
  ++w.generation;
  for (uint32_t wi = 0; wi < (n + 31) / 32; ++wi) {
    const uint32_t lanes = std::min<uint32_t>(32, n - wi * 32);
    w.warps[wi].valid = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
    w.warps[wi].exited = 0;
    w.warps[wi].active_groups = 0;
  }
  for (uint32_t i = 0; i < n; ++i) push_ready(w, &w.fibers[w.reverse ? n - 1 - i : i]);

  Fiber* first = pop_ready(w);
  tl_fiber = first;
#if CPUCUDA_ASAN
  __sanitizer_start_switch_fiber(&w.main_fake_stack, first->stack_lo, first->stack_size);
#endif
  fc::transfer_t t = fc::jump_fcontext(first->ctx, &w.main_ctx);
  *static_cast<fc::fcontext_t*>(t.data) = t.fctx;
#if CPUCUDA_ASAN
  __sanitizer_finish_switch_fiber(w.main_fake_stack, nullptr, nullptr);
#endif
  tl_fiber = nullptr;

  bool ok = !w.failed;
  if (ok && w.done_count != n) {
    w.error = deadlock_report(w);
    ok = false;
  }
  for (int id = 1; ok && id < kNamedBarriers; ++id) {
    const NamedBar& b = w.named[id];
    if (!b.open) continue;
    // Harmless once the block ends, but the next use of the barrier (a loop
    // one round longer, a persistent kernel's next tile) would complete early.
    w.error = "block " + fmt3(w.info.block_idx.x, w.info.block_idx.y, w.info.block_idx.z) +
              ": the block ended with named barrier " + std::to_string(id) + " holding " +
              std::to_string(b.threads_in()) + " of its " + std::to_string(b.threads) + " arrivals (first at " +
              site(b.file, b.line) + "): an arrival that no completion took (a hand-over bar.arrive that no "
              "bar.sync waited for?)";
    ok = false;
  }
#if CPUCUDA_ASAN
  if (!ok) {
    // Abandoned fibers leave poisoned stack frames behind; clear them for reuse.
    for (uint32_t i = 0; i < n; ++i) __asan_unpoison_memory_region(w.fibers[i].stack_lo, w.fibers[i].stack_size);
  }
#endif
  return ok;
}

void run_job_on_worker(Worker& w, Job& job) {
  w.job = &job;
  while (!job.failed.load(std::memory_order_relaxed)) {
    const uint64_t b = job.next_block.fetch_add(1, std::memory_order_relaxed);
    if (b >= job.num_blocks) break;
    bool ok = false;
    try {
      ok = run_block(w, b);
    } catch (const std::exception& e) {
      w.error = e.what();
    }
    if (!ok) {
      std::lock_guard<std::mutex> lock(job.error_mu);
      if (!job.failed.exchange(true)) job.error = std::move(w.error);
      break;
    }
  }
  tl_block = nullptr;
  w.job = nullptr;
}

// Worker threads live for the whole process, so fiber stacks and shared memory
// buffers are reused across blocks and launches.
class Pool {
 public:
  Pool() {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    num_ = static_cast<int>(env_size("CPUCUDA_WORKERS", hw));
    const size_t stack_kb = env_size("CPUCUDA_STACK_KB", 256);
    const char* rev = std::getenv("CPUCUDA_REVERSE_ORDER");
    reverse_.store(rev && *rev && std::strcmp(rev, "0") != 0);
    for (int i = 0; i < num_; ++i) {
      workers_.push_back(std::make_unique<Worker>());
      workers_.back()->stack_bytes = std::max<size_t>(stack_kb, 16) * 1024;
    }
    for (int i = 0; i < num_; ++i) threads_.emplace_back([this, i] { worker_main(*workers_[i]); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int size() const { return num_; }
  std::atomic<bool>& reverse() { return reverse_; }

  void run(Job& job) {
    std::lock_guard<std::mutex> serial(launch_mu_);  // one launch at a time
    std::unique_lock<std::mutex> lock(mu_);
    job_ = &job;
    running_ = num_;
    ++generation_;
    start_cv_.notify_all();
    done_cv_.wait(lock, [this] { return running_ == 0; });
    job_ = nullptr;
  }

 private:
  void worker_main(Worker& w) {
    tl_worker = &w;
#if CPUCUDA_ASAN
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      pthread_attr_getstack(&attr, &addr, &size);
      w.main_stack_bottom = addr;
      w.main_stack_size = size;
      pthread_attr_destroy(&attr);
    }
#endif
    uint64_t seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        job = job_;
      }
      run_job_on_worker(w, *job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (--running_ == 0) done_cv_.notify_one();
      }
    }
  }

  int num_ = 1;
  std::atomic<bool> reverse_{false};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::mutex launch_mu_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool quit_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void run_grid(Invoker invoke, const void* params, dim3 grid, dim3 block, size_t smem_bytes) {
  const std::string config = "grid " + fmt3(grid.x, grid.y, grid.z) + ", block " + fmt3(block.x, block.y, block.z) +
                             ", " + std::to_string(smem_bytes) + " bytes of dynamic shared memory";
  auto reject = [&](const std::string& why) {
    throw KernelError("cpucuda: invalid launch configuration (" + config + "): " + why);
  };
  if (tl_worker) reject("launching a kernel from inside a kernel is not supported");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) reject("grid dimensions must be at least 1");
  if (grid.y > 65535 || grid.z > 65535) reject("grid.y and grid.z must be at most 65535");
  if (block.x == 0 || block.y == 0 || block.z == 0) reject("block dimensions must be at least 1");
  if (block.x > 1024 || block.y > 1024 || block.z > 64) reject("block dimensions must be at most (1024,1024,64)");
  if (static_cast<uint64_t>(block.x) * block.y * block.z > static_cast<uint64_t>(kMaxThreads)) {
    reject("more than 1024 threads per block");
  }
  if (smem_bytes > kSharedMemPerBlockOptin) {
    reject("dynamic shared memory above the " + std::to_string(kSharedMemPerBlockOptin) + "-byte limit of an H200");
  }
  Job job;
  job.invoke = invoke;
  job.params = params;
  job.grid = grid;
  job.block = block;
  job.smem_bytes = smem_bytes;
  job.num_blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  job.reverse = pool().reverse().load();
  pool().run(job);
  if (job.failed.load()) throw KernelError("cpucuda: kernel failed: " + job.error);
}

}  // namespace detail

void set_reverse_order(bool reverse) { detail::pool().reverse().store(reverse); }
bool reverse_order() { return detail::pool().reverse().load(); }
int num_workers() { return detail::pool().size(); }

}  // namespace cpucuda
