# SPDX-License-Identifier: Apache-2.0
# Shared by the install checks (cmake -P scripts): running commands, checking
# an installed prefix, building and running the two out-of-tree consumers.
# None of them sets LD_LIBRARY_PATH: what they run must find libgqla.so
# through its rpath, as a user's program or an installed gqla tool does.

function(run)  # run(WHAT <what> [OUT <var>] [DIR <dir>] COMMAND ...): fail loudly with the output
  cmake_parse_arguments(R "" "WHAT;OUT;DIR" "COMMAND" ${ARGN})
  if(NOT R_DIR)
    set(R_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${R_COMMAND}
                  WORKING_DIRECTORY "${R_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${R_WHAT} failed (${rc}):\n${out}\n${err}")
  endif()
  if(R_OUT)
    set(${R_OUT} "${out}" PARENT_SCOPE)
  endif()
endfunction()

function(require_vars)
  foreach(var ${ARGN})
    if(NOT DEFINED ${var})
      message(FATAL_ERROR "${var} not set")
    endif()
  endforeach()
endfunction()

# check_installed_library(<prefix> <libdir>): libgqla.so.1 with its SONAME and
# development link in <libdir>, the public headers and no private ones.
function(check_installed_library prefix libdir)
  if(NOT EXISTS "${libdir}/libgqla.so.1" OR NOT EXISTS "${libdir}/libgqla.so")
    file(GLOB_RECURSE found "${prefix}/*libgqla.so*")
    message(FATAL_ERROR "libgqla.so.1 and libgqla.so expected in ${libdir}; found: ${found}")
  endif()
  if(NOT EXISTS "${prefix}/include/gqla/gqla.h" OR NOT EXISTS "${prefix}/include/gqla/gqla.hpp")
    message(FATAL_ERROR "gqla.h / gqla.hpp not installed under ${prefix}/include/gqla")
  endif()
  file(GLOB_RECURSE private_headers "${prefix}/include/*backend_api.h" "${prefix}/include/*reference.hpp")
  if(private_headers)
    message(FATAL_ERROR "internal headers installed: ${private_headers}")
  endif()
  find_program(OBJDUMP objdump REQUIRED)
  run(WHAT "objdump -p" COMMAND ${OBJDUMP} -p "${libdir}/libgqla.so.1" OUT dyn)
  if(NOT dyn MATCHES "SONAME +libgqla\\.so\\.1\n")
    message(FATAL_ERROR "SONAME of ${libdir}/libgqla.so.1 is not libgqla.so.1:\n${dyn}")
  endif()
endfunction()

