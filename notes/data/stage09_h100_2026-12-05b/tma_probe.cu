// Device probe (not part of the course): which TMA boxes does the hardware refuse?
// usage: tma_probe c0 swz(0|1) dst_offset   -- one case per process (a trap kills the context)
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>

__global__ void k(const __grid_constant__ CUtensorMap map, int c0, int c1, int c2, unsigned bytes, unsigned off, int n, uint16_t* out) {
  __shared__ alignas(8) uint64_t bar;
  extern __shared__ unsigned char raw[];
  unsigned char* base = (unsigned char*)(((uintptr_t)raw + 1023) & ~uintptr_t(1023));
  uint16_t* s = (uint16_t*)base;
  for (int i = 0; i < n; ++i) s[i] = 0xFFFF;
  unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
  unsigned d = (unsigned)__cvta_generic_to_shared(base + off);
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               ::"r"(d), "l"((uint64_t)&map), "r"(c0), "r"(c1), "r"(c2), "r"(b) : "memory");
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra W;\n}" ::"r"(b) : "memory");
  for (int i = 0; i < n; ++i) out[i] = s[i];
}

int main(int argc, char** argv) {
  int c0 = atoi(argv[1]), swz = atoi(argv[2]); unsigned off = atoi(argv[3]);
  const int D = 64, H = 2, R = 40;
  std::vector<uint16_t> h(D * H * R);
  for (size_t i = 0; i < h.size(); ++i) h[i] = (uint16_t)(i + 1);
  uint16_t* g; cudaMalloc(&g, h.size() * 2); cudaMemcpy(g, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
  CUtensorMap map;
  cuuint64_t dims[3] = {D, H, R}; cuuint64_t strides[2] = {D * 2, D * H * 2};
  cuuint32_t box[3] = {64, 1, 16}; cuuint32_t es[3] = {1, 1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, g, dims, strides, box, es,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swz ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("encode refused %d\n", (int)r); return 2; }
  const unsigned bytes = 64 * 16 * 2; const int n = (off + bytes) / 2 + 64;
  uint16_t* o; cudaMalloc(&o, n * 2);
  k<<<1, 1, 1024 + n * 2>>>(map, c0, 1, 2, bytes, off, n, o);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { printf("c0=%d swz=%d off=%u: %s\n", c0, swz, off, cudaGetErrorString(e)); return 1; }
  std::vector<uint16_t> got(n); cudaMemcpy(got.data(), o, n * 2, cudaMemcpyDeviceToHost);
  // expected: row j (c2 = 2 + j), head 1, dims c0..c0+63 (zeros outside 0..63), dense or swizzled by 16B chunk
  int bad = 0, first = -1;
  for (int j = 0; j < 16; ++j) for (int x = 0; x < 64; ++x) {
    int dim = c0 + x; uint16_t want = (dim >= 0 && dim < D) ? h[(size_t)(2 + j) * D * H + 1 * D + dim] : 0;
    unsigned byte = off + j * 128 + x * 2;
    if (swz) { unsigned chunk = (byte >> 4) & 7, row = (byte >> 7) & 7; byte = (byte & ~0x70u) | ((chunk ^ row) << 4); }
    if (got[byte / 2] != want) { ++bad; if (first < 0) first = j * 64 + x; }
  }
  printf("c0=%d swz=%d off=%u: ok, %d of 1024 differ from the model (first at %d); row0:", c0, swz, off, bad, first);
  for (int x = 0; x < 10; ++x) printf(" %u", got[off / 2 + x]);
  printf("\n");
  return 0;
}
