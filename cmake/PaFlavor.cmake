# Flavor setup: decides how .cu files are compiled and what they link against.
#
# PA_CU_LANGUAGE  CXX (CPU flavor) or CUDA (GPU flavor); pa_cu_sources() applies it.

set(PA_SOURCE_ROOT ${CMAKE_SOURCE_DIR})

if(PA_GPU)
  # sm_90a machine code only (wgmma, setmaxnreg and TMA need the "a" target): the
  # H100/H200 the kernels are tuned for. PA_PORTABLE_PTX=ON adds compute_90 PTX
  # that other GPUs can JIT, at the price of a second front-end pass over every
  # translation unit; -DCMAKE_CUDA_ARCHITECTURES=... overrides both.
  option(PA_PORTABLE_PTX "GPU flavor: also embed compute_90 PTX (portable, slower to build)" OFF)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    if(PA_PORTABLE_PTX)
      set(CMAKE_CUDA_ARCHITECTURES "90a-real;90-virtual" CACHE STRING "CUDA architectures")
    else()
      set(CMAKE_CUDA_ARCHITECTURES "90a-real" CACHE STRING "CUDA architectures")
    endif()
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know that nvcc >= 12 accepts C++20: tell it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  set(PA_CU_LANGUAGE CUDA)
  add_compile_definitions(PA_GPU_BUILD=1)
  add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>
                      $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
  # nvcc's device-code optimisation of one translation unit on several threads
  # (--split-compile): the units that instantiate many tile kernels dominate a
  # clean build, and a learner's stage edit rebuilds exactly one of them.
  set(PA_NVCC_SPLIT_COMPILE "8" CACHE STRING
      "GPU flavor: nvcc --split-compile=N threads per translation unit (0 = off)")
  if(PA_NVCC_SPLIT_COMPILE GREATER 0)
    add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:--split-compile=${PA_NVCC_SPLIT_COMPILE}>)
  endif()
  message(STATUS "paged-attention: GPU flavor, CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")
else()
  set(PA_CU_LANGUAGE CXX)
  # The CPU runtime header must come before anything else: it defines the CUDA
  # qualifiers, built-in variables and runtime API that the .cu files use.
  # -ffp-contract=off: the host compiler never fuses a * b + c on its own (GCC
  # does on targets with FMA, e.g. aarch64); where the kernels want a fused
  # multiply-add, the source says fmaf, which both flavors honour.
  # -Wno-psabi: GCC notes that passing a 64-byte-aligned struct by value (stage
  # 09's tensor maps, a kernel parameter) changed ABI in GCC 4.6; nothing here
  # links against code that old.
  add_compile_options("SHELL:-include ${PA_SOURCE_ROOT}/common/runtime/cpu_runtime.h"
                      -Wno-unknown-pragmas -ffp-contract=off $<$<CXX_COMPILER_ID:GNU>:-Wno-psabi>)
  message(STATUS "paged-attention: CPU flavor (kernels run on the course's CPU runtime)")
endif()

# The bit-exact build (bench/crosscheck, README "Does the CPU compute what the
# GPU computes?"): the softmax's 2^x from fused multiply-adds (pa::exact_exp2)
# instead of the GPU's ex2.approx, and nvcc fuses no a * b + c on its own, as
# the host compiler does not (-ffp-contract=off above).
if(PA_BIT_EXACT)
  add_compile_definitions(PA_BIT_EXACT=1)
  if(PA_GPU)
    add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:-fmad=false>)
  endif()
  message(STATUS "paged-attention: bit-exact build (exp2 from FMAs, no contraction)")
endif()

if(PA_ASAN)
  add_compile_options(-fsanitize=address -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address)
endif()
if(PA_UBSAN)
  # -fno-sanitize-recover: the first undefined behaviour aborts the program, so
  # its test fails; recovering would print a line and let the test pass.
  add_compile_options(-fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=undefined)
endif()

# Mark .cu files so the CPU flavor compiles them as C++ with the host compiler.
function(pa_cu_sources)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "\\.cu$")
      if(PA_GPU)
        set_source_files_properties(${src} PROPERTIES LANGUAGE CUDA)
      else()
        set_source_files_properties(${src} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
      endif()
    endif()
  endforeach()
endfunction()

# Link a target against the flavor's runtime (the CPU runtime, or cudart).
function(pa_link_runtime target)
  if(PA_GPU)
    target_link_libraries(${target} PUBLIC CUDA::cudart_static)
    set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  else()
    target_link_libraries(${target} PUBLIC pa_cpu_runtime)
  endif()
endfunction()