# check_pc_file(<prefix> <libdir>): gqla.pc lies in <libdir>/pkgconfig and
# pkg-config reads the installed directories back from it.
function(check_pc_file prefix libdir)
  find_program(PKG_CONFIG pkg-config REQUIRED)
  set(pkg ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${libdir}/pkgconfig" ${PKG_CONFIG})
  run(WHAT "pkg-config --variable=libdir" COMMAND ${pkg} --variable=libdir gqla OUT pc_libdir)
  run(WHAT "pkg-config --variable=includedir" COMMAND ${pkg} --variable=includedir gqla OUT pc_includedir)
  string(STRIP "${pc_libdir}" pc_libdir)
  string(STRIP "${pc_includedir}" pc_includedir)
  if(NOT pc_libdir STREQUAL libdir OR NOT pc_includedir STREQUAL "${prefix}/include")
    file(READ "${libdir}/pkgconfig/gqla.pc" text)
    message(FATAL_ERROR "gqla.pc names libdir '${pc_libdir}' and includedir '${pc_includedir}', "
                        "expected '${libdir}' and '${prefix}/include':\n${text}")
  endif()
endfunction()

# build_and_run_consumers(<prefix> <libdir> <work dir> <C compiler>):
# find_package(gqla) through CMAKE_PREFIX_PATH (C++, gqla.hpp; CMake's build
# rpath finds the library), and pkg-config through PKG_CONFIG_PATH (C; the
# rpath from `pkg-config --variable=libdir`, as the README shows).
function(build_and_run_consumers prefix libdir work c_compiler)
  set(consumers "${CMAKE_CURRENT_LIST_DIR}")
  set(cm_build "${work}/consumer_cmake")
  set(generator_args)
  if(GENERATOR)
    set(generator_args -G "${GENERATOR}")
  endif()
  run(WHAT "configure the find_package consumer"
      COMMAND ${CMAKE_COMMAND} -S "${consumers}/consumer_cmake" -B "${cm_build}" ${generator_args}
              "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release)
  run(WHAT "build the find_package consumer" COMMAND ${CMAKE_COMMAND} --build "${cm_build}")
  run(WHAT "run the find_package consumer" COMMAND "${cm_build}/consumer" OUT out1)
  if(NOT out1 MATCHES "^OK")
    message(FATAL_ERROR "find_package consumer printed: ${out1}")
  endif()

  find_program(PKG_CONFIG pkg-config REQUIRED)
  set(pkg ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${libdir}/pkgconfig" ${PKG_CONFIG})
  run(WHAT "pkg-config --cflags" COMMAND ${pkg} --cflags gqla OUT cflags)
  run(WHAT "pkg-config --libs" COMMAND ${pkg} --libs gqla OUT ldflags)
  run(WHAT "pkg-config --variable=libdir" COMMAND ${pkg} --variable=libdir gqla OUT rpath)
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  separate_arguments(ldflags UNIX_COMMAND "${ldflags}")
  string(STRIP "${rpath}" rpath)
  set(pc_exe "${work}/consumer_pkgconfig")
  run(WHAT "build the pkg-config consumer"
      COMMAND ${c_compiler} -std=c99 -Wall -Wextra -Werror "${consumers}/consumer_pkgconfig/main.c"
              ${cflags} ${ldflags} -lm "-Wl,-rpath,${rpath}" -o "${pc_exe}")
  run(WHAT "run the pkg-config consumer" COMMAND "${pc_exe}" OUT out2)
  if(NOT out2 MATCHES "^OK")
    message(FATAL_ERROR "pkg-config consumer printed: ${out2}")
  endif()
  message(STATUS "${out1}${out2}")
endfunction()

# check_installed_program(<bindir> <name> <expected rpath> [ARGS...]): the program is
# installed, carries the relative rpath, and runs without LD_LIBRARY_PATH.
function(check_installed_program bindir name expected_rpath)
  set(exe "${bindir}/${name}")
  if(NOT EXISTS "${exe}")
    message(FATAL_ERROR "${exe} not installed")
  endif()
  find_program(OBJDUMP objdump REQUIRED)
  run(WHAT "objdump -p ${name}" COMMAND ${OBJDUMP} -p "${exe}" OUT dyn)
  if(NOT dyn MATCHES "(RUNPATH|RPATH) +([^\n]*)\n" OR NOT CMAKE_MATCH_2 STREQUAL expected_rpath)
    message(FATAL_ERROR "${exe}: rpath '${CMAKE_MATCH_2}', expected '${expected_rpath}'")
  endif()
  run(WHAT "installed ${name}" COMMAND "${exe}" ${ARGN} OUT out)
  string(LENGTH "${out}" n)
  if(n EQUAL 0)
    message(FATAL_ERROR "installed ${name} printed nothing")
  endif()
endfunction()

# fresh_build_args(<var>): the configure arguments of a fresh gqla build that
# match the tree under test (WITH_ONEDNN, DNNL_DIR, COMPILER_LAUNCHER from the
# test's command line).
function(fresh_build_args var)
  if(NOT DEFINED WITH_ONEDNN)
    set(WITH_ONEDNN ON)
  endif()
  set(args "-DGQLA_WITH_ONEDNN=${WITH_ONEDNN}")
  if(DNNL_DIR AND EXISTS "${DNNL_DIR}")
    list(APPEND args "-Ddnnl_DIR=${DNNL_DIR}")
  endif()
  if(COMPILER_LAUNCHER)
    list(APPEND args "-DCMAKE_C_COMPILER_LAUNCHER=${COMPILER_LAUNCHER}" "-DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER}")
  endif()
  set(${var} ${args} PARENT_SCOPE)
endfunction()
