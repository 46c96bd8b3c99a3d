# Installs byteps from a build tree into a fresh prefix, then configures, builds and runs the
# consumer project against that prefix. Any failing step stops the script with its output.
# Registered as a test by tests/install/CMakeLists.txt, which passes:
#   BYTEPS_BUILD_DIR     the byteps build tree to install from               (required)
#   WORK_DIR             scratch directory, deleted at the start of each run (required)
#   CONSUMER_SOURCE_DIR  the consumer project                                (required)
#   GENERATOR            the CMake generator of the byteps build             (required)
#   INSTALL_COMPONENT    install only this component (empty: everything)
#   INSTALL_INCLUDEDIR   include directory relative to the prefix (default: include)
#   CONFIG, MULTI_CONFIG the configuration to install and build; whether the generator is multi-config
#   GENERATOR_PLATFORM, GENERATOR_TOOLSET, MAKE_PROGRAM, CXX_COMPILER, CXX_FLAGS, TOOLCHAIN_FILE
#                        forwarded to the consumer so that it is built the same way
#   OUTER_PREFIX_PATH    the build's CMAKE_PREFIX_PATH, '|'-separated, searched after the prefix
#   EXE_SUFFIX           the executable suffix of the platform
#   EXPECT_OUTPUT        a regular expression the consumer's output must match (the mode it was
#                        built in)
#   EXPECT_CONFIGURE_ERROR  a regular expression: the consumer's configure must fail with
#                        output that matches it (a component this build lacks), and the
#                        script stops there
cmake_minimum_required(VERSION 3.20)

foreach(required BYTEPS_BUILD_DIR WORK_DIR CONSUMER_SOURCE_DIR GENERATOR)
  if("${${required}}" STREQUAL "")
    message(FATAL_ERROR "install_and_consume.cmake: pass -D${required}=...")
  endif()
endforeach()
if("${INSTALL_INCLUDEDIR}" STREQUAL "")
  set(INSTALL_INCLUDEDIR include)
endif()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
set(consumer_bin "${consumer_build}/bin")

# Stops the script when the last execute_process() failed, showing its command and output.
macro(_check_step what)
  if(NOT "${step_rc}" STREQUAL "0")
    string(REPLACE ";" " " _shown_command "${step_command}")
    message(FATAL_ERROR
      "install test: ${what} failed (exit status: ${step_rc})\n"
      "command: ${_shown_command}\n"
      "output:\n${step_output}")
  endif()
  message(STATUS "install test: ${what}: ok")
endmacro()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
# A DESTDIR in the environment would send the files elsewhere than the prefix.
unset(ENV{DESTDIR})

# 1. Install into the fresh prefix: no root needed, nothing outside the build tree touched.
set(step_command "${CMAKE_COMMAND}" --install "${BYTEPS_BUILD_DIR}" --prefix "${prefix}")
if(NOT "${INSTALL_COMPONENT}" STREQUAL "")
  list(APPEND step_command --component "${INSTALL_COMPONENT}")
endif()
if(NOT "${CONFIG}" STREQUAL "")
  list(APPEND step_command --config "${CONFIG}")
endif()
execute_process(COMMAND ${step_command}
  RESULT_VARIABLE step_rc OUTPUT_VARIABLE step_output ERROR_VARIABLE step_output)
_check_step("cmake --install into ${prefix}")

# 2. The installed tree has the headers and the package files side by side.
set(step_command "(inspect ${prefix})")
set(step_output "")
set(step_rc 0)
set(header "${prefix}/${INSTALL_INCLUDEDIR}/byteps/core/config.hpp")
if(NOT EXISTS "${header}")
  set(step_rc 1)
  string(APPEND step_output "missing: ${header}\n")
endif()
file(GLOB_RECURSE config_files "${prefix}/*/byteps-config.cmake")
list(LENGTH config_files config_count)
if(NOT config_count EQUAL 1)
  set(step_rc 1)
  string(APPEND step_output "expected one byteps-config.cmake under ${prefix}, found ${config_count}: ${config_files}\n")
else()
  get_filename_component(config_dir "${config_files}" DIRECTORY)
  foreach(name byteps-config-version.cmake byteps-targets.cmake Findasio.cmake)
    if(NOT EXISTS "${config_dir}/${name}")
      set(step_rc 1)
      string(APPEND step_output "missing beside the config: ${config_dir}/${name}\n")
    endif()
  endforeach()
endif()
if(NOT "${step_rc}" STREQUAL "0")
  file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
  string(REPLACE ";" "\n  " installed "${installed}")
  string(APPEND step_output "installed files:\n  ${installed}\n")
endif()
_check_step("installed tree has ${INSTALL_INCLUDEDIR}/byteps/core/config.hpp and the package files")

# 3. Configure the consumer the way the byteps build was configured, finding byteps only
#    through the prefix (the user package registry is off, so a stale registration cannot win).
set(prefix_path "${prefix}")
if(NOT "${OUTER_PREFIX_PATH}" STREQUAL "")
  string(REPLACE "|" ";" outer "${OUTER_PREFIX_PATH}")
  list(APPEND prefix_path ${outer})
endif()
set(step_command "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" -G "${GENERATOR}")
if(NOT "${GENERATOR_PLATFORM}" STREQUAL "")
  list(APPEND step_command -A "${GENERATOR_PLATFORM}")
