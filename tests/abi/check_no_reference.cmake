# SPDX-License-Identifier: Apache-2.0
# cmake -DLIBRARY=<libgqla.so> -P check_no_reference.cmake
# Fails if LIBRARY contains code of the float64 test oracle (namespace
# gqla::ref, tests/reference): it belongs to the tests, not to what ships.
find_program(NM nm REQUIRED)
execute_process(COMMAND ${NM} -C "${LIBRARY}" OUTPUT_VARIABLE nm_out RESULT_VARIABLE nm_rc ERROR_VARIABLE nm_err)
if(NOT nm_rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIBRARY}: ${nm_err}")
endif()
string(REGEX MATCHALL "gqla::ref::[A-Za-z0-9_]+" found "${nm_out}")
if(found)
  list(REMOVE_DUPLICATES found)
  message(FATAL_ERROR "${LIBRARY} contains the float64 reference: ${found}")
endif()
message(STATUS "${LIBRARY}: no gqla::ref symbols")
