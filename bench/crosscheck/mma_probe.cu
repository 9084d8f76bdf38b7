// mma_probe: records what the GPU's mma.sync m16n8k16 (f16 and bf16 inputs, fp32
// accumulators) returns for seeded inputs, so the CPU runtime's emulation can be
// checked against the hardware: `mma_probe FILE [EX2FILE]` writes the test count,
// each test's kind, then A (16x16), B (16x8) as 16-bit bits, C (16x8) and D
// (16x8) as fp32; it also prints how far ex2.approx (exp2f) is from the exact
// 2^x and checks pa::gpu_log2f against the device's log2f. Not part of the
// build; on a GPU machine:
//   nvcc -arch=sm_90a -O2 -std=c++20 -o mma_probe bench/crosscheck/mma_probe.cu && ./mma_probe mma.bin
// The CPU runtime's model (common/runtime/fiber_runtime.cpp, mma_dot16) matched
// all 262,144 outputs of an H200 bit for bit.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <random>
#include <vector>

#include "../../common/cuda_compat.cuh"

__global__ void mma_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D, int bf16, int n) {
  const int t = blockIdx.x, lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  if (t >= n) return;
  const uint16_t* a = A + t * 256;
  const uint16_t* b = B + t * 128;
  const float* c = C + t * 128;
  float* d = D + t * 128;
  auto pk = [](uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); };
  uint32_t ra[4] = {pk(a[g * 16 + 2 * q], a[g * 16 + 2 * q + 1]), pk(a[(g + 8) * 16 + 2 * q], a[(g + 8) * 16 + 2 * q + 1]),
                    pk(a[g * 16 + 2 * q + 8], a[g * 16 + 2 * q + 9]),
                    pk(a[(g + 8) * 16 + 2 * q + 8], a[(g + 8) * 16 + 2 * q + 9])};
  // B is K x N (16 x 8), stored row-major [k][n].
  uint32_t rb[2] = {pk(b[(2 * q) * 8 + g], b[(2 * q + 1) * 8 + g]), pk(b[(2 * q + 8) * 8 + g], b[(2 * q + 9) * 8 + g])};
  float rc[4] = {c[g * 8 + 2 * q], c[g * 8 + 2 * q + 1], c[(g + 8) * 8 + 2 * q], c[(g + 8) * 8 + 2 * q + 1]};
  float rd[4];
  if (bf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                 : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
                 : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]), "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                 : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
                 : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]), "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
  }
  d[g * 8 + 2 * q] = rd[0];
  d[g * 8 + 2 * q + 1] = rd[1];
  d[(g + 8) * 8 + 2 * q] = rd[2];
  d[(g + 8) * 8 + 2 * q + 1] = rd[3];
}

__global__ void log2_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = log2f(x[i]);
}

// ex2.approx.f32 (what exp2f compiles to) on given inputs.
__global__ void ex2_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = exp2f(x[i]);
}

