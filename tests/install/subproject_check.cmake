# SPDX-License-Identifier: Apache-2.0
# cmake -DSOURCE_DIR=... -DWORK_DIR=... -DC_COMPILER=... -DCXX_COMPILER=...
#       [-DGENERATOR=...] [-DWITH_ONEDNN=...] [-DDNNL_DIR=...] -P subproject_check.cmake
# gqla inside another project (subproject/): configured with the parent's
# defaults it must leave the parent's build type unset, build nothing but
# the library (no gqla tests in the parent's ctest), and install only the
# library, its headers, CMake package and gqla.pc. The parent's program
# links gqla::gqla and runs from the build tree.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
fresh_build_args(configure_args)
require_vars(SOURCE_DIR WORK_DIR C_COMPILER CXX_COMPILER)

set(build "${WORK_DIR}/build")  # kept between runs: a rerun only rebuilds what changed
set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${prefix}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(generator_args)
if(GENERATOR AND NOT EXISTS "${build}/CMakeCache.txt")
  set(generator_args -G "${GENERATOR}")
endif()
run(WHAT "configure the parent"
    COMMAND ${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/subproject" -B "${build}" ${generator_args}
            "-DGQLA_SOURCE_DIR=${SOURCE_DIR}" "-DCMAKE_INSTALL_PREFIX=${prefix}"
            "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" ${configure_args})

file(STRINGS "${build}/CMakeCache.txt" build_type REGEX "^CMAKE_BUILD_TYPE:")
if(NOT build_type MATCHES "^CMAKE_BUILD_TYPE:[A-Z]+=$")
  message(FATAL_ERROR "gqla set the parent's build type: ${build_type}")
endif()

# `all` must be the library and the parent's program only.
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
run(WHAT "build the parent" COMMAND ${CMAKE_COMMAND} --build "${build}" --parallel ${cores})
foreach(absent gqla-probe gqla-bench gqla-gather-floor gqla-demo gqla_abi_tests gqla_core_tests gqla_example_c)
  file(GLOB_RECURSE built "${build}/*/${absent}")
  if(built)
    message(FATAL_ERROR "the parent's build made ${absent}: ${built}")
  endif()
endforeach()

# The parent's ctest: its own test, and any test of gqla's named gqla.*.
run(WHAT "ctest -N" COMMAND ${CMAKE_CTEST_COMMAND} --test-dir "${build}" -N OUT listing)
string(REGEX MATCHALL "Test +#[0-9]+: [^\n]+" tests "${listing}")
string(REGEX REPLACE "Test +#[0-9]+: " "" tests "${tests}")
if(NOT tests STREQUAL "parent.app")
  message(FATAL_ERROR "the parent's ctest lists '${tests}', expected only 'parent.app'")
endif()
run(WHAT "the parent's ctest" COMMAND ${CMAKE_CTEST_COMMAND} --test-dir "${build}" --output-on-failure)

run(WHAT "install the parent" COMMAND ${CMAKE_COMMAND} --install "${build}")
file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
foreach(file ${installed})
  if(NOT file MATCHES "^include/gqla/[^/]+$|^lib/libgqla\\.so[.0-9]*$|^lib/cmake/gqla/[^/]+\\.cmake$|^lib/pkgconfig/gqla\\.pc$")
    message(FATAL_ERROR "installed by gqla as a subproject: ${file} (everything: ${installed})")
  endif()
endforeach()
message(STATUS "subproject: tests ${tests}; installed ${installed}")
