# SPDX-License-Identifier: Apache-2.0
# cmake -DRUST_DIR=<repo>/bindings/rust -DLIBDIR=<installed libdir> -DWORK_DIR=... -P rust_check.cmake
# A new cargo project with path dependencies on the crates, built offline
# and run against the install that multiarch_check.cmake left in LIBDIR:
# gqla-sys must find it through PKG_CONFIG_PATH (and nothing else), and the
# binary must run without LD_LIBRARY_PATH.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_vars(RUST_DIR LIBDIR WORK_DIR)

find_program(CARGO cargo HINTS "$ENV{HOME}/.cargo/bin")
if(NOT CARGO)
  message("SKIPPED: cargo not found")  # the test's SKIP_REGULAR_EXPRESSION
  return()
endif()
if(NOT EXISTS "${LIBDIR}/pkgconfig/gqla.pc")
  message(FATAL_ERROR "no install in ${LIBDIR} (gqla.install.multiarch sets it up)")
endif()

set(project "${WORK_DIR}/project")
file(REMOVE_RECURSE "${project}")
file(MAKE_DIRECTORY "${project}/src")
set(GQLA_RUST_DIR "${RUST_DIR}")
configure_file("${CMAKE_CURRENT_LIST_DIR}/rust_consumer/Cargo.toml.in" "${project}/Cargo.toml" @ONLY)
configure_file("${CMAKE_CURRENT_LIST_DIR}/rust_consumer/build.rs" "${project}/build.rs" COPYONLY)
configure_file("${CMAKE_CURRENT_LIST_DIR}/rust_consumer/src/main.rs" "${project}/src/main.rs" COPYONLY)

# The target directory outlives the project so that a rerun builds only what
# changed; GQLA_LIB_DIR unset so that pkg-config is what finds the library.
run(WHAT "cargo run" DIR "${project}"
    COMMAND ${CMAKE_COMMAND} -E env --unset=GQLA_LIB_DIR "PKG_CONFIG_PATH=${LIBDIR}/pkgconfig"
            "CARGO_TARGET_DIR=${WORK_DIR}/target"
            ${CARGO} run --offline --quiet --manifest-path "${project}/Cargo.toml" OUT out)
if(NOT out MATCHES "^OK rust consumer")
  message(FATAL_ERROR "the Rust consumer printed: ${out}")
endif()
get_filename_component(real_libdir "${LIBDIR}" REALPATH)
string(FIND "${out}" "library from ${real_libdir}\n" at_real)
string(FIND "${out}" "library from ${LIBDIR}\n" at_given)
if(at_real EQUAL -1 AND at_given EQUAL -1)
  message(FATAL_ERROR "gqla-sys found a library other than the installed one in ${LIBDIR}: ${out}")
endif()
message(STATUS "${out}")
