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

// The 8-bit write path (stage 05): quantizes each new token's K and V head rows
// (common/quant.cuh: scale = max|x| / 127 or 448, one per (token, KV head)) and
// stores codes into kv.k_codes / kv.v_codes and scales into kv.k_scale /
// kv.v_scale at the token's slot. kv.format must be int8 or fp8_e4m3.
// k_new, v_new: [num_tokens, num_kv_heads, head_dim] bf16; slot_mapping as write_kv.
// This is the harness's copy, used to build every 8-bit test and benchmark
// input; stage05::write_kv is the learner's version of the same kernel (its
// TODOs), checked bit for bit against the host quantizer, so the 8-bit tests of
// stages 05 and 06 do not depend on an unfinished skeleton.
void write_kv_quantized(const PagedKV& kv, const bf16* k_new, const bf16* v_new, const int* slot_mapping,
                        int num_tokens, cudaStream_t stream = nullptr);

// The attention kernels' code -> MMA operand conversions (common/quant.cuh's
// decode4_half2 for K, decode_pair_half for V) over codes[0, n), n a multiple
// of 8, as a kernel: k_bits[i] = code i's value as fp16 bits through the K path;
// v_bits[i] and v_bits[n + i] = the same through the V path, from the low and
// from the high half of a pair (v_bits holds 2n values). For tests: on a GPU
// build it runs the device path those kernels use.
void decode_codes(KvFormat f, const uint8_t* codes, int n, uint16_t* k_bits, uint16_t* v_bits,
                  cudaStream_t stream = nullptr);

// Rows [batch.first_padding_row, batch.num_tokens) belong to no request: out := 0,
// lse := -inf. A no-op when there are none.
void clear_padding_rows(const AttentionParams& p, cudaStream_t stream = nullptr);

// Fills data[0, n) with reproducible pseudo-random values, uniform in
// [-sqrt(3), sqrt(3)) (unit variance), from a counter-based hash of (seed, index).
// Benchmarks use it to fill gigabyte caches on the device instead of the host.
void fill_random(bf16* data, size_t n, uint64_t seed, cudaStream_t stream = nullptr);

}  // namespace pa
