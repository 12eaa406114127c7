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


@needs_subprocess
def test_fused_moe_topk_ids_changed_during_the_call_never_crash():
    """Another thread flips topk_ids between valid ids and huge ones while fused_moe runs: each
    call either refuses the ids (ValueError) or computes with one consistent copy of them."""
    out = _run("""
        import threading, numpy as np, ml_dtypes
        from cpukern import moe
        rng = np.random.default_rng(0)
        e, h, i, t, k = 8, 32, 32, 20000, 2
        w13 = moe.prepare((rng.standard_normal((e, 2 * i, h)) / 8).astype(ml_dtypes.bfloat16))
        w2 = moe.prepare((rng.standard_normal((e, h, i)) / 8).astype(ml_dtypes.bfloat16))
        x = rng.standard_normal((t, h)).astype(ml_dtypes.bfloat16)
        tw = np.full((t, k), 0.5, np.float32)
        ids = rng.integers(0, e, (t, k)).astype(np.int32)
        good = ids.copy()
        stop = False
        def flip():
            bad = np.full_like(ids, 1 << 30)
            while not stop:
                ids[:] = bad
                ids[:] = good
        th = threading.Thread(target=flip)
        th.start()
        refused = ran = 0
        try:
            for _ in range(300):
                try:
                    moe.fused_moe(x, w13, w2, tw, ids, threads=2)
                    ran += 1
                except ValueError as err:
                    assert "topk_ids" in str(err), err
                    refused += 1
        finally:
            stop = True
            th.join()
        print("OK", ran, refused)
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK"), out.stdout + out.stderr


@needs_torch
def test_torch_int64_topk_ids_are_read_once():
    """Another thread flips one id between 1 and 2**32 + 2 (which int32 would read as 2): every
    call either refuses the id or routes to expert 1, never to expert 2 (what a check of one
    read followed by a narrowing of another would let through)."""
    import cpukern.torch  # noqa: F401

    e, h, inter = 4, 32, 32
    w13 = torch.randn(e, 2 * inter, h).to(torch.bfloat16)
    w2 = torch.randn(e, h, inter).to(torch.bfloat16)
    x = torch.randn(1, h).to(torch.bfloat16)
    tw = torch.ones(1, 1)
    good = torch.ops.cpukern.fused_moe(x, w13, w2, tw, torch.tensor([[1]]))
    ids = torch.tensor([[1]], dtype=torch.int64)
    stop = False
    old = sys.getswitchinterval()

    def flip():
        while not stop:
            ids[0, 0] = 2 ** 32 + 2
            ids[0, 0] = 1

    sys.setswitchinterval(1e-6)
    th = threading.Thread(target=flip, daemon=True)
    th.start()
    wrong = 0
    try:
        for _ in range(3000):
            try:
                y = torch.ops.cpukern.fused_moe(x, w13, w2, tw, ids)
            except ValueError as err:
                assert "topk_ids" in str(err)
                continue
            wrong += not torch.equal(y, good)
    finally:
        stop = True
        th.join()
        sys.setswitchinterval(old)
    assert wrong == 0


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


@needs_subprocess
def test_memory_comes_back_after_a_large_fused_moe_call():
    out = _run("""
        import gc, numpy as np, ml_dtypes, cpukern
        from cpukern import moe
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 2**20
        rng = np.random.default_rng(6)
        e, h, i = 8, 1024, 1024
        bf = ml_dtypes.bfloat16
        w13 = moe.prepare((rng.standard_normal((e, 2 * i, h)) / 32).astype(bf))
        w2 = moe.prepare((rng.standard_normal((e, h, i)) / 32).astype(bf))
        def inputs(t):
            x = rng.standard_normal((t, h)).astype(bf)
            tw, ids = moe.route(rng.standard_normal((t, e)).astype(np.float32), 2)
            return x, tw, ids, np.empty((t, h), bf)
        small, large, medium = inputs(8), inputs(4096), inputs(1024)
        for _ in range(2):
            moe.fused_moe(small[0], w13, w2, small[1], small[2], threads=2, out=small[3])
        gc.collect()
        base = rss()
        x, tw, ids, out = large   # about 64 MiB of scratch while it runs
        moe.fused_moe(x, w13, w2, tw, ids, threads=2, out=out)
        big = rss() - base
        x, tw, ids, out = medium  # about 16 MiB: kept for the next call
        moe.fused_moe(x, w13, w2, tw, ids, threads=2, out=out)
        cpukern.empty_cache()
        after_empty = rss() - base
        print("OK", round(big, 1), round(after_empty, 1))
    """)
    assert out.returncode == 0 and out.stdout.startswith("OK"), out.stdout + out.stderr
    _, big, after_empty = out.stdout.split()
    assert float(big) < 20, out.stdout           # at most the 16 MiB kept per thread (+ slack)
    assert float(after_empty) < 4, out.stdout


def test_empty_cache_is_public_and_safe_between_calls():
    cpukern.empty_cache()
    w13, w2 = _moe_weights(4, 32, 32)
    x = np.ones((5, 32), BF16)
    tw, ids = moe.route(np.zeros((5, 4), np.float32), 2)
    a = moe.fused_moe(x, w13, w2, tw, ids)
    cpukern.empty_cache()
    np.testing.assert_array_equal(moe.fused_moe(x, w13, w2, tw, ids), a)
