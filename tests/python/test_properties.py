"""Property tests (hypothesis): random shapes, values, scales and thread counts, every variant this
CPU runs, against the reference variant and float64 models; NaN / Inf propagate as IEEE
arithmetic on the documented semantics would.

Example counts are bounded: the file takes well under 30 s on the host and a few examples per
test under qemu-user (CPUKERN_QEMU_CPU set).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpukern import moe, ternary, widely_linear
from variants import supported

UNDER_QEMU = bool(os.environ.get("CPUKERN_QEMU_CPU"))
BF16 = ml_dtypes.bfloat16


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


# --- ternary GEMV --------------------------------------------------------------------------------


# --- widely-linear layer ------------------------------------------------------------------------


# --- fused MoE ----------------------------------------------------------------------------------

from test_moe import check_close, model  # noqa: E402  (the suite's float64 model)


@st.composite
def moe_case(draw):
    e = draw(st.integers(1, 6))
    topk = draw(st.integers(1, e))
    h = draw(st.integers(1, 48))
    inter = draw(st.integers(1, 40))
    t = draw(st.integers(0, 9))
    rng = np.random.default_rng(draw(SEEDS))
    act = draw(st.sampled_from(moe.ACTIVATIONS))
    bias = draw(st.booleans())
    bf = lambda a: np.asarray(a, np.float32).astype(BF16)  # noqa: E731
    x = bf(rng.standard_normal((t, h)))
    w13 = bf(rng.standard_normal((e, 2 * inter, h)) / np.sqrt(h))
    w2 = bf(rng.standard_normal((e, h, inter)) / np.sqrt(inter))
    b13 = bf(rng.standard_normal((e, 2 * inter)) * 0.1) if bias else None
    b2 = bf(rng.standard_normal((e, h)) * 0.1) if bias else None
    logits = rng.standard_normal((t, e)).astype(np.float32)
    tw, ids = moe.route(logits, topk)
    if draw(st.booleans()):  # repeated / arbitrary ids are allowed too
        ids = rng.integers(0, e, size=(t, topk)).astype(np.int32)
    return x, w13, w2, b13, b2, tw, ids, act, draw(THREADS)


@budget(80)
@given(moe_case())
def test_fused_moe_matches_float64_model_and_is_deterministic(case):
    x, w13, w2, b13, b2, tw, ids, act, threads = case
    want = model(x, w13, w2, tw, ids, act, b13, b2)
    for isa in supported("fused_moe"):
        p13, p2 = moe.prepare(w13, isa=isa), moe.prepare(w2, isa=isa)
        kw = dict(activation=act, w13_bias=b13, w2_bias=b2)
        out = moe.fused_moe(x, p13, p2, tw, ids, threads=threads, **kw)
        assert out.dtype == BF16 and out.shape == x.shape
        check_close(out, want)
        bitwise(out, moe.fused_moe(x, p13, p2, tw, ids, threads=1, **kw))
        if x.shape[0] > 1:  # a token's result does not depend on the other tokens
            bitwise(out[1:], moe.fused_moe(x[1:].copy(), p13, p2, tw[1:].copy(), ids[1:].copy(),
                                           threads=threads, **kw))


@budget(60)
@given(moe_case(), st.data())
def test_fused_moe_nan_stays_in_its_token(case, data):
    x, w13, w2, b13, b2, tw, ids, act, threads = case
    if x.shape[0] == 0:
        return
    t = data.draw(st.integers(0, x.shape[0] - 1))
    where = data.draw(st.sampled_from(["x", "topk_weights"]))
    x, tw = x.copy(), tw.copy()
    if where == "x":
        x[t, data.draw(st.integers(0, x.shape[1] - 1))] = np.nan
    else:
        tw[t, data.draw(st.integers(0, tw.shape[1] - 1))] = np.nan
    for isa in supported("fused_moe"):
        p13, p2 = moe.prepare(w13, isa=isa), moe.prepare(w2, isa=isa)
        kw = dict(activation=act, w13_bias=b13, w2_bias=b2, threads=threads)
        out = moe.fused_moe(x, p13, p2, tw, ids, **kw).astype(np.float32)
        assert np.isnan(out[t]).all(), (isa, where)
        others = np.delete(np.arange(x.shape[0]), t)
        assert np.isfinite(out[others]).all(), isa
