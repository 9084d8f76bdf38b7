#include "checked_launch.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_compat.cuh"
#include "device_buffer.h"
#include "launch.cuh"

namespace pa {
namespace {

// A bad item is reported as one 64-bit key, (request + 1) << 32 | item, so the
// smallest key over all threads (one atomicMin) is the first bad item in the
// report order: the batch's own items (request -1, then its sinks by query
// head), then request by request, within a request the kinds below, then its
// table entries in order.
enum Item : uint32_t {
  // The batch (request -1).
  kFirstStart = 0,  // query_start_loc[0] != 0
  kLastStart,       // query_start_loc[num_requests] != first_padding_row
  kFirstSink,       // kFirstSink + h: sinks[h] is NaN or +inf
};
enum RequestItem : uint32_t {
  kQueryOrder = 0,   // query_start_loc[r + 1] < query_start_loc[r]
  kQueryPastTokens,  // query_start_loc[r + 1] > num_tokens
  kQueryMax,         // q_len > max_query_len
  kDecodeOnly,       // decode_only, and q_len > 1
  kSeqBelowQuery,    // seq_len < q_len
  kSeqMax,           // seq_len > max_seq_len
  kSeqTable,         // seq_len > max_blocks_per_seq * block_size
  kFirstEntry,       // kFirstEntry + b: block_table[r][b] outside [0, num_blocks)
};

constexpr unsigned long long kNone = ~0ull;
constexpr int kThreads = 128;

__device__ __forceinline__ unsigned long long item_key(int r, uint32_t item) {
  return (static_cast<unsigned long long>(r + 1) << 32) | item;
}

// A sink logit is finite, or -inf for none (AttentionParams::sinks). Written
// with comparisons alone, which are false for NaN, so no isnan is needed.
__device__ __forceinline__ bool valid_sink(float s) { return s == -INFINITY || fabsf(s) < INFINITY; }

// Program r checks request r (program 0 also the batch's items and the sinks,
// [num_q_heads] or null): thread 0 the lengths, all threads the table entries
// the request's seq_len makes it read.
__global__ void __launch_bounds__(kThreads)
    check_batch_kernel(BatchView b, int block_size, int num_blocks, const float* __restrict__ sinks,
                       int num_q_heads, unsigned long long* first_bad) {
  const int r = blockIdx.x;
  if (r == 0 && threadIdx.x == 0) {
    if (b.query_start_loc[0] != 0) atomicMin(first_bad, item_key(-1, kFirstStart));
    if (b.query_start_loc[b.num_requests] != b.first_padding_row) atomicMin(first_bad, item_key(-1, kLastStart));
  }
  if (r == 0 && sinks != nullptr) {
    for (int h = threadIdx.x; h < num_q_heads; h += kThreads) {
      if (!valid_sink(sinks[h])) {
        atomicMin(first_bad, item_key(-1, kFirstSink + h));
        break;  // this thread's later heads come after it
      }
    }
  }
  if (r >= b.num_requests) return;
  // 64 bits: the values may be anything, and their differences must not wrap.
  const long long start = b.query_start_loc[r], end = b.query_start_loc[r + 1];
  const long long q_len = end - start, seq_len = b.seq_lens[r];
  if (threadIdx.x == 0) {
    // The first failing rule of this request (its smallest key).
    uint32_t item = kFirstEntry;
    if (end < start) {
      item = kQueryOrder;
    } else if (end > b.num_tokens) {
      item = kQueryPastTokens;
    } else if (q_len > b.max_query_len) {
      item = kQueryMax;
    } else if (b.decode_only && q_len > 1) {
      item = kDecodeOnly;
    } else if (seq_len < q_len) {
      item = kSeqBelowQuery;
    } else if (seq_len > b.max_seq_len) {
      item = kSeqMax;
    } else if (seq_len > static_cast<long long>(b.max_blocks_per_seq) * block_size) {
      item = kSeqTable;
    }
    if (item != kFirstEntry) atomicMin(first_bad, item_key(r, item));
  }
  // The entries a kernel reads for seq_len positions, never past the table row.
  const long long wanted = seq_len > 0 ? (seq_len + block_size - 1) / block_size : 0;
  const int num_entries = static_cast<int>(min(wanted, static_cast<long long>(b.max_blocks_per_seq)));
  const int* row = b.block_table + static_cast<size_t>(r) * b.max_blocks_per_seq;  // [max_blocks_per_seq]
  for (int e = threadIdx.x; e < num_entries; e += kThreads) {
    const int id = row[e];
    if (id < 0 || id >= num_blocks) {
      atomicMin(first_bad, item_key(r, kFirstEntry + e));
      break;  // this thread's later entries come after it
    }
  }
}

// One value of a device array, for the message (after the check has synchronised).
int read_back(const int* device_array, long long index) {
  int v = 0;
  PA_CHECK(cudaMemcpy(&v, device_array + index, sizeof(int), cudaMemcpyDeviceToHost));
  return v;
}

float read_back(const float* device_array, long long index) {
  float v = 0.0f;
  PA_CHECK(cudaMemcpy(&v, device_array + index, sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

std::string str(long long v) { return std::to_string(v); }

// The message for the bad item `key`, with the values read back from the device.
std::string describe(const AttentionParams& p, unsigned long long key) {
  const BatchView& b = p.batch;
  const int r = static_cast<int>(key >> 32) - 1;
  const uint32_t item = static_cast<uint32_t>(key & 0xFFFFFFFFu);
  if (r < 0) {
    const std::string last = "query_start_loc[" + str(b.num_requests) + "]";
    if (item == kFirstStart) return "query_start_loc[0] = " + str(read_back(b.query_start_loc, 0)) + "; it must be 0";
    if (item >= kFirstSink) {
      const long long h = item - kFirstSink;
      return "query head " + str(h) + ": sinks[" + str(h) + "] = " + std::to_string(read_back(p.sinks, h)) +
             " (valid: a finite logit, or -inf for no sink; a NaN or +inf sink makes the row's output NaN "
             "while its lse stays finite or -inf, which a merge by lse would drop)";
    }
    return last + " = " + str(read_back(b.query_start_loc, b.num_requests)) + ", but first_padding_row is " +
           str(b.first_padding_row) + " (the rows of the requests end where the padding rows begin)";
  }
  const std::string who = "request " + str(r) + ": ";
  const long long start = read_back(b.query_start_loc, r), end = read_back(b.query_start_loc, r + 1);
  const long long q_len = end - start, seq_len = read_back(b.seq_lens, r);
  const std::string qsl = "query_start_loc[" + str(r + 1) + "] = " + str(end);
  const std::string seq = "seq_lens[" + str(r) + "] = " + str(seq_len);
  switch (item) {
    case kQueryOrder:
      return who + qsl + " is below query_start_loc[" + str(r) + "] = " + str(start) +
             " (query starts must not decrease; valid: [" + str(start) + ", " + str(b.num_tokens) + "])";
    case kQueryPastTokens:
      return who + qsl + " is past num_tokens (valid: [" + str(start) + ", " + str(b.num_tokens) + "])";
    case kQueryMax:
      return who + "query length " + str(q_len) + " exceeds max_query_len " + str(b.max_query_len) +
             " (the host-side bound must bound every request; valid: [0, " + str(b.max_query_len) + "])";
    case kDecodeOnly:
      return who + "decode_only is set, but the request has " + str(q_len) + " queries (valid: [0, 1])";
    case kSeqBelowQuery:
      return who + seq + " is below its query length " + str(q_len) +
             " (its queries are the last q_len of its positions; valid: [" + str(q_len) + ", " + str(b.max_seq_len) +
             "])";
    case kSeqMax:
      return who + seq + " exceeds max_seq_len " + str(b.max_seq_len) + " (valid: [" + str(q_len) + ", " +
             str(b.max_seq_len) + "])";
    case kSeqTable:
      return who + seq + " needs more than the table row's " + str(b.max_blocks_per_seq) + " blocks of " +
             str(p.kv.block_size) + " (valid: [" + str(q_len) + ", " +
             str(static_cast<long long>(b.max_blocks_per_seq) * p.kv.block_size) + "])";
    default: {
      const long long e = item - kFirstEntry;
      const int id = read_back(b.block_table, static_cast<long long>(r) * b.max_blocks_per_seq + e);
      return who + "block_table[" + str(r) + "][" + str(e) + "] = " + str(id) + " is out of range [0, " +
             str(p.kv.num_blocks) + ") (entry " + str(e) + " of the " + str((seq_len + p.kv.block_size - 1) / p.kv.block_size) +
             " its seq_len " + str(seq_len) + " reads)";
    }
  }
}

}  // namespace

void check_device_batch(const AttentionParams& p, const char* who, cudaStream_t stream) {
  if (!p.checked) return;
  const BatchView& b = p.batch;
  const std::string me = std::string(who) + ": checked launch: ";
  // The host-side sizes first: the kernel's reads depend on them.
  PA_REQUIRE(b.num_requests >= 0 && b.num_tokens >= 0 && b.max_blocks_per_seq >= 0,
             me + "num_requests (" + str(b.num_requests) + "), num_tokens (" + str(b.num_tokens) +
                 ") and max_blocks_per_seq (" + str(b.max_blocks_per_seq) + ") must be >= 0");
  PA_REQUIRE(b.first_padding_row >= 0 && b.first_padding_row <= b.num_tokens,
             me + "first_padding_row " + str(b.first_padding_row) + " is outside [0, num_tokens = " +
                 str(b.num_tokens) + "]");
  PA_REQUIRE(p.kv.block_size >= 1, me + "block_size " + str(p.kv.block_size) + " must be >= 1");
  PA_REQUIRE(b.query_start_loc != nullptr && (b.num_requests == 0 || b.seq_lens != nullptr) &&
                 (b.num_requests == 0 || b.max_blocks_per_seq == 0 || b.block_table != nullptr),
             me + "query_start_loc, seq_lens and block_table must be device arrays, not null");

  thread_local DeviceBuffer<unsigned long long> first_bad(1);  // the smallest bad key, kNone when none
  PA_CHECK(cudaMemsetAsync(first_bad.data(), 0xFF, sizeof(unsigned long long), stream));
  launch(check_batch_kernel, dim3(std::max(1, b.num_requests)), dim3(kThreads), 0, stream, b, p.kv.block_size,
         p.kv.num_blocks, p.sinks, p.num_q_heads, first_bad.data());
  unsigned long long key = kNone;
  PA_CHECK(cudaMemcpyAsync(&key, first_bad.data(), sizeof(key), cudaMemcpyDeviceToHost, stream));
  PA_CHECK(cudaStreamSynchronize(stream));
  if (key == kNone) return;
  throw Error(me + describe(p, key) + "; the device metadata is wrong, no attention kernel was launched");
}

}  // namespace pa
