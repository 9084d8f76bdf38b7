// Batch-level device operations every backend shares: the cache write path,
// and exact zeros for padding rows.
#pragma once

#include "attention_params.h"
#include "check.h"

namespace pa {

// k_new, v_new: [num_tokens, num_kv_heads, head_dim]; slot_mapping: [num_tokens],
// slot = block * block_size + offset, -1 = skip (padding rows).
void write_kv(const PagedKV& kv, const bf16* k_new, const bf16* v_new, const int* slot_mapping,
              int num_tokens, cudaStream_t stream = nullptr);

// Rows [batch.first_padding_row, batch.num_tokens) belong to no request: out := 0,
// lse := -inf. A no-op when there are none.
void clear_padding_rows(const AttentionParams& p, cudaStream_t stream = nullptr);

// Fills data[0, n) with reproducible pseudo-random values, uniform in
// [-sqrt(3), sqrt(3)) (unit variance), from a counter-based hash of (seed, index).
// Benchmarks use it to fill gigabyte caches on the device instead of the host.
void fill_random(bf16* data, size_t n, uint64_t seed, cudaStream_t stream = nullptr);

}  // namespace pa
