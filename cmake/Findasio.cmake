# Finds standalone Asio (header-only; Debian's libasio-dev ships no CMake config).
# Provides asio::asio, an INTERFACE target that compiles Asio in standalone mode.
find_path(asio_INCLUDE_DIR NAMES asio.hpp PATH_SUFFIXES include)
if(asio_INCLUDE_DIR AND EXISTS "${asio_INCLUDE_DIR}/asio/version.hpp")
  file(STRINGS "${asio_INCLUDE_DIR}/asio/version.hpp" _asio_version_line REGEX "^#define ASIO_VERSION [0-9]+")
  string(REGEX REPLACE "^#define ASIO_VERSION ([0-9]+).*" "\\1" _asio_v "${_asio_version_line}")
  math(EXPR _asio_major "${_asio_v} / 100000")
  math(EXPR _asio_minor "${_asio_v} / 100 % 1000")
  math(EXPR _asio_patch "${_asio_v} % 100")
  set(asio_VERSION "${_asio_major}.${_asio_minor}.${_asio_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(asio REQUIRED_VARS asio_INCLUDE_DIR VERSION_VAR asio_VERSION)
if(asio_FOUND AND NOT TARGET asio::asio)
  find_package(Threads REQUIRED)
  add_library(asio::asio INTERFACE IMPORTED)
  set_target_properties(asio::asio PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${asio_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "ASIO_STANDALONE;ASIO_NO_DEPRECATED"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
endif()
mark_as_advanced(asio_INCLUDE_DIR)
