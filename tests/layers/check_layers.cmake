# Checks that every include between byteps's headers points down the layer order, and reads that
# order from the Layers table of docs/architecture.md, so the documented order and the checked
# one are the same text. Run as a script:
#
#   cmake -DINCLUDE_DIR=<repo>/include -DLAYERS_DOC=<repo>/docs/architecture.md -P check_layers.cmake
#
# Rules:
# - A header's layer is the first folder under include/byteps/ (an impl/ subfolder belongs to
#   its parent's layer). A header may include its own layer and the layers listed above it in
#   the table.
# - Headers at the top of include/byteps/ (byteps.hpp, the umbrella, and version.hpp) come after
#   every layer: they may include anything, and no layer may include them.
# - Every folder under include/byteps/ must be a row of the table, and every row a folder.
# Both `#include "byteps/..."` and `#include <byteps/...>` are read.

cmake_minimum_required(VERSION 3.20)

foreach(input INCLUDE_DIR LAYERS_DOC)
  if(NOT DEFINED ${input})
    message(FATAL_ERROR "check_layers.cmake needs -D${input}=...")
  endif()
endforeach()
set(root "${INCLUDE_DIR}/byteps")
file(RELATIVE_PATH doc_shown "${INCLUDE_DIR}/.." "${LAYERS_DOC}")  # docs/architecture.md
set(top_level "the top of include/byteps/")

# The lines of `file` in `out`, numbered from 1 by their position in the list. CMake lists split
# on ';' and do not split inside '[...]', so those (and '\') are replaced first: the checks below
# only look at include lines and table rows, which do not need them.
function(read_lines file out)
  file(READ "${file}" text)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\\" "/" text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The order: the first cell of each row of the table under "## Layers", top to bottom.
read_lines("${LAYERS_DOC}" doc_lines)
set(order)
set(in_section FALSE)
foreach(line IN LISTS doc_lines)
  if(line MATCHES "^## ")
    if(line MATCHES "^## Layers[ \t]*$")
      set(in_section TRUE)
    else()
      set(in_section FALSE)
    endif()
  elseif(in_section AND line MATCHES "^\\| `([A-Za-z0-9_]+)/` \\|")
    list(APPEND order "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT order)
  message(FATAL_ERROR "${doc_shown}: found no Layers table (rows like \"| `core/` | ... |\" "
                      "under \"## Layers\")")
endif()
list(JOIN order "/ > " order_text)
set(order_text "${order_text}/ > ${top_level}")

set(problems)
# One problem, given in pieces that are joined into one line.
macro(report)
  string(CONCAT problem ${ARGN})
  list(APPEND problems "${problem}")
endmacro()

# The table and the folders must list the same layers.
file(GLOB folders LIST_DIRECTORIES true RELATIVE "${root}" "${root}/*")
foreach(folder IN LISTS folders)
  if(IS_DIRECTORY "${root}/${folder}" AND NOT folder IN_LIST order)
    report("include/byteps/${folder}/: this folder is not a row of the Layers table "
           "of ${doc_shown}, so its place in the order is unknown")
  endif()
endforeach()
foreach(layer IN LISTS order)
  if(NOT IS_DIRECTORY "${root}/${layer}")
    report("${doc_shown}: the Layers table lists ${layer}/, which include/byteps/ "
           "does not have")
  endif()
endforeach()

# The position of a header (a path under include/byteps/) in the order, and its layer's name.
function(place_of path out_index out_name)
  if(path MATCHES "^([^/]+)/")
    list(FIND order "${CMAKE_MATCH_1}" index)
    set(name "${CMAKE_MATCH_1}/")
  else()
    list(LENGTH order index)  # after every layer
    set(name "${top_level}")
  endif()
  set(${out_index} ${index} PARENT_SCOPE)
  set(${out_name} "${name}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE headers RELATIVE "${root}" "${root}/*.hpp" "${root}/*.h" "${root}/*.ipp")
list(SORT headers)
set(include_count 0)
foreach(header IN LISTS headers)
  place_of("${header}" from from_name)
  if(from EQUAL -1)
    continue()  # its folder is already reported above
  endif()
  read_lines("${root}/${header}" lines)
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]byteps/([^>\"]+)[>\"]")
      continue()
    endif()
    set(target "${CMAKE_MATCH_1}")
    math(EXPR include_count "${include_count} + 1")
    place_of("${target}" to to_name)
    if(to EQUAL -1)
      report("include/byteps/${header}:${number}: includes byteps/${target}, whose "
             "folder is not a row of the Layers table of ${doc_shown}")
    elseif(to GREATER from)
      report("include/byteps/${header}:${number}: ${from_name} includes byteps/${target}, "
             "but ${to_name} is below ${from_name} in the order")
    endif()
  endforeach()
endforeach()

list(LENGTH headers header_count)
if(problems)
  # Plain notices, one line each (an error message would be re-wrapped), then the verdict.
  message(NOTICE "Layer order (the Layers table of ${doc_shown}), each layer including only "
                 "itself and those before it:\n  ${order_text}")
  foreach(problem IN LISTS problems)
    message(NOTICE "${problem}")
  endforeach()
  list(LENGTH problems problem_count)
  message(FATAL_ERROR "${problem_count} include(s) or folder(s) against the layer order")
endif()
message(STATUS "${header_count} headers, ${include_count} byteps includes, every one pointing "
               "down the order ${order_text}")
