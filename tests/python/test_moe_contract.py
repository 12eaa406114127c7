"""The fused_moe contract (cpukern.moe: route, prepare, fused_moe, quantize, dequantize; linear on
its one-expert packings; and the FusedMoE module): the shapes it accepts, its bad input (each
case names the argument), and its guarantees (the float64 model's bound, NaN staying in its
token, batch and thread invariance, out= overlap refusal, memory the caller owns, scratch memory
given back). Numerics per variant and weight format: test_moe.py, test_moe_int8.py,
test_moe_mxfp4.py, test_moe_w4a8.py."""

from __future__ import annotations

import re
import sys
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cpukern
from bad_input_table import case_ids, check_bad_input, non_contiguous, read_only
from contract import (BF16, SEEDS, THREADS, array_kinds, bitwise, budget, moe_weights,
                      needs_subprocess, needs_torch, run_python, torch)
from cpukern import moe
from test_moe import check_close, model  # the suite's float64 model
from variants import supported


# --- shapes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,T", array_kinds())
def test_every_function_accepts_empty_batches(kind, T):
    tw_, ids = moe.route(T(np.zeros((0, 4), np.float32)), 2)
    assert tuple(tw_.shape) == (0, 2) and tuple(ids.shape) == (0, 2)
    for variant in supported("fused_moe"):
        w13, w2 = moe_weights(4, 32, 32, variant=variant)
        y = moe.fused_moe(T(np.zeros((0, 32), BF16)), w13, w2, T(np.zeros((0, 2), np.float32)),
                          T(np.zeros((0, 2), np.int32)))
        assert tuple(y.shape) == (0, 32)
        y = moe.fused_moe(T(np.zeros((0, 32), BF16)), w13, w2, T(np.zeros((0, 2), np.float32)),
                          T(np.zeros((0, 2), np.int32)), out=T(np.zeros((0, 32), BF16)))
        assert tuple(y.shape) == (0, 32)


@needs_torch
def test_module_accepts_empty_batches():
    from cpukern.torch import FusedMoE

    m = FusedMoE.from_experts(torch.randn(4, 64, 32) / 8, torch.randn(4, 32, 32) / 8)
    assert tuple(m(torch.zeros(0, 32, dtype=torch.bfloat16), torch.zeros(0, 4)).shape) == (0, 32)


# --- bad input: (id, exception, argument named, case); see bad_input_table.py ---------------------

