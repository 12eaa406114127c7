"""benchmarks/distributed/tp_ep_example.py under torchrun (2 processes, gloo on loopback)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from variants import UNDER_QEMU

pytest.importorskip("torch", reason="torch is not installed here: distributed example skipped")
if UNDER_QEMU:
    pytest.skip("under QEMU: two emulated torch processes are too slow (and torch is host-only)",
                allow_module_level=True)


def example() -> Path:
    here = Path(__file__).parent  # tests/python in the runfiles tree or the checkout
    for root in (here.parents[1], Path(__file__).resolve().parents[2]):
        p = root / "benchmarks" / "distributed" / "tp_ep_example.py"
        if p.is_file():
            return p
    pytest.skip("benchmarks/distributed/tp_ep_example.py not found next to the tests")


def test_tensor_and_expert_parallel_match_single_process(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHELASTIC_ERROR_FILE=str(tmp_path / "err.json"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(example()), "--tokens", "3", "--hidden", "64", "--out-features", "48",
           "--experts", "4", "--intermediate", "32"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in 240 s:\n{e.stdout}\n{e.stderr}")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "bitwise equal" in out.stdout and "OK" in out.stdout.splitlines()[-1], log
