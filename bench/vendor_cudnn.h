// vendor_cudnn: cuDNN's fused attention (SDPA) behind the course's backend
// seam, through the cudnn-frontend C++ graph API. It reads the course's own
// paged cache in place: cuDNN's paged K/V container is (num_blocks, Hkv,
// block_size, D), and the strides (block_size*Hkv*D, D, Hkv*D, 1) describe our
// [num_blocks, block_size, Hkv, D] layout; the page tables are our block_table.
// Queries and outputs stay [num_tokens, Hq, D] (ragged offsets per request),
// the lse [num_tokens, Hq] (cuDNN's softmax stats, natural log). Nothing is
// copied into another layout.
//
// GPU flavor only, built when CMake finds cuDNN and cudnn-frontend
// (cmake/FindCudnn.cmake, cmake/FindCudnnFrontend.cmake). cuDNN's graphs are
// built once per batch shape and cached, so a step after the first is one
// graph execution (plus zeroing the padding rows, when a batch has them).
#pragma once

#include <string>

#include "common/device_batch.h"
#include "common/problem.h"

namespace pa::vendor_cudnn {

// Empty when cuDNN runs this batch; otherwise why not: a course feature the
// backend does not map (8-bit caches, learned sinks, sink tokens) or cuDNN's
// own refusal of the graph, in its words. Builds the batch shape's graph (and
// caches it), so calling this before timing keeps the build out of the timed
// region.
std::string unsupported(const Problem& p);

// One attention step on db: out [num_tokens, Hq, D] bf16 and lse [num_tokens,
// Hq] for every request's rows; padding rows get exact zeros and lse -inf.
// Throws pa::Error with unsupported()'s reason when cuDNN cannot run the batch.
void forward(const Problem& p, DeviceBatch& db);

// The versions that run: "cuDNN 9.14.0 (built against 9.14.0), cudnn-frontend 1.32.0".
std::string versions();

// Padding rows [first_row, num_tokens): out := +0.0, lse := -inf (vendor_cudnn.cu).
void fill_padding_rows(bf16* out, float* lse, int first_row, int num_tokens, int num_q_heads, int head_dim,
                       cudaStream_t stream);

}  // namespace pa::vendor_cudnn
