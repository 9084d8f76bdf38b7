// One include for every .cu file: the CUDA runtime and number formats on a GPU
// build, the course's CPU runtime otherwise (which the CPU build force-includes
// anyway; including it again here keeps editors and readers oriented).
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#else
#include "runtime/cpu_runtime.h"
#endif
