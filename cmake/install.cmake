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

# The cuda, rdma and tls components: each its own export set, loaded by the config only when a
# consumer asks for it (and finds what it needs), so that such a build still serves consumers
# without CUDA or rdma-core.
set(_byteps_package_files)
set(BYTEPS_PACKAGE_COMPONENTS "tcp")
set(BYTEPS_UNBUILT_COMPONENTS "")
if(BYTEPS_BUILD_COMPILED)
  install(TARGETS byteps_compiled EXPORT byteps-compiled-targets
    ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT ${_byteps_install_component}
    LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT ${_byteps_install_component})
  install(EXPORT byteps-compiled-targets
    NAMESPACE byteps::
    FILE byteps-compiled-targets.cmake
    DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
    COMPONENT ${_byteps_install_component})
  string(APPEND BYTEPS_PACKAGE_COMPONENTS " compiled")
else()
  string(APPEND BYTEPS_UNBUILT_COMPONENTS " compiled")
endif()
if(BYTEPS_HAVE_RDMA)
  install(TARGETS byteps_rdma EXPORT byteps-rdma-targets COMPONENT ${_byteps_install_component})
  install(EXPORT byteps-rdma-targets
    NAMESPACE byteps::
    FILE byteps-rdma-targets.cmake
    DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
    COMPONENT ${_byteps_install_component})
  list(APPEND _byteps_package_files "${CMAKE_CURRENT_LIST_DIR}/FindRdmaCore.cmake")
  string(APPEND BYTEPS_PACKAGE_COMPONENTS " rdma")
else()
  string(APPEND BYTEPS_UNBUILT_COMPONENTS " rdma")
endif()
if(BYTEPS_HAVE_TLS)
  install(TARGETS byteps_tls EXPORT byteps-tls-targets COMPONENT ${_byteps_install_component})
  install(EXPORT byteps-tls-targets
    NAMESPACE byteps::
    FILE byteps-tls-targets.cmake
    DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
    COMPONENT ${_byteps_install_component})
  string(APPEND BYTEPS_PACKAGE_COMPONENTS " tls")
else()
  string(APPEND BYTEPS_UNBUILT_COMPONENTS " tls")
endif()
if(BYTEPS_HAVE_CUDA)
  install(TARGETS byteps_cuda EXPORT byteps-cuda-targets COMPONENT ${_byteps_install_component})
  install(EXPORT byteps-cuda-targets
    NAMESPACE byteps::
    FILE byteps-cuda-targets.cmake
    DESTINATION "${BYTEPS_INSTALL_CMAKEDIR}"
    COMPONENT ${_byteps_install_component})
  list(APPEND _byteps_package_files "${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake")
  string(APPEND BYTEPS_PACKAGE_COMPONENTS " cuda")
  set(BYTEPS_PACKAGE_CUDA_ROOT "${CUDAToolkit_LIBRARY_ROOT}")
else()
  string(APPEND BYTEPS_UNBUILT_COMPONENTS " cuda")
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
