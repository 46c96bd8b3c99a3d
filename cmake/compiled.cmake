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
    src/bodies.cpp
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

# byteps_compiled_nccl: Communicator<tcp, local::nccl> instantiated once for this project's GPU
# programs (train_mlp_cuda, bps-gpu-bench, tests/gpu), which otherwise each compiled it. Not
# installed: a consumer with CUDA instantiates it in its own file, as for any other policy.
# It links neither libcudart nor libnccl: a real program adds byteps::cuda, and the fake-device
# tests link their CPU model of both instead. Sanitized builds have only two of those programs,
# for which the library costs more than it saves.
set(byteps_nccl_link_target "")
if(BYTEPS_BUILD_COMPILED AND BYTEPS_HAVE_CUDA AND NOT BYTEPS_SANITIZED)
  add_library(byteps_compiled_nccl STATIC src/communicator_nccl.cpp)
  target_link_libraries(byteps_compiled_nccl PUBLIC byteps_compiled)
  target_include_directories(byteps_compiled_nccl PUBLIC ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  target_compile_definitions(byteps_compiled_nccl PUBLIC BYTEPS_COMPILED_NCCL)
  target_compile_options(byteps_compiled_nccl PRIVATE ${BYTEPS_WARNINGS})
  set_target_properties(byteps_compiled_nccl PROPERTIES POSITION_INDEPENDENT_CODE ON)
  set(byteps_nccl_link_target byteps_compiled_nccl)
endif()
