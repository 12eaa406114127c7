"""Writes cpukern's wheel (PEP 427) from the package files and the compiled extension.

Stdlib only (tomllib: Python >= 3.11). Bazel runs it as the //python:wheel action; the
PEP 517 backend (_build_backend/) and tests/packaging import it for `python_abi` and
`wheel_name`, the one statement of the tag rule:

  CPython 3.11 (and older)  -> cp3X-cp3X, Requires-Python ==3.X.*, _ext.cpython-3X-<arch>-linux-gnu.so
  CPython >= 3.12           -> cp312-abi3 (nanobind's stable ABI: Py_LIMITED_API=0x030C0000),
                               Requires-Python >=3.12, _ext.abi3.so; one wheel for 3.12, 3.13, ...
  free-threaded (3.13t ...) -> refused: the limited API does not exist there and this build
                               does not compile nanobind's free-threaded support.

python/wheel.bzl mirrors the rule in Starlark (the output file name and Py_LIMITED_API must
be known before the action runs); main() recomputes the name here and fails the build if the
two disagree.
"""

import argparse
import base64
import hashlib
import os
import re
import sys
import zipfile

# The first CPython whose limited API nanobind's stable-ABI build supports.
STABLE_ABI_MIN = (3, 12)
LIMITED_API_HEX = "0x030C0000"
MIN_PYTHON = (3, 9)

# Legacy aliases of PEP 600 tags (auditwheel writes both; pip < 20.3 knows only the old ones).
_LEGACY_MANYLINUX = {(2, 5): "manylinux1", (2, 12): "manylinux2010", (2, 17): "manylinux2014"}


class PythonABI:
    """What the wheel needs to know about the target interpreter."""

    def __init__(self, python_tag, abi_tag, requires_python, ext_suffix, limited_api, classifiers):
        self.python_tag = python_tag
        self.abi_tag = abi_tag
        self.requires_python = requires_python
        self.ext_suffix = ext_suffix
        self.limited_api = limited_api  # the Py_LIMITED_API value compiled in, or None
        self.classifiers = classifiers

    def __repr__(self):
        return f"PythonABI({self.python_tag}-{self.abi_tag}, {self.requires_python!r}, {self.ext_suffix!r})"


def python_abi(version, arch, implementation="cpython", free_threaded=False):
    """The tags of the wheel for interpreter `version` ((major, minor)) on Linux `arch`."""
    major, minor = int(version[0]), int(version[1])
    if implementation != "cpython":
        raise ValueError(f"cpukern builds CPython extensions only, not {implementation}")
    if major != 3 or (major, minor) < MIN_PYTHON:
        raise ValueError(f"cpukern needs CPython >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}, got {major}.{minor}")
    if free_threaded:
        raise ValueError(
            f"free-threaded CPython {major}.{minor}t is not supported: no stable ABI there, and this "
            "build does not compile nanobind's free-threaded support")
    if (major, minor) >= STABLE_ABI_MIN:
        return PythonABI(
            python_tag=f"cp{STABLE_ABI_MIN[0]}{STABLE_ABI_MIN[1]}",
            abi_tag="abi3",
            requires_python=f">={STABLE_ABI_MIN[0]}.{STABLE_ABI_MIN[1]}",
            ext_suffix=".abi3.so",
            limited_api=LIMITED_API_HEX,
            classifiers=["Programming Language :: Python :: 3 :: Only"] + [
                f"Programming Language :: Python :: 3.{m}" for m in range(STABLE_ABI_MIN[1], max(minor, 13) + 1)],
        )
    return PythonABI(
        python_tag=f"cp{major}{minor}",
        abi_tag=f"cp{major}{minor}",
        requires_python=f"=={major}.{minor}.*",
        ext_suffix=f".cpython-{major}{minor}-{arch}-linux-gnu.so",
        limited_api=None,
        classifiers=["Programming Language :: Python :: 3 :: Only", f"Programming Language :: Python :: {major}.{minor}"],
    )


def platform_tag(arch, manylinux=None):
    """linux_<arch>, or a PEP 600 tag with its legacy alias: manylinux='manylinux_2_17' ->
    'manylinux_2_17_x86_64.manylinux2014_x86_64' (a compressed tag set, as auditwheel writes)."""
    if arch not in ("x86_64", "aarch64"):
        raise ValueError(f"unknown arch {arch!r}")
    if not manylinux:
        return f"linux_{arch}"
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)", manylinux)
    if not m:
        raise ValueError(f"manylinux policy must look like manylinux_2_17, got {manylinux!r}")
    tags = [f"{manylinux}_{arch}"]
    legacy = _LEGACY_MANYLINUX.get((int(m.group(1)), int(m.group(2))))
    if legacy:
        tags.append(f"{legacy}_{arch}")
    return ".".join(tags)


def wheel_name(dist_version, abi, arch, manylinux=None):
    return f"cpukern-{dist_version}-{abi.python_tag}-{abi.abi_tag}-{platform_tag(arch, manylinux)}.whl"


