# FindNCCL: NVIDIA's collective communication library (nccl.h, libnccl).
#
# Looks under NCCL_ROOT (variable or environment), then beside the CUDA toolkit
# (CUDAToolkit_LIBRARY_ROOT, CUDAToolkit_ROOT, /usr/local/cuda), then the system paths.
# Defines NCCL_FOUND, NCCL_VERSION (from nccl.h), NCCL_INCLUDE_DIR, NCCL_LIBRARY and the
# imported target NCCL::nccl (the shared library).

set(_nccl_hints)
foreach(_nccl_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_LIBRARY_ROOT}"
                            "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}" /usr/local/cuda)
  if(NOT "${_nccl_root}" STREQUAL "")
    list(APPEND _nccl_hints "${_nccl_root}")
  endif()
endforeach()

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${_nccl_hints} PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_nccl_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${_nccl_part} +([0-9]+).*" "\\1" _nccl_${_nccl_part}
           "${_nccl_version_lines}")
  endforeach()
  set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()

unset(_nccl_hints)
unset(_nccl_root)
unset(_nccl_version_lines)
unset(_nccl_part)
