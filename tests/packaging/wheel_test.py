"""Checks the wheel Bazel packed (//python:wheel, this configuration's architecture) without
installing it: name and WHEEL tags by the rule of python/build_wheel.py for the target
interpreter, METADATA (licence, Requires-Python, dependencies, extras with the pinned
versions), the LICENSE, RECORD hashes, every package file, the extension's ELF
architecture, and that the manylinux tag is true (`auditwheel show`, pinned in
requirements-host.txt).

usage: wheel_test.py --wheel WHEEL --arch x86_64|aarch64 --python-info PYTHON_INFO_BZL PACKAGE_FILE...
(PYTHON_INFO_BZL: @cpukern_python//:python_info.bzl, the target interpreters the build used)
"""

import argparse
import base64
import email.parser
import hashlib
import os
import re
import subprocess
import sys
import unittest
import zipfile

from repo_files import build_wheel as bw
from repo_files import find as _find

ARGS = None


def _pin(req_file, name):
    with open(_find(req_file)) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.lower().startswith(name + "=="):
                return line
    raise AssertionError(f"{name} not pinned in {req_file}")


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = ARGS.wheel
        cls.name = os.path.basename(cls.path)
        cls.zip = zipfile.ZipFile(cls.path)
        cls.names = cls.zip.namelist()
        cls.project = bw.project_metadata(_find("pyproject.toml"))
        with open(ARGS.python_info) as f:
            m = re.search(rf'"{ARGS.arch}": struct\(version = \((\d+), (\d+)\)', f.read())
        cls.abi = bw.python_abi((int(m.group(1)), int(m.group(2))), ARGS.arch)
        cls.dist = f"cpukern-{cls.project['version']}.dist-info"
        m = re.fullmatch(r"cpukern-([^-]+)-([^-]+)-([^-]+)-([^-]+)\.whl", cls.name)
        assert m, cls.name
        cls.version, cls.py_tag, cls.abi_tag, cls.plat = m.groups()

    def read(self, name):
        return self.zip.read(name).decode()

    def test_name_and_tags(self):
        self.assertEqual(self.version, self.project["version"])
        self.assertEqual((self.py_tag, self.abi_tag), (self.abi.python_tag, self.abi.abi_tag))
        plats = self.plat.split(".")
        self.assertTrue(all(p.endswith("_" + ARGS.arch) for p in plats), plats)
        self.assertRegex(plats[0], r"^manylinux_\d+_\d+_")
        wheel = email.parser.Parser().parsestr(self.read(f"{self.dist}/WHEEL"))
        self.assertEqual(wheel["Root-Is-Purelib"], "false")
        self.assertEqual(wheel.get_all("Tag"), [f"{self.py_tag}-{self.abi_tag}-{p}" for p in plats])

    def test_version_matches_package(self):
        init = self.read("cpukern/__init__.py")
        self.assertIn(f'__version__ = "{self.project["version"]}"', init)

    def test_metadata(self):
        meta = email.parser.Parser().parsestr(self.read(f"{self.dist}/METADATA"))
        self.assertIn(meta["Metadata-Version"], ("2.4",))
        self.assertEqual(meta["Name"], "cpukern")
        self.assertEqual(meta["License-Expression"], "Apache-2.0")
        self.assertEqual(meta.get_all("License-File"), ["LICENSE"])
        self.assertEqual(meta["Requires-Python"], self.abi.requires_python)
        self.assertEqual(sorted(meta.get_all("Provides-Extra")), ["gguf", "hf", "io", "torch"])
        reqs = meta.get_all("Requires-Dist")
        self.assertIn(f'{_pin("requirements-host.txt", "transformers")}; extra == "hf"', reqs)
        self.assertIn(f'{_pin("requirements-host.txt", "torch")}; extra == "torch"', reqs)
        self.assertIn(f'{_pin("requirements.txt", "safetensors")}; extra == "io"', reqs)
        self.assertIn(f'{_pin("requirements-host.txt", "gguf")}; extra == "gguf"', reqs)
        self.assertTrue(any(r.startswith("numpy") for r in reqs), reqs)
        self.assertTrue(any(r.startswith("ml_dtypes") for r in reqs), reqs)
        for c in self.abi.classifiers:
            self.assertIn(c, meta.get_all("Classifier"))
        self.assertIn("cpukern", meta.get_payload())  # the README as the long description

    def test_license(self):
        with open(_find("LICENSE"), "rb") as f:
            lic = f.read()
        self.assertEqual(self.zip.read(f"{self.dist}/licenses/LICENSE"), lic)
        self.assertIn(b"Apache License", lic)
        self.assertIn(b"Version 2.0, January 2004", lic)
        self.assertIn(b"END OF TERMS AND CONDITIONS", lic)

    def test_record(self):
        rows = [l.rsplit(",", 2) for l in self.read(f"{self.dist}/RECORD").splitlines() if l]
        listed = {r[0] for r in rows}
        self.assertEqual(listed, set(self.names))
        for name, digest, size in rows:
            if name.endswith("RECORD"):
                continue
            data = self.zip.read(name)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            self.assertEqual((digest, int(size)), (want, len(data)), name)

    def test_package_files(self):
        want = set()
        for f in ARGS.package_file:
            rel = f.replace(os.sep, "/").split("python/", 1)[-1]
            if rel.startswith("cpukern/") and not rel.endswith(".so"):
                want.add(rel)
        self.assertTrue(want, "no package files given")
        have = {n for n in self.names if n.startswith("cpukern/")}
        self.assertEqual(want - have, set(), "package files missing from the wheel")
        exts = [n for n in have if n.startswith("cpukern/_ext") and n.endswith(".so")]
        self.assertEqual(exts, ["cpukern/_ext" + self.abi.ext_suffix])
        self.assertEqual(have - want, set(exts), "unexpected files in the wheel")

    def test_extension_elf(self):
        data = self.zip.read("cpukern/_ext" + self.abi.ext_suffix)
        self.assertEqual(data[:4], b"\x7fELF")
        machine = int.from_bytes(data[18:20], "little")
        self.assertEqual(machine, {"x86_64": 62, "aarch64": 183}[ARGS.arch])

    def test_manylinux_tag_is_true(self):
        r = subprocess.run([sys.executable, "-m", "auditwheel", "show", self.path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        text = " ".join(r.stdout.split())
        m = re.search(r'consistent with the following platform tag: "(manylinux_(\d+)_(\d+)_\w+)"', text)
        self.assertTrue(m, text)
        print(f"\nauditwheel show: {m.group(1)}", file=sys.stderr)
        need = (int(m.group(2)), int(m.group(3)))
        claimed = re.match(r"manylinux_(\d+)_(\d+)_", self.plat.split(".")[0])
        got = (int(claimed.group(1)), int(claimed.group(2)))
        # The tag must promise no older glibc than the symbols need (python/wheel.bzl MANYLINUX).
        self.assertGreaterEqual(got, need, f"{self.plat} claims glibc {got}, auditwheel says {m.group(1)}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--wheel", required=True)
    p.add_argument("--arch", required=True)
    p.add_argument("--python-info", required=True)
    p.add_argument("package_file", nargs="+", help="the files of //python:package")
    ARGS = p.parse_args()
    unittest.main(argv=[sys.argv[0]], verbosity=2)
