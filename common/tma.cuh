// Hopper's TMA tensor copy (cp.async.bulk.tensor, 3-D, tiled mode): one
// thread asks the copy engine for a box of a tensor in global memory, named by
// element coordinates; the box lands in shared memory as dense rows, swizzled
// or not, and completes its bytes on an mbarrier (mbarrier.cuh) as a bulk copy
// does (bulk_copy.cuh). What a bulk copy cannot do, the tensor copy does in
// the copy engine: a strided gather (rows of a paged cache that are a head
// apart), zeros for elements outside the tensor (the tail of a sequence, a
// negative coordinate), and the shared layout the tensor core reads
// (wgmma.cuh's Sw128), with no address arithmetic in the kernel.
//
// The tensor is described once, on the host, by a map (make_tma_map_2byte_3d):
// base address, dims, strides, the box and the swizzle. On a GPU the map is the
// driver's CUtensorMap, which the copy engine reads from the kernel's
// parameters: pass it as a kernel parameter (or in a struct parameter) marked
// `const __grid_constant__`, and hand tma_load_3d that parameter itself, never
// a copy (a copy lives in local memory, which the copy engine cannot read).
//
//   __global__ void k(const __grid_constant__ pa::TmaMap k_map, ...) {
//     ...  full[s].arrive_expect_tx(box_bytes);
//          pa::tma_load_3d(slot, k_map, 0, kv_head, row0, full[s]);
//   }
//
// The box lands as box[2] planes of box[1] rows of box[0] elements, row-major
// from the destination: element (x, y, z) of the box, which is element
// (c0 + x, c1 + y, c2 + z) of the tensor, at byte 2 * ((z * box[1] + y) *
// box[0] + x) before the swizzle. With TmaSwizzle::b128 the 16-byte chunks move
// as the hardware moves them: a function of the shared-memory ADDRESS, bits
// [4:6] ^= bits [7:9]. So a box of 64-element rows whose destination is
// 1024-byte aligned is exactly an Sw128 slab (wgmma.cuh's sw128(row, col),
// row = z * box[1] + y); a destination that is only 128-byte aligned lands
// with the pattern shifted by its address.
//
// Rules (the PTX ISA's and the driver's):
//   - the map's arguments: checked by make_tma_map_2byte_3d on both flavors,
//     which throws pa::Error naming the rule (a GPU's driver would refuse most
//     of them with an error code, the CPU runtime has no driver);
//   - the destination is 128-byte aligned shared memory, room for the box;
//   - the first coordinate c0 is a multiple of 8 elements (16 bytes, as a
//     box row is), negative ones too: a GPU stops the kernel with an
//     illegal instruction on any other, with or without the swizzle;
//   - bar has been initialized, and its phase is announced the box's bytes
//     (box[0] * box[1] * box[2] * 2), all of them even where the box reaches
//     outside the tensor: the zeros are delivered bytes too;
//   - the box's bytes read as data only after a wait on bar's phase; a
//     tensor core that reads them through a descriptor (wgmma) needs the
//     descriptor's swizzle to be the map's.
// The CPU runtime checks each of the device rules and names it (and, in
// wgmma.cuh's emulation, that the tensor core reads no byte a copy still
// writes, nor a copy's bytes through another swizzle); a GPU does not check:
// it faults, corrupts or hangs.
//
// On the CPU runtime a tensor copy lands as late as a bulk copy does: when a
// thread waits on its barrier and the phase is not complete, or when no
// thread of the block can run. The tensor is read then, not at issue.
#pragma once

#include <cstdint>

#include "cuda_compat.cuh"
#include "mbarrier.cuh"
#include "ptx.cuh"

#if !defined(__CUDACC__)
#include <source_location>
#define PA_TMA_LOC_PARAM , std::source_location pa_loc_ = std::source_location::current()
#define PA_TMA_LOC pa_loc_.file_name(), static_cast<int>(pa_loc_.line())
#else
#define PA_TMA_LOC_PARAM
#endif

namespace pa {

// The shared layout of a box: dense rows, or the hardware's 128-byte swizzle
// (rows of at most 128 bytes; the layout common/wgmma.cuh's sw128() describes).
enum class TmaSwizzle { none, b128 };

// 128 opaque bytes: the driver's CUtensorMap on a GPU, the runtime's own
// description on the CPU. Made on the host, read on the device in place.
struct alignas(64) TmaMap {
  uint64_t opaque[16];
};
static_assert(sizeof(TmaMap) == 128, "a TmaMap is a CUtensorMap's 128 bytes");

// Host. A 3-D tiled map over 2-byte elements (bf16, fp16, uint16_t):
//   base            the element (0, 0, 0), 16-byte aligned (global memory on a GPU);
//   dims[i]         elements along dim i (1 .. 2^32); dims[0] is the contiguous one;
//   strides_bytes   strides_bytes[0] between consecutive indices of dim 1,
//                   strides_bytes[1] of dim 2: multiples of 16, below 2^40, each
//                   at least a row of dims[0] elements;
//   box[i]          elements a copy takes along dim i (1 .. 256); box[0] * 2
//                   bytes a multiple of 16, at most 128 with TmaSwizzle::b128;
//   swizzle         the box's shared layout.
// Every rule is checked first, the same on both flavors: a violation throws
// pa::Error naming it. On a GPU the map is then encoded by the driver's
// cuTensorMapEncodeTiled (no interleave, L2 promotion of 128 bytes, zeros
// outside the tensor); a refusal there throws too, with the driver's code.
TmaMap make_tma_map_2byte_3d(const void* base, const uint64_t (&dims)[3], const uint64_t (&strides_bytes)[2],
                             const uint32_t (&box)[3], TmaSwizzle swizzle);

// Device, one thread: copies the box whose first element is the tensor's
// element (c0, c1, c2) to smem_dst (box[2] x box[1] rows of box[0] elements,
// laid out per the map's swizzle; see the top of this file) and completes the
// box's bytes of bar's tx-count, the whole box's even where it lies outside
// the tensor. Elements outside the tensor land as zeros; coordinates may be
// negative, c0 a multiple of 8 (see the rules above). `map` is the kernel's
// __grid_constant__ parameter itself.
__device__ __forceinline__ void tma_load_3d(void* smem_dst /* 128-byte aligned */, const TmaMap& map, int c0, int c1,
                                            int c2, Mbarrier& bar PA_TMA_LOC_PARAM) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The map operand is the parameter's generic address; as for bulk copies, a
  // CTA's own shared::cta addresses are valid shared::cluster addresses.
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_u32(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(&bar.state))
      : "memory");
#elif defined(__CUDA_ARCH__)
  // No copy engine for tensors before sm_90: fail loudly rather than compute on garbage.
  (void)smem_dst;
  (void)map;
  (void)c0;
  (void)c1;
  (void)c2;
  (void)bar;
  __trap();
#elif !defined(__CUDACC__)
  cpucuda::detail::tma_load_3d(smem_dst, &map, c0, c1, c2, &bar.state, PA_TMA_LOC);
#else
  (void)smem_dst;
  (void)map;
  (void)c0;
  (void)c1;
  (void)c2;
  (void)bar;
#endif
}

}  // namespace pa

#undef PA_TMA_LOC_PARAM
#undef PA_TMA_LOC
