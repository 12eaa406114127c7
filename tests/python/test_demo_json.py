"""benchmarks/demo.py --json: numbers as numbers, with version, machine, threads and a
timestamp; relative --json/--plot paths resolve against the directory `bazel run` started in
(BUILD_WORKING_DIRECTORY), not the runfiles tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import cpukern
from test_plot import benchmarks_dir
from variants import UNDER_QEMU

if UNDER_QEMU:
    pytest.skip("under QEMU: qemu-user cannot start a guest subprocess (covered on the host leg)",
                allow_module_level=True)


def test_quick_demo_json_is_numbers_and_lands_in_the_working_directory(tmp_path):
    work, run_dir = tmp_path / "work", tmp_path / "runfiles"
    work.mkdir()
    run_dir.mkdir()
    cmd = [sys.executable, str(benchmarks_dir() / "demo.py"), "--quick", "--threads", "2",
           "--json", "out.json"]
    env = dict(os.environ, BUILD_WORKING_DIRECTORY=str(work))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=run_dir, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (run_dir / "out.json").exists()
    res = json.loads((work / "out.json").read_text())
    assert res["version"] == cpukern.__version__
    assert res["threads"] == 2 and res["quick"] is True
    assert res["timestamp"].endswith("+00:00")
    assert res["machine"]["arch"] in ("x86_64", "aarch64") and res["machine"]["cpu_model"]
    assert isinstance(res["read_bandwidth_GB_s"], float) and res["read_bandwidth_GB_s"] > 0
    for op in ("ternary_gemv", "widely_linear", "fused_moe"):
        for row in res[op]:
            assert row["check"] == "ok", (op, row)
            numbers = {k: v for k, v in row.items() if k not in ("check", "op", "shape")}
            bad = {k: v for k, v in numbers.items() if not isinstance(v, (int, float))}
            assert not bad, f"{op}: non-numeric fields {bad}"
