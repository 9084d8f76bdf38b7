// The engine: the one place where the stages' pieces meet. A stage's forward
// runs its own idea; the engine composes every cache format (stage 05) with
// every mask (stage 06's window, stage 08's sink tokens), learned sinks (stage
// 08), whole query tiles (stage 03) and split-KV (stage 04), on the fastest tile
// family of each format (bf16: stage 04's two-warp decode tile, going further,
// and stage 09's Hopper tile for prefill query tiles on an sm_90 GPU).
//
// Its interface has FlashInfer's plan/run shape, which is what a serving engine
// embeds:
//   plan()           once per batch shape (the bounds a step's batch stays
//                    within), on the host: validates the shape, picks the path
//                    and the split count, sizes the workspace. No device work.
//   workspace_bytes  the caller allocates that much device memory, once, and
//                    owns it (one workspace per stream that runs at a time).
//   run()            once per layer and step: launches only. No allocation, no
//                    host synchronisation, no thread-local state, so a step can
//                    be captured in a CUDA graph and replayed while contexts
//                    grow inside the plan's bounds (tests/test_engine.cpp does).
// Checked launches (AttentionParams::checked) are the one exception: they copy
// a verdict back to the host, so a checked run synchronises and cannot be
// captured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/attention_params.h"
#include "common/check.h"
#include "common/stages.h"

namespace pa::engine {

class TunedTable;  // tuned_table.h: measured split counts per (batch, context, group)

// The batches a plan serves. The grids are sized from these, so a plan made for
// a bound runs every batch inside it, and a graph captured from it stays valid
// while the contexts grow up to max_seq_len.
struct Bounds {
  int num_requests = 0;      // exactly the batch's (the grids' z dimension)
  int num_tokens = 0;        // exactly the batch's rows of q and out, padding rows included
  int max_query_len = 0;     // >= every request's q_len
  int max_seq_len = 0;       // >= every request's seq_len
  bool decode_only = false;  // every q_len <= 1
};

// The tightest bounds of a batch (its own host-side sizes).
Bounds bounds_of(const BatchView& batch);

// How a plan runs the batch.
enum class Path : uint8_t {
  whole_tiles,        // stage 03: one program per (query tile, KV head, request) over its whole context
  splits,             // stage 04: decodes, each context cut into splits, then the merge
  sink_token_splits,  // stage 08: decodes with sink tokens, split 0 the sink tokens, then the window's splits
  mixed,              // chunks and decodes: 128-row tiles for requests of several queries (on stage 09's tile,
                      //   optionally on a few programs per KV head: Options::chunk_programs), the decode tile
                      //   over splits for the decodes beside them (a dependent launch), then the decodes' merge
  work_list,          // decodes (Options::work_list): a flat grid of items of balanced length over all requests,
                      //   each context cut by its own length, then the merge
  invariant,          // batch-invariant mode (going_further/batch_invariant.cuh): fixed-size splits for decodes, 128-row tiles for the rest
};
const char* name(Path path);

// Which tile runs the query tiles of prefill chunks (whole tiles and the
// chunks of a mixed batch).
enum class PrefillTiles : uint8_t {
  automatic,  // stage 09's on an sm_90 GPU where it serves the layer, stage 03's elsewhere (the CPU included)
  mma_sync,   // stage 03's 128-row tile (mma.sync), on any device
  hopper,     // stage 09's (TMA, mbarriers, wgmma): bf16, causal, no window, no learned sinks, not batch-invariant;
              //   an sm_90 GPU, or the CPU runtime (which emulates it: tests)
};

// How stage 09's tile fills its ring of K/V slots, where a plan runs it.
enum class PrefillCopies : uint8_t {
  tma,       // stage 09's: one tensor copy per cache block (at most a tile's rows) and 64-dim slab
  cp_async,  // 16-byte cp.async copies by the producer warpgroup's threads into the same slots
             //   (engine/hopper_cp_async.cuh), what FlashInfer keeps for small pages; not with mma_sync tiles
};

struct Options {
  int num_splits = 0;  // 0: the engine decides (stage 04's rule); 1..64 forces that many splits on the decodes
  int num_sms = 0;     // 0: the current device's SM count
  // Not null: a decode plan takes its split count from the table's entry for
  // its bounds where one serves them (tuned_table.h), stage 04's rule elsewhere.
  // The caller keeps the table alive while it plans; plans do not point to it.
  // The table's shape must be the layer's, and num_splits must be 0.
  // Batch-invariant plans ignore it (their splits never depend on the batch).
  const TunedTable* tuned = nullptr;
  // Decode batches: cut each context into items by its own length (a long
  // context beside short ones gets many, a short one one) instead of one split
  // count for every request (with a window: the keys inside it; sink tokens
  // before it: an item of their own). Decodes, and not with num_splits, a
  // tuned table or batch-invariant mode.
  bool work_list = false;
  PrefillTiles prefill_tiles = PrefillTiles::automatic;
  PrefillCopies prefill_copies = PrefillCopies::tma;
  // Mixed batches whose chunks run on stage 09's tile: n > 0 runs the chunks'
  // query tiles on n programs per KV head, each several, so that the decodes
  // start beside them on the SMs they leave (engine/persistent_chunks.cuh); n
  // x num_kv_heads must not exceed the SMs (one program per SM). 0: the plan
  // chooses n from the bounds, giving the chunks the share of the SMs at which
  // they and the decodes finish together (bounds without decodes: one program
  // per query tile). one_program_per_tile: stage 09's grid, one program per
  // query tile (the decodes start after its first wave).
  static constexpr int one_program_per_tile = -1;
  int chunk_programs = 0;
};

// Made by plan(), read by run(). Plain data: copy it, keep it beside the workspace.
struct Plan {
  // The layer shape it was made for; run() refuses any other.
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  KvFormat format = KvFormat::bf16;
  int window = 0;        // 0 = none
  int sink_tokens = 0;   // 0 = none (also when there is no window: they change nothing then)
  bool sinks = false;    // learned sink logits
  bool batch_invariant = false;
  Bounds bounds;

