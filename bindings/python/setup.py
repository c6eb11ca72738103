# SPDX-License-Identifier: Apache-2.0
"""Builds the gqla._gqla extension and the gqla package.

Two ways, chosen by the environment:

* Bundled (the default; what wheels are): CMake builds libgqla and the
  extension, and the package carries libgqla.so.1 (and libgqla_cuda.so.1
  when the CUDA module was built) next to the extension, with an $ORIGIN
  rpath, stripped. One command, offline:
      pip wheel --no-build-isolation --no-deps bindings/python -w dist/
  GQLA_CMAKE_BUILD_DIR=<build tree> packages an existing build instead of
  compiling; GQLA_CMAKE_ARGS adds configure arguments to the private build
  (see cmake_bundle.py).
* Linked: the extension is compiled here and linked against a libgqla built
  or installed separately, with an rpath to it. Chosen by
    1. GQLA_LIB_DIR=<absolute dir with libgqla.so> (and GQLA_INCLUDE_DIR=<dir
       with gqla/gqla.h>; default <lib>/../include, else this source tree's
       capi/include), e.g. a CMake build tree: GQLA_LIB_DIR=$PWD/build/capi;
    2. GQLA_USE_PKG_CONFIG=1: pkg-config gqla (an installed gqla.pc; set
       PKG_CONFIG_PATH for a prefix). Asked for explicitly, so that a gqla
       installed on the build machine never turns a wheel into one that
       needs it.
  pybind11 comes from the pybind11 Python package or the system headers
  (Debian: pybind11-dev), DLPack from the system headers (libdlpack-dev) or
  GQLA_DLPACK_INCLUDE_DIR.
"""

import glob
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # setuptools' build backend does not put it there

from cmake_bundle import BuildBundledExtension  # noqa: E402


def _has_header(include_dir):
    return include_dir and os.path.exists(os.path.join(include_dir, "gqla", "gqla.h"))


def _from_environment():
    lib_dir = os.environ.get("GQLA_LIB_DIR")
    if not lib_dir:
        return None
    if not glob.glob(os.path.join(lib_dir, "libgqla.so*")):
        # pip runs this file from a copy or from bindings/python, so a
        # relative path rarely means what the caller meant.
        raise SystemExit(f"gqla: no libgqla.so in GQLA_LIB_DIR={lib_dir!r} "
                         "(give an absolute path, e.g. $PWD/build/capi)")
    lib_dir = os.path.abspath(lib_dir)
    candidates = [os.environ.get("GQLA_INCLUDE_DIR"),
                  os.path.join(lib_dir, os.pardir, "include"),
                  os.path.join(HERE, os.pardir, os.pardir, "capi", "include")]
    for include_dir in candidates:
        if _has_header(include_dir):
            return [os.path.abspath(include_dir)], [lib_dir]
    raise SystemExit("gqla: GQLA_LIB_DIR is set but gqla/gqla.h was not found; set GQLA_INCLUDE_DIR")


def _from_pkg_config():
    try:
        cflags = subprocess.run(["pkg-config", "--cflags-only-I", "gqla"], check=True,
                                capture_output=True, text=True).stdout
        libs = subprocess.run(["pkg-config", "--libs-only-L", "gqla"], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    includes = [flag[2:] for flag in shlex.split(cflags) if flag.startswith("-I")]
    lib_dirs = [flag[2:] for flag in shlex.split(libs) if flag.startswith("-L")]
    return includes, lib_dirs


def _linked_library():
    """(include dirs, library dirs) of a separately built libgqla, or None: bundle it."""
    if os.environ.get("GQLA_LIB_DIR"):
        return _from_environment()
    if os.environ.get("GQLA_USE_PKG_CONFIG") == "1":
        found = _from_pkg_config()
        if found is None:
            raise SystemExit("gqla: GQLA_USE_PKG_CONFIG=1 but `pkg-config gqla` found nothing "
                             "(set PKG_CONFIG_PATH to <prefix>/lib/pkgconfig)")
        return found
    return None


def _pybind11_includes():
    try:
        import pybind11
        return [pybind11.get_include()]
    except ImportError:
        return []  # system headers (/usr/include/pybind11)


def _linked_extension(include_dirs, library_dirs):
    include_dirs = include_dirs + _pybind11_includes()
    if os.environ.get("GQLA_DLPACK_INCLUDE_DIR"):
        include_dirs.append(os.environ["GQLA_DLPACK_INCLUDE_DIR"])
    return Extension(
        "gqla._gqla",
        sources=sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "src", "*.cpp"))),
        include_dirs=include_dirs,
        library_dirs=library_dirs,
        runtime_library_dirs=library_dirs,
        libraries=["gqla"],
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
    )


linked = _linked_library()
if linked is not None:
    setup(ext_modules=[_linked_extension(*linked)])
else:
    # No sources: BuildBundledExtension copies what CMake built.
    setup(ext_modules=[Extension("gqla._gqla", sources=[])],
          cmdclass={"build_ext": BuildBundledExtension})
