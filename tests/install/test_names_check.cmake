# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD_DIR=... -P test_names_check.cmake
# Every test this build tree registers is named gqla.*, so that in a parent
# project's ctest they neither collide with the parent's nor hide among them.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_vars(BUILD_DIR)
run(WHAT "ctest -N" COMMAND ${CMAKE_CTEST_COMMAND} --test-dir "${BUILD_DIR}" -N OUT listing)
string(REGEX MATCHALL "Test +#[0-9]+: [^\n]+" tests "${listing}")
string(REGEX REPLACE "Test +#[0-9]+: " "" tests "${tests}")
list(LENGTH tests n)
if(n EQUAL 0)
  message(FATAL_ERROR "ctest -N listed no tests:\n${listing}")
endif()
set(unprefixed ${tests})
list(FILTER unprefixed EXCLUDE REGEX "^gqla\\.")
# doctest's stand-in for a test executable not built yet (that entry fails on its own).
list(FILTER unprefixed EXCLUDE REGEX "_NOT_BUILT-[0-9a-f]+$")
if(unprefixed)
  message(FATAL_ERROR "tests not named gqla.*: ${unprefixed}")
endif()
message(STATUS "${n} tests, all named gqla.*")
