// Checked launches: the device copy of a batch's metadata, validated before the
// attention kernels read it.
//
// The host copy of a batch is validated once (pa::validate, DeviceBatch), but
// the kernels read the device copy, and a serving engine rewrites that every
// step. A block id past the cache (num_blocks, -1, 2^28) then reads out of
// bounds: garbage or NaN outputs, or a crash. With AttentionParams::checked
// set, every launcher first runs one small kernel over the entries each request
// will read and the metadata they depend on, reads back the first bad item
// (smallest request, then the order below) and throws pa::Error naming it, so
// no attention kernel runs on a bad batch. What is checked, per request r:
//   - query_start_loc[r + 1] >= query_start_loc[r]   (q_len >= 0)
//   - query_start_loc[r + 1] <= num_tokens
//   - q_len <= max_query_len, and q_len <= 1 when decode_only is set
//   - q_len <= seq_lens[r] <= max_seq_len, and <= max_blocks_per_seq * block_size
//   - block_table[r][b] in [0, num_blocks) for b in [0, ceil(seq_len / block_size))
// and for the batch: query_start_loc[0] == 0, query_start_loc[num_requests] ==
// first_padding_row; and when p.sinks is set, sinks[h] finite or -inf for every
// query head h (a NaN or +inf sink makes the row's output NaN while its lse
// stays finite or -inf, so a merge by lse would drop the row silently). Its
// price: one launch and one host synchronisation per forward (measured by
// bench_attention's checked cases); a stream being captured into a CUDA graph
// cannot synchronise, so capture with checked off.
#pragma once

#include "attention_params.h"
#include "check.h"

namespace pa {

// Does nothing unless p.checked. Otherwise validates p.batch's device arrays as
// above on `stream` and throws pa::Error("<who>: checked launch: ...") naming
// the first bad item, its value and the valid range. `who` names the caller
// ("stage 04").
void check_device_batch(const AttentionParams& p, const char* who, cudaStream_t stream = nullptr);

}  // namespace pa
