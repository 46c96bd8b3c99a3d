# Finds rdma-core's libibverbs and librdmacm (Debian: libibverbs-dev, librdmacm-dev) and defines
# the imported targets RdmaCore::ibverbs and RdmaCore::rdmacm. Hint: RdmaCore_ROOT.
#
# Sets RdmaCore_FOUND, RdmaCore_VERSION (from pkg-config when it knows libibverbs).

find_path(RdmaCore_VERBS_INCLUDE_DIR infiniband/verbs.h)
find_path(RdmaCore_CM_INCLUDE_DIR rdma/rdma_cma.h)
find_library(RdmaCore_VERBS_LIBRARY ibverbs)
find_library(RdmaCore_CM_LIBRARY rdmacm)

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(_RdmaCore_PC QUIET libibverbs)
  if(_RdmaCore_PC_FOUND)
    set(RdmaCore_VERSION "${_RdmaCore_PC_VERSION}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(RdmaCore
  REQUIRED_VARS RdmaCore_VERBS_LIBRARY RdmaCore_CM_LIBRARY RdmaCore_VERBS_INCLUDE_DIR RdmaCore_CM_INCLUDE_DIR
  VERSION_VAR RdmaCore_VERSION)

if(RdmaCore_FOUND)
  if(NOT TARGET RdmaCore::ibverbs)
    add_library(RdmaCore::ibverbs UNKNOWN IMPORTED)
    set_target_properties(RdmaCore::ibverbs PROPERTIES
      IMPORTED_LOCATION "${RdmaCore_VERBS_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${RdmaCore_VERBS_INCLUDE_DIR}")
  endif()
  if(NOT TARGET RdmaCore::rdmacm)
    add_library(RdmaCore::rdmacm UNKNOWN IMPORTED)
    set_target_properties(RdmaCore::rdmacm PROPERTIES
      IMPORTED_LOCATION "${RdmaCore_CM_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${RdmaCore_CM_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES RdmaCore::ibverbs)
  endif()
endif()
mark_as_advanced(RdmaCore_VERBS_INCLUDE_DIR RdmaCore_CM_INCLUDE_DIR RdmaCore_VERBS_LIBRARY RdmaCore_CM_LIBRARY)
