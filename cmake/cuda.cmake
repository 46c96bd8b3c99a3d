# BYTEPS_WITH_CUDA: bps::local::nccl (include/byteps/local/nccl.hpp), its tests and the GPU
# examples. AUTO builds them when the CUDA toolkit and NCCL are found, ON fails the configure
# when they are not, OFF never looks. Sets BYTEPS_HAVE_CUDA and, when ON, defines the INTERFACE
# target byteps::cuda (byteps + CUDA::cudart + NCCL::nccl) that users of nccl.hpp link.
#
# Hints: CUDAToolkit_ROOT (or nvcc on PATH, or /usr/local/cuda) for CUDA, NCCL_ROOT for NCCL.

set(BYTEPS_WITH_CUDA AUTO CACHE STRING
    "Build bps::local::nccl, its tests and GPU examples: AUTO (when CUDA and NCCL are found), ON (required), OFF")
set_property(CACHE BYTEPS_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${BYTEPS_WITH_CUDA}" _byteps_cuda_mode)
if(_byteps_cuda_mode MATCHES "^(1|YES|TRUE|Y)$")
  set(_byteps_cuda_mode ON)
elseif(_byteps_cuda_mode MATCHES "^(0|NO|FALSE|N)$")
  set(_byteps_cuda_mode OFF)
endif()
if(NOT _byteps_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "BYTEPS_WITH_CUDA='${BYTEPS_WITH_CUDA}' is not valid: expected AUTO, ON or OFF")
endif()

set(BYTEPS_HAVE_CUDA OFF)
if(_byteps_cuda_mode STREQUAL "OFF")
  message(STATUS "byteps: BYTEPS_WITH_CUDA=OFF: bps::local::nccl, its tests and GPU examples are not built")
else()
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)  # also where NVIDIA's packages put it
  endif()
  find_package(CUDAToolkit QUIET)
  find_package(NCCL QUIET)
  if(CUDAToolkit_FOUND AND NCCL_FOUND)
    set(BYTEPS_HAVE_CUDA ON)
  else()
    set(_byteps_cuda_missing)
    if(NOT CUDAToolkit_FOUND)
      list(APPEND _byteps_cuda_missing "the CUDA toolkit (set CUDAToolkit_ROOT, or put nvcc on PATH)")
    endif()
    if(NOT NCCL_FOUND)
      list(APPEND _byteps_cuda_missing "NCCL (nccl.h and libnccl; set NCCL_ROOT)")
    endif()
    string(REPLACE ";" " and " _byteps_cuda_missing "${_byteps_cuda_missing}")
    if(_byteps_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "BYTEPS_WITH_CUDA=ON, but ${_byteps_cuda_missing} could not be found. "
                          "Install them, point CMake at them, or configure with -DBYTEPS_WITH_CUDA=AUTO "
                          "(build without bps::local::nccl when they are missing) or OFF.")
    endif()
    message(STATUS "byteps: building without bps::local::nccl: ${_byteps_cuda_missing} not found "
                   "(BYTEPS_WITH_CUDA=AUTO)")
    unset(_byteps_cuda_missing)
  endif()
endif()

if(BYTEPS_HAVE_CUDA)
  add_library(byteps_cuda INTERFACE)
  add_library(byteps::cuda ALIAS byteps_cuda)
  set_target_properties(byteps_cuda PROPERTIES EXPORT_NAME cuda)
  target_link_libraries(byteps_cuda INTERFACE byteps CUDA::cudart NCCL::nccl)
  message(STATUS "byteps: building bps::local::nccl with CUDA ${CUDAToolkit_VERSION} and NCCL ${NCCL_VERSION}")
endif()
unset(_byteps_cuda_mode)
