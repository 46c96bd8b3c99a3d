# bps-ps-traffic (ps_traffic.cpp): not byteps, the bytes of a PS round by plain TCP. Defined once
# here, for the benchmarks and for the suite's test of it (tests/bench), whichever comes first.
if(NOT TARGET bps-ps-traffic)
  add_executable(bps-ps-traffic ${CMAKE_CURRENT_LIST_DIR}/ps_traffic.cpp)
  # Header-only pieces: bench_options.hpp's parse_bytes and the dtype header it includes.
  target_link_libraries(bps-ps-traffic PRIVATE byteps fmt::fmt Threads::Threads)
  target_compile_features(bps-ps-traffic PRIVATE cxx_std_20)
  target_compile_options(bps-ps-traffic PRIVATE ${BYTEPS_WARNINGS})
endif()