BAD_INPUT = [
    # moe.route
    ("route/dtype", TypeError, "router_logits", lambda c: moe.route(c.logits.astype(np.float16), 2)),
    ("route/ndim", ValueError, "router_logits", lambda c: moe.route(c.logits[0], 2)),
    ("route/no_experts", ValueError, "router_logits", lambda c: moe.route(np.ones((3, 0), np.float32), 1)),
    ("route/topk_gt_e", ValueError, "topk", lambda c: moe.route(c.logits, 5)),
    ("route/topk_0", ValueError, "topk", lambda c: moe.route(c.logits, 0)),
    ("route/topk_huge", ValueError, "topk", lambda c: moe.route(c.logits, 2**40)),
    ("route/topk_past_int64", ValueError, "topk", lambda c: moe.route(c.logits, 2**70)),
    ("route/topk_type", TypeError, "topk", lambda c: moe.route(c.logits, 2.0)),
    ("route/renormalize_type", TypeError, "renormalize", lambda c: moe.route(c.logits, 2, renormalize="yes")),
    ("route/non_contiguous", TypeError, "router_logits", lambda c: moe.route(c.logits.T, 2)),

    # moe.prepare
    ("moe_prepare/dtype", TypeError, "w", lambda c: moe.prepare(c.W13.astype(np.float32))),
    ("moe_prepare/dtype_float16", TypeError, "w", lambda c: moe.prepare(c.W13.astype(np.float16))),
    ("moe_prepare/ndim", ValueError, "w", lambda c: moe.prepare(c.W13[0])),
    ("moe_prepare/empty", ValueError, "w", lambda c: moe.prepare(np.ones((0, 4, 4), BF16))),
    ("moe_prepare/non_contiguous", TypeError, "w", lambda c: moe.prepare(non_contiguous(c.W13))),
    ("moe_prepare/zero_stride_huge", TypeError, "w",
     lambda c: moe.prepare(np.lib.stride_tricks.as_strided(c.W13, (1 << 20, 1 << 20, 1 << 20), (0, 0, 0)))),
    ("moe_prepare/huge_zero_size", ValueError, "w", lambda c: moe.prepare(np.empty((2**50, 0, 4), BF16))),
    ("moe_prepare/variant_unknown", ValueError, "variant", lambda c: moe.prepare(c.W13, variant="sme2")),
    ("moe_prepare/variant_type", TypeError, "variant", lambda c: moe.prepare(c.W13, variant=["avx2"])),
    ("moe_prepare/int8_no_rows", ValueError, "w",
     lambda c: moe.prepare(np.zeros((2, 0, 8), np.int8), format="int8", scales=np.zeros((2, 0), np.float32))),
    ("moe_prepare/int8_scales_shape", ValueError, "scales",
     lambda c: moe.prepare(np.zeros((2, 3, 8), np.int8), format="int8", scales=np.ones((3, 2), np.float32))),
    ("moe_prepare/mxfp4_no_experts", ValueError, "w",
     lambda c: moe.prepare(np.zeros((0, 4, 1, 16), np.uint8), format="mxfp4", scales=np.zeros((0, 4, 1), np.uint8))),
    ("moe_prepare/mxfp4_block_bytes", ValueError, "w",
     lambda c: moe.prepare(np.zeros((2, 4, 1, 8), np.uint8), format="mxfp4", scales=np.full((2, 4, 1), 127, np.uint8))),
    ("moe_prepare/mxfp4_scales_shape", ValueError, "scales",
     lambda c: moe.prepare(np.zeros((2, 4, 1, 16), np.uint8), format="mxfp4", scales=np.full((2, 4, 2), 127, np.uint8))),
    # moe.fused_moe
    ("fused_moe/x_dtype", TypeError, "x", lambda c: c.moe_call(x=c.xb.astype(np.float32))),
    ("fused_moe/x_ndim", ValueError, "x", lambda c: c.moe_call(x=c.xb[0])),
    ("fused_moe/x_hidden", ValueError, "w13", lambda c: c.moe_call(x=c.xb[:, :8].copy())),  # the driver: w13's in-features != H
    ("fused_moe/x_non_contiguous", TypeError, "x", lambda c: c.moe_call(x=non_contiguous(c.xb))),
    ("fused_moe/w13_type", TypeError, "w13", lambda c: c.moe_call(w13=c.W13)),
    ("fused_moe/w2_type", TypeError, "w2", lambda c: c.moe_call(w2=None)),
    ("fused_moe/w13_rows", ValueError, "w13", lambda c: c.moe_call(w13=moe.prepare(c.W13[:, :12].copy()))),
    ("fused_moe/w2_out_features", ValueError, "w2", lambda c: c.moe_call(w2=moe.prepare(c.W2[:, :8].copy()))),
    ("fused_moe/w2_experts", ValueError, "w2", lambda c: c.moe_call(w2=moe.prepare(c.W2[:3].copy()))),
    ("fused_moe/w2_other_variant", ValueError, "w2",
     lambda c: c.moe_call(w2=moe.prepare(c.W2, variant="reference" if c.p13.variant != "reference" else
                                         next(v["name"] for v in cpukern.kernels("fused_moe")
                                              if v["supported"] and v["name"] != "reference")))),
    ("fused_moe/ids_dtype", TypeError, "topk_ids", lambda c: c.moe_call(topk_ids=c.ti.astype(np.int64))),
    ("fused_moe/ids_high", ValueError, "topk_ids", lambda c: c.moe_call(topk_ids=np.full_like(c.ti, 4), out=c.watch(np.empty((3, 16), BF16)))),
    ("fused_moe/ids_negative", ValueError, "topk_ids", lambda c: c.moe_call(topk_ids=np.full_like(c.ti, -1))),
    ("fused_moe/ids_int_min", ValueError, "topk_ids", lambda c: c.moe_call(topk_ids=np.full_like(c.ti, -2**31))),
    ("fused_moe/ids_rows", ValueError, "topk_ids", lambda c: c.moe_call(topk_ids=c.ti[:2].copy())),
    ("fused_moe/topk_gt_e", ValueError, "topk_ids",
     lambda c: c.moe_call(topk_ids=np.zeros((3, 5), np.int32), topk_weights=np.ones((3, 5), np.float32))),
    ("fused_moe/topk_0", ValueError, "topk_ids",
     lambda c: c.moe_call(topk_ids=np.zeros((3, 0), np.int32), topk_weights=np.ones((3, 0), np.float32))),
    ("fused_moe/weights_shape", ValueError, "topk_weights", lambda c: c.moe_call(topk_weights=c.tw[:, :1].copy())),
    ("fused_moe/weights_dtype", TypeError, "topk_weights", lambda c: c.moe_call(topk_weights=c.tw.astype(np.float64))),
    ("fused_moe/activation", ValueError, "activation", lambda c: c.moe_call(activation="relu")),
    ("fused_moe/activation_type", TypeError, "activation", lambda c: c.moe_call(activation=None)),
    ("fused_moe/skip_weighted_topk2", ValueError, "skip_weighted", lambda c: c.moe_call(skip_weighted=True)),
    ("fused_moe/skip_weighted_type", TypeError, "skip_weighted", lambda c: c.moe_call(skip_weighted="no")),
    ("fused_moe/w13_bias_shape", ValueError, "w13_bias", lambda c: c.moe_call(w13_bias=np.zeros((4, 8), BF16))),
    ("fused_moe/w13_bias_dtype", TypeError, "w13_bias", lambda c: c.moe_call(w13_bias=np.zeros((4, 16), np.float32))),
    ("fused_moe/w2_bias_shape", ValueError, "w2_bias", lambda c: c.moe_call(w2_bias=np.zeros((3, 16), BF16))),
    ("fused_moe/threads_past_max", ValueError, "threads", lambda c: c.moe_call(threads=cpukern.MAX_THREADS + 1)),
    ("fused_moe/threads_huge", ValueError, "threads", lambda c: c.moe_call(threads=10**6)),
    ("fused_moe/variant_mismatch", ValueError, "variant", lambda c: c.moe_call(variant="avx9000")),
    ("fused_moe/out_shape", ValueError, "out", lambda c: c.moe_call(out=c.watch(np.empty((3, 8), BF16)))),
    ("fused_moe/out_dtype", TypeError, "out", lambda c: c.moe_call(out=c.watch(np.empty((3, 16), np.float32)))),
    ("fused_moe/out_read_only", TypeError, "out", lambda c: c.moe_call(out=read_only(np.empty((3, 16), BF16)))),
    ("fused_moe/out_overlaps_x", ValueError, "out", lambda c: c.moe_call(out=c.xb)),
    ("fused_moe/out_overlaps_bias", ValueError, "out",
     lambda c: (lambda b: c.moe_call(w2_bias=b[:4], out=b[1:4]))(np.zeros((5, 16), BF16))),
    ("fused_moe/out_in_w13_buffer", ValueError, "out",
     lambda c: c.in_view(c.p13, moe.from_buffer,
                         lambda w, buf: c.moe_call(w13=w, out=c.tail(buf, BF16, (3, 16))))),
    ("fused_moe/out_in_w2_buffer", ValueError, "out",
     lambda c: c.in_view(c.p2, moe.from_buffer,
                         lambda w, buf: c.moe_call(w2=w, out=c.tail(buf, BF16, (3, 16))))),
    ("moe_linear/out_in_prepared_buffer", ValueError, "out",
     lambda c: c.in_view(moe.prepare(c.W2[:1].copy()), moe.from_buffer,
                         lambda w, buf: cpukern.linear.linear(c.xb[:, :8].copy(), w, out=c.tail(buf, BF16, (3, 16))))),
    ("moe_linear/out_overlaps_x", ValueError, "out",
     lambda c: (lambda b: cpukern.linear.linear(b[:24].reshape(3, 8), moe.prepare(c.W2[:1].copy()),
                                                out=b[16:64].reshape(3, 16)))(np.zeros(64, BF16))),
    ("moe/to_bytes_out_is_the_viewed_buffer", ValueError, "out",
     lambda c: c.in_view(c.p2, moe.from_buffer, lambda w, buf: moe.to_bytes(w, out=buf))),
]


