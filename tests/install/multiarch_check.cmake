# SPDX-License-Identifier: Apache-2.0
# cmake -DSOURCE_DIR=... -DWORK_DIR=... -DC_COMPILER=... -DCXX_COMPILER=... -DMULTIARCH=...
#       [-DGENERATOR=...] [-DWITH_ONEDNN=...] [-DDNNL_DIR=...] -P multiarch_check.cmake
# A distribution-style install: gqla configured on its own with prefix
# <root>/usr and libdir lib/<multiarch>, as Debian packages it. Builds only the
# library and gqla-probe, installs those two components, then checks gqla.pc,
# the CMake package (both consumers) and the installed probe's rpath, all
# without LD_LIBRARY_PATH. The install stays in WORK_DIR/root for the Rust check.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
fresh_build_args(configure_args)
require_vars(SOURCE_DIR WORK_DIR C_COMPILER CXX_COMPILER MULTIARCH)

set(build "${WORK_DIR}/build")  # kept between runs: a rerun only rebuilds what changed
set(prefix "${WORK_DIR}/root/usr")
set(libdir "${prefix}/lib/${MULTIARCH}")
file(REMOVE_RECURSE "${WORK_DIR}/root" "${WORK_DIR}/consumer_cmake")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(generator_args)
if(GENERATOR AND NOT EXISTS "${build}/CMakeCache.txt")
  set(generator_args -G "${GENERATOR}")
endif()
run(WHAT "configure"
    COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${build}" ${generator_args}
            -DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
            "-DCMAKE_INSTALL_PREFIX=${prefix}" "-DCMAKE_INSTALL_LIBDIR=lib/${MULTIARCH}"
            -DGQLA_WITH_CUDA=OFF -DGQLA_BUILD_TESTS=OFF -DGQLA_BUILD_EXAMPLES=OFF -DGQLA_BUILD_PYTHON=OFF
            -DGQLA_BUILD_TOOLS=ON ${configure_args})
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
run(WHAT "build" COMMAND ${CMAKE_COMMAND} --build "${build}" --parallel ${cores} --target gqla gqla-probe)
# The default component is the library with its headers, CMake package and gqla.pc.
run(WHAT "install the library" COMMAND ${CMAKE_COMMAND} --install "${build}" --component Unspecified)
run(WHAT "install gqla-probe" COMMAND ${CMAKE_COMMAND} --install "${build}" --component gqla-probe)

check_installed_library("${prefix}" "${libdir}")
file(STRINGS "${libdir}/pkgconfig/gqla.pc" pc_lines REGEX "^(prefix|libdir|includedir)=")
set(expected_pc "prefix=${prefix};libdir=\${prefix}/lib/${MULTIARCH};includedir=\${prefix}/include")
if(NOT pc_lines STREQUAL expected_pc)
  message(FATAL_ERROR "gqla.pc says\n  ${pc_lines}\nexpected\n  ${expected_pc}")
endif()
check_pc_file("${prefix}" "${libdir}")
if(NOT EXISTS "${libdir}/cmake/gqla/gqlaConfig.cmake")
  message(FATAL_ERROR "gqlaConfig.cmake not installed in ${libdir}/cmake/gqla")
endif()
build_and_run_consumers("${prefix}" "${libdir}" "${WORK_DIR}" "${C_COMPILER}")
check_installed_program("${prefix}/bin" gqla-probe "$ORIGIN/../lib/${MULTIARCH}" --json --no-calibrate)
