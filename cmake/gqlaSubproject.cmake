# SPDX-License-Identifier: Apache-2.0
# How gqla behaves inside another project (add_subdirectory, FetchContent).
# GQLA_TOP_LEVEL is set by the top-level CMakeLists.txt.

# A top-level build without a build type is a Release build. Inside another
# project the build type is the parent's to choose and is left alone; when the
# parent has none, gqla's own targets still get -O2 (directory-scoped, so the
# parent's targets are untouched), because the attention kernels unoptimized
# are orders of magnitude slower.
macro(gqla_default_build_type)
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    if(GQLA_TOP_LEVEL)
      set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
    else()
      add_compile_options(-O2)
    endif()
  endif()
endmacro()