@pytest.mark.parametrize("case_id", case_ids(BAD_INPUT))
def test_bad_input(case_id):
    check_bad_input(__name__, case_id)


@needs_torch
def test_module_constructor_checks_its_arguments():
    from cpukern.torch import FusedMoE

    with pytest.raises(ValueError, match=r"topk: expected 1 <= topk <= num_experts = 4, got 5"):
        FusedMoE(4, 32, 32, topk=5)
    with pytest.raises(ValueError, match="topk: expected an integer in"):
        FusedMoE(4, 32, 32, topk=0)
    with pytest.raises(ValueError, match="num_experts"):
        FusedMoE(0, 32, 32)
    with pytest.raises(ValueError, match="activation"):
        FusedMoE(4, 32, 32, activation="relu")
    assert FusedMoE(4, 32, 32, topk=4).topk == 4


NOT_FLOAT = ["int8", "int16", "int32", "bool", "complex64"]


def _refused_as(name, t):
    """pytest.raises for the from_* constructors' refusal of a non-float weight t."""
    return pytest.raises(TypeError, match="^" + re.escape(
        f"{name}: expected a floating-point tensor, got {t.dtype} tensor of shape {tuple(t.shape)}"))


@needs_torch
@pytest.mark.parametrize("dtype", NOT_FLOAT)
@pytest.mark.parametrize("arg", ["w13", "w2", "w13_bias", "w2_bias"])
def test_from_experts_refuses_non_float_weights(arg, dtype):
    """from_experts stores float weights as bf16: integer, bool and complex tensors are refused,
    never converted by value (nor their imaginary part dropped)."""
    from cpukern.torch import FusedMoE

    args = dict(w13=torch.randn(4, 64, 32) / 8, w2=torch.randn(4, 32, 32) / 8,
                w13_bias=torch.randn(4, 64) / 8, w2_bias=torch.randn(4, 32) / 8)
    FusedMoE.from_experts(**args)
    args[arg] = torch.ones_like(args[arg]).to(getattr(torch, dtype))
    with _refused_as(arg, args[arg]):
        FusedMoE.from_experts(**args)


