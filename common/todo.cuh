// Skeleton support: how an unfinished TODO reports itself.
//
// cmake/make_skeletons.py turns each marked solution block into the skeleton's
// placeholder, which keeps the kernel safe to run (no out-of-bounds access, no
// hang) and calls PA_TODO(n). In device code that sets bit n of a per-file flag;
// the skeleton's launcher then calls PA_CHECK_TODOS("NN_name"), which reads the
// flag back and throws pa::TodoError naming every TODO that ran unfinished.
// Host code uses PA_TODO_HOST(n, "NN_name"), which throws at once.
// Solutions contain neither call, so they pay nothing for this.
#pragma once

#include "check.h"
#include "cuda_compat.cuh"


// Each .cu file that includes this gets its own flag (static), read back by its launcher.
[[maybe_unused]] static __device__ unsigned int pa_todo_bits_ = 0;

#define PA_TODO(n) atomicOr(&pa_todo_bits_, 1u << (n))

#define PA_TODO_HOST(n, stage) throw ::pa::TodoError(::pa::todo_message(stage, 1u << (n)))

#define PA_CHECK_TODOS(stage)                                                      \
  do {                                                                             \
    unsigned int pa_bits_ = 0;                                                     \
    PA_CHECK(cudaDeviceSynchronize());                                             \
    PA_CHECK(cudaMemcpyFromSymbol(&pa_bits_, pa_todo_bits_, sizeof(pa_bits_)));    \
    if (pa_bits_) {                                                                \
      const unsigned int pa_zero_ = 0;                                             \
      PA_CHECK(cudaMemcpyToSymbol(pa_todo_bits_, &pa_zero_, sizeof(pa_zero_)));    \
      throw ::pa::TodoError(::pa::todo_message(stage, pa_bits_));                  \
    }                                                                              \
  } while (0)
