# What a trainer's translation unit includes in compiled mode: the minimal trainer
# (benchmarks/compile/minimal_trainer.cpp), preprocessed with -DBYTEPS_COMPILED as
# byteps::compiled sets it, must include none of the code the library compiles once (Asio, the
# transports' definitions, the worker's, server's and scheduler's engines). Header-only, the same
# file must include them all: the check's positive control. Run as a script:
#
#   cmake -DCXX=<compiler> -DSOURCE_DIR=<repo> -DMODE=compiled|header-only -P compiled_mode_includes.cmake
cmake_minimum_required(VERSION 3.20)

foreach(input CXX SOURCE_DIR MODE)
  if(NOT DEFINED ${input})
    message(FATAL_ERROR "compiled_mode_includes.cmake needs -D${input}=...")
  endif()
endforeach()

set(flags -std=c++20 "-I${SOURCE_DIR}/include")
if(MODE STREQUAL "compiled")
  list(APPEND flags -DBYTEPS_COMPILED)
endif()
# -M lists every header the file includes, after the preprocessor took its branches.
execute_process(COMMAND "${CXX}" ${flags} -M "${SOURCE_DIR}/benchmarks/compile/minimal_trainer.cpp"
  RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "preprocessing the minimal trainer (${MODE}) failed:\n${err}")
endif()

# "asio/" is any of Asio's headers (the transports include its parts, not <asio.hpp>).
set(heavy asio/ byteps/transport/tcp/tcp.hpp byteps/transport/ipc/ipc.hpp byteps/worker/node.hpp
          byteps/server/node.hpp byteps/rendezvous/scheduler.hpp byteps/local/host.hpp)
set(found "")
foreach(h IN LISTS heavy)
  string(FIND "${deps}" "/${h}" at)
  if(at GREATER -1)
    list(APPEND found "${h}")
  endif()
endforeach()

if(MODE STREQUAL "compiled")
  if(found)
    string(REPLACE ";" ", " found "${found}")
    message(FATAL_ERROR "in compiled mode the minimal trainer includes ${found}: the library "
                        "compiles these once, and a trainer should not parse them")
  endif()
  message(STATUS "compiled mode: the minimal trainer includes none of: ${heavy}")
else()
  list(LENGTH heavy want)
  list(LENGTH found got)
  if(NOT got EQUAL want)
    message(FATAL_ERROR "header-only, the minimal trainer includes only ${found} of ${heavy}: "
                        "the list this check looks for is out of date")
  endif()
  message(STATUS "header-only: the minimal trainer includes all of: ${heavy}")
endif()