  Path path = Path::whole_tiles;
  int num_splits = 1;       // split programs per (KV head, request), the sink tokens' split included
  int keys_per_split = 0;   // keys of each split after the leading one(s); work list: the fewest keys of an item
  int items_per_wave = 0;   // work list: the items one wave of programs holds per KV head
  int span_keys = 0;        // the most keys a request reads (its context, or its window)
  bool tuned = false;       // num_splits came from Options::tuned's table, not from stage 04's rule
  bool hopper_prefill = false;  // prefill query tiles on stage 09's tile (Options::prefill_tiles), not stage 03's
  bool cp_async_copies = false;  // stage 09's tile filled by cp.async, not TMA (Options::prefill_copies)
  int chunk_programs = 0;        // mixed path on stage 09's tile: programs per KV head over the chunks' query
                                 //   tiles (Options::chunk_programs, or the plan's count); 0: one per query tile
  size_t part_o_floats = 0;    // partial outputs in the workspace: [num_splits, rows, Hq, D] (work list: rows 1)
  size_t part_lse_floats = 0;  // their lse: [num_splits, rows, Hq]
  size_t workspace_bytes = 0;  // what run() needs; 0 = no workspace

  std::string describe() const;  // e.g. "splits x16 (256 keys each), int8, window 4096"
};

// Validates the layer's shape and options (p's tensors may be null; its
// num_q_heads, kv shape and format, window, sink_tokens, sinks and
// batch_invariant are read) and plans for `bounds`. Throws pa::Error naming what
// it cannot serve.
Plan plan(const AttentionParams& p, const Bounds& bounds, const Options& options = {});

// One layer of one step: out (and lse when p.lse is not null) for every row,
// padding rows exactly 0. p must have the plan's shape and a batch inside its
// bounds; workspace: at least plan.workspace_bytes of device memory, 256-byte
// aligned (cudaMalloc's pointers are). Throws pa::Error, before any launch, on
// a mismatch.
void run(const Plan& plan, const AttentionParams& p, void* workspace, size_t workspace_bytes,
         cudaStream_t stream = nullptr);

// Cascade attention (stage 07) for a batch whose requests share prefixes,
// composed with any cache format and learned sinks (stage 08: the sink joins
// each row's own suffix partial, never a prefix partial). `cascade` is
// plan_cascade()'s (or stage07::plan()'s) for this batch: made once per batch on the host, it owns
// the gathered queries, the prefix and suffix partials and, where the suffix pass runs beside the
// prefix pass, the second stream, so this call only launches. No window and no sink tokens (stage 07 refuses windows),
// no batch-invariant mode (a prefix pass serves a whole group).
void run_cascade(const stage07::Cascade& cascade, const AttentionParams& p, cudaStream_t stream = nullptr);
// stage07::plan() with the engine's prefix pass. prefix_tiles:
//   automatic: stage 09's tile (TMA, mbarriers, wgmma) and the engine's cost
//              model where it serves (bf16 caches; an sm_90 GPU or the CPU
//              runtime), stage 03's tiles and stage 07's model elsewhere;
//   hopper:    stage 09's tile, or an error where it cannot run;
//   mma_sync:  stage 03's tiles (stage 07's own plan).
// force as stage07::plan's.
stage07::Cascade plan_cascade(const AttentionParams& p, const BatchMeta& meta, const std::vector<PrefixGroup>& groups,
                              int force = -1, PrefillTiles prefix_tiles = PrefillTiles::automatic);
// The cost model plan_cascade() asks for one group (stage07::choose_path's
// arguments): the engine's, for stage 09's prefix pass, where that serves p's
// cache (bf16), else stage 07's.
stage07::Path cascade_path(const AttentionParams& p, int members, int prefix_len, int queries, int suffix_len,
                           int num_sms);

// plan() + a workspace of its own + run(), for one call: tests and one-off use,
// not a serving loop (it allocates).
void forward(const AttentionParams& p, cudaStream_t stream = nullptr, const Options& options = {});

}  // namespace pa::engine
