// The CUDA runtime API subset of the CPU runtime (declared in cpu_api.h).
// Host memory plays device memory, and every call completes before it returns.
#include "cpu_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

// Work recorded by stream capture, in the order it was issued: every call runs
// to completion before it returns, so issue order is an order that respects
// every dependency the streams and events expressed.
struct CUgraph_st {
  std::vector<std::function<void()>> work;
  unsigned long long id = 0;                                     // unique per capture (events outlive it)
  CUstream_st* origin = nullptr;                                 // the stream that began the capture
  std::vector<CUstream_st*> joined;                              // streams that joined it through an event
  std::vector<std::pair<const CUstream_st*, size_t>> origin_waits;  // (stream, its work count) the origin waited for
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};
struct CUstream_st {
  unsigned flags;
  CUgraph_st* capture = nullptr;  // non-null while capturing (its own capture, or one it joined)
  bool invalidated = false;       // a prohibited call happened during the capture
  size_t captured = 0;            // work items it added to the capture
};
struct CUevent_st {
  std::chrono::steady_clock::time_point when;
  bool recorded;
  // Recorded on a capturing stream: a node of that capture, which another stream
  // joins by waiting on it (CUDA's fork / join of captured streams).
  CUgraph_st* capture = nullptr;  // valid only while a capture of that id is active
  unsigned long long capture_id = 0;
  const CUstream_st* source = nullptr;
  size_t source_work = 0;  // the source's work before the event
};

