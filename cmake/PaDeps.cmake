# GoogleTest and Google Benchmark: use an installed package when there is one,
# else a source tree / prebuilt copy under .deps/ (for machines with no network).

find_package(Threads REQUIRED)

set(PA_DEPS_DIR ${CMAKE_SOURCE_DIR}/.deps CACHE PATH "Folder with vendored googletest source / benchmark build")

find_package(GTest QUIET)
if(NOT GTest_FOUND)
  if(EXISTS ${PA_DEPS_DIR}/googletest/CMakeLists.txt)
    message(STATUS "paged-attention: GoogleTest from source at ${PA_DEPS_DIR}/googletest")
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory(${PA_DEPS_DIR}/googletest ${CMAKE_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  else()
    message(FATAL_ERROR
      "GoogleTest was not found. Install it (Debian/Ubuntu: apt-get install libgtest-dev), "
      "or copy its source tree (e.g. /usr/src/googletest) to ${PA_DEPS_DIR}/googletest, "
      "or pass -DGTest_DIR=<dir with GTestConfig.cmake>.")
  endif()
endif()

find_package(benchmark QUIET)
if(NOT benchmark_FOUND AND EXISTS ${PA_DEPS_DIR}/benchmark/include/benchmark/benchmark.h)
  file(GLOB _pa_bm_lib ${PA_DEPS_DIR}/benchmark/lib/libbenchmark.so*)
  if(_pa_bm_lib)
    list(GET _pa_bm_lib 0 _pa_bm_first)
    add_library(benchmark::benchmark SHARED IMPORTED)
    set_target_properties(benchmark::benchmark PROPERTIES
      IMPORTED_LOCATION ${_pa_bm_first}
      INTERFACE_INCLUDE_DIRECTORIES ${PA_DEPS_DIR}/benchmark/include)
    set(benchmark_FOUND TRUE)
    message(STATUS "paged-attention: Google Benchmark from ${PA_DEPS_DIR}/benchmark")
  endif()
endif()
if(NOT benchmark_FOUND)
  message(WARNING
    "Google Benchmark was not found, so the benchmark suites are not built "
    "(the `backends` main job and the tests do not need it). Install it "
    "(Debian/Ubuntu: apt-get install libbenchmark-dev) to build bench/.")
endif()
