# SPDX-License-Identifier: Apache-2.0
"""pytest setup: make the built gqla package importable and share fixtures.

The package is looked up in $GQLA_PYTHONPATH, then in the usual build trees
(build/, build-*/ at the repository root). An installed gqla is used when
none is found.
"""

import glob
import os
import sys
import zlib

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the float64 reference helpers next to the tests


def _find_package_dir():
    explicit = os.environ.get("GQLA_PYTHONPATH")
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(HERE))
    candidates = [os.path.join(root, "build", "bindings", "python")]
    candidates += sorted(glob.glob(os.path.join(root, "build-*", "bindings", "python")))
    for candidate in candidates:
        if glob.glob(os.path.join(candidate, "gqla", "_gqla*.so")):
            return candidate
    return None


_package_dir = _find_package_dir()
if _package_dir and _package_dir not in sys.path:
    sys.path.insert(0, _package_dir)


# New data on every run; GQLA_TEST_SEED=<n> replays a run (the seed is
# printed in the pytest header).
BASE_SEED = int(os.environ.get("GQLA_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


def pytest_report_header(config):
    where = _package_dir or "installed package"
    return f"gqla python tests: GQLA_TEST_SEED={BASE_SEED}, package from {where}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Every failure report says which seed replays it."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("random seed", f"GQLA_TEST_SEED={BASE_SEED} replays this run"))


@pytest.fixture
def rng(request):
    """A generator of fresh random data, different for every test."""
    return np.random.default_rng([BASE_SEED, zlib.crc32(request.node.nodeid.encode())])
