# BYTEPS_WITH_TLS: bps::transport::tls<tcp> (include/byteps/transport/tls/tls.hpp, over OpenSSL's
# libssl through Asio's SSL stream), its tests and the tls component of the package. AUTO builds
# them when libssl is found, ON fails the configure when it is not, OFF never looks. Sets
# BYTEPS_HAVE_TLS and, when ON, defines the INTERFACE target byteps::tls (byteps + libssl) that
# users of the TLS transport link; byteps::byteps itself needs only libcrypto (the job token).

set(BYTEPS_WITH_TLS AUTO CACHE STRING
    "Build bps::transport::tls over OpenSSL's libssl: AUTO (when found), ON (required), OFF")
set_property(CACHE BYTEPS_WITH_TLS PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${BYTEPS_WITH_TLS}" _byteps_tls_mode)
if(_byteps_tls_mode MATCHES "^(1|YES|TRUE|Y)$")
  set(_byteps_tls_mode ON)
elseif(_byteps_tls_mode MATCHES "^(0|NO|FALSE|N)$")
  set(_byteps_tls_mode OFF)
endif()
if(NOT _byteps_tls_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "BYTEPS_WITH_TLS='${BYTEPS_WITH_TLS}' is not valid: expected AUTO, ON or OFF")
endif()

set(BYTEPS_HAVE_TLS OFF)
if(_byteps_tls_mode STREQUAL "OFF")
  message(STATUS "byteps: BYTEPS_WITH_TLS=OFF: bps::transport::tls is not built")
else()
  find_package(OpenSSL QUIET COMPONENTS SSL)
  if(OpenSSL_SSL_FOUND OR OPENSSL_SSL_LIBRARY)
    set(BYTEPS_HAVE_TLS ON)
  elseif(_byteps_tls_mode STREQUAL "ON")
    message(FATAL_ERROR "BYTEPS_WITH_TLS=ON, but OpenSSL's libssl could not be found. Install "
                        "libssl-dev, set OPENSSL_ROOT_DIR, or configure with -DBYTEPS_WITH_TLS=AUTO "
                        "or OFF.")
  else()
    message(STATUS "byteps: building without bps::transport::tls: OpenSSL's libssl (libssl-dev) "
                   "not found (BYTEPS_WITH_TLS=AUTO)")
  endif()
endif()

if(BYTEPS_HAVE_TLS)
  add_library(byteps_tls INTERFACE)
  add_library(byteps::tls ALIAS byteps_tls)
  set_target_properties(byteps_tls PROPERTIES EXPORT_NAME tls)
  target_link_libraries(byteps_tls INTERFACE byteps OpenSSL::SSL)
  message(STATUS "byteps: building bps::transport::tls with OpenSSL ${OPENSSL_VERSION}")
endif()
unset(_byteps_tls_mode)
