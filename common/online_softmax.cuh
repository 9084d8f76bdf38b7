// The online-softmax state, written once: every stage's key loop, the merge of
// a program's warps and the merge of split-KV partials use these two structs,
// and nothing else implements the recurrence.
//
// Everything is in the log2 domain: a score enters as s * scale * log2(e), so
// each weight is one exp2. For one query row, after scores s_1..s_n and values v_j:
//   m = max_j s_j                       running maximum (log2 units)
//   l = sum_j 2^(s_j - m)               denominator, relative to m
//   o = sum_j 2^(s_j - m) * v_j         unnormalized output
// Final output o / l, natural-log log-sum-exp lse = (m + log2(l)) * ln(2).
//
// Empty-state rule: a row that has seen no key is (m = -inf, l = 0, o = 0).
// Weights are taken against reference(m), which is 0 for an empty row, so a
// masked score (-inf) gets 2^(-inf - 0) = 0 and -inf - -inf never happens.
// Merging anything with an empty state leaves it unchanged; finishing an empty
// row gives o = 0 and lse = -inf, never NaN.
//
// Two states A and B merge as  m = max(mA, mB),  l = lA 2^(mA - m) + lB 2^(mB - m),
// o = oA 2^(mA - m) + oB 2^(mB - m). A finished partial (normalized o_s and its
// lse_s, as split-KV and cascade write them) is the state (lse_s * log2(e), 1, o_s).
// A sink logit (stage 08) is a state (sink * log2(e), 1, 0): it joins the
// denominator and adds no value, and it caps the running max from the start.
#pragma once

#include "cuda_compat.cuh"

namespace pa {

// The rules, for one row; the two states below apply them.
struct Softmax {
  // The value a row's weights are taken against: its max, or 0 while empty.
  __device__ __forceinline__ static float reference(float m) { return m == -INFINITY ? 0.0f : m; }
  // 2^(from - to): the factor that moves a sum kept against `from` to `to`
  // (to >= from); 0 when `from` is -inf.
  __device__ __forceinline__ static float rescale(float from, float to) { return softmax_exp2(from - reference(to)); }
  // The merged max of two states and the factors each one is scaled by.
  __device__ __forceinline__ static float merge_factors(float ma, float mb, float& wa, float& wb) {
    const float m = fmaxf(ma, mb);
    wa = rescale(ma, m);
    wb = rescale(mb, m);
    return m;
  }
  // 1 / l, and exactly 0 for an empty row (o = 0 there, and 0 * inf would be NaN).
  __device__ __forceinline__ static float inv_l(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }
  // The natural-log lse; -inf for an empty row.
  // gpu_log2f: the device's log2f on both flavors (common/cuda_compat.cuh).
  __device__ __forceinline__ static float lse(float m, float l) { return l > 0.0f ? (m + gpu_log2f(l)) * LN2 : -INFINITY; }
};

// One row, N of its values held by this thread (stage 02's warp per row, the
// split merge's 4 dims per thread).
template <int N>
struct SoftmaxState {
  float o[N];  // this thread's slice of the unnormalized output
  float m;     // log2 units
  float l;

  __device__ __forceinline__ void init() { init_with_sink(-INFINITY); }

  // sink_log2 = sink * log2(e), or -inf for no sink (l starts at 2^(sink - m) = 1).
  __device__ __forceinline__ void init_with_sink(float sink_log2) {
    m = sink_log2;
    l = sink_log2 == -INFINITY ? 0.0f : 1.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = 0.0f;
  }

  // A finished partial: normalized output o_part (N values) with its natural-log lse.
  __device__ __forceinline__ static SoftmaxState partial(float lse_part, const float (&o_part)[N]) {
    SoftmaxState s;
    s.m = lse_part * LOG2E;
    s.l = 1.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) s.o[i] = o_part[i];
    return s;
  }

  // Raises the running max to cover a tile whose largest score is m_tile,
  // scaling l and o to match. Then add the tile's keys with weight().
  __device__ __forceinline__ void raise_max(float m_tile) {
    const float m_new = fmaxf(m, m_tile);
    const float a = Softmax::rescale(m, m_new);
    l *= a;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] *= a;
    m = m_new;
  }

  // 2^(s - m) for a score s (log2 units) of the current tile; -inf -> 0.
  __device__ __forceinline__ float weight(float s) const { return Softmax::rescale(s, m); }

  __device__ __forceinline__ void merge(const SoftmaxState& b) {
    float wa, wb;
    m = Softmax::merge_factors(m, b.m, wa, wb);
    // a * wa + b * wb with the fused multiply-add written out: nvcc would contract
    // it anyway (in an order of its choosing), the CPU flavor never does.
    l = fmaf(l, wa, b.l * wb);
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = fmaf(o[i], wa, b.o[i] * wb);
  }

  __device__ __forceinline__ float inv_l() const { return Softmax::inv_l(l); }
  __device__ __forceinline__ float lse() const { return Softmax::lse(m, l); }
};

