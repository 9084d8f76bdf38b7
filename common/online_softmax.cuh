// The online-softmax state, written once and reused by every stage.
//
// For one query row, after seeing scores s_1..s_n (already scaled) and values v_j:
//   m = max_j s_j                      running maximum
//   l = sum_j exp(s_j - m)             denominator, relative to m
//   o = sum_j exp(s_j - m) * v_j       unnormalized output (N values per thread)
// Final output o / l, log-sum-exp lse = m + log(l).
//
// Empty-state rule: a row that has seen no key is (m = -inf, l = 0, o = 0).
// Merging anything with it leaves that thing unchanged; finishing it gives o = 0
// and lse = -inf, never NaN. Every exp() below is guarded so -inf - -inf never
// happens.
//
// Two states A and B combine as  m = max(mA, mB),
//   l = lA*exp(mA - m) + lB*exp(mB - m),  o = oA*exp(mA - m) + oB*exp(mB - m).
// A finished partial (normalized output o_s with its lse_s, as split-KV and
// cascade write them) is the state (m = lse_s, l = 1, o = o_s), so the same
// merge() combines partials. A sink logit (stage 08) is a state that starts at
// (m = sink, l = 1, o = 0): it joins the denominator and adds no value.
#pragma once

#include "cuda_compat.cuh"

namespace pa {

template <int N>
struct SoftmaxState {
  float o[N];  // this thread's slice of the unnormalized output
  float m;
  float l;

  __device__ __forceinline__ void init() { init_with_sink(-INFINITY, 0.0f); }

  __device__ __forceinline__ void init_with_sink(float m0, float l0) {
    m = m0;
    l = l0;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = 0.0f;
  }

  // exp(from - to), with the empty-state rule: 0 when `from` is -inf.
  __device__ __forceinline__ static float rescale(float from, float to) {
    return from == -INFINITY ? 0.0f : __expf(from - to);
  }

  // Moves the running max up to cover a new tile whose largest score is
  // m_tile, shrinking l and o to match. Afterwards add the tile's keys with
  // weight(s) to l and o.
  __device__ __forceinline__ void raise_max(float m_tile) {
    const float m_new = fmaxf(m, m_tile);
    const float a = rescale(m, m_new);
    l *= a;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] *= a;
    m = m_new;
  }

  // exp(s - m) for a score s of the current tile; masked scores are -inf -> 0.
  __device__ __forceinline__ float weight(float s) const { return rescale(s, m); }

  __device__ __forceinline__ void merge(const SoftmaxState& b) {
    const float m_new = fmaxf(m, b.m);
    const float wa = rescale(m, m_new), wb = rescale(b.m, m_new);
    l = l * wa + b.l * wb;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = o[i] * wa + b.o[i] * wb;
    m = m_new;
  }

  // Final output scale 1/l (0 for the empty state) and lse.
  __device__ __forceinline__ float inv_l() const { return l > 0.0f ? 1.0f / l : 0.0f; }
  __device__ __forceinline__ float lse() const { return l > 0.0f ? m + logf(l) : -INFINITY; }
};

}  // namespace pa
