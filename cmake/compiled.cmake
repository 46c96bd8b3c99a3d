# byteps::compiled: the compiled mode (docs/architecture.md, "Compiled mode"). The shipped
# policies' Communicator, Server and SchedulerNode are instantiated once, in this library, and
# every program that links it gets BYTEPS_COMPILED: <byteps/byteps.hpp> then declares them
# (extern template) without their bodies, Asio or the sockets, so a trainer's translation unit
# compiles in seconds. Header-only (byteps::byteps) stays the default for consumers; this
# project's own tools, examples, benchmarks and tests link byteps::compiled, so the suite builds
# each of these instantiations once instead of once per file.

option(BYTEPS_BUILD_COMPILED "Build byteps::compiled, the library of the shipped policies' instantiations" ON)

if(BYTEPS_BUILD_COMPILED)
  add_library(byteps_compiled
    src/communicator_standard.cpp
    src/communicator_tcp.cpp
    src/server_standard.cpp
    src/server_tcp.cpp
    src/scheduler_node.cpp)
  add_library(byteps::compiled ALIAS byteps_compiled)
  target_link_libraries(byteps_compiled PUBLIC byteps)
  target_compile_definitions(byteps_compiled PUBLIC BYTEPS_COMPILED)
  target_compile_options(byteps_compiled PRIVATE ${BYTEPS_WARNINGS})
  set_target_properties(byteps_compiled PROPERTIES
    EXPORT_NAME compiled
    OUTPUT_NAME byteps
    POSITION_INDEPENDENT_CODE ON)
  set(byteps_link_target byteps::compiled)
else()
  set(byteps_link_target byteps::byteps)
endif()
