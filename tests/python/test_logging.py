"""logging.getLogger("cpukern") says which variant each op selected and why (CPU features,
variant=, CPUKERN_VARIANT), once per op and selection, at INFO; CPUKERN_VERBOSE=1 turns it on from the
environment."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import _log, moe, ternary, widely_linear
from variants import UNDER_QEMU


@pytest.fixture(autouse=True)
def _fresh_log():
    _log._seen.clear()
    yield
    _log._seen.clear()


def _selected(op):
    return next(v for v in cpukern.kernels(op) if v["selected"])


def _records(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "cpukern"]


def _prepare_all(variant=None):
    packed = ternary.pack(np.ones((4, 32), np.int8))
    ternary.prepare(packed, 32, variant=variant)
    planes, scales = widely_linear.quantize(np.ones((4, 4), np.float32))
    widely_linear.prepare(planes, scales, 2, variant=variant)
    moe.prepare(np.ones((2, 4, 8), ml_dtypes.bfloat16), variant=variant)


def test_default_selection_is_logged_once_per_op_with_the_cpu_features(caplog, monkeypatch):
    monkeypatch.delenv("CPUKERN_VARIANT", raising=False)
    if os.environ.get("CPUKERN_VARIANT"):
        pytest.skip("CPUKERN_VARIANT is set for this run")
    caplog.set_level(logging.INFO, logger="cpukern")
    _prepare_all()
    _prepare_all()  # the same selections again: no new records
    msgs = _records(caplog)
    assert len(msgs) == 3, msgs
    features = ", ".join(cpukern.cpu_info()["features"]) or "none"
    for op, msg in zip(("ternary_gemv", "widely_linear", "fused_moe"), msgs):
        v = _selected(op)
        assert msg.startswith(f"{op}: variant '{v['name']}' ({v['ukernel']})"), msg
        assert f"CPU features: {features}" in msg, msg
        for other in cpukern.kernels(op):  # better variants this CPU lacks are named with why
            if other["priority"] > v["priority"] and not other["supported"]:
                assert f"{other['name']} (missing {other['why']})" in msg, msg


def test_forced_selection_names_the_variant_argument(caplog):
    caplog.set_level(logging.INFO, logger="cpukern")
    _prepare_all(variant="reference")
    msgs = _records(caplog)
    assert len(msgs) == 3, msgs
    assert all("variant 'reference'" in m and "forced by variant='reference'" in m for m in msgs), msgs


def test_nothing_is_logged_or_remembered_while_info_is_off(caplog):
    caplog.set_level(logging.WARNING, logger="cpukern")
    _prepare_all()
    assert _records(caplog) == [] and not _log._seen
    caplog.set_level(logging.INFO, logger="cpukern")
    _prepare_all()  # turned on later: still reported
    assert len(_records(caplog)) == 3


@pytest.mark.skipif(UNDER_QEMU, reason="qemu-user cannot start a guest subprocess without "
                    "binfmt_misc")
def test_cpukern_verbose_prints_the_selection_and_the_cpukern_variant_reason():
    script = ("import numpy as np, ml_dtypes; from cpukern import moe, ternary\n"
              "moe.prepare(np.ones((2, 4, 8), ml_dtypes.bfloat16))\n"
              "ternary.prepare(ternary.pack(np.ones((4, 32), np.int8)), 32)\n")
    env = dict(os.environ, CPUKERN_VERBOSE="1", CPUKERN_VARIANT="fused_moe=reference")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("cpukern: ")]
    assert len(lines) == 2, r.stderr
    assert ("cpukern: fused_moe: variant 'reference'" in lines[0]
            and "forced by CPUKERN_VARIANT (entry 'fused_moe=reference')" in lines[0]), lines
    assert "cpukern: ternary_gemv: variant" in lines[1] and "CPU features" in lines[1], lines
    quiet = dict(os.environ, CPUKERN_VARIANT="fused_moe=reference")
    quiet.pop("CPUKERN_VERBOSE", None)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=quiet,
                       timeout=120)
    assert r.returncode == 0 and "cpukern: " not in r.stderr, r.stderr