// The same state for the two rows a lane holds in the mma.sync m16n8k16
// accumulator layout (stages 03-08): rows g = lane / 4 (index 0) and g + 8
// (index 1), o[j][2 i + h] = row i, dim 8 j + 2 (lane % 4) + h. Scores arrive
// raw, in S tiles of the same layout, and are scaled by scale_log2 here. l holds
// only this lane's columns until sum_rows() adds the 4 lanes of each row.
template <int O_TILES>
struct FragSoftmax {
  float o[O_TILES][4];  // [8-dim tile][c0..c3]
  float m[2];           // log2 units
  float l[2];

  // sink_log2[i]: row i's sink * log2(e), or -inf; its l = 1 goes to one lane of the row (t4 == 0).
  __device__ __forceinline__ void init(const float (&sink_log2)[2] = {-INFINITY, -INFINITY}, bool holds_sink = true) {
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      m[i] = sink_log2[i];
      l[i] = sink_log2[i] != -INFINITY && holds_sink ? 1.0f : 0.0f;
    }
  }

  // Raises each row's max to cover raw scores s (masked ones -inf) and scales l
  // by alpha = 2^(m_old - m_new). o is scaled only when some row of the warp
  // moved: past the first tiles the maxima rarely move, and then alpha is
  // exactly 1 (both maxima are products rounded alike, __fmul_rn, so an
  // unmoved max gives 2^0; a fused multiply-add would leave a rounding error).
  // Returns whether o was scaled, with the factors in alpha, for state the
  // caller keeps beside o.
  template <int S_TILES>
  __device__ __forceinline__ bool raise_max(const float (&s)[S_TILES][4], float scale_log2, float (&alpha)[2]) {
    if (!raise_max_m_l(s, scale_log2, alpha)) return false;
    rescale_o(alpha);
    return true;
  }

  // raise_max's first half: m and l only. Returns whether some row of the warp
  // moved; then rescale_o(alpha) must follow before o is used again (a
  // pipelined loop does it once the tensor core has finished adding to o).
  template <int S_TILES>
  __device__ __forceinline__ bool raise_max_m_l(const float (&s)[S_TILES][4], float scale_log2, float (&alpha)[2]) {
    float m_tile[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
      m_tile[0] = fmaxf(m_tile[0], fmaxf(s[j][0], s[j][1]));
      m_tile[1] = fmaxf(m_tile[1], fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // The 4 lanes t4 = 0..3 of a quad hold the columns of the same row.
      m_tile[i] = fmaxf(m_tile[i], __shfl_xor_sync(0xffffffffu, m_tile[i], 1));
      m_tile[i] = fmaxf(m_tile[i], __shfl_xor_sync(0xffffffffu, m_tile[i], 2));
      const float m_new = fmaxf(m[i], __fmul_rn(m_tile[i], scale_log2));
      alpha[i] = Softmax::rescale(m[i], m_new);
      m[i] = m_new;
      l[i] *= alpha[i];
    }
    return __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f);
  }

  __device__ __forceinline__ void rescale_o(const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) {
      o[j][0] *= alpha[0], o[j][1] *= alpha[0];
      o[j][2] *= alpha[1], o[j][3] *= alpha[1];
    }
  }

  // Turns raw scores into weights 2^(s * scale_log2 - m) in place and adds them to l.
  // Each product is rounded as raise_max_m_l rounds the row max (__fmul_rn), and m is
  // subtracted after: the max key's weight is then exactly 2^0 = 1, and no weight
  // exceeds it (rounding is monotonic). A fused s * scale_log2 - m keeps the product
  // exact, so the max key got 2^(m's rounding error), which grows with |m|: from keys
  // ~1e7 times the usual size it overflowed P's fp16 operand (inf, then NaN) or
  // flushed the whole row to 0. The price: a multiply and a subtract for one FMA.
  template <int S_TILES>
  __device__ __forceinline__ void weights(float (&s)[S_TILES][4], float scale_log2) {
    const float ref[2] = {Softmax::reference(m[0]), Softmax::reference(m[1])};
#pragma unroll
    for (int j = 0; j < S_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = softmax_exp2(__fmul_rn(s[j][e], scale_log2) - ref[e >> 1]);  // masked: 2^-inf = 0
        l[e >> 1] += s[j][e];
      }
    }
  }

  // After the key loop: each row's l over all of its columns.
  __device__ __forceinline__ void sum_rows() {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
  }

  // Merges another state of row i (after sum_rows): its m, l and its o in this
  // layout, o_b(j, h) = row i, dim 8 j + 2 t4 + h.
  template <class OAt>
  __device__ __forceinline__ void merge_row(int i, float m_b, float l_b, OAt o_b) {
    float wa, wb;
    m[i] = Softmax::merge_factors(m[i], m_b, wa, wb);
    l[i] = fmaf(l[i], wa, l_b * wb);  // the fused multiply-add written out, as in SoftmaxState::merge
#pragma unroll
    for (int j = 0; j < O_TILES; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) o[j][2 * i + h] = fmaf(o[j][2 * i + h], wa, o_b(j, h) * wb);
    }
  }

  __device__ __forceinline__ float inv_l(int i) const { return Softmax::inv_l(l[i]); }
  __device__ __forceinline__ float lse(int i) const { return Softmax::lse(m[i], l[i]); }
};

}  // namespace pa
