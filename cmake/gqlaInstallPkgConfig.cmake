# SPDX-License-Identifier: Apache-2.0
# Writes and installs gqla.pc; runs at install time (install(CODE) in
# capi/CMakeLists.txt sets the GQLA_PC_* inputs). Install time, because only
# then is the prefix known for certain: `cmake --install --prefix <dir>`
# overrides the configured one, and the file must name the directories the
# library really went to.
#
# Inputs: GQLA_PC_TEMPLATE, GQLA_PC_STAGING (a file in the build tree),
# GQLA_PC_INSTALL_LIBDIR and GQLA_PC_INSTALL_INCLUDEDIR (CMAKE_INSTALL_LIBDIR
# and CMAKE_INSTALL_INCLUDEDIR as configured: relative to the prefix, e.g.
# lib/x86_64-linux-gnu, or absolute), GQLA_PC_DESCRIPTION, GQLA_PC_VERSION.

set(GQLA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "(.)/+$" "\\1" GQLA_PC_PREFIX "${GQLA_PC_PREFIX}")

# Directories under the prefix are written as ${prefix}/..., so that
# `pkg-config --define-variable=prefix=<dir>` still relocates them.
function(gqla_pc_dir out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
gqla_pc_dir(GQLA_PC_LIBDIR "${GQLA_PC_INSTALL_LIBDIR}")
gqla_pc_dir(GQLA_PC_INCLUDEDIR "${GQLA_PC_INSTALL_INCLUDEDIR}")

if(IS_ABSOLUTE "${GQLA_PC_INSTALL_LIBDIR}")
  set(GQLA_PC_DESTINATION "${GQLA_PC_INSTALL_LIBDIR}/pkgconfig")
else()
  set(GQLA_PC_DESTINATION "${GQLA_PC_PREFIX}/${GQLA_PC_INSTALL_LIBDIR}/pkgconfig")
endif()

configure_file("${GQLA_PC_TEMPLATE}" "${GQLA_PC_STAGING}" @ONLY)
# file(INSTALL) honours DESTDIR and records the file in install_manifest.txt.
file(INSTALL "${GQLA_PC_STAGING}" DESTINATION "${GQLA_PC_DESTINATION}")