def wheel_tags(abi, arch, manylinux=None):
    """The Tag: lines of WHEEL: one per platform tag of the compressed set."""
    return [f"{abi.python_tag}-{abi.abi_tag}-{p}" for p in platform_tag(arch, manylinux).split(".")]


def patchlevel_version(path):
    """(major, minor) from a CPython patchlevel.h: the headers the extension is compiled against."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    got = {}
    for key in ("PY_MAJOR_VERSION", "PY_MINOR_VERSION"):
        m = re.search(rf"#define\s+{key}\s+(\d+)", text)
        if not m:
            raise ValueError(f"{path}: no {key}")
        got[key] = int(m.group(1))
    return got["PY_MAJOR_VERSION"], got["PY_MINOR_VERSION"]


def project_metadata(pyproject_path):
    """The [project] table of pyproject.toml (the one source of name, version, dependencies,
    extras and licence), with [tool.cpukern]'s base classifiers."""
    import tomllib

    with open(pyproject_path, "rb") as f:
        doc = tomllib.load(f)
    project = dict(doc["project"])
    project["classifiers"] = doc.get("tool", {}).get("cpukern", {}).get("classifiers", [])
    return project


def metadata_text(project, abi, readme=None):
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"License-Expression: {project['license']}",
    ]
    lines += [f"License-File: {f}" for f in project.get("license-files", [])]
    lines += [f"Classifier: {c}" for c in project.get("classifiers", []) + abi.classifiers]
    lines.append(f"Requires-Python: {abi.requires_python}")
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    for label, url in project.get("urls", {}).items():
        lines.append(f"Project-URL: {label}, {url}")
    text = "\n".join(lines) + "\n"
    if readme is not None:
        text = text.replace("Requires-Python", "Description-Content-Type: text/markdown\nRequires-Python", 1)
        text += "\n" + readme
    return text


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(out, files):
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        # The .dist-info last, as PEP 427 recommends.
        for name in sorted(files, key=lambda n: (".dist-info/" in n, n)):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            z.writestr(info, files[name], compress_type=zipfile.ZIP_DEFLATED)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--version", required=True, help="the version Bazel named the file with")
    p.add_argument("--arch", required=True)
    p.add_argument("--python-version", required=True, help="MAJOR.MINOR of the target interpreter")
    p.add_argument("--free-threaded", action="store_true")
    p.add_argument("--patchlevel", help="patchlevel.h of the headers compiled against (checked)")
    p.add_argument("--manylinux", default="", help="e.g. manylinux_2_17 (empty: linux_<arch>)")
    p.add_argument("--pyproject", required=True)
    p.add_argument("--readme", help="README (markdown): the long description")
    p.add_argument("--license", action="append", default=[], help="licence file (repeatable)")
    p.add_argument("--extension", required=True)
    p.add_argument("srcs", nargs="*", help="DEST=SRC: package files, DEST relative to the wheel root")
    a = p.parse_args()

    version = tuple(int(x) for x in a.python_version.split("."))[:2]
    if a.patchlevel:
        headers = patchlevel_version(a.patchlevel)
        if headers != version:
            sys.exit(f"build_wheel: target Python {version} but the extension's headers are {headers} ({a.patchlevel})")
    abi = python_abi(version, a.arch, free_threaded=a.free_threaded)
    project = project_metadata(a.pyproject)
    if project["version"] != a.version:
        sys.exit(f"build_wheel: pyproject.toml says version {project['version']}, python/BUILD says {a.version}")
    want = wheel_name(a.version, abi, a.arch, a.manylinux)
    if os.path.basename(a.out) != want:
        sys.exit(f"build_wheel: python/wheel.bzl named the wheel {os.path.basename(a.out)}, "
                 f"build_wheel.py's rule says {want}: make the two agree")

    dist = f"cpukern-{a.version}.dist-info"
    files = {}
    for spec in a.srcs:
        dest, src = spec.split("=", 1)
        if not dest.startswith("cpukern/"):
            sys.exit(f"build_wheel: {src} would land outside the package as {dest}")
        with open(src, "rb") as f:
            files[dest] = f.read()
    with open(a.extension, "rb") as f:
        files[f"cpukern/_ext{abi.ext_suffix}"] = f.read()
    for lic in a.license:
        with open(lic, "rb") as f:
            files[f"{dist}/licenses/{os.path.basename(lic)}"] = f.read()
    project = dict(project, **{"license-files": [os.path.basename(x) for x in a.license]})
    readme = None
    if a.readme:
        with open(a.readme, encoding="utf-8") as f:
            readme = f.read()
    files[f"{dist}/METADATA"] = metadata_text(project, abi, readme).encode()
    files[f"{dist}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: cpukern build_wheel.py\nRoot-Is-Purelib: false\n"
        + "".join(f"Tag: {t}\n" for t in wheel_tags(abi, a.arch, a.manylinux))
    ).encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    write_wheel(a.out, files)


if __name__ == "__main__":
    main()
