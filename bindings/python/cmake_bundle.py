# SPDX-License-Identifier: Apache-2.0
"""The bundled build of gqla._gqla, used by setup.py for wheels.

CMake builds libgqla and the extension; the package then carries
libgqla.so.1 (and the CUDA module libgqla_cuda.so.1 when it was built) next
to the extension, every file stripped and the extension's rpath set to
$ORIGIN, so the wheel installs anywhere without a separately installed
libgqla. libgqla still needs the system's OpenMP runtime (libgomp) and,
unless built with -DGQLA_WITH_ONEDNN=OFF, oneDNN (Debian: libdnnl).

Where the compiled files come from:
  * GQLA_CMAKE_BUILD_DIR=<dir>: an existing build tree of this source with
    the target gqla_python_extension built (`cmake --build <dir> --target
    gqla_python_extension`); nothing is compiled. Read from it:
        <dir>/capi/libgqla.so.1
        <dir>/capi/libgqla_cuda.so.1                (when present)
        <dir>/bindings/python/gqla/_gqla<EXT_SUFFIX>  (this interpreter's suffix)
  * otherwise a private build tree under setuptools' build_temp, configured
    from the source tree around this directory (library and extension only)
    with GQLA_CMAKE_ARGS appended, e.g. "-DGQLA_WITH_CUDA=ON -DGQLA_CUDA_ARCHS=90".
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir))
LIBRARY = "libgqla.so.1"
CUDA_MODULE = "libgqla_cuda.so.1"
SET_RPATH_SCRIPT = os.path.join(HERE, "cmake", "set_origin_rpath.cmake")


def _run(command, **kwargs):
    print("gqla: " + " ".join(shlex.quote(str(part)) for part in command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def _private_build(build_dir):
    """Configures (when new) and builds the extension target from SOURCE_ROOT."""
    if not os.path.exists(os.path.join(SOURCE_ROOT, "capi", "include", "gqla", "gqla.h")):
        raise SystemExit(f"gqla: no gqla source tree around {HERE}: set GQLA_CMAKE_BUILD_DIR "
                         "to a build tree with the target gqla_python_extension built")
    configure = ["cmake", "-S", SOURCE_ROOT, "-B", build_dir,
                 "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}",
                 "-DGQLA_BUILD_PYTHON=ON", "-DGQLA_BUILD_TESTS=OFF",
                 "-DGQLA_BUILD_TOOLS=OFF", "-DGQLA_BUILD_EXAMPLES=OFF"]
    # The generator of an existing tree cannot change; a new one uses Ninja when there is one.
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")) and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("GQLA_CMAKE_ARGS", ""))
    _run(configure)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run(["cmake", "--build", build_dir, "--target", "gqla_python_extension", "--parallel", jobs])


def _built_files(build_dir, extension_name):
    """(extension, [libraries]) of a built tree; the CUDA module only when it exists."""
    extension = os.path.join(build_dir, "bindings", "python", "gqla", extension_name)
    library = os.path.join(build_dir, "capi", LIBRARY)
    for path, what in ((library, "libgqla"), (extension, "the extension for this interpreter")):
        if not os.path.exists(path):
            raise SystemExit(f"gqla: {what} not found at {path}: build the target gqla_python_extension "
                             f"there with {sys.executable} as Python3_EXECUTABLE")
    libraries = [library]
    cuda_module = os.path.join(build_dir, "capi", CUDA_MODULE)
    if os.path.exists(cuda_module):
        libraries.append(cuda_module)
    return extension, libraries


def _strip(path):
    strip = os.environ.get("STRIP", "strip")
    _run([strip, "--strip-unneeded", path])


def _set_origin_rpath(path):
    # CMake rewrites the rpath in place (it fits: "$ORIGIN" is shorter than
    # any build-tree path), so no patchelf is needed.
    _run(["cmake", f"-DFILE={path}", "-P", SET_RPATH_SCRIPT])


class BuildBundledExtension(build_ext):
    """build_ext that takes the CMake-built extension and libgqla instead of compiling."""

    def build_extension(self, ext):
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        build_dir = os.environ.get("GQLA_CMAKE_BUILD_DIR")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
        else:
            build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            _private_build(build_dir)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        extension, libraries = _built_files(build_dir, "_gqla" + suffix)

        package_dir = os.path.dirname(target)
        os.makedirs(package_dir, exist_ok=True)
        shutil.copy(extension, target)
        _set_origin_rpath(target)
        _strip(target)
        for library in libraries:
            # Under its SONAME, the name the extension and libgqla's loader look for.
            copy = os.path.join(package_dir, os.path.basename(library))
            shutil.copy(os.path.realpath(library), copy)
            _strip(copy)
