"""Shapes every op accepts: empty batches (no tokens, no rows) through every function, op and
module, for numpy and torch input, with and without out=."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from cpukern import moe, ternary, widely_linear
from variants import supported

try:
    import torch
except ImportError:  # the QEMU legs have no torch
    torch = None

BF16 = ml_dtypes.bfloat16
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed here")


def _moe_weights(e, h, inter, seed=0, isa=None):
    rng = np.random.default_rng(seed)
    w13 = moe.prepare((rng.standard_normal((e, 2 * inter, h)) / 8).astype(BF16), isa=isa)
    w2 = moe.prepare((rng.standard_normal((e, h, inter)) / 8).astype(BF16), isa=isa)
    return w13, w2


def _kinds():
    kinds = [("numpy", lambda a: a)]
    if torch is not None:
        def to_torch(a):
            if a.dtype == BF16:
                return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
            return torch.from_numpy(a)
        kinds.append(("torch", to_torch))
    return kinds


@pytest.mark.parametrize("kind,T", _kinds())
def test_every_op_accepts_empty_batches(kind, T):
    rng = np.random.default_rng(5)
    w = rng.integers(-1, 2, (8, 32)).astype(np.int8)
    packed = ternary.pack(w)
    for isa in supported("ternary_gemv"):
        tw = ternary.prepare(T(packed), 32, isa=isa)
        for act in ("fp32", "int8"):
            y = ternary.gemv(tw, T(np.zeros((0, 32), np.float32)), act=act)
            assert tuple(y.shape) == (0, 8)
            y = ternary.gemv(tw, T(np.zeros((0, 32), np.float32)), act=act,
                             out=T(np.zeros((0, 8), np.float32)))
            assert tuple(y.shape) == (0, 8)
        # M = 0 and K = 0 weights
        y = ternary.gemv(ternary.prepare(T(np.zeros((0, 2), np.uint32)), 32, isa=isa),
                         T(np.ones((3, 32), np.float32)))
        assert tuple(y.shape) == (3, 0)
        y = ternary.gemv(ternary.prepare(T(np.zeros((4, 0), np.uint32)), 0, isa=isa),
                         T(np.ones((3, 0), np.float32)), act="int8")
        np.testing.assert_array_equal(np.asarray(y), np.zeros((3, 4), np.float32))
    assert tuple(ternary.pack(T(np.zeros((0, 32), np.int8))).shape) == (0, 2)
    assert tuple(ternary.pack(T(np.zeros((4, 0), np.int8))).shape) == (4, 0)
    assert tuple(ternary.unpack(T(np.zeros((0, 2), np.uint32)), 32).shape) == (0, 32)
    assert tuple(ternary.unpack(T(np.zeros((4, 0), np.uint32)), 0).shape) == (4, 0)
    p, s = ternary.quantize(T(np.zeros((0, 32), np.float32)))
    assert tuple(p.shape) == (0, 2) and tuple(s.shape) == (0,)
    planes, scales = widely_linear.quantize(rng.standard_normal((8, 16)).astype(np.float32))
    for isa in supported("widely_linear"):
        layer = widely_linear.prepare(T(planes), T(scales), 8, isa=isa)
        assert tuple(widely_linear.apply(layer, T(np.zeros((0, 16), np.float32))).shape) == (0, 8)
    assert tuple(widely_linear.apply(T(planes), T(np.zeros((0, 16), np.float32)), T(scales)).shape) == (0, 8)
    tw_, ids = moe.route(T(np.zeros((0, 4), np.float32)), 2)
    assert tuple(tw_.shape) == (0, 2) and tuple(ids.shape) == (0, 2)
    for isa in supported("fused_moe"):
        w13, w2 = _moe_weights(4, 32, 32, isa=isa)
        y = moe.fused_moe(T(np.zeros((0, 32), BF16)), w13, w2, T(np.zeros((0, 2), np.float32)),
                          T(np.zeros((0, 2), np.int32)))
        assert tuple(y.shape) == (0, 32)
        y = moe.fused_moe(T(np.zeros((0, 32), BF16)), w13, w2, T(np.zeros((0, 2), np.float32)),
                          T(np.zeros((0, 2), np.int32)), out=T(np.zeros((0, 32), BF16)))
        assert tuple(y.shape) == (0, 32)


@needs_torch
def test_torch_modules_accept_empty_batches():
    from cpukern.torch import FusedMoE, TernaryLinear, WidelyLinear

    lin = TernaryLinear.from_linear(torch.nn.Linear(32, 8))
    assert tuple(lin(torch.zeros(0, 32)).shape) == (0, 8)
    wl = WidelyLinear.from_linear(torch.nn.Linear(16, 8))
    assert tuple(wl(torch.zeros(0, 16)).shape) == (0, 8)
    m = FusedMoE.from_experts(torch.randn(4, 64, 32) / 8, torch.randn(4, 32, 32) / 8)
    assert tuple(m(torch.zeros(0, 32, dtype=torch.bfloat16), torch.zeros(0, 4)).shape) == (0, 32)
