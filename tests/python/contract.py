"""Helpers shared by the contract-test files (test_<op>_contract.py, test_arguments.py,
test_prepared_bytes.py): small valid weights, numpy and torch forms of an array, a fresh-Python
runner, and the hypothesis budget and float64 models of the property tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from cpukern import moe, ternary
from variants import UNDER_QEMU

try:
    import torch
except ImportError:  # the QEMU legs have no torch
    torch = None

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(27)
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed here")
needs_subprocess = pytest.mark.skipif(
    UNDER_QEMU, reason="under QEMU: qemu-user cannot start guest subprocesses")


# --- small valid arguments ----------------------------------------------------------------------

def small_ternary(m=8, k=32):
    w = RNG.integers(-1, 2, (m, k)).astype(np.int8)
    return ternary.prepare(ternary.pack(w), k), w


def moe_weights(e, h, inter, seed=0, variant=None):
    rng = np.random.default_rng(seed)
    w13 = moe.prepare((rng.standard_normal((e, 2 * inter, h)) / 8).astype(BF16), variant=variant)
    w2 = moe.prepare((rng.standard_normal((e, h, inter)) / 8).astype(BF16), variant=variant)
    return w13, w2


def array_kinds():
    """(kind, T) params for pytest.mark.parametrize("kind,T", ...): T turns a numpy array into that
    kind of argument (numpy itself, and a torch tensor where torch is installed)."""
    kinds = [("numpy", lambda a: a)]
    if torch is not None:
        def to_torch(a):
            if a.dtype == BF16:
                return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
            return torch.from_numpy(a)
        kinds.append(("torch", to_torch))
    return [pytest.param(kind, T, id=kind) for kind, T in kinds]


def run_python(code: str, timeout: float = 240, env=None) -> subprocess.CompletedProcess:
    """`code` (dedented) in a fresh interpreter, with `env` added to this one's environment."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


# --- property tests (hypothesis): budget and float64 models --------------------------------------
# Example counts are bounded: each op's properties take well under 30 s on the host and a few
# examples per test under qemu-user (CPUKERN_QEMU_CPU set).

def budget(host: int) -> settings:
    return settings(max_examples=max(3, host // 16) if UNDER_QEMU else host, deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


THREADS = st.integers(1, 5)
SEEDS = st.integers(0, 2**32 - 1)


def unpack_f64(packed, k):
    return ternary.unpack(packed, k).astype(np.float64)


def masked(w, x):
    """sum_k w x over the nonzero weights only (the kernels add/subtract, never multiply by 0),
    float64, rows of w against the last axis of x."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        pos = np.where(w[None] == 1, x[:, None, :], 0.0).sum(-1)
        neg = np.where(w[None] == -1, x[:, None, :], 0.0).sum(-1)
        return pos - neg


def same_nonfinite(got, want):
    got = np.asarray(got, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))


def bitwise(a, b):
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32 if np.asarray(a).itemsize == 4 else np.uint16),
                                  np.asarray(b).view(np.uint32 if np.asarray(b).itemsize == 4 else np.uint16))
