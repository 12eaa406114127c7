"""Repo files for the packaging tests, from Bazel's runfiles or from the source tree, and
python/build_wheel.py imported as `build_wheel`."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def find(rel):
    """A repo file, from Bazel's runfiles or from the source tree."""
    for base in (os.path.join(os.environ.get("TEST_SRCDIR", ""), "cpukern"), os.path.join(HERE, "..", "..")):
        p = os.path.join(base, rel)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(rel)


sys.path.insert(0, os.path.dirname(find("python/build_wheel.py")))
import build_wheel  # noqa: E402,F401
