# BYTEPS_WITH_TORCH: the libtorch plugin (include/byteps/torch/: DistributedOptimizer,
# broadcast_parameters, broadcast_optimizer_state), its example (examples/train_torch), its
# tests and the torch component of the package. Defaults to ON when CMake finds Torch
# (Debian 12: libtorch-dev) and OFF when it does not; ON where Torch is missing fails the
# configure. Sets BYTEPS_HAVE_TORCH and, when ON, defines the INTERFACE target byteps::torch
# (byteps + libtorch) that a libtorch trainer links.
#
# Sanitized builds (CMAKE_CXX_FLAGS with -fsanitize=: the asan and tsan presets, which also
# say BYTEPS_WITH_TORCH=OFF, and scripts/sanitize.sh) default to OFF: libtorch is a
# prebuilt library that is not instrumented, so AddressSanitizer and ThreadSanitizer would see
# only half of every allocation and every lock (false reports, missed ones), and its headers
# cost minutes of compile time per file in the instrumented builds that CI keeps under 45 min.

set(_byteps_torch_default OFF)
if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  find_package(Torch QUIET)
  if(Torch_FOUND OR TORCH_FOUND)
    set(_byteps_torch_default ON)
  endif()
endif()
option(BYTEPS_WITH_TORCH "Build the libtorch plugin (byteps::torch); default ON when Torch is found"
       ${_byteps_torch_default})
unset(_byteps_torch_default)

set(BYTEPS_HAVE_TORCH OFF)
if(BYTEPS_WITH_TORCH)
  find_package(Torch QUIET)
  if(NOT (Torch_FOUND OR TORCH_FOUND))
    message(FATAL_ERROR "BYTEPS_WITH_TORCH=ON, but Torch could not be found. Install "
                        "libtorch-dev (Debian 12), set Torch_DIR to the folder holding "
                        "TorchConfig.cmake, or configure with -DBYTEPS_WITH_TORCH=OFF.")
  endif()
  set(BYTEPS_HAVE_TORCH ON)
  add_library(byteps_torch INTERFACE)
  add_library(byteps::torch ALIAS byteps_torch)
  set_target_properties(byteps_torch PROPERTIES EXPORT_NAME torch)
  # `torch` is Torch's own imported target (its include folders, libtorch and libc10).
  target_link_libraries(byteps_torch INTERFACE byteps torch)
  message(STATUS "byteps: building the libtorch plugin (byteps::torch) with Torch ${Torch_VERSION}")
else()
  message(STATUS "byteps: the libtorch plugin is not built (BYTEPS_WITH_TORCH=OFF, the default "
                 "where Torch is not found and in sanitized builds)")
endif()
