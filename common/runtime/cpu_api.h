// The subset of the CUDA runtime API the course uses, with CUDA's names and types,
// for the CPU runtime. Memory is host memory ("device" pointers are ordinary
// pointers), every call is synchronous, and there is exactly one device.
// Part of cpu_runtime.h; not included on its own.
#pragma once

#include <cstddef>

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorUnknown = 999,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr : int {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrL2CacheSize = 89,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute : int {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
enum cudaStreamCaptureMode : int {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus : int {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
constexpr unsigned cudaStreamDefault = 0x0;
constexpr unsigned cudaStreamNonBlocking = 0x1;
constexpr unsigned cudaEventDefault = 0x0;
constexpr unsigned cudaEventBlockingSync = 0x1;
constexpr unsigned cudaEventDisableTiming = 0x2;
constexpr unsigned cudaHostAllocDefault = 0x0;

// Only fields that CUDA 13's cudaDeviceProp still has, so code reading them
// compiles in both flavors.
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  size_t totalConstMem;
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  int persistingL2CacheMaxSize;
  int maxThreadsPerMultiProcessor;
  size_t sharedMemPerMultiprocessor;
  size_t sharedMemPerBlockOptin;
  int memoryBusWidth;
};

namespace cpucuda {
// Largest dynamic shared memory a launch may ask for: an H200's opt-in limit,
// so a kernel that fits here fits there.
constexpr size_t kSharedMemPerBlockOptin = 227 * 1024;
constexpr size_t kSharedMemPerBlock = 48 * 1024;
}  // namespace cpucuda

const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned flags = 1);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
template <class T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <class T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
template <class T>
cudaError_t cudaMallocManaged(T** ptr, size_t bytes, unsigned flags = 1) {
  return cudaMallocManaged(reinterpret_cast<void**>(ptr), bytes, flags);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaFreeHost(void* ptr);

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);

// __constant__ and __device__ variables are ordinary globals on the CPU.
template <class T>
cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t bytes, size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  if (offset + bytes > sizeof(T)) return cudaErrorInvalidValue;
  return cudaMemcpy(reinterpret_cast<unsigned char*>(&symbol) + offset, src, bytes, kind);
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t bytes, size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
  if (offset + bytes > sizeof(T)) return cudaErrorInvalidValue;
  return cudaMemcpy(dst, reinterpret_cast<const unsigned char*>(&symbol) + offset, bytes, kind);
}
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t bytes, size_t offset = 0,
                                    cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t = nullptr) {
  return cudaMemcpyToSymbol(symbol, src, bytes, offset, kind);
}

cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
// Every call is synchronous, so a stream never has anything to wait for.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

// CUDA graphs by stream capture. While a stream captures, the launches and
// async copies given to it are recorded instead of run; cudaGraphLaunch runs
// them in order. As on a GPU in the default (global) mode, a call that would
// synchronise or allocate while a capture is active (cudaMalloc, cudaFree,
// cudaMemcpy, cudaMemset, a launch or async copy on the legacy stream 0, a
// stream or device synchronisation) fails with cudaErrorStreamCaptureUnsupported
// and invalidates the capture, so code meant to be captured is checked here too.
// The legacy stream itself cannot capture. Not modelled: events inside a
// capture (fork/join across streams) and the relaxed modes' leniency.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

// Kernel attributes mean nothing on the CPU (the dynamic shared memory limit is
// checked at launch against kSharedMemPerBlockOptin); accept them like CUDA does.
template <class F>
cudaError_t cudaFuncSetAttribute(F* /*func*/, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize &&
      (value < 0 || static_cast<size_t>(value) > cpucuda::kSharedMemPerBlockOptin)) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
