# SPDX-License-Identifier: Apache-2.0
"""The wheel as users get it (ctest gqla.install.python_wheel):

  1. copy the build's outputs (libgqla, the CUDA module when built, the
     extension) into a scratch tree laid out like a build tree, and the
     package sources into a scratch directory;
  2. `pip wheel --no-build-isolation --no-deps --no-index` from there with
     GQLA_CMAKE_BUILD_DIR naming the scratch tree: the already built library
     is packaged, nothing is compiled;
  3. check the wheel: libgqla.so.1 next to the extension, the extension's
     rpath exactly $ORIGIN, every shared object stripped;
  4. install it into a fresh venv (--system-site-packages: NumPy from the
     system), then delete the scratch build tree, the sources and the wheel;
  5. with the venv's interpreter, from an empty directory and without
     PYTHONPATH or LD_LIBRARY_PATH: a CPU decode against float64 NumPy, and
     gqla plus every libgqla it mapped must come from the venv.

usage: python_wheel_check.py --python PY --work-dir DIR --source-dir SRC
           --library LIBGQLA --extension EXT [--cuda-module LIBGQLA_CUDA]
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(command, **kwargs):
    env = dict(os.environ)
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "GQLA_LIB_DIR", "GQLA_USE_PKG_CONFIG", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(name, None)
    env.update(kwargs.pop("extra_env", {}))
    result = subprocess.run(command, env=env, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"FAILED ({result.returncode}): {' '.join(command)}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def scratch_build_tree(tree, library, extension, cuda_module):
    """The layout setup.py reads from GQLA_CMAKE_BUILD_DIR (bindings/python/cmake_bundle.py)."""
    os.makedirs(os.path.join(tree, "capi"))
    os.makedirs(os.path.join(tree, "bindings", "python", "gqla"))
    shutil.copy(library, os.path.join(tree, "capi", "libgqla.so.1"))
    if cuda_module:
        shutil.copy(cuda_module, os.path.join(tree, "capi", "libgqla_cuda.so.1"))
    shutil.copy(extension, os.path.join(tree, "bindings", "python", "gqla", os.path.basename(extension)))


def package_sources(source_dir, dest):
    python_dir = os.path.join(source_dir, "bindings", "python")
    shutil.copytree(python_dir, dest, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "src"))


def check_wheel(wheel, unpack_dir, with_cuda):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(unpack_dir)
    expected = ["gqla/libgqla.so.1"] + (["gqla/libgqla_cuda.so.1"] if with_cuda else [])
    extensions = [n for n in names if n.startswith("gqla/_gqla") and n.endswith(".so")]
    missing = [n for n in expected if n not in names]
    if missing or len(extensions) != 1:
        sys.exit(f"wheel {wheel} lacks {missing or 'the extension'}: {names}")
    dynamic = run(["readelf", "-d", os.path.join(unpack_dir, extensions[0])])
    runpaths = [line for line in dynamic.splitlines() if "RUNPATH" in line or "RPATH" in line]
    if len(runpaths) != 1 or not runpaths[0].rstrip().endswith("[$ORIGIN]"):
        sys.exit(f"extension rpath is not exactly $ORIGIN: {runpaths}")
    for name in expected + extensions:
        sections = run(["readelf", "-S", "-W", os.path.join(unpack_dir, name)])
        if ".symtab" in sections or ".debug_info" in sections:
            sys.exit(f"{name} is not stripped")
    return len(names)


def main():
    parser = argparse.ArgumentParser()
    for name in ("--python", "--work-dir", "--source-dir", "--library", "--extension"):
        parser.add_argument(name, required=True)
    parser.add_argument("--cuda-module", default="")
    args = parser.parse_args()
    start = time.monotonic()

    work = os.path.abspath(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    tree, sources, dist, unpacked = (os.path.join(work, d) for d in ("build-tree", "src", "dist", "unpacked"))
    venv, empty = os.path.join(work, "venv"), os.path.join(work, "cwd")
    scratch_build_tree(tree, args.library, args.extension, args.cuda_module)
    package_sources(args.source_dir, sources)

    run([args.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         sources, "-w", dist], extra_env={"GQLA_CMAKE_BUILD_DIR": tree})
    wheels = glob.glob(os.path.join(dist, "gqla-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"expected one wheel in {dist}: {os.listdir(dist)}")
    files = check_wheel(wheels[0], unpacked, bool(args.cuda_module))

    run([args.python, "-m", "venv", "--system-site-packages", "--without-pip", venv])
    venv_python = os.path.join(venv, "bin", "python")
    # The system's pip, run by the venv's interpreter, installs into the venv.
    run([venv_python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", wheels[0]])
    for gone in (tree, sources, dist, unpacked):
        shutil.rmtree(gone)

    os.makedirs(empty)
    site = run([venv_python, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]).strip()
    if subprocess.run([venv_python, "-c", "import numpy"], capture_output=True).returncode != 0:
        # The interpreter's numpy lives in its own virtual environment (not
        # in the system site the new venv sees): point the venv at it.
        numpy_site = run([args.python, "-c", "import numpy, os; print(os.path.dirname(os.path.dirname("
                                             "numpy.__file__)))"]).strip()
        with open(os.path.join(site, "interpreter_numpy.pth"), "w") as f:
            f.write(numpy_site + "\n")
    out = run([venv_python, os.path.join(HERE, "python_decode_check.py"), os.path.join(site, "gqla")], cwd=empty)
    print(f"wheel {os.path.basename(wheels[0])} ({files} files) installed into a fresh venv")
    print(out.strip())
    print(f"took {time.monotonic() - start:.1f} s")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