@needs_torch
@pytest.mark.parametrize("dtype", NOT_FLOAT)
@pytest.mark.parametrize("fmt,arg", [(f, a) for f in ("mxfp4", "int8") for a in ("w13_bias", "w2_bias")])
def test_quantized_experts_refuse_non_float_biases(fmt, arg, dtype):
    """from_mxfp4 / from_int8 store the biases as bf16: the same refusal as from_experts."""
    from cpukern.torch import FusedMoE

    w13, w2 = torch.randn(4, 64, 32) / 8, torch.randn(4, 32, 32) / 8
    q = [*moe.quantize(w13.to(torch.bfloat16), format=fmt),
         *moe.quantize(w2.to(torch.bfloat16), format=fmt)]
    make = FusedMoE.from_mxfp4 if fmt == "mxfp4" else FusedMoE.from_int8
    biases = dict(w13_bias=torch.randn(4, 64) / 8, w2_bias=torch.randn(4, 32) / 8)
    make(*q, **biases)
    biases[arg] = torch.ones_like(biases[arg]).to(getattr(torch, dtype))
    with _refused_as(arg, biases[arg]):
        make(*q, **biases)


def test_dequantize_int8_refuses_minus_128_as_prepare_does():
    q = np.ones((1, 2, 4), np.int8)
    q[0, 1, 2] = -128
    s = np.ones((1, 2), np.float32)
    with pytest.raises(ValueError, match="-128"):
        moe.prepare(q, format="int8", scales=s)
    with pytest.raises(ValueError, match=r"blocks: int8 weight -128 at index \[0, 1, 2\]"):
        moe.dequantize(q, s, format="int8")


@needs_torch
def test_torch_int64_ids_are_range_checked_before_narrowing():
    from cpukern.torch import FusedMoE

    m = FusedMoE.from_experts(torch.randn(4, 64, 32) / 8, torch.randn(4, 32, 32) / 8, topk=1)
    x = torch.randn(3, 32).to(torch.bfloat16)
    w = torch.ones(3, 1)
    good = torch.tensor([[1], [2], [3]], dtype=torch.int64)
    want = m.experts(x, w, good.to(torch.int32))
    assert torch.equal(m.experts(x, w, good), want)
    for bad in (2**32 + 1, 2**31, -1, -(2**32) + 1, 4):
        ids = good.clone()
        ids[1, 0] = bad
        with pytest.raises(ValueError, match=f"topk_ids: .*{bad}"):
            m.experts(x, w, ids)
        with pytest.raises(ValueError, match=f"topk_ids: .*{bad}"):
            torch.ops.cpukern.fused_moe_prepared(x, m.w13, m.w2, w, ids)


# --- guarantees: the float64 model, NaN in its token, batch and thread invariance ---------------

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
    for variant in supported("fused_moe"):
        p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
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
    for variant in supported("fused_moe"):
        p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
        kw = dict(activation=act, w13_bias=b13, w2_bias=b2, threads=threads)
        out = moe.fused_moe(x, p13, p2, tw, ids, **kw).astype(np.float32)
        assert np.isnan(out[t]).all(), (variant, where)
        others = np.delete(np.arange(x.shape[0]), t)
        assert np.isfinite(out[others]).all(), variant


# --- guarantees: memory the caller owns, scratch memory given back -------------------------------

@needs_subprocess
def test_fused_moe_topk_ids_changed_during_the_call_never_crash():
    """Another thread flips topk_ids between valid ids and huge ones while fused_moe runs: each
    call either refuses the ids (ValueError) or computes with one consistent copy of them."""
    out = run_python("""
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


@needs_subprocess
def test_memory_comes_back_after_a_large_fused_moe_call():
    out = run_python("""
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
    w13, w2 = moe_weights(4, 32, 32)
    x = np.ones((5, 32), BF16)
    tw, ids = moe.route(np.zeros((5, 4), np.float32), 2)
    a = moe.fused_moe(x, w13, w2, tw, ids)
    cpukern.empty_cache()
    np.testing.assert_array_equal(moe.fused_moe(x, w13, w2, tw, ids), a)
