// make_tma_map_2byte_3d (tma.cuh): the arguments' rules, checked the same way
// on both flavors, then the map: the driver's CUtensorMap on a GPU, the CPU
// runtime's own description otherwise.
#include "tma.cuh"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.h"

#if defined(__CUDACC__)
#include <cuda.h>
#include <cudaTypedefs.h>
#endif

namespace pa {

namespace {

std::string hex_address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Each rule names itself, so that a bad map fails with the same message on a
// machine without a GPU as on one with.
void check_map_arguments(const void* base, const uint64_t (&dims)[3], const uint64_t (&strides_bytes)[2],
                         const uint32_t (&box)[3], TmaSwizzle swizzle) {
  const std::string at = "make_tma_map_2byte_3d: ";
  PA_REQUIRE(swizzle == TmaSwizzle::none || swizzle == TmaSwizzle::b128,
             at + "swizzle " + std::to_string(static_cast<int>(swizzle)) +
                 " is neither TmaSwizzle::none nor TmaSwizzle::b128");
  PA_REQUIRE(base != nullptr, at + "the base address is null");
  PA_REQUIRE(reinterpret_cast<uintptr_t>(base) % 16 == 0,
             at + "the base address " + hex_address(base) + " is not 16-byte aligned");
  for (int i = 0; i < 3; ++i) {
    PA_REQUIRE(dims[i] >= 1 && dims[i] <= (uint64_t{1} << 32),
               at + "dims[" + std::to_string(i) + "] = " + std::to_string(dims[i]) +
                   ": a dimension holds 1 to 2^32 elements");
  }
  const uint64_t row_bytes = dims[0] * 2;
  for (int i = 0; i < 2; ++i) {
    const std::string which = "strides_bytes[" + std::to_string(i) + "] = " + std::to_string(strides_bytes[i]);
    PA_REQUIRE(strides_bytes[i] % 16 == 0, at + which + ": a stride is a multiple of 16 bytes");
    PA_REQUIRE(strides_bytes[i] < (uint64_t{1} << 40), at + which + ": a stride is below 2^40 bytes");
    PA_REQUIRE(strides_bytes[i] >= row_bytes,
               at + which + ": a stride is at least a row of dims[0] = " + std::to_string(dims[0]) + " elements (" +
                   std::to_string(row_bytes) + " bytes), or rows would overlap");
  }
  for (int i = 0; i < 3; ++i) {
    PA_REQUIRE(box[i] >= 1 && box[i] <= 256,
               at + "box[" + std::to_string(i) + "] = " + std::to_string(box[i]) +
                   ": a box takes 1 to 256 elements along each dimension");
  }
  PA_REQUIRE(box[0] * 2 % 16 == 0, at + "box[0] = " + std::to_string(box[0]) +
                                       ": a box's rows (box[0] * 2 bytes) are a multiple of 16 bytes");
  PA_REQUIRE(swizzle != TmaSwizzle::b128 || box[0] * 2 <= 128,
             at + "box[0] = " + std::to_string(box[0]) +
                 " with TmaSwizzle::b128: the 128-byte swizzle takes rows of at most 128 bytes (64 elements)");
}

#if defined(__CUDACC__)
// The driver's encoder, through the runtime (no link against the driver
// library): looked up once per process.
PFN_cuTensorMapEncodeTiled_v12000 driver_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    PA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    PA_REQUIRE(found == cudaDriverEntryPointSuccess && fn != nullptr,
               "make_tma_map_2byte_3d: the driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or later "
               "is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The copy engine needs the map 64-byte aligned where it reads it (a TmaMap
// is); CUDA 13's header asks 128 of its own type, which only the encoder's
// output here has: the map is copied out of it.
static_assert(sizeof(CUtensorMap) == sizeof(TmaMap), "a TmaMap holds a CUtensorMap");
#endif

}  // namespace

TmaMap make_tma_map_2byte_3d(const void* base, const uint64_t (&dims)[3], const uint64_t (&strides_bytes)[2],
                             const uint32_t (&box)[3], TmaSwizzle swizzle) {
  check_map_arguments(base, dims, strides_bytes, box, swizzle);
  TmaMap map{};
#if defined(__CUDACC__)
  const cuuint64_t global_dims[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t global_strides[2] = {strides_bytes[0], strides_bytes[1]};
  const cuuint32_t box_dims[3] = {box[0], box[1], box[2]};
  const cuuint32_t element_strides[3] = {1, 1, 1};  // every element of the box, none skipped
  CUtensorMap encoded;
  const CUresult result = driver_encoder()(
      &encoded, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), global_dims, global_strides, box_dims,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle == TmaSwizzle::b128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // out-of-bounds elements are zeros
  PA_REQUIRE(result == CUDA_SUCCESS, "make_tma_map_2byte_3d: cuTensorMapEncodeTiled refused the map (CUresult " +
                                         std::to_string(static_cast<int>(result)) +
                                         ") although its arguments pass this function's checks");
  std::memcpy(&map, &encoded, sizeof map);
#else
  cpucuda::detail::tma_encode_3d(&map, base, dims, strides_bytes, box, swizzle == TmaSwizzle::b128 ? 1 : 0);
#endif
  return map;
}

}  // namespace pa
