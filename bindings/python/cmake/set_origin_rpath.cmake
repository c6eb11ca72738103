# SPDX-License-Identifier: Apache-2.0
# cmake -DFILE=<shared object> -P set_origin_rpath.cmake
# Points the rpath of FILE at its own directory ($ORIGIN): the wheel's
# extension finds the libgqla.so.1 that lies next to it in the package.
if(NOT FILE)
  message(FATAL_ERROR "usage: cmake -DFILE=<shared object> -P set_origin_rpath.cmake")
endif()
file(RPATH_SET FILE "${FILE}" NEW_RPATH "$ORIGIN")
