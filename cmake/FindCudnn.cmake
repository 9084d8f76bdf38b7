# FindCudnn: NVIDIA cuDNN (cudnn.h + libcudnn), for the vendor backend vendor_cudnn.
#
# Looks, in this order, in: -DCUDNN_ROOT=... or the environment variable CUDNN_ROOT,
# ${PROJECT_SOURCE_DIR}/.deps/cudnn (a pip wheel unpacked there: include/, lib/),
# the CUDA toolkit, and the standard places (/usr/include/x86_64-linux-gnu and
# /usr/lib/x86_64-linux-gnu from NVIDIA's Debian/Ubuntu packages, /usr/local/cuda).
# Never downloads anything.
#
# Sets Cudnn_FOUND, Cudnn_VERSION (e.g. 9.14.0), Cudnn_INCLUDE_DIR, Cudnn_LIBRARY,
# Cudnn_NOT_FOUND_REASON (the missing piece, when not found), and the imported
# target Cudnn::cudnn.

set(_pa_cudnn_hints)
foreach(_root IN ITEMS "${CUDNN_ROOT}" "$ENV{CUDNN_ROOT}" "${PROJECT_SOURCE_DIR}/.deps/cudnn")
  if(_root)
    list(APPEND _pa_cudnn_hints "${_root}")
  endif()
endforeach()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _pa_cudnn_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()

find_path(Cudnn_INCLUDE_DIR NAMES cudnn_version.h cudnn.h
          HINTS ${_pa_cudnn_hints}
          PATH_SUFFIXES include include/x86_64-linux-gnu include/aarch64-linux-gnu)
find_library(Cudnn_LIBRARY NAMES cudnn libcudnn.so.9 libcudnn.so.8
             HINTS ${_pa_cudnn_hints}
             PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu)

set(Cudnn_VERSION "")
if(Cudnn_INCLUDE_DIR)
  set(_pa_cudnn_vh "${Cudnn_INCLUDE_DIR}/cudnn_version.h")
  if(NOT EXISTS "${_pa_cudnn_vh}")
    set(_pa_cudnn_vh "${Cudnn_INCLUDE_DIR}/cudnn.h")
  endif()
  file(STRINGS "${_pa_cudnn_vh}" _pa_cudnn_defs REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
  foreach(_part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${_part} +([0-9]+)" _m "${_pa_cudnn_defs}")
    set(_pa_cudnn_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT "${_pa_cudnn_MAJOR}" STREQUAL "")
    set(Cudnn_VERSION "${_pa_cudnn_MAJOR}.${_pa_cudnn_MINOR}.${_pa_cudnn_PATCHLEVEL}")
  endif()
endif()

set(Cudnn_NOT_FOUND_REASON "")
if(NOT Cudnn_INCLUDE_DIR)
  set(Cudnn_NOT_FOUND_REASON "cuDNN's header cudnn.h was not found (set CUDNN_ROOT)")
elseif(NOT Cudnn_LIBRARY)
  set(Cudnn_NOT_FOUND_REASON "cuDNN's library libcudnn.so was not found (set CUDNN_ROOT)")
elseif(Cudnn_VERSION VERSION_LESS 9.7)
  # Paged K/V together with ragged (packed) queries needs cuDNN 9.7 or newer.
  set(Cudnn_NOT_FOUND_REASON "cuDNN ${Cudnn_VERSION} at ${Cudnn_INCLUDE_DIR} is older than 9.7 (paged K/V with ragged queries)")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Cudnn
  REQUIRED_VARS Cudnn_INCLUDE_DIR Cudnn_LIBRARY
  VERSION_VAR Cudnn_VERSION
  REASON_FAILURE_MESSAGE "${Cudnn_NOT_FOUND_REASON}")
if(Cudnn_FOUND AND Cudnn_NOT_FOUND_REASON)
  set(Cudnn_FOUND FALSE)
endif()

if(Cudnn_FOUND AND NOT TARGET Cudnn::cudnn)
  add_library(Cudnn::cudnn UNKNOWN IMPORTED)
  # Not a system include (-I, not -isystem): -I folders are searched first, so
  # this cudnn.h wins over another one in the CUDA toolkit's include folder
  # (some toolkits ship one), and header and library stay one version.
  set_target_properties(Cudnn::cudnn PROPERTIES
    IMPORTED_LOCATION "${Cudnn_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Cudnn_INCLUDE_DIR}"
    IMPORTED_NO_SYSTEM TRUE)
endif()
mark_as_advanced(Cudnn_INCLUDE_DIR Cudnn_LIBRARY)
