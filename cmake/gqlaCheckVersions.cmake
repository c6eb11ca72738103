# SPDX-License-Identifier: Apache-2.0
# cmake -DSOURCE_DIR=<repo> -P gqlaCheckVersions.cmake
# Fails unless every package's version equals gqla.h's (the one source):
# the Python project, both Rust crates and their path dependency, the Rust
# example and the lock files that record them.
include("${CMAKE_CURRENT_LIST_DIR}/gqlaVersion.cmake")
gqla_read_header_version("${SOURCE_DIR}/capi/include/gqla/gqla.h" expected)

set(mismatches "")
function(expect_version file regex)
  file(READ "${SOURCE_DIR}/${file}" text)
  string(REGEX MATCHALL "${regex}" found "${text}")
  if(NOT found)
    set(mismatches "${mismatches}\n  ${file}: no match for ${regex}" PARENT_SCOPE)
    return()
  endif()
  foreach(hit IN LISTS found)
    string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" v "${hit}")
    if(NOT v STREQUAL expected)
      string(REPLACE "\n" " " shown "${hit}")
      string(STRIP "${shown}" shown)
      set(mismatches "${mismatches}\n  ${file}: '${shown}' (expected ${expected})" PARENT_SCOPE)
    endif()
  endforeach()
endfunction()

# The first `version = "..."` of a manifest is its package's own.
expect_version(bindings/python/pyproject.toml "\nversion = \"[0-9.]+\"")
expect_version(bindings/rust/gqla-sys/Cargo.toml "\nversion = \"[0-9.]+\"")
expect_version(bindings/rust/gqla/Cargo.toml "\nversion = \"[0-9.]+\"")
expect_version(bindings/rust/gqla/Cargo.toml "gqla-sys = {[^}]*version = \"[0-9.]+\"")
expect_version(examples/rust/Cargo.toml "\nversion = \"[0-9.]+\"")
foreach(lock bindings/rust/Cargo.lock examples/rust/Cargo.lock)
  if(EXISTS "${SOURCE_DIR}/${lock}")
    expect_version(${lock} "name = \"gqla(-sys)?\"\nversion = \"[0-9.]+\"")
  endif()
endforeach()

if(mismatches)
  message(FATAL_ERROR "package versions differ from gqla.h's ${expected}:${mismatches}")
endif()
message(STATUS "every package is at gqla.h's version ${expected}")
