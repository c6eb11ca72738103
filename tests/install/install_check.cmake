# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD_DIR=... -DWORK_DIR=... -DC_COMPILER=... [-DGENERATOR=...] -P install_check.cmake
# Installs the build tree under test into a fresh prefix (`cmake --install
# --prefix`, the configured layout) and uses it from outside: the two
# out-of-tree consumers, and gqla-probe as installed, all without
# LD_LIBRARY_PATH.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_vars(BUILD_DIR WORK_DIR C_COMPILER LIBDIR BINDIR)

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
run(WHAT "cmake --install" COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

set(libdir "${prefix}/${LIBDIR}")
check_installed_library("${prefix}" "${libdir}")
check_pc_file("${prefix}" "${libdir}")
build_and_run_consumers("${prefix}" "${libdir}" "${WORK_DIR}" "${C_COMPILER}")
if(EXISTS "${prefix}/${BINDIR}/gqla-probe" OR WITH_TOOLS)
  file(RELATIVE_PATH bin_to_lib "${prefix}/${BINDIR}" "${libdir}")
  check_installed_program("${prefix}/${BINDIR}" gqla-probe "$ORIGIN/${bin_to_lib}" --json --no-calibrate)
endif()
