# SPDX-License-Identifier: Apache-2.0
# cmake -DLIBRARY=<libgqla.so> -DHEADER=<gqla.h> -P check_exports.cmake
# Fails unless the defined dynamic symbols of LIBRARY are exactly the
# functions HEADER declares with GQLA_API (a version node's own absolute
# symbol, e.g. GQLA_1, is not a symbol anyone can call and is skipped).
foreach(var LIBRARY HEADER)
  if(NOT EXISTS "${${var}}")
    message(FATAL_ERROR "${var}='${${var}}' does not exist")
  endif()
endforeach()

# Declared: "GQLA_API <return type> <name>(" — possibly over several lines,
# in HEADER and the C headers beside it that it includes (gqla_probe.h).
get_filename_component(header_dir "${HEADER}" DIRECTORY)
file(GLOB c_headers "${header_dir}/*.h")
set(header_text "")
foreach(h IN LISTS c_headers)
  file(READ "${h}" one_header)
  string(APPEND header_text "${one_header}\n")
endforeach()
string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" header_text "${header_text}")  # drop comments
string(REGEX REPLACE "\n[ \t]*#[^\n]*" "\n" header_text "${header_text}")                   # and preprocessor lines
string(REGEX MATCHALL "GQLA_API[^;(]*\\(" declarations "${header_text}")
set(declared "")
foreach(decl IN LISTS declarations)
  string(REGEX MATCH "([A-Za-z_][A-Za-z0-9_]*)[ \t\r\n]*\\($" _ "${decl}")
  list(APPEND declared "${CMAKE_MATCH_1}")
endforeach()
list(REMOVE_ITEM declared "")
list(SORT declared)
list(LENGTH declared n_declared)
if(n_declared LESS 10)
  message(FATAL_ERROR "parsed only ${n_declared} GQLA_API declarations from ${HEADER}: ${declared}")
endif()

find_program(NM nm REQUIRED)
execute_process(COMMAND ${NM} -D --defined-only --format=posix "${LIBRARY}"
                OUTPUT_VARIABLE nm_out RESULT_VARIABLE nm_rc ERROR_VARIABLE nm_err)
if(NOT nm_rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIBRARY}: ${nm_err}")
endif()
string(REPLACE "\n" ";" nm_lines "${nm_out}")
set(exported "")
foreach(line IN LISTS nm_lines)
  if(line MATCHES "^([^ @]+)(@+[^ ]*)? ([A-Za-z]) ")
    set(name "${CMAKE_MATCH_1}")
    set(type "${CMAKE_MATCH_3}")
    if(type STREQUAL "A" AND name MATCHES "^GQLA_[0-9]+$")
      continue()  # version node
    endif()
    list(APPEND exported "${name}")
  endif()
endforeach()
list(REMOVE_DUPLICATES exported)
list(SORT exported)

set(missing ${declared})
list(REMOVE_ITEM missing ${exported})
set(extra ${exported})
list(REMOVE_ITEM extra ${declared})
if(missing OR extra)
  message(FATAL_ERROR "libgqla exports differ from gqla.h\n  declared but not exported: ${missing}\n  exported but not declared: ${extra}")
endif()
message(STATUS "OK: ${n_declared} exported symbols match gqla.h")
