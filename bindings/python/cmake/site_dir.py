# SPDX-License-Identifier: Apache-2.0
"""python3 site_dir.py PREFIX: prints where, relative to PREFIX, this
interpreter looks for packages installed under PREFIX.

Of the interpreter's site directories (sys.path entries named site-packages
or dist-packages) that lie under PREFIX the shortest wins: on Debian,
prefix /usr gives lib/python3/dist-packages (not local/lib/...), /usr/local
gives lib/pythonX.Y/dist-packages, a venv's prefix its site-packages. A
prefix the interpreter does not search (/opt/gqla) gets the standard
lib/pythonX.Y/site-packages, for PYTHONPATH.
"""

import os
import sys
import sysconfig


def site_dir_under(prefix):
    prefix = os.path.realpath(prefix)
    found = []
    for entry in sys.path:
        if os.path.basename(entry) not in ("site-packages", "dist-packages"):
            continue
        path = os.path.realpath(entry)
        if path.startswith(prefix + os.sep):
            found.append(os.path.relpath(path, prefix))
    if found:
        return min(found, key=len)
    standard = sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix})
    return os.path.relpath(standard, prefix)


if __name__ == "__main__":
    print(site_dir_under(sys.argv[1]))