namespace {

// Like CUDA's, the last error is per host thread; cudaGetLastError resets it.
thread_local cudaError_t tl_last_error = cudaSuccess;

cudaError_t record(cudaError_t err) {
  if (err != cudaSuccess) tl_last_error = err;
  return err;
}

void* aligned_bytes(size_t bytes) {
  // 64-byte alignment: at least what cudaMalloc guarantees for vector loads
  // (256 on a GPU, but 64 already covers float4 / cp.async 16-byte accesses).
  const size_t rounded = ((bytes + 63) / 64) * 64;
  return std::aligned_alloc(64, rounded);
}

cudaError_t alloc(void** ptr, size_t bytes) {
  if (!ptr) return record(cudaErrorInvalidValue);
  if (bytes == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  *ptr = aligned_bytes(bytes);
  return *ptr ? cudaSuccess : record(cudaErrorMemoryAllocation);
}

bool valid_kind(cudaMemcpyKind kind) { return kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDefault; }

// The streams capturing now (global mode: any of them forbids synchronising calls).
std::mutex g_capture_mutex;
std::vector<CUstream_st*> g_capturing;
unsigned long long g_capture_ids = 0;

// The active capture an event was recorded in, or null (none, or that capture has ended).
CUgraph_st* active_capture_of(const CUevent_st* event) {
  if (event->capture == nullptr) return nullptr;
  for (const CUstream_st* s : g_capturing) {
    if (s->capture == event->capture && s->capture->id == event->capture_id) return s->capture;
  }
  return nullptr;
}

// A call that synchronises or allocates: refused, and every active capture
// invalidated, while a capture is active. Returns cudaSuccess otherwise.
cudaError_t refuse_during_capture() {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (g_capturing.empty()) return cudaSuccess;
  for (CUstream_st* s : g_capturing) s->invalidated = true;
  return record(cudaErrorStreamCaptureUnsupported);
}

bool capturing(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  return stream != nullptr && stream->capture != nullptr;
}

}  // namespace

namespace cpucuda::detail {
bool record_work(cudaStream_t stream, std::function<void()> work) {
  if (stream == nullptr) {
    if (refuse_during_capture() != cudaSuccess) {
      throw KernelError("work on the legacy stream 0 while a stream is capturing a CUDA graph: "
                        "give the captured code the capturing stream");
    }
    return false;
  }
  if (!capturing(stream)) return false;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  stream->capture->work.push_back(std::move(work));
  ++stream->captured;
  return true;
}
}  // namespace cpucuda::detail

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "the capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  const cudaError_t err = tl_last_error;
  tl_last_error = cudaSuccess;
  return err;
}
cudaError_t cudaPeekAtLastError() { return tl_last_error; }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (const cudaError_t err = refuse_during_capture()) return err;
  return alloc(ptr, bytes);
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return alloc(ptr, bytes); }
cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned) { return alloc(ptr, bytes); }
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned) { return alloc(ptr, bytes); }
cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t err = refuse_during_capture()) return err;
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t err = refuse_during_capture()) return err;
  if (!valid_kind(kind)) return record(cudaErrorInvalidMemcpyDirection);
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return record(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (capturing(stream)) {
    if (!valid_kind(kind)) return record(cudaErrorInvalidMemcpyDirection);
    stream->capture->work.push_back([=] { std::memmove(dst, src, bytes); });
    return cudaSuccess;
  }
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
  if (!valid_kind(kind)) return record(cudaErrorInvalidMemcpyDirection);
  if (width > dpitch || width > spitch) return record(cudaErrorInvalidValue);
  for (size_t r = 0; r < height; ++r) {
    std::memmove(static_cast<unsigned char*>(dst) + r * dpitch, static_cast<const unsigned char*>(src) + r * spitch,
                 width);
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (const cudaError_t err = refuse_during_capture()) return err;
  if (bytes == 0) return cudaSuccess;
  if (!dst) return record(cudaErrorInvalidValue);
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (capturing(stream)) {
    stream->capture->work.push_back([=] { std::memset(dst, value, bytes); });
    return cudaSuccess;
  }
  return cudaMemset(dst, value, bytes);
}

cudaError_t cudaDeviceSynchronize() { return refuse_during_capture(); }
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaGetDevice(int* device) {
  if (!device) return record(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : record(cudaErrorInvalidDevice); }
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return record(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return record(cudaErrorInvalidValue);
  if (device != 0) return record(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  const int workers = cpucuda::num_workers();
  std::snprintf(prop->name, sizeof prop->name, "CPU runtime (%d workers)", workers);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  prop->totalGlobalMem = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  prop->sharedMemPerBlock = cpucuda::kSharedMemPerBlock;
  prop->sharedMemPerBlockOptin = cpucuda::kSharedMemPerBlockOptin;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 64 * 1024;
  prop->major = 0;  // not a GPU: code that checks for sm_90 must not take the Hopper path
  prop->minor = 0;
  // CPUCUDA_SMS: the SM count that plans read, apart from the workers that run
  // the blocks (a plan made for an H200's 132 SMs without 132 threads' stacks).
  const char* sms = std::getenv("CPUCUDA_SMS");
  const int sms_n = sms ? std::atoi(sms) : 0;
  prop->multiProcessorCount = sms_n > 0 ? sms_n : workers;
  prop->l2CacheSize = 50 * 1024 * 1024;  // an H200's, so L2-flush sizes in benchmarks stay meaningful
  prop->persistingL2CacheMaxSize = 0;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->memoryBusWidth = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return record(cudaErrorInvalidValue);
  if (device != 0) return record(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    default: return record(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return record(cudaErrorInvalidValue);
  const long avail = sysconf(_SC_AVPHYS_PAGES), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  *free_bytes = avail > 0 ? static_cast<size_t>(avail) * static_cast<size_t>(page) : 0;
  *total_bytes = pages > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream) return record(cudaErrorInvalidValue);
  *stream = new CUstream_st{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (capturing(stream) || stream == nullptr) return refuse_during_capture();
  return cudaSuccess;
}
// An event recorded during a capture is a node of it: a stream that waits on
// it joins the capture (its later work is recorded, not run), and the origin
// waiting on an event of a joined stream is that stream's join.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (!event) return record(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  CUgraph_st* capture = active_capture_of(event);
  if (capture == nullptr) return cudaSuccess;
  if (stream == nullptr) return record(cudaErrorStreamCaptureImplicit);  // the legacy stream cannot join
  if (stream->capture == nullptr) {
    stream->capture = capture;
    stream->invalidated = false;
    stream->captured = 0;
    capture->joined.push_back(stream);
    g_capturing.push_back(stream);
  } else if (stream->capture != capture) {
    return record(cudaErrorStreamCaptureIsolation);
  }
  if (stream == stream->capture->origin) stream->capture->origin_waits.emplace_back(event->source, event->source_work);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (stream == nullptr) return record(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot capture
  if (mode < cudaStreamCaptureModeGlobal || mode > cudaStreamCaptureModeRelaxed) return record(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (stream->capture != nullptr) return record(cudaErrorIllegalState);
  stream->capture = new CUgraph_st;
  stream->capture->origin = stream;
  stream->capture->id = ++g_capture_ids;
  stream->invalidated = false;
  stream->captured = 0;
  g_capturing.push_back(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!graph) return record(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (stream == nullptr || stream->capture == nullptr) return record(cudaErrorIllegalState);
  if (stream->capture->origin != stream) return record(cudaErrorStreamCaptureUnmatched);
  // Every joined stream must have joined back: the origin waited on an event
  // recorded after the last work it added (else that work hangs off the graph).
  bool unjoined = false, invalidated = stream->invalidated;
  for (CUstream_st* j : stream->capture->joined) {
    size_t waited = 0;
    for (const auto& [source, work] : stream->capture->origin_waits) {
      if (source == j) waited = std::max(waited, work);
    }
    unjoined |= waited < j->captured;
    invalidated |= j->invalidated;
    j->capture = nullptr;
    g_capturing.erase(std::find(g_capturing.begin(), g_capturing.end(), j));
  }
  g_capturing.erase(std::find(g_capturing.begin(), g_capturing.end(), stream));
  CUgraph_st* captured = std::exchange(stream->capture, nullptr);
  if (unjoined) {
    delete captured;
    *graph = nullptr;
    return record(cudaErrorStreamCaptureUnjoined);
  }
  if (invalidated) {
    delete captured;
    *graph = nullptr;
    return record(cudaErrorStreamCaptureInvalidated);
  }
  *graph = captured;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return record(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (stream == nullptr || stream->capture == nullptr) {
    *status = cudaStreamCaptureStatusNone;
  } else {
    *status = stream->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  }
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!exec || !graph) return record(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->work};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return record(cudaErrorInvalidValue);
  if (capturing(stream)) {  // a graph launched into a capture becomes part of it
    stream->capture->work.insert(stream->capture->work.end(), exec->work.begin(), exec->work.end());
    return cudaSuccess;
  }
  if (stream == nullptr) {
    if (const cudaError_t err = refuse_during_capture()) return err;
  }
  for (const auto& work : exec->work) work();  // a kernel's error is thrown, as from a launch
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  if (!event) return record(cudaErrorInvalidValue);
  *event = new CUevent_st{{}, false};
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return record(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    const bool in_capture = stream != nullptr && stream->capture != nullptr;
    event->capture = in_capture ? stream->capture : nullptr;
    event->capture_id = in_capture ? stream->capture->id : 0;
    event->source = in_capture ? stream : nullptr;
    event->source_work = in_capture ? stream->captured : 0;
    if (in_capture) return cudaSuccess;  // a node of the graph, not a time
  }
  event->when = std::chrono::steady_clock::now();  // all work before it has finished: calls are synchronous
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : record(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventQuery(cudaEvent_t event) { return event ? cudaSuccess : record(cudaErrorInvalidResourceHandle); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return record(cudaErrorInvalidValue);
  if (!start || !end) return record(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return record(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
