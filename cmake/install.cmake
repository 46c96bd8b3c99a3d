# Install rules and the CMake package, so that a consumer can write
#
#   find_package(byteps CONFIG REQUIRED [COMPONENTS tcp])
#   target_link_libraries(app PRIVATE byteps::byteps)
#
# With rdma-core (BYTEPS_HAVE_RDMA) the package also has the component "rdma":
#
#   find_package(byteps CONFIG REQUIRED COMPONENTS rdma)
#   target_link_libraries(app PRIVATE byteps::rdma)   # rdma.hpp: byteps + libibverbs + librdmacm
#
# With OpenSSL's libssl (BYTEPS_HAVE_TLS) the package also has the component "tls":
#
#   find_package(byteps CONFIG REQUIRED COMPONENTS tls)
#   target_link_libraries(app PRIVATE byteps::tls)    # tls.hpp: byteps + libssl
#
# With byteps::compiled built (BYTEPS_BUILD_COMPILED, the default) the package also has the
# component "compiled", the library of the shipped policies' instantiations:
#
#   find_package(byteps CONFIG REQUIRED COMPONENTS compiled)
#   target_link_libraries(app PRIVATE byteps::compiled)  # byteps + BYTEPS_COMPILED + libbyteps
#
# With Torch (BYTEPS_HAVE_TORCH) the package also has the component "torch", the libtorch plugin:
#
#   find_package(byteps CONFIG REQUIRED COMPONENTS torch)
#   target_link_libraries(app PRIVATE byteps::torch)  # byteps/torch.hpp: byteps + libtorch
#
# With CUDA (BYTEPS_HAVE_CUDA) the package also has the component "cuda":
#
#   find_package(byteps CONFIG REQUIRED COMPONENTS cuda)
#   target_link_libraries(app PRIVATE byteps::cuda)   # nccl.hpp: byteps + CUDA runtime + NCCL
#
# Everything here belongs to the install component "byteps_development", so that the
# headers and the package can be installed on their own, without building any tool:
#   cmake --install <build> --prefix <dir> --component byteps_development
# byteps is header-only: ARCH_INDEPENDENT below keeps the version file from rejecting a
# consumer whose pointer size differs from that of the machine that configured the install.
# (The compiled component's library is built for this machine; a consumer of another pointer
# size fails at link time, as with any library.)

include(CMakePackageConfigHelpers)

set(BYTEPS_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/byteps"
    CACHE STRING "Where the byteps CMake package files are installed, relative to the prefix")
mark_as_advanced(BYTEPS_INSTALL_CMAKEDIR)
set(_byteps_install_component byteps_development)

# Public headers only: the include tree holds nothing else today, but stray files must not ship.
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/byteps"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  COMPONENT ${_byteps_install_component}
  FILES_MATCHING PATTERN "*.hpp")

# The INTERFACE target; its include directory is given by INSTALL_INTERFACE in CMakeLists.txt.
install(TARGETS byteps EXPORT byteps-targets COMPONENT ${_byteps_install_component})
install(EXPORT byteps-targets
  NAMESPACE byteps::
  FILE byteps-targets.cmake
  DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
  COMPONENT ${_byteps_install_component})

# The compiled, cuda, rdma, tls and torch components: each its own export set, loaded by the config only when a
# consumer asks for it (and finds what it needs), so that such a build still serves consumers
# without CUDA or rdma-core.
set(_byteps_package_files)
set(BYTEPS_PACKAGE_COMPONENTS "tcp")
set(BYTEPS_UNBUILT_COMPONENTS "")
# _byteps_component(NAME BUILT): installs byteps_NAME in its own export set when BUILT, and
# lists NAME among the package's built or unbuilt components.
function(_byteps_component name built)
  if(built)
    install(TARGETS byteps_${name} EXPORT byteps-${name}-targets
      ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT ${_byteps_install_component}
      LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT ${_byteps_install_component})
    install(EXPORT byteps-${name}-targets
      NAMESPACE byteps::
      FILE byteps-${name}-targets.cmake
      DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
      COMPONENT ${_byteps_install_component})
    set(BYTEPS_PACKAGE_COMPONENTS "${BYTEPS_PACKAGE_COMPONENTS} ${name}" PARENT_SCOPE)
  else()
    set(BYTEPS_UNBUILT_COMPONENTS "${BYTEPS_UNBUILT_COMPONENTS} ${name}" PARENT_SCOPE)
  endif()
endfunction()
_byteps_component(compiled "${BYTEPS_BUILD_COMPILED}")
_byteps_component(rdma "${BYTEPS_HAVE_RDMA}")
_byteps_component(tls "${BYTEPS_HAVE_TLS}")
_byteps_component(cuda "${BYTEPS_HAVE_CUDA}")
_byteps_component(torch "${BYTEPS_HAVE_TORCH}")
if(BYTEPS_HAVE_RDMA)
  list(APPEND _byteps_package_files "${CMAKE_CURRENT_LIST_DIR}/FindRdmaCore.cmake")
endif()
if(BYTEPS_HAVE_CUDA)
  list(APPEND _byteps_package_files "${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake")
  set(BYTEPS_PACKAGE_CUDA_ROOT "${CUDAToolkit_LIBRARY_ROOT}")
else()
  set(BYTEPS_PACKAGE_CUDA_ROOT "")
endif()
string(STRIP "${BYTEPS_UNBUILT_COMPONENTS}" BYTEPS_UNBUILT_COMPONENTS)

configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/byteps-config.cmake.in"
  "${PROJECT_BINARY_DIR}/byteps-package/byteps-config.cmake"
  INSTALL_DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
  NO_SET_AND_CHECK_MACRO)
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/byteps-package/byteps-config-version.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion
  ARCH_INDEPENDENT)

# Findasio.cmake goes beside the config: Debian's libasio-dev ships no asio CMake package,
# and the installed config puts its own directory on CMAKE_MODULE_PATH to find Asio.
install(FILES
    "${PROJECT_BINARY_DIR}/byteps-package/byteps-config.cmake"
    "${PROJECT_BINARY_DIR}/byteps-package/byteps-config-version.cmake"
    "${CMAKE_CURRENT_LIST_DIR}/Findasio.cmake"
    ${_byteps_package_files}
  DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
  COMPONENT ${_byteps_install_component})

unset(_byteps_install_component)
unset(_byteps_package_files)