static uint16_t f2h(float f) {  // RNE float -> fp16 bits (finite, normal range used here)
  uint32_t u; std::memcpy(&u, &f, 4);
  const uint32_t s = (u >> 16) & 0x8000u; u &= 0x7fffffffu;
  if (u < 0x38800000u) {  // subnormal half
    float a; std::memcpy(&a, &u, 4);
    return static_cast<uint16_t>(s | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t r = u - (112u << 23);
  uint32_t rem = r & 0x1fffu; r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(s | r);
}
static uint16_t f2b(float f) { uint32_t u; std::memcpy(&u, &f, 4); return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: mma_probe FILE [ex2FILE]\n"); return 2; }
  const int per = 512;
  std::vector<uint16_t> A, B; std::vector<float> C;
  std::vector<int> kinds;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> code(-127, 127), ex(-12, 12), coin(0, 1);
  for (int bf = 0; bf < 2; ++bf)
    for (int dist = 0; dist < 4; ++dist)
      for (int t = 0; t < per; ++t) {
        auto cvt = [&](float x) { return bf ? f2b(x) : f2h(x); };
        for (int i = 0; i < 256; ++i) {
          float x = nd(gen);
          if (dist == 2) x *= std::ldexp(1.0f, ex(gen) / 2);
          if (dist == 3) x = std::ldexp(1.0f + std::fabs(nd(gen)), ex(gen)) * (coin(gen) ? 1 : -1);
          A.push_back(cvt(x));
        }
        for (int i = 0; i < 128; ++i) {
          float x = nd(gen);
          if (dist == 1) x = 1152.0f + code(gen);
          if (dist == 2) x = (float)code(gen);
          if (dist == 3) x = std::ldexp(1.0f + std::fabs(nd(gen)), ex(gen)) * (coin(gen) ? 1 : -1);
          B.push_back(cvt(x));
        }
        for (int i = 0; i < 128; ++i) {
          float x = nd(gen) * 4.0f;
          if (dist == 1) x = nd(gen) * 20000.0f;
          if (dist == 2 && coin(gen)) x = 0.0f;
          if (dist == 3) x = std::ldexp(nd(gen), ex(gen) + 2);
          C.push_back(x);
        }
        kinds.push_back(bf * 4 + dist);
      }
  const int n = static_cast<int>(kinds.size());
  uint16_t *dA, *dB; float *dC, *dD;
  cudaMalloc(&dA, A.size() * 2); cudaMalloc(&dB, B.size() * 2); cudaMalloc(&dC, C.size() * 4); cudaMalloc(&dD, C.size() * 4);
  cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
  std::vector<float> D(C.size());
  // Two launches: f16 tests first (kinds 0-3), then bf16 (4-7).
  const int half_n = 4 * per;
  mma_kernel<<<half_n, 32>>>(dA, dB, dC, dD, 0, half_n);
  mma_kernel<<<half_n, 32>>>(dA + half_n * 256, dB + half_n * 128, dC + half_n * 128, dD + half_n * 128, 1, half_n);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { std::fprintf(stderr, "%s\n", cudaGetErrorString(e)); return 1; }
  cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost);
  FILE* f = std::fopen(argv[1], "wb");
  std::fwrite(&n, 4, 1, f);
  std::fwrite(kinds.data(), 4, n, f);
  std::fwrite(A.data(), 2, A.size(), f); std::fwrite(B.data(), 2, B.size(), f);
  std::fwrite(C.data(), 4, C.size(), f); std::fwrite(D.data(), 4, D.size(), f);
  std::fclose(f);
  if (argc > 2) {
    // ex2 on every float in [-1, 0) ... sampled: all 2^23 values of [-1,-0.5) and [0.5,1) plus a spread.
    std::vector<float> x;
    for (uint32_t m = 0; m < (1u << 23); ++m) { uint32_t u = 0xBF000000u | m; float v; std::memcpy(&v, &u, 4); x.push_back(v); }
    float *dx, *dy; cudaMalloc(&dx, x.size() * 4); cudaMalloc(&dy, x.size() * 4);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    ex2_kernel<<<(x.size() + 255) / 256, 256>>>(dx, dy, (int)x.size());
    std::vector<float> y(x.size());
    cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost);
    // ulp distance from the correctly rounded 2^x, as a histogram.
    long hist[9] = {0};
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = static_cast<float>(std::exp2(static_cast<double>(x[i])));
      int32_t a, b; std::memcpy(&a, &y[i], 4); std::memcpy(&b, &want, 4);
      const int d = a - b;
      hist[d < -4 ? 0 : d > 4 ? 8 : d + 4]++;
    }
    std::printf("ex2.approx.f32 on all %zu floats of [-1,-0.5): ulps from correctly rounded:", x.size());
    for (int k = 0; k < 9; ++k) std::printf(" %d:%ld", k - 4, hist[k]);
    std::printf(" (-4 and 4 mean <= -4, >= 4)\n");
    FILE* g = std::fopen(argv[2], "wb");
    std::fwrite(y.data(), 4, y.size(), g);
    std::fclose(g);
  }
  {
    // log2f on the device against pa::gpu_log2f's host path, on every 64th float bit pattern.
    std::vector<float> x;
    for (uint64_t u = 0; u < (1ull << 32); u += 64) { uint32_t v = static_cast<uint32_t>(u); float f; std::memcpy(&f, &v, 4); x.push_back(f); }
    float *dx, *dy; cudaMalloc(&dx, x.size() * 4); cudaMalloc(&dy, x.size() * 4);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    log2_kernel<<<(x.size() + 255) / 256, 256>>>(dx, dy, (int)x.size());
    std::vector<float> y(x.size());
    cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost);
    long bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float h = pa::gpu_log2f(x[i]);
      if (std::memcmp(&h, &y[i], 4) != 0 && !(std::isnan(h) && std::isnan(y[i]))) {
        if (bad < 5) std::printf("log2f(%a): device %a, gpu_log2f %a\n", x[i], y[i], h);
        ++bad;
      }
    }
    std::printf("log2f: pa::gpu_log2f differs from the device on %ld of %zu inputs\n", bad, x.size());
  }
  std::printf("mma_probe: %d tests written\n", n);
  return 0;
}
