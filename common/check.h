// Error checking for host API calls and launches. Every failure becomes a
// pa::Error that names the expression, file and line; nothing calls exit().
#pragma once

#include <stdexcept>
#include <string>

#if defined(__CUDACC__) || defined(PA_HOST_CUDA_HEADERS)
#include <cuda_runtime.h>
#endif

namespace pa {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown by a skeleton whose TODO blocks still hold placeholders (common/todo.cuh).
struct TodoError : Error {
  using Error::Error;
};

inline std::string todo_message(const char* stage, unsigned bits) {
  std::string msg = std::string("steps/") + stage + ": ";
  bool first = true;
  for (int n = 0; n < 32; ++n) {
    if (!(bits & (1u << n))) continue;
    msg += (first ? "TODO " : ", TODO ") + std::to_string(n);
    first = false;
  }
  return msg + " not done yet (see steps/" + stage + "/README.md)";
}

[[noreturn]] inline void fail_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  throw Error(std::string("CUDA error: ") + cudaGetErrorString(err) + "\n  in: " + expr +
              "\n  at: " + file + ":" + std::to_string(line));
}

}  // namespace pa

// PA_CHECK(cudaMalloc(&p, n)): throws pa::Error with the failing expression.
#define PA_CHECK(expr)                                                 \
  do {                                                                 \
    cudaError_t pa_err_ = (expr);                                      \
    if (pa_err_ != cudaSuccess) ::pa::fail_cuda(pa_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// PA_REQUIRE(cond, msg): host-side precondition; msg is a std::string expression.
#define PA_REQUIRE(cond, msg)                                          \
  do {                                                                 \
    if (!(cond)) throw ::pa::Error(std::string(msg));                  \
  } while (0)
