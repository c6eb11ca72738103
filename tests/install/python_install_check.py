# SPDX-License-Identifier: Apache-2.0
"""`cmake --install` of the Python package (ctest gqla.install.python_cmake):
installs the build tree into a fresh prefix and, with PYTHONPATH set to the
package directory CMake chose (GQLA_PYTHON_INSTALL_DIR, by default the
interpreter's site directory under the prefix), decodes on the CPU against
float64 NumPy; gqla and libgqla must load from the prefix, the extension
finding libgqla through its relative rpath.

usage: python_install_check.py --python PY --build-dir B --work-dir DIR --site-dir REL
"""

import argparse
import os
import shutil
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from python_wheel_check import run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser()
    for name in ("--python", "--build-dir", "--work-dir", "--site-dir"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    work = os.path.abspath(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    prefix, empty = os.path.join(work, "prefix"), os.path.join(work, "cwd")
    run(["cmake", "--install", args.build_dir, "--prefix", prefix])
    site = args.site_dir if os.path.isabs(args.site_dir) else os.path.join(prefix, args.site_dir)
    if not os.path.exists(os.path.join(site, "gqla", "__init__.py")):
        sys.exit(f"no gqla package installed in {site}")
    os.makedirs(empty)
    out = run([args.python, os.path.join(HERE, "python_decode_check.py"), prefix], cwd=empty,
              extra_env={"PYTHONPATH": site})
    print(out.strip())
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
