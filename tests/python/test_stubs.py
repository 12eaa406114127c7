"""The committed type stubs of the extension (python/cpukern/_ext.pyi) match the built module."""

import os
import pathlib
import subprocess
import sys

import pytest

import cpukern


def test_ext_stub_is_current(tmp_path):
    if os.environ.get("CPUKERN_QEMU_CPU"):
        pytest.skip("stub generation runs on the host leg (qemu-user cannot start guest subprocesses)")
    pytest.importorskip("nanobind", reason="nanobind (the stub generator) is not installed here")
    out = tmp_path / "_ext.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "cpukern._ext", "-o", str(out)],
                   check=True, capture_output=True)
    committed = pathlib.Path(cpukern.__file__).with_name("_ext.pyi")
    assert committed.read_text() == out.read_text(), (
        "python/cpukern/_ext.pyi is stale: regenerate it with "
        "`python -m nanobind.stubgen -m cpukern._ext -o python/cpukern/_ext.pyi` against the built package")
