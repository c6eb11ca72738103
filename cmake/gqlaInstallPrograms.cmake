# SPDX-License-Identifier: Apache-2.0
# gqla_install_program(<target>): install a program of gqla's own into the
# bindir with an rpath that finds libgqla.so relative to the binary
# ($ORIGIN/../lib, $ORIGIN/../lib/x86_64-linux-gnu, ...), so it runs from any
# install prefix without LD_LIBRARY_PATH. Inside another project gqla installs
# nothing but the library and its development files, so there it does nothing.
include(GNUInstallDirs)

function(gqla_install_program target)
  if(NOT GQLA_TOP_LEVEL)
    return()
  endif()
  file(RELATIVE_PATH bin_to_lib "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
  if(bin_to_lib STREQUAL "")
    set(rpath "$ORIGIN")
  else()
    set(rpath "$ORIGIN/${bin_to_lib}")
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}")
  # One component per program: `cmake --install <build> --component gqla-probe`
  # installs it alone (the library is the default component).
  install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${target})
endfunction()
