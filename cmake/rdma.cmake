# BYTEPS_WITH_RDMA: bps::transport::rdma (include/byteps/transport/rdma/rdma.hpp, over rdma-core), its
# real-device tests and the rdma component of the package. AUTO builds them when rdma-core's
# libibverbs and librdmacm are found, ON fails the configure when they are not, OFF never looks.
# Sets BYTEPS_HAVE_RDMA and, when ON, defines the INTERFACE target byteps::rdma (byteps +
# libibverbs + librdmacm) that users of the RDMA transport link.
#
# The transport's logic is tested whatever this says: tests/rdma runs it over an in-process
# emulation of verbs, which needs no rdma-core. Hint: RdmaCore_ROOT.

set(BYTEPS_WITH_RDMA AUTO CACHE STRING
    "Build bps::transport::rdma over rdma-core: AUTO (when libibverbs and librdmacm are found), ON (required), OFF")
set_property(CACHE BYTEPS_WITH_RDMA PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${BYTEPS_WITH_RDMA}" _byteps_rdma_mode)
if(_byteps_rdma_mode MATCHES "^(1|YES|TRUE|Y)$")
  set(_byteps_rdma_mode ON)
elseif(_byteps_rdma_mode MATCHES "^(0|NO|FALSE|N)$")
  set(_byteps_rdma_mode OFF)
endif()
if(NOT _byteps_rdma_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "BYTEPS_WITH_RDMA='${BYTEPS_WITH_RDMA}' is not valid: expected AUTO, ON or OFF")
endif()

set(BYTEPS_HAVE_RDMA OFF)
if(_byteps_rdma_mode STREQUAL "OFF")
  message(STATUS "byteps: BYTEPS_WITH_RDMA=OFF: bps::transport::rdma is not built")
else()
  find_package(RdmaCore QUIET)
  if(RdmaCore_FOUND)
    set(BYTEPS_HAVE_RDMA ON)
  elseif(_byteps_rdma_mode STREQUAL "ON")
    message(FATAL_ERROR "BYTEPS_WITH_RDMA=ON, but rdma-core (infiniband/verbs.h, rdma/rdma_cma.h, "
                        "libibverbs and librdmacm) could not be found. Install libibverbs-dev and "
                        "librdmacm-dev (scripts/install-deps.sh), set RdmaCore_ROOT, or configure "
                        "with -DBYTEPS_WITH_RDMA=AUTO or OFF.")
  else()
    message(STATUS "byteps: building without bps::transport::rdma: rdma-core (libibverbs-dev, "
                   "librdmacm-dev) not found (BYTEPS_WITH_RDMA=AUTO)")
  endif()
endif()

if(BYTEPS_HAVE_RDMA)
  add_library(byteps_rdma INTERFACE)
  add_library(byteps::rdma ALIAS byteps_rdma)
  set_target_properties(byteps_rdma PROPERTIES EXPORT_NAME rdma)
  target_link_libraries(byteps_rdma INTERFACE byteps RdmaCore::rdmacm RdmaCore::ibverbs)
  message(STATUS "byteps: building bps::transport::rdma with rdma-core ${RdmaCore_VERSION}")
endif()
unset(_byteps_rdma_mode)
