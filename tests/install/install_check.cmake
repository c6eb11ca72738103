# cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMERS=... -DC_COMPILER=... -P install_check.cmake
# Installs the build into a fresh prefix, checks the SONAME, then builds and
# runs two out-of-tree consumers: find_package(gqla) and pkg-config gqla.
foreach(var BUILD_DIR WORK_DIR CONSUMERS C_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} not set")
  endif()
endforeach()

function(run)  # run(<what> COMMAND ...): fail loudly with the output
  cmake_parse_arguments(R "" "WHAT;OUT" "COMMAND" ${ARGN})
  execute_process(COMMAND ${R_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${R_WHAT} failed (${rc}):\n${out}\n${err}")
  endif()
  if(R_OUT)
    set(${R_OUT} "${out}" PARENT_SCOPE)
  endif()
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
run(WHAT "cmake --install" COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

# The shared library and its SONAME (ABI major 1).
file(GLOB_RECURSE libs "${prefix}/*/libgqla.so.1")
list(LENGTH libs n_libs)
if(NOT n_libs EQUAL 1)
  message(FATAL_ERROR "expected one installed libgqla.so.1, found: '${libs}'")
endif()
get_filename_component(libdir "${libs}" DIRECTORY)
if(NOT EXISTS "${libdir}/libgqla.so")
  message(FATAL_ERROR "the development symlink ${libdir}/libgqla.so is missing")
endif()
if(NOT EXISTS "${prefix}/include/gqla/gqla.h" OR NOT EXISTS "${prefix}/include/gqla/gqla.hpp")
  message(FATAL_ERROR "gqla.h / gqla.hpp not installed under ${prefix}/include/gqla")
endif()
file(GLOB_RECURSE private_headers "${prefix}/include/*backend_api.h" "${prefix}/include/*reference.hpp")
if(private_headers)
  message(FATAL_ERROR "internal headers installed: ${private_headers}")
endif()
find_program(OBJDUMP objdump REQUIRED)
run(WHAT "objdump -p" COMMAND ${OBJDUMP} -p "${libs}" OUT dyn)
if(NOT dyn MATCHES "SONAME +libgqla\\.so\\.1\n")
  message(FATAL_ERROR "SONAME of ${libs} is not libgqla.so.1:\n${dyn}")
endif()

# Consumer 1: find_package(gqla) + gqla::gqla (C++, gqla.hpp).
set(cm_build "${WORK_DIR}/consumer_cmake")
run(WHAT "configure the find_package consumer"
    COMMAND ${CMAKE_COMMAND} -S "${CONSUMERS}/consumer_cmake" -B "${cm_build}" "-DCMAKE_PREFIX_PATH=${prefix}"
            -DCMAKE_BUILD_TYPE=Release)
run(WHAT "build the find_package consumer" COMMAND ${CMAKE_COMMAND} --build "${cm_build}")
run(WHAT "run the find_package consumer" COMMAND ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${libdir}"
    "${cm_build}/consumer" OUT out1)
if(NOT out1 MATCHES "^OK")
  message(FATAL_ERROR "find_package consumer printed: ${out1}")
endif()

# Consumer 2: pkg-config gqla (C). The .pc file was written for the configured
# prefix; relocate it to the temporary one.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(GLOB_RECURSE pcs "${prefix}/*/gqla.pc")
if(NOT pcs)
  message(FATAL_ERROR "gqla.pc not installed")
endif()
list(GET pcs 0 pc)
get_filename_component(pcdir "${pc}" DIRECTORY)
set(pkg ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pcdir}" ${PKG_CONFIG} "--define-variable=prefix=${prefix}")
run(WHAT "pkg-config --cflags" COMMAND ${pkg} --cflags gqla OUT cflags)
run(WHAT "pkg-config --libs" COMMAND ${pkg} --libs gqla OUT ldflags)
separate_arguments(cflags UNIX_COMMAND "${cflags}")
separate_arguments(ldflags UNIX_COMMAND "${ldflags}")
set(pc_exe "${WORK_DIR}/consumer_pkgconfig")
run(WHAT "build the pkg-config consumer"
    COMMAND ${C_COMPILER} -std=c99 -Wall -Wextra -Werror "${CONSUMERS}/consumer_pkgconfig/main.c" ${cflags} ${ldflags}
            -lm "-Wl,-rpath,${libdir}" -o "${pc_exe}")
run(WHAT "run the pkg-config consumer" COMMAND "${pc_exe}" OUT out2)
if(NOT out2 MATCHES "^OK")
  message(FATAL_ERROR "pkg-config consumer printed: ${out2}")
endif()
message(STATUS "${out1}${out2}")
