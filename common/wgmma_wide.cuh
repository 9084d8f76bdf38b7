// Wider warpgroup MMAs than common/wgmma.cuh's m64n64k16: D (64 x N fp32) +=
// A (64 x 16 bf16) * B (16 x N bf16) for N = 64, 128 and 256, the shapes of a
// prefill tile (stage 09): S = Q K^T over 128 keys at once, and O += P V over a
// whole row of up to 256 dims in one instruction. A wider N reads A once for
// more columns: fewer shared-memory bytes per flop, which is what bounds the
// narrow shapes of a warpgroup MMA.
//
// The register layouts are common/wgmma.cuh's (mma.sync m16n8k16's per warp),
// with N / 8 n-tiles: d[j] = {D[g][8j+2t], D[g][8j+2t+1], D[g+8][8j+2t],
// D[g+8][8j+2t+1]} for rows 16 (warp % 4) + g. The shared layout is Sw128 (64
// values a row, 8-row atoms of 1024 bytes), and an operand wider than 64
// values is stored as several slabs, `slab_elems` values apart.
//
//   - compiled for sm_90a: wgmma.mma_async; a B operand that is N-major (V in
//     P V: keys are its k, dims its n) spans several slabs through the
//     descriptor's leading byte offset, which for a swizzled N-major operand is
//     the distance between groups of 64 n-values (one slab to the next); its
//     stride byte offset is the distance between groups of 8 k-rows (1024);
//   - elsewhere: the same product as N / 8 mma.sync m16n8k16 per warp.
#pragma once

#include <cstdint>

#include "common/wgmma.cuh"

#if !defined(__CUDACC__)
#include <source_location>
#define PA_WGMMA_WIDE_LOC_PARAM , std::source_location pa_loc_ = std::source_location::current()
#define PA_WGMMA_WIDE_LOC pa_loc_.file_name(), static_cast<int>(pa_loc_.line())
#else
#define PA_WGMMA_WIDE_LOC_PARAM
#endif

namespace pa {
namespace wgmma_detail {

template <int N>
struct Width {};

#if PA_WGMMA
template <int TRANS_B>
__device__ __forceinline__ void issue_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b_desc, Width<64>) {
  issue<TRANS_B>(d, a, b_desc);
}
template <int TRANS_B>
__device__ __forceinline__ void issue_ss(float (&d)[8][4], uint64_t a_desc, uint64_t b_desc, Width<64>) {
  issue_ss<TRANS_B>(d, a_desc, b_desc);
}

// The operand lists are spelled out: an asm statement takes one literal string.
template <int TRANS_B>
__device__ __forceinline__ void issue_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b_desc, Width<128>) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "{%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void issue_ss(float (&d)[16][4], uint64_t a_desc, uint64_t b_desc, Width<128>) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "%64, %65, p, 1, 1, 0, %67;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(a_desc), "l"(b_desc), "r"(1), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void issue_rs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t b_desc, Width<256>) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
      "{%128,%129,%130,%131}, %132, p, 1, 1, %134;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]),
        "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]),
        "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]),
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]),
        "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]),
        "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]),
        "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]),
        "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]),
        "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]),
        "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]),
        "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]),
        "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]),
        "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]),
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]),
        "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]),
        "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]),
        "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void issue_ss(float (&d)[32][4], uint64_t a_desc, uint64_t b_desc, Width<256>) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
      "%128, %129, p, 1, 1, 0, %131;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]),
        "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]),
        "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]),
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]),
        "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]),
        "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]),
        "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]),
        "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]),
        "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]),
        "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]),
        "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]),
        "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]),
        "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]),
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]),
        "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]),
        "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]),
        "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
      : "l"(a_desc), "l"(b_desc), "r"(1), "n"(TRANS_B));
}

#else
// N / 8 mma.sync per warp: B[k][n] = b_at(k, n), n = 8j + g.
template <int N, class BAt>
__device__ __forceinline__ void emulate_n(float (&d)[N / 8][4], const uint32_t (&a)[4], BAt b_at) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < N / 8; ++j) {
    const int n = 8 * j + g;
    const uint32_t b[2] = {pair(b_at(2 * t, n), b_at(2 * t + 1, n)), pair(b_at(2 * t + 8, n), b_at(2 * t + 9, n))};
    mma_m16n8k16_bf16(d[j], a, b, d[j]);
  }
}
#endif

}  // namespace wgmma_detail

