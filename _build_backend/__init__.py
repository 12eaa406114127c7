"""cpukern's in-tree PEP 517 build backend (pyproject.toml: build-backend = "_build_backend").

build_wheel runs `./bazelw build //python:wheel` (bazelw installs the toolchain and the pinned
build requirements first) for the interpreter running this backend, and copies the wheel
Bazel packed (python/build_wheel.py, python/wheel.bzl) to the wheel directory.
build_sdist packs the source tree minus VCS data, Bazel's output symlinks and caches.

Environment:
  CPUKERN_BAZEL_ARGS   extra bazel build arguments, split on whitespace (e.g. --config=aarch64
                       for the cross-built aarch64 wheel)
  CPUKERN_CACHE        bazelw's cache (default ~/.cache/cpukern); build venvs for interpreters
                       other than bazelw's own live there
  CPUKERN_KEEP_BAZEL=1 keep Bazel's output base after building an unpacked sdist (default:
                       `bazel clean --expunge` there, since its temporary directory is gone after)

Stdlib only; no build requirements (pyproject.toml: requires = []).
"""

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import build_wheel as _bw  # noqa: E402  (python/build_wheel.py: the tag rule and metadata)

sys.path.pop(0)

# Never in an sdist: VCS data, Bazel's convenience symlinks and local state, caches, builds.
_SDIST_EXCLUDE_DIRS = {".git", ".cache", ".gl", ".whl", "__pycache__", ".pytest_cache", ".hypothesis",
                       "dist", "build", ".mypy_cache", ".ruff_cache", ".venv", "venv"}
_SDIST_EXCLUDE_FILES = {".bazelrc.user", "MODULE.bazel.lock"}


def _log(msg):
    print(f"cpukern build backend: {msg}", file=sys.stderr, flush=True)


def _project():
    return _bw.project_metadata(os.path.join(ROOT, "pyproject.toml"))


def _cache():
    return os.environ.get("CPUKERN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cpukern")


def _pin(name):
    """name==version from requirements.txt (the tested pin)."""
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.lower().startswith(name + "=="):
                return line
    return name


def _build_python():
    """A Python of this interpreter's version with nanobind, for CPUKERN_PYTHON: bazelw's own
    venv when the versions agree (today: 3.11), else a venv made from this interpreter."""
    want = sys.version_info[:2]
    if want == (3, 11):
        return None  # bazelw's venv (it requires 3.11)
    venv = os.path.join(_cache(), f"build-venv-{want[0]}.{want[1]}")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, ".ok")):
        _log(f"creating {venv} (nanobind for CPython {want[0]}.{want[1]})")
        exe = getattr(sys, "_base_executable", None) or sys.executable
        subprocess.run([exe, "-m", "venv", "--clear", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", _pin("nanobind")],
                       check=True)
        open(os.path.join(venv, ".ok"), "w").close()
    return py


def _bazel(*args, check=True):
    """Runs ./bazelw ARGS, its output going to stderr; returns that output."""
    cmd = [os.path.join(ROOT, "bazelw"), *args]
    _log(" ".join(cmd))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        sys.stderr.write(line)
        lines.append(line)
    sys.stderr.flush()
    if proc.wait() != 0 and check:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode})")
    return "".join(lines)


# --- PEP 517 hooks -------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if not sys.platform.startswith("linux"):
        raise RuntimeError("cpukern builds Linux wheels only")
    extra = os.environ.get("CPUKERN_BAZEL_ARGS", "").split()
    if config_settings:  # pip --config-settings bazel-args="..." / python -m build -C...
        extra += str(config_settings.get("bazel-args", "")).split()
    cross = any(a.startswith("--config=") for a in extra)
    args = ["build", "//python:wheel"]
    py = None if cross else _build_python()
    if py:
        args.append(f"--repo_env=CPUKERN_PYTHON={py}")
    args += extra
    start = time.time()
    output = _bazel(*args)
    _log(f"bazel build took {time.time() - start:.0f} s")
    # "Target //python:wheel up-to-date:" then the wheel's path (bazel-bin/... or bazel-out/...).
    wheels = [w for w in output.split() if w.endswith(".whl")]
    if len(wheels) != 1:
        raise RuntimeError(f"cannot tell the wheel //python:wheel built from Bazel's output: {wheels}")
    # The real output directory: bazel-bin follows whichever configuration built last.
    info = subprocess.run([os.path.join(ROOT, "bazelw"), "info", *args[2:], "bazel-bin"], cwd=ROOT,
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    src = os.path.join(info, "python", os.path.basename(wheels[0]))
    name = os.path.basename(src)
    if not cross:
        # The tags must be this interpreter's (python_abi of the running version).
        abi = _bw.python_abi(sys.version_info[:2], os.uname().machine)
        if f"-{abi.python_tag}-{abi.abi_tag}-" not in name:
            raise RuntimeError(f"Bazel built {name}, not a {abi.python_tag}-{abi.abi_tag} wheel for "
                               f"this Python {sys.version.split()[0]}")
    os.makedirs(wheel_directory, exist_ok=True)
    dst = os.path.join(wheel_directory, name)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)
    if not os.path.isdir(os.path.join(ROOT, ".git")) and os.environ.get("CPUKERN_KEEP_BAZEL") != "1":
        # An unpacked sdist in a temporary directory: do not leave its output base and server.
        _bazel("clean", "--expunge", check=False)
    return name


def _sdist_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in _SDIST_EXCLUDE_DIRS and not (rel == "." and d.startswith("bazel-")))
        for f in sorted(filenames):
            if f in _SDIST_EXCLUDE_FILES or f.endswith((".pyc", ".pyo", ".whl")):
                continue
            if rel == "." and f.startswith("bazel-"):
                continue
            yield os.path.normpath(os.path.join(rel, f))
        # Symlinked directories (none are walked into): keep them as links.
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                dirnames.remove(d)
                yield os.path.normpath(os.path.join(rel, d))


def _pkg_info():
    project = _project()
    text = _bw.metadata_text(dict(project, **{"license-files": ["LICENSE"]}),
                             _bw.python_abi(sys.version_info[:2], os.uname().machine))
    # Requires-Python and the version classifiers depend on the interpreter that builds the wheel.
    lines = [l for l in text.splitlines()
             if not l.startswith(("Requires-Python:", "Classifier: Programming Language :: Python :: 3"))]
    at = next(i for i, l in enumerate(lines) if l.startswith("Version:")) + 1
    lines[at:at] = ["Dynamic: Requires-Python", "Dynamic: Classifier"]
    return "\n".join(lines) + "\n"


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = f"{project['name']}-{project['version']}"
    name = f"{base}.tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, name)

    def clean(info):
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = min(info.mtime, time.time())
        return info

    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in _sdist_files():
            tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}", recursive=False, filter=clean)
        data = _pkg_info().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        import io

        tar.addfile(info, io.BytesIO(data))
    return name
