// A second stream and two events, made on the current device and owned by
// whoever plans the work that needs them (engine::plan_cascade): a run forks
// work onto the stream after everything already queued on the caller's stream
// (`fork`), and joins it back before what depends on it (`join`), so that two
// independent passes may share the GPU. The stream does not synchronise with
// the legacy default stream; the events order everything. Made at plan time,
// never in a run, so a run can be captured in a CUDA graph.
#pragma once

#include "check.h"

namespace pa {

struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;

  SideStream() {
    PA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    PA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    PA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  // Return codes are ignored: at process exit the CUDA runtime may already be
  // going down, and nothing waits on these any more.
  ~SideStream() {
    if (join != nullptr) (void)cudaEventDestroy(join);
    if (fork != nullptr) (void)cudaEventDestroy(fork);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
};

}  // namespace pa
