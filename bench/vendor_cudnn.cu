// vendor_cudnn's one kernel of its own: cuDNN writes only the rows of requests,
// and the course's contract says padding rows hold exact zeros with lse -inf.
#include <cmath>

#include "common/check.h"
#include "vendor_cudnn.h"

namespace pa::vendor_cudnn {

namespace {

__global__ void fill_padding_rows_kernel(bf16* out,    // [num_tokens, Hq, D]
                                         float* lse,   // [num_tokens, Hq] or null
                                         int first_row, int num_tokens, int num_q_heads, int head_dim) {
  const size_t row_elems = static_cast<size_t>(num_q_heads) * head_dim;
  const size_t begin = static_cast<size_t>(first_row) * row_elems, end = static_cast<size_t>(num_tokens) * row_elems;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = begin + blockIdx.x * blockDim.x + threadIdx.x; i < end; i += stride) out[i] = __float2bfloat16(0.0f);
  if (!lse) return;
  const size_t lse_begin = static_cast<size_t>(first_row) * num_q_heads;
  const size_t lse_end = static_cast<size_t>(num_tokens) * num_q_heads;
  for (size_t i = lse_begin + blockIdx.x * blockDim.x + threadIdx.x; i < lse_end; i += stride) lse[i] = -INFINITY;
}

}  // namespace

void fill_padding_rows(bf16* out, float* lse, int first_row, int num_tokens, int num_q_heads, int head_dim,
                       cudaStream_t stream) {
  if (first_row >= num_tokens) return;
  fill_padding_rows_kernel<<<64, 256, 0, stream>>>(out, lse, first_row, num_tokens, num_q_heads, head_dim);
  PA_CHECK(cudaGetLastError());
}

}  // namespace pa::vendor_cudnn