endif()
if(NOT "${GENERATOR_TOOLSET}" STREQUAL "")
  list(APPEND step_command -T "${GENERATOR_TOOLSET}")
endif()
if(NOT "${MAKE_PROGRAM}" STREQUAL "")
  list(APPEND step_command "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(NOT "${TOOLCHAIN_FILE}" STREQUAL "")
  list(APPEND step_command "-DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN_FILE}")
endif()
if(NOT "${CXX_COMPILER}" STREQUAL "")
  list(APPEND step_command "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(NOT "${CXX_FLAGS}" STREQUAL "")
  list(APPEND step_command "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
endif()
# The consumer's own files compile without optimisation: its build type stays (so the package's
# imported configurations are chosen as a user's build would choose them) but that type's flags
# are emptied. What the test proves is the package, not the optimiser, and a header-only consumer
# builds a communicator, a server and a scheduler in its one file.
if(NOT MULTI_CONFIG AND NOT "${CONFIG}" STREQUAL "")
  string(TOUPPER "${CONFIG}" config_upper)
  list(APPEND step_command "-DCMAKE_BUILD_TYPE=${CONFIG}" "-DCMAKE_CXX_FLAGS_${config_upper}=")
endif()
list(APPEND step_command
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  "-DCMAKE_RUNTIME_OUTPUT_DIRECTORY=${consumer_bin}")
# prefix_path is a list: passed as one quoted argument so that its ';' survives.
execute_process(COMMAND ${step_command} "-DCMAKE_PREFIX_PATH=${prefix_path}"
  RESULT_VARIABLE step_rc OUTPUT_VARIABLE step_output ERROR_VARIABLE step_output)
list(APPEND step_command "-DCMAKE_PREFIX_PATH=${prefix_path}")
if(NOT "${EXPECT_CONFIGURE_ERROR}" STREQUAL "")
  # CMake wraps messages at any space: match against the output with whitespace runs as one space.
  string(REGEX REPLACE "[ \t\r\n]+" " " flat_output "${step_output}")
  if("${step_rc}" STREQUAL "0")
    set(step_rc 1)
    string(PREPEND step_output "the configure succeeded, but it was expected to fail with a message matching '${EXPECT_CONFIGURE_ERROR}'\n")
  elseif(NOT flat_output MATCHES "${EXPECT_CONFIGURE_ERROR}")
    string(PREPEND step_output "the configure failed, but its message does not match '${EXPECT_CONFIGURE_ERROR}'\n")
  else()
    set(step_rc 0)
  endif()
  _check_step("configure the consumer: fails as expected")
  string(REGEX MATCH "${EXPECT_CONFIGURE_ERROR}.*" shown "${flat_output}")
  string(SUBSTRING "${shown}" 0 400 shown)
  message(STATUS "the consumer's configure failed, saying: ${shown}")
  return()
endif()
_check_step("configure the consumer with CMAKE_PREFIX_PATH=${prefix}")

# The package that was found must be the one just installed.
set(step_command "(read byteps_DIR from ${consumer_build}/CMakeCache.txt)")
file(STRINGS "${consumer_build}/CMakeCache.txt" byteps_dir_line REGEX "^byteps_DIR:")
string(REGEX REPLACE "^byteps_DIR:[A-Z]+=" "" found_dir "${byteps_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
if(EXISTS "${found_dir}")
  file(REAL_PATH "${found_dir}" found_dir)
endif()
string(FIND "${found_dir}/" "${real_prefix}/" at)
if(at EQUAL 0)
  set(step_rc 0)
else()
  set(step_rc 1)
  set(step_output "the consumer found byteps in '${found_dir}', not under ${real_prefix}\n")
endif()
_check_step("the consumer found byteps in ${found_dir}")

# 4. Build it.
set(step_command "${CMAKE_COMMAND}" --build "${consumer_build}")
if(NOT "${CONFIG}" STREQUAL "")
  list(APPEND step_command --config "${CONFIG}")
endif()
execute_process(COMMAND ${step_command}
  RESULT_VARIABLE step_rc OUTPUT_VARIABLE step_output ERROR_VARIABLE step_output)
_check_step("build the consumer")

# 5. Run it. Multi-config generators put the executable in a per-configuration subdirectory.
set(step_command "${consumer_bin}/consumer${EXE_SUFFIX}")
if(MULTI_CONFIG AND NOT "${CONFIG}" STREQUAL "")
  set(step_command "${consumer_bin}/${CONFIG}/consumer${EXE_SUFFIX}")
endif()
execute_process(COMMAND ${step_command}
  WORKING_DIRECTORY "${consumer_build}"
  TIMEOUT 300
  RESULT_VARIABLE step_rc OUTPUT_VARIABLE step_output ERROR_VARIABLE step_output)
_check_step("run the consumer")
message(STATUS "consumer output:\n${step_output}")
if(NOT "${EXPECT_OUTPUT}" STREQUAL "" AND NOT "${step_output}" MATCHES "${EXPECT_OUTPUT}")
  set(step_rc 1)
  string(PREPEND step_output "the consumer's output does not match '${EXPECT_OUTPUT}'\n")
  _check_step("the consumer says how it was built")
endif()