// An Sw128 operand of the products below: where in shared memory a product
// reads it, made once and moved along the operand for each product. On sm_90a
// it is the operand's descriptor: a move adds its 16-byte units to the
// descriptor's start field (one integer add; the start stays below 2^14 units,
// shared memory being under 256 KB, so nothing carries into the next field),
// where building each product's descriptor from its address would convert,
// mask and shift it for every product. Elsewhere it is the slab and column
// that the emulation reads, and its reads are checked as the CPU runtime
// checks a tensor core's.
class Sw128Operand {
 public:
  // K-major: rows of 64 k-values (Q, or a K tile in Q K^T).
  __device__ __forceinline__ static Sw128Operand k_major(const bf16* slab) { return Sw128Operand(slab, 0); }
  // N-major: rows of k (keys), their n-values (dims) 64 a slab, slabs
  // slab_elems values apart (a V tile in P V).
  __device__ __forceinline__ static Sw128Operand n_major(const bf16* slabs, int slab_elems) {
    return Sw128Operand(slabs, slab_elems);
  }
  // r rows further on, r a multiple of 8 (whole 1024-byte atoms: a slab, a
  // ring slot, 8 or 16 keys).
  __device__ __forceinline__ Sw128Operand rows(int r) const {
    Sw128Operand o = *this;
#if PA_WGMMA
    o.lo_ += static_cast<uint32_t>(r) * (128 / 16);
#else
    o.slab_ += r * 64;
#endif
    return o;
  }
  // k values further along each row, k a multiple of 16 below 64 (a k-step
  // of K-major operands: the hardware swizzles the address it computes).
  __device__ __forceinline__ Sw128Operand cols(int k) const {
    Sw128Operand o = *this;
#if PA_WGMMA
    o.lo_ += static_cast<uint32_t>(k) * 2 / 16;
#else
    o.k_off_ += k;
#endif
    return o;
  }

#if PA_WGMMA
  __device__ __forceinline__ uint64_t descriptor() const { return (uint64_t{hi_} << 32) | lo_; }
#else
  const bf16* slab() const { return slab_; }
  int k_off() const { return k_off_; }
  int slab_elems() const { return slab_elems_; }
#endif

 private:
  __device__ __forceinline__ Sw128Operand(const bf16* slab, int slab_elems) {
#if PA_WGMMA
    // The moves add to the low word (start address / 16); the high word is
    // the layout's constants.
    const uint64_t d = wgmma_detail::sw128_descriptor(slab, slab_elems ? static_cast<uint32_t>(slab_elems) * 2 : 16u);
    lo_ = static_cast<uint32_t>(d), hi_ = static_cast<uint32_t>(d >> 32);
#else
    slab_ = slab, k_off_ = 0, slab_elems_ = slab_elems;
#endif
  }
#if PA_WGMMA
  uint32_t lo_, hi_;
#else
  const bf16* slab_;
  int k_off_, slab_elems_;
#endif
};

// d (64 x N) += A * B with A in registers (P's 16 keys, an mma.sync A fragment
// per warp) and B[k][n] = V row k, dim n, of v: 16 rows of an N-major operand
// (its N / 64 slabs) (P V).
template <int N>
__device__ __forceinline__ void wgmma_rs_n_major(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                                 const Sw128Operand& v PA_WGMMA_WIDE_LOC_PARAM) {
  static_assert(N == 64 || N == 128 || N == 256, "m64nNk16 for N = 64, 128, 256");
#if PA_WGMMA
  wgmma_detail::issue_rs<1>(d, a, v.descriptor(), wgmma_detail::Width<N>{});
#else
#if !defined(__CUDACC__)
  for (int h = 0; h < N / 64; ++h) {
    wgmma_detail::check_read(v.slab() + h * v.slab_elems(), 0, 16, "wgmma_rs_n_major's B operand", PA_WGMMA_WIDE_LOC);
  }
#endif
  wgmma_detail::emulate_n<N>(d, a, [&](int k, int n) -> const bf16& {
    return v.slab()[(n / 64) * v.slab_elems() + sw128(k, n % 64)];
  });
#endif
}

// d (64 x N) += A * B with A[m][k] = a(row m, col k) (the warpgroup's 64 rows
// of Q) and B[k][n] = b(row n, col k) (N rows of a K tile against 16 of its
// dims: Q K^T), both K-major. Both operands from shared memory.
template <int N>
__device__ __forceinline__ void wgmma_ss_k_major_n(float (&d)[N / 8][4], const Sw128Operand& a,
                                                   const Sw128Operand& b PA_WGMMA_WIDE_LOC_PARAM) {
  static_assert(N == 64 || N == 128 || N == 256, "m64nNk16 for N = 64, 128, 256");
#if PA_WGMMA
  wgmma_detail::issue_ss<0>(d, a.descriptor(), b.descriptor(), wgmma_detail::Width<N>{});
#else
#if !defined(__CUDACC__)
  wgmma_detail::check_read(a.slab(), 0, 64, "wgmma_ss_k_major_n's A operand", PA_WGMMA_WIDE_LOC);
  wgmma_detail::check_read(b.slab(), 0, N, "wgmma_ss_k_major_n's B operand", PA_WGMMA_WIDE_LOC);
#endif
  uint32_t af[4];
  wgmma_detail::a_fragment(af, a.slab(), a.k_off());
  wgmma_detail::emulate_n<N>(d, af, [&](int k, int n) -> const bf16& { return b.slab()[sw128(n, b.k_off() + k)]; });
#endif
}

}  // namespace pa

#undef PA_WGMMA_WIDE_LOC_PARAM
#undef PA_WGMMA_WIDE_LOC
