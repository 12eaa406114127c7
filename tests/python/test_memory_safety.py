"""Memory the caller owns: index and weight arrays changed by another thread during a call are read
once (never an out-of-bounds read, never a check bypassed), out= over read-only or immutable
memory and lazily negated views are refused, in-place edits of a module's weights are seen, and
the memory of large calls is given back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import warnings

import ml_dtypes
import numpy as np
import pytest

import cpukern
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


def _run(code: str, timeout: float = 240, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def _moe_weights(e, h, inter, seed=0, isa=None):
    rng = np.random.default_rng(seed)
    w13 = moe.prepare((rng.standard_normal((e, 2 * inter, h)) / 8).astype(BF16), isa=isa)
    w2 = moe.prepare((rng.standard_normal((e, h, inter)) / 8).astype(BF16), isa=isa)
    return w13, w2


def small_ternary(m=8, k=32):
    w = RNG.integers(-1, 2, (m, k)).astype(np.int8)
    return ternary.prepare(ternary.pack(w), k), w


@needs_torch
def test_torch_out_over_read_only_memory_is_a_type_error(tmp_path):
    path = tmp_path / "w.safetensors"
    rng = np.random.default_rng(2)
    w = rng.integers(-1, 2, (8, 32)).astype(np.int8)
    ternary.save(path, {"w": ternary.pack(w), "y": np.zeros((8,), np.float32)}, k={"w": 32})
    ck = ternary.load(path)
    ro = ck["y"]
    assert not ro.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the array is not writable
        out = torch.from_numpy(ro)
    tw = ternary.prepare(ternary.pack(w), 32)
    x = rng.standard_normal(32).astype(np.float32)
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, torch.from_numpy(x), out=out)
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, x, out=out)
    # the numpy array itself: the same error
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, x, out=ro)
    # memory torch allocated works (shared memory included); memory it only wraps
    # (from_numpy, frombuffer, DLPack) carries no read-only flag in torch and is refused
    for ok in (torch.empty(8), torch.zeros(16)[::2].clone(), torch.empty(8).share_memory_()):
        np.testing.assert_array_equal(ternary.gemv(tw, x, out=ok).numpy(), ternary.gemv(tw, x))
    with pytest.raises(TypeError, match="out: expected a writeable array.*torch.empty"):
        ternary.gemv(tw, x, out=torch.from_numpy(np.empty(8, np.float32)))


@needs_torch
def test_out_over_immutable_memory_is_refused():
    tw, _ = small_ternary()
    x = RNG.standard_normal(32).astype(np.float32)
    frozen = bytes(32)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the memory is not writable
        outs = [torch.frombuffer(frozen, dtype=torch.float32), torch.from_numpy(ro)]
    for out in outs:
        with pytest.raises(TypeError, match="out: expected a writeable array"):
            ternary.gemv(tw, x, out=out)
    assert frozen == bytes(32) and not ro.any()


@needs_torch
def test_gemv_refuses_a_lazily_negated_tensor():
    tw, w = small_ternary()
    x = torch.randn(32)
    with pytest.raises(TypeError, match=r"x: .*lazily negated.*resolve_neg"):
        ternary.gemv(tw, x._neg_view())
    np.testing.assert_allclose(ternary.gemv(tw, x._neg_view().resolve_neg()).numpy(),
                               -ternary.gemv(tw, x).numpy())
    # the torch ops resolve it (as torch ops do)
    import cpukern.torch  # noqa: F401
    packed = torch.from_numpy(ternary.pack(w).view(np.int32))
    y = torch.ops.cpukern.ternary_gemv(packed, x._neg_view())
    torch.testing.assert_close(y, -torch.ops.cpukern.ternary_gemv(packed, x))


