# FindCudnnFrontend: NVIDIA's header-only cudnn-frontend (the C++ graph API over
# cuDNN), for the vendor backend vendor_cudnn.
#
# Looks, in this order, in: -DCUDNN_FRONTEND_ROOT=... or the environment variable
# CUDNN_FRONTEND_ROOT, ${PROJECT_SOURCE_DIR}/.deps/cudnn_frontend (the include/
# folder of the pip wheel nvidia-cudnn-frontend, or a clone of
# github.com/NVIDIA/cudnn-frontend), then the standard include folders.
# Never downloads anything.
#
# Sets CudnnFrontend_FOUND, CudnnFrontend_VERSION (e.g. 1.32.0),
# CudnnFrontend_INCLUDE_DIR, CudnnFrontend_NOT_FOUND_REASON, and the imported
# target CudnnFrontend::CudnnFrontend (headers only; link Cudnn::cudnn too).

set(_pa_cfe_hints)
foreach(_root IN ITEMS "${CUDNN_FRONTEND_ROOT}" "$ENV{CUDNN_FRONTEND_ROOT}"
                       "${PROJECT_SOURCE_DIR}/.deps/cudnn_frontend")
  if(_root)
    list(APPEND _pa_cfe_hints "${_root}")
  endif()
endforeach()

find_path(CudnnFrontend_INCLUDE_DIR NAMES cudnn_frontend.h cudnn_frontend_version.h
          HINTS ${_pa_cfe_hints}
          PATH_SUFFIXES include)

set(CudnnFrontend_VERSION "")
if(CudnnFrontend_INCLUDE_DIR AND EXISTS "${CudnnFrontend_INCLUDE_DIR}/cudnn_frontend_version.h")
  file(STRINGS "${CudnnFrontend_INCLUDE_DIR}/cudnn_frontend_version.h" _pa_cfe_defs
       REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "CUDNN_FRONTEND_${_part}_VERSION +([0-9]+)" _m "${_pa_cfe_defs}")
    set(_pa_cfe_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT "${_pa_cfe_MAJOR}" STREQUAL "")
    set(CudnnFrontend_VERSION "${_pa_cfe_MAJOR}.${_pa_cfe_MINOR}.${_pa_cfe_PATCH}")
  endif()
endif()

set(CudnnFrontend_NOT_FOUND_REASON "")
if(NOT CudnnFrontend_INCLUDE_DIR)
  # One string (string(CONCAT)): set() of two strings makes a list, whose ';'
  # find_package_handle_standard_args would split into unknown arguments.
  string(CONCAT CudnnFrontend_NOT_FOUND_REASON
         "cudnn-frontend's header cudnn_frontend.h was not found (set CUDNN_FRONTEND_ROOT, or unpack the pip wheel "
         "nvidia-cudnn-frontend's include/ into .deps/cudnn_frontend/include)")
elseif(CudnnFrontend_VERSION AND CudnnFrontend_VERSION VERSION_LESS 1.13)
  # The SDPA options the backend uses: diagonal band masks with bottom-right
  # alignment (1.10) and set_generate_stats (1.13).
  set(CudnnFrontend_NOT_FOUND_REASON
      "cudnn-frontend ${CudnnFrontend_VERSION} at ${CudnnFrontend_INCLUDE_DIR} is older than 1.13")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CudnnFrontend
  REQUIRED_VARS CudnnFrontend_INCLUDE_DIR
  VERSION_VAR CudnnFrontend_VERSION
  REASON_FAILURE_MESSAGE "${CudnnFrontend_NOT_FOUND_REASON}")
if(CudnnFrontend_FOUND AND CudnnFrontend_NOT_FOUND_REASON)
  set(CudnnFrontend_FOUND FALSE)
endif()

if(CudnnFrontend_FOUND AND NOT TARGET CudnnFrontend::CudnnFrontend)
  add_library(CudnnFrontend::CudnnFrontend INTERFACE IMPORTED)
  set_target_properties(CudnnFrontend::CudnnFrontend PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CudnnFrontend_INCLUDE_DIR}")
endif()
mark_as_advanced(CudnnFrontend_INCLUDE_DIR)
