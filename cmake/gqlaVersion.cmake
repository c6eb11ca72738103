# SPDX-License-Identifier: Apache-2.0
# The version has one source: the GQLA_VERSION_MAJOR/MINOR/PATCH macros of
# gqla.h (the ABI a caller compiles against). CMake reads them here for
# project(); the Python and Rust package metadata are checked against them
# by the ctest entry gqla.version.packages (cmake/gqlaCheckVersions.cmake).
function(gqla_read_header_version header out_var)
  file(STRINGS "${header}" lines REGEX "^#define GQLA_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part MAJOR MINOR PATCH)
    set(value "")
    foreach(line IN LISTS lines)
      if(line MATCHES "^#define GQLA_VERSION_${part} +([0-9]+)")
        set(value "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    if(value STREQUAL "")
      message(FATAL_ERROR "${header}: no '#define GQLA_VERSION_${part} <number>'")
    endif()
    set(${part} "${value}")
  endforeach()
  set(${out_var} "${MAJOR}.${MINOR}.${PATCH}" PARENT_SCOPE)
endfunction()
