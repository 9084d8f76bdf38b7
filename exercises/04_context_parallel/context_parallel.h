// Exercise 04: context-parallel decode. The KV cache of a decode batch is
// sharded over R ranks by blocks; each rank runs the engine's split decode over
// the keys it holds and keeps one partial (o, lse) per row; the partials of all
// ranks meet (an all-gather), and every rank merges them by log-sum-exp in rank
// order, which makes the result the same bits on every rank and in every run.
//
// The learner's part (starter.cu; solution.cu has an answer):
//   TODO 1  owner(): which rank holds a request's block b
//   TODO 2  the partial of a row that has no key on a rank: o = 0, lse = -inf
//   TODO 3  the merge's source: partial i of a row is rank i's (o, lse)
// Everything else (shards, the runs, the collective as a copy) is given, in
// context_parallel.cu. nccl_decode.cu runs the same pieces one process per GPU.
#pragma once

#include <string>
#include <vector>

#include "common/attention_params.h"
#include "common/device_batch.h"
#include "common/problem.h"

namespace pa::exercise04 {

enum class Sharding {
  contiguous,   // rank r holds one run of each request's blocks: blocks [r n / R, (r + 1) n / R) of n
  interleaved,  // block b of each request is on rank b % R (vLLM's decode context parallel does this per token)
};
const char* name(Sharding s);

// TODO 1: the rank (0 .. ranks - 1) that holds block b (0 <= b < num_blocks, in
// block-table order) of a request whose context fills num_blocks blocks.
int owner(Sharding s, int b, int num_blocks, int ranks);

// One rank's part of a decode batch: its own pool holds only the blocks it
// owns (block ids renumbered 0..), its batch only the requests with at least
// one key here, each with seq_len = its keys here and one query, the same
// query as in the whole batch. Keys are a set to a decode (its query sees
// every cached key; positions matter only to masks, and there are none here),
// so a shard's keys may come from anywhere in the context.
struct Shard {
  int rank = 0, ranks = 1;
  Sharding sharding = Sharding::contiguous;
  Problem problem;               // the rank's batch; num_requests() may be 0
  std::vector<int> shard_row;    // [whole num_tokens]: the row of problem's out that holds the whole
                                 //   batch's row t, or -1 (no key of its request here, or a padding row)
  long long keys() const;        // the keys this rank holds, over all requests
};

// The shard of `whole` on `rank`. whole must be a decode batch (every q_len 1,
// or 0 for a request without a query) over a bf16 cache, without window or
// sinks; throws pa::Error otherwise, or if ranks < 1 or rank is not in [0, ranks).
Shard make_shard(const Problem& whole, int rank, int ranks, Sharding s);

// One rank's partial of every row of the whole batch, written where the
// all-gather expects it: o [rows, Hq, D] bf16 and lse [rows, Hq], rows = the
// whole batch's num_tokens. Runs the engine's split decode over db (the shard's
// DeviceBatch; not used when the shard has no request), then writes each row's
// partial: the shard's row, or the empty state (TODO 2).
void local_attention(const Shard& shard, DeviceBatch* db, bf16* o, float* lse, cudaStream_t stream = nullptr);

// TODO 2 lives in this launch: row t of (o, lse) := the shard's row shard_row[t]
// of (shard_o, shard_lse), or the empty state when shard_row[t] < 0.
void write_partials(const int* shard_row, int rows, int num_q_heads, int head_dim, const bf16* shard_o,
                    const float* shard_lse, bf16* o, float* lse, cudaStream_t stream);

// The merge, on every rank: whole.out and whole.lse (when not null) of each
// request's row from the gathered partials of all ranks, o [ranks, rows, Hq, D]
// and lse [ranks, rows, Hq], folded in rank order with the course's merge
// (common/merge.cuh); padding rows exactly zero. TODO 3 is its partial source.
void merge_ranks(const AttentionParams& whole, const bf16* o, const float* lse, int ranks,
                 cudaStream_t stream = nullptr);

// The exercise in one process: every rank's shard, local attention and
// partials, the all-gather as a copy into one buffer, then the merge into
// whole_db's out and lse. rank_order: the order the ranks run in (empty: 0 ..
// ranks - 1); the result must not depend on it.
void run_in_one_process(const Problem& whole, DeviceBatch& whole_db, int ranks, Sharding s,
                        const std::vector<int>& rank_order = {});

// The starter's unfinished device TODOs, read back after a run: throws
// pa::TodoError naming them (the solution's is a no-op).
void check_todos();

}  // namespace pa::exercise04
