"""The wheel tag rule (python/build_wheel.py: python_abi, platform_tag, wheel_name) for
interpreters and platforms this machine does not have, and its Starlark mirror in
python/wheel.bzl. Runs with any Python >= 3.11 (tomllib); no build needed."""

import re
import sys
import unittest

from repo_files import build_wheel as bw
from repo_files import find as _find


class PythonAbiTest(unittest.TestCase):
    def test_311_is_version_specific(self):
        abi = bw.python_abi((3, 11), "x86_64")
        self.assertEqual((abi.python_tag, abi.abi_tag), ("cp311", "cp311"))
        self.assertEqual(abi.requires_python, "==3.11.*")
        self.assertEqual(abi.ext_suffix, ".cpython-311-x86_64-linux-gnu.so")
        self.assertIsNone(abi.limited_api)
        self.assertIn("Programming Language :: Python :: 3.11", abi.classifiers)

    def test_311_aarch64_suffix(self):
        self.assertEqual(bw.python_abi((3, 11), "aarch64").ext_suffix, ".cpython-311-aarch64-linux-gnu.so")

    def test_310_is_version_specific(self):
        abi = bw.python_abi((3, 10), "x86_64")
        self.assertEqual((abi.python_tag, abi.abi_tag, abi.requires_python), ("cp310", "cp310", "==3.10.*"))

    def test_312_and_later_share_one_abi3_wheel(self):
        for minor in (12, 13, 14, 15):
            with self.subTest(minor=minor):
                abi = bw.python_abi((3, minor), "x86_64")
                self.assertEqual((abi.python_tag, abi.abi_tag), ("cp312", "abi3"))
                self.assertEqual(abi.requires_python, ">=3.12")
                self.assertEqual(abi.ext_suffix, ".abi3.so")
                self.assertEqual(abi.limited_api, "0x030C0000")
                self.assertEqual(bw.wheel_name("0.1.0", abi, "aarch64", "manylinux_2_17"),
                                 "cpukern-0.1.0-cp312-abi3-manylinux_2_17_aarch64.manylinux2014_aarch64.whl")

    def test_version_tuple_may_carry_micro(self):
        self.assertEqual(bw.python_abi(sys.version_info, "x86_64").python_tag,
                         "cp312" if sys.version_info >= (3, 12) else f"cp3{sys.version_info[1]}")

    def test_refused(self):
        with self.assertRaisesRegex(ValueError, "free-threaded"):
            bw.python_abi((3, 13), "x86_64", free_threaded=True)
        with self.assertRaisesRegex(ValueError, "CPython"):
            bw.python_abi((3, 11), "x86_64", implementation="pypy")
        with self.assertRaises(ValueError):
            bw.python_abi((2, 7), "x86_64")
        with self.assertRaises(ValueError):
            bw.python_abi((3, 8), "x86_64")


class PlatformTagTest(unittest.TestCase):
    def test_plain_linux(self):
        self.assertEqual(bw.platform_tag("x86_64"), "linux_x86_64")
        self.assertEqual(bw.platform_tag("aarch64", ""), "linux_aarch64")

    def test_legacy_aliases(self):
        self.assertEqual(bw.platform_tag("x86_64", "manylinux_2_17"), "manylinux_2_17_x86_64.manylinux2014_x86_64")
        self.assertEqual(bw.platform_tag("x86_64", "manylinux_2_5"), "manylinux_2_5_x86_64.manylinux1_x86_64")
        self.assertEqual(bw.platform_tag("aarch64", "manylinux_2_28"), "manylinux_2_28_aarch64")

    def test_bad(self):
        with self.assertRaises(ValueError):
            bw.platform_tag("riscv64", "manylinux_2_17")
        with self.assertRaises(ValueError):
            bw.platform_tag("x86_64", "manylinux2014")

    def test_wheel_tags_lines(self):
        abi = bw.python_abi((3, 11), "x86_64")
        self.assertEqual(bw.wheel_tags(abi, "x86_64", "manylinux_2_17"),
                         ["cp311-cp311-manylinux_2_17_x86_64", "cp311-cp311-manylinux2014_x86_64"])
        self.assertEqual(bw.wheel_name("0.1.0", abi, "x86_64"), "cpukern-0.1.0-cp311-cp311-linux_x86_64.whl")


def _source_tree_file(rel):
    try:
        return _find(rel)
    except FileNotFoundError:
        return None


@unittest.skipUnless(_source_tree_file("python/wheel.bzl"),
                     "python/wheel.bzl is not a runfile (python/BUILD does not export it); "
                     "run tests/packaging/tags_test.py from the checkout")
class StarlarkMirrorTest(unittest.TestCase):
    """python/wheel.bzl states the same thresholds (the //python:wheel action also fails if the
    file name wheel.bzl declares differs from build_wheel.py's)."""

    def test_constants_agree(self):
        with open(_find("python/wheel.bzl")) as f:
            bzl = f.read()
        self.assertIn(f"STABLE_ABI_MIN = {bw.STABLE_ABI_MIN}", bzl)
        self.assertIn(f'LIMITED_API_HEX = "{bw.LIMITED_API_HEX}"', bzl)
        for policy in re.findall(r'"(?:x86_64|aarch64)": "(manylinux_\d+_\d+)"', bzl):
            bw.platform_tag("x86_64", policy)  # well-formed


class MetadataTest(unittest.TestCase):
    def test_metadata_from_pyproject(self):
        project = bw.project_metadata(_find("pyproject.toml"))
        text = bw.metadata_text(dict(project, **{"license-files": ["LICENSE"]}), bw.python_abi((3, 13), "x86_64"))
        self.assertIn("License-Expression: Apache-2.0\n", text)
        self.assertIn("License-File: LICENSE\n", text)
        self.assertIn("Requires-Python: >=3.12\n", text)
        self.assertIn("Classifier: Programming Language :: Python :: 3.13\n", text)
        self.assertIn('Provides-Extra: io\nRequires-Dist: safetensors==', text)
        self.assertIn('Provides-Extra: torch\nRequires-Dist: torch==', text)


if __name__ == "__main__":
    unittest.main()
