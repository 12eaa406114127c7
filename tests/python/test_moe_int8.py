"""int8 (W8A8) experts: quantize / dequantize against their fp32 formulas, prepare validation,
and fused_moe on int8 experts (both GEMMs, or one of them with the other in bf16) against a
numpy float64 model of the same quantisation, within the bound derived in
tests/cc/moe/moe_test.cc (MoeInt8Test), on every variant."""

import math

import ml_dtypes
import numpy as np
import pytest

from cpukern import moe
from test_moe import activation, bf16, make_layer
from variants import UNDER_QEMU, variant_params

BF16 = ml_dtypes.bfloat16
F32 = np.float32
U = 2.0 ** -24


def np_quantize_rows(x):
    """The activation quantiser (kernels/moe/int8.h) in numpy fp32: rows of x (n, k) -> (q, sa)."""
    x = np.asarray(x, F32)
    finite = np.isfinite(x).all(-1)
    amax = np.where(finite, np.abs(np.where(np.isfinite(x), x, 0)).max(-1), 0).astype(F32)
    pre = np.where(amax < F32(2.0 ** -64), F32(2.0 ** 64), F32(1)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = (F32(127) / (amax * pre)).astype(F32)
        v = ((x * pre[:, None]).astype(F32) * inv[:, None]).astype(F32)
    q = np.clip(np.rint(v), -127, 127)
    q = np.where((amax > 0)[:, None] & finite[:, None], q, 0).astype(np.int8)
    sa = np.where(finite, amax / F32(127), np.nan).astype(F32)
    return q, sa


def np_quantize_weights(w):
    wf = np.asarray(w, F32)
    s = (np.abs(wf).max(-1) / F32(127)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint((wf / s[..., None]).astype(F32)), -127, 127)
    return np.where(s[..., None] > 0, q, 0).astype(np.int8), s


def test_quantize_matches_formula_and_round_trip():
    rng = np.random.default_rng(3)
    w = bf16(rng.standard_normal((3, 5, 77)) * 0.05)
    w[1, 2] = 0  # amax 0 row
    w[2, 4, 7] = bf16(-30.0)
    q, s = moe.quantize(w, format="int8")
    assert q.dtype == np.int8 and q.shape == w.shape and s.dtype == np.float32 and s.shape == (3, 5)
    wq, ws = np_quantize_weights(w)
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_array_equal(s, ws)
    assert s[1, 2] == 0 and (q[1, 2] == 0).all() and q[2, 4, 7] == -127
    assert np.abs(q).max() <= 127
    d = moe.dequantize(q, s, format="int8")
    assert d.dtype == np.float32 and d.shape == w.shape
    np.testing.assert_array_equal(d, q.astype(F32) * s[..., None])
    err = np.abs(d.astype(np.float64) - w.astype(np.float64))
    assert (err <= 0.5 * s[..., None].astype(np.float64) * (1 + 1e-5)).all()
    # quantize(dequantize(q)) == q where the dequantized weights are exact in bf16
    q2, s2 = moe.quantize(moe.dequantize(q, s, format="int8").astype(BF16), format="int8")
    assert np.abs(q2.astype(int) - q).max() <= 1
    bad = w.copy()
    bad[0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="^w: non-finite weight at row 0, column 0"):
        moe.quantize(bad, format="int8")
    with pytest.raises(ValueError, match="^format:"):
        moe.quantize(w, format="int4")


def test_prepare_validation_names_the_argument():
    rng = np.random.default_rng(4)
    q = rng.integers(-127, 128, (2, 3, 40), dtype=np.int8)
    s = rng.random((2, 3), dtype=F32)
    p = moe.prepare(q, format="int8", scales=s)
    assert p.format == "int8" and p.shape == (2, 3, 40) and "int8" in repr(p)
    assert "int8" in moe.FORMATS
    with pytest.raises(ValueError, match="^scales: required"):
        moe.prepare(q, format="int8")
    with pytest.raises(TypeError, match="^w:"):
        moe.prepare(q.astype(np.uint8), format="int8", scales=s)
    with pytest.raises(TypeError, match="^scales:"):
        moe.prepare(q, format="int8", scales=s.astype(np.float64))
    with pytest.raises(ValueError, match="^scales: expected shape"):
        moe.prepare(q, format="int8", scales=s[:, :2].copy())
    with pytest.raises(ValueError, match="^w:"):
        moe.prepare(q[:, :, :0].copy(), format="int8", scales=s)
    with pytest.raises(ValueError, match="^w:"):
        moe.prepare(q[0], format="int8", scales=s)
    for v in (np.nan, np.inf, -1.0):
        bad = s.copy()
        bad[1, 2] = v
        with pytest.raises(ValueError, match=r"^scales: .*expert 1, row 2"):
            moe.prepare(q, format="int8", scales=bad)
        with pytest.raises(ValueError, match="^scales:"):
            moe.dequantize(q, bad, format="int8")
    bad = q.copy()
    bad[0, 1, 5] = -128
    with pytest.raises(ValueError, match=r"^w: int8 weight -128 at expert 0, row 1, column 5"):
        moe.prepare(bad, format="int8", scales=s)
    with pytest.raises(ValueError, match="^i:"):
        big = np.ones((1, 1, 133145), np.int8)
        moe.prepare(big, format="int8", scales=np.ones((1, 1), F32))
    with pytest.raises(ValueError, match="^scales:"):
        moe.dequantize(q, s[:, :2].copy(), format="int8")


def int8_model(x, w13, w2, q13, s13, q2, s2, tw, ids, act, b13, b2, skip, int8_13, int8_2):
    """float64 model of fused_moe with the same quantisation and its error bound per output
    (the derivation is in tests/cc/moe/moe_test.cc, MoeInt8Test)."""
    t_count, h = x.shape
    inter = w2.shape[2]
    topk = ids.shape[1]
    il = act == "swigluoai"
    out = np.zeros((t_count, h))
    other = np.zeros((t_count, h))
    qx, sx = np_quantize_rows(x.astype(F32))
    xf = x.astype(np.float64)
    for t in range(t_count):
        for j in range(topk):
            e = ids[t, j]
            wt = 1.0 if skip else float(tw[t, j])
            if int8_13:
                g = (q13[e].astype(np.int64) @ qx[t].astype(np.int64)) * float(sx[t]) * \
                    s13[e].astype(np.float64)
                err = 1.01 * U * np.abs(g)
            else:
                prod = w13[e].astype(np.float64) * xf[t]
                g = prod.sum(-1)
                err = 1.01 * h * U * np.abs(prod).sum(-1)
            if b13 is not None:
                b = b13[e].astype(np.float64)
                g = g + b
                err = err + U * (np.abs(g) + np.abs(b))
            v = activation(act, g, inter)
            gate, up = (g[0::2], g[1::2]) if il else (g[:inter], g[inter:])
            eg, eu = (err[0::2], err[1::2]) if il else (err[:inter], err[inter:])
            tol_a = (1 + np.abs(gate)) * (1 + np.abs(up)) * 2.0 ** -18 + \
                (2 + np.abs(gate) + np.abs(up)) * (eg + eu)
            ambiguous = ((v - tol_a).astype(F32).astype(BF16) !=
                         (v + tol_a).astype(F32).astype(BF16)).any()
            a_bf = v.astype(F32).astype(BF16)
            a = a_bf.astype(np.float64)
            if int8_2:
                qa, sa = np_quantize_rows(a_bf.astype(F32)[None])
                y = (q2[e].astype(np.int64) @ qa[0].astype(np.int64)) * float(sa[0]) * \
                    s2[e].astype(np.float64)
                wq = q2[e].astype(np.float64) * s2[e].astype(np.float64)[:, None]
                e2 = 1.01 * U * np.abs(y)
                if ambiguous:
                    e2 = e2 + np.abs(wq * a).sum(-1) * 2.0 ** -7 + \
                        1.01 * np.abs(wq).sum(-1) * float(sa[0]) * (2 + 2.0 ** -6)
            else:
                prod = w2[e].astype(np.float64) * a
                y = prod.sum(-1)
                e2 = 1.01 * inter * U * np.abs(prod).sum(-1)
                if ambiguous:
                    e2 = e2 + np.abs(prod).sum(-1) * 2.0 ** -7
            bb = b2[e].astype(np.float64) if b2 is not None else 0.0
            out[t] += wt * (y + bb)
            other[t] += wt * (e2 + (topk + 2) * U * (np.abs(y) + np.abs(bb)))
    return out, np.abs(out) * 2.0 ** -8 * 1.01 + 1.01 * other


CASES = [  # (E, topk, H, I, T, activation, bias)
    (1, 1, 1, 1, 1, "silu", False),
    (8, 2, 31, 176, 7, "gelu", True),
    (8, 4, 32, 32, 7, "gelu_tanh", False),
    (8, 4, 128, 31, 16, "swigluoai", True),
    (4, 4, 40, 24, 5, "silu", True),
]
if not UNDER_QEMU:
    CASES += [(32, 4, 128, 176, 64, "swigluoai", True), (8, 2, 176, 128, 64, "gelu_tanh", False)]


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("e,topk,h,inter,t,act,bias", CASES)
def test_fused_moe_int8_matches_float64_model(variant, e, topk, h, inter, t, act, bias):
    rng = np.random.default_rng(e * 1000 + h + inter)
    x, w13, w2, logits, b13, b2 = make_layer(e, h, inter, t, topk, bias, rng)
    tw, ids = moe.route(logits, topk)
    q13, s13 = moe.quantize(w13, format="int8")
    q2, s2 = moe.quantize(w2, format="int8")
    i13 = moe.prepare(q13, format="int8", scales=s13, variant=variant)
    i2 = moe.prepare(q2, format="int8", scales=s2, variant=variant)
    p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
    assert i13.format == "int8" and i13.variant == variant
    for m13, m2 in ((i13, i2), (i13, p2), (p13, i2)):
        out = moe.fused_moe(x, m13, m2, tw, ids, activation=act, w13_bias=b13, w2_bias=b2)
        assert out.dtype == BF16 and out.shape == (t, h)
        want, tol = int8_model(x, w13, w2, q13, s13, q2, s2, tw, ids, act, b13, b2, False,
                               m13 is i13, m2 is i2)
        err = np.abs(out.astype(np.float64) - want)
        assert (err <= tol).all(), (m13.format, m2.format, float((err - tol).max()))
        again = moe.fused_moe(x, m13, m2, tw, ids, activation=act, w13_bias=b13, w2_bias=b2,
                              threads=3)
        np.testing.assert_array_equal(again.view(np.uint16), out.view(np.uint16))


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
def test_fused_moe_int8_skip_weighted_and_edge_rows(variant):
    """topk 1 with skip_weighted; tokens that are all zero (amax 0) and at bf16's extremes."""
    rng = np.random.default_rng(9)
    e, h, inter, t = 4, 48, 40, 6
    x, w13, w2, _, b13, b2 = make_layer(e, h, inter, t, 1, True, rng)
    x[1] = 0
    x[2] = bf16(x[2].astype(F32) * F32(1e30))
    x[3] = bf16(x[3].astype(F32) * F32(1e-38))
    ids = rng.integers(0, e, (t, 1)).astype(np.int32)
    tw = np.ones((t, 1), F32)
    q13, s13 = moe.quantize(w13, format="int8")
    q2, s2 = moe.quantize(w2, format="int8")
    i13 = moe.prepare(q13, format="int8", scales=s13, variant=variant)
    i2 = moe.prepare(q2, format="int8", scales=s2, variant=variant)
    out = moe.fused_moe(x, i13, i2, tw, ids, activation="silu", w13_bias=b13, w2_bias=b2,
                        skip_weighted=True)
    with np.errstate(over="ignore", invalid="ignore"):  # the 1e30 token overflows to inf
        want, tol = int8_model(x, w13, w2, q13, s13, q2, s2, tw, ids, "silu", b13, b2, True,
                               True, True)
        finite = np.isfinite(want)
        assert (np.abs(out.astype(np.float64) - want)[finite] <= tol[finite]).all()


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
def test_fused_moe_int8_finite_near_bf16_max(variant):
    """Tokens with |x| from 1e36 up to near bf16's max (3.39e38): bf16 experts give finite
    outputs (swigluoai clamps the huge gate and up values), and so do int8 experts now. The
    first epilogue, (float(acc) * sa) * sw in fp32, overflowed in float(acc) * sa (about
    K * max|x|) and gave inf, then NaN through the activation, on every variant."""
    rng = np.random.default_rng(12)
    e, h, inter, t = 3, 64, 32, 6
    x, w13, w2, _, b13, b2 = make_layer(e, h, inter, t, 2, True, rng)
    big = np.array([1e36, 3e36, 1e37, 3e37, 1e38, 3e38], F32)
    xf = x.astype(F32)
    xf = xf / np.abs(xf).max(-1, keepdims=True) * big[:, None]
    x = xf.astype(BF16)
    assert np.isfinite(x.astype(F32)).all()
    ids = np.stack([np.arange(t) % e, (np.arange(t) + 1) % e], 1).astype(np.int32)
    tw = np.full((t, 2), 0.5, F32)
    q13, s13 = moe.quantize(w13, format="int8")
    q2, s2 = moe.quantize(w2, format="int8")
    p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
    ref = moe.fused_moe(x, p13, p2, tw, ids, activation="swigluoai", w13_bias=b13, w2_bias=b2)
    finite = np.isfinite(ref.astype(F32))
    assert finite[:4].all(), "the bf16 experts overflow too: the test would prove nothing"
    i13 = moe.prepare(q13, format="int8", scales=s13, variant=variant)
    i2 = moe.prepare(q2, format="int8", scales=s2, variant=variant)
    with np.errstate(over="ignore", invalid="ignore"):
        want, tol = int8_model(x, w13, w2, q13, s13, q2, s2, tw, ids, "swigluoai", b13, b2,
                               False, True, True)
    for m13, m2 in ((i13, i2), (i13, p2), (p13, i2)):
        out = moe.fused_moe(x, m13, m2, tw, ids, activation="swigluoai", w13_bias=b13,
                            w2_bias=b2).astype(np.float64)
        assert np.isfinite(out[finite]).all(), (m13.format, m2.format, out)
        if m13 is i13 and m2 is i2:
            assert (np.abs(out - want) <= tol).all(), float((np.abs(out - want) - tol).max())


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
def test_int8_gemm_bitwise_equal_across_variants(variant):
    """Every variant's int8 result equals the reference variant's where the activation between
    the GEMMs rounds to the same bf16 on every variant: with topk 1, I = 1 and the swigluoai
    clamps saturated (gate = up = 7: 8 * 7 * sigmoid(11.9) -> bf16 56 whatever the last fp32
    bit of the sigmoid) the rest of the op is float(double(acc) * sa * sw), + bias, * weight."""
    rng = np.random.default_rng(5)
    e, h, inter, t = 3, 70, 1, 9
    x, _, w2, _, _, b2 = make_layer(e, h, inter, t, 1, True, rng)
    w13 = np.zeros((e, 2, h), BF16)
    w13[:, :, 0] = bf16([[1000.0, 1000.0]])  # gate and up far past the clamps
    x[:, 0] = bf16(np.abs(x[:, 0].astype(F32)) + 1)
    q13, s13 = moe.quantize(w13, format="int8")
    q2, s2 = moe.quantize(w2, format="int8")
    ids = rng.integers(0, e, (t, 1)).astype(np.int32)
    tw = rng.random((t, 1), dtype=F32)
    outs = []
    for v in (variant, "reference"):
        i13 = moe.prepare(q13, format="int8", scales=s13, variant=v)
        i2 = moe.prepare(q2, format="int8", scales=s2, variant=v)
        outs.append(moe.fused_moe(x, i13, i2, tw, ids, activation="swigluoai", w2_bias=b2))
    np.testing.assert_array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


def test_fused_moe_rejects_mixed_families():
    rng = np.random.default_rng(6)
    x, w13, w2, logits, _, _ = make_layer(4, 32, 16, 3, 2, False, rng)
    tw, ids = moe.route(logits, 2)
    q13, s13 = moe.quantize(w13, format="int8")
    i13 = moe.prepare(q13, format="int8", scales=s13, variant="reference")
    others = [v for v in variant_params("fused_moe") if not v.marks and v.values[0] != "reference"]
    if not others:
        pytest.skip("this CPU runs only the reference variant")
    p2 = moe.prepare(w2, variant=others[0].values[0])
    with pytest.raises(ValueError, match="^w2:"):
        moe.fused_moe(x, i13, p2, tw, ids)


def test_torch_op_and_module_take_int8():
    torch = pytest.importorskip("torch")
    import cpukern.torch  # noqa: F401  registers the ops
    from cpukern.torch import FusedMoE

    rng = np.random.default_rng(8)
    x, w13, w2, logits, _, _ = make_layer(4, 64, 32, 5, 2, False, rng)
    tw, ids = moe.route(logits, 2)
    q13, s13 = moe.quantize(w13, format="int8")
    q2, s2 = moe.quantize(w2, format="int8")
    want = moe.fused_moe(x, moe.prepare(q13, format="int8", scales=s13),
                         moe.prepare(q2, format="int8", scales=s2), tw, ids)
    T = torch.from_numpy
    xt = T(x.view(np.int16)).view(torch.bfloat16)
    tq13, ts13, tq2, ts2 = T(q13), T(s13), T(q2), T(s2)
    got = torch.ops.cpukern.fused_moe(xt, tq13, tq2, T(tw), T(ids), "silu", None, None, False,
                                      "", ts13, ts2)
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), want.view(np.int16))
    mod = FusedMoE.from_int8(tq13, ts13, tq2, ts2, topk=2)
    assert torch.equal(mod.experts(xt, T(tw), T(ids)), got)
    assert torch.equal(mod.half().experts(xt, T(tw), T(ids)), got)  # packed weights unchanged
    # the experts are held packed only: no int8 tensors or scales beside them
    assert isinstance(mod.w13, cpukern.torch.PackedWeightsTensor) and mod.w13.kind == "moe"
    assert mod.w13.weights.format == "int8" and mod.w2.weights.format == "int8"
    assert sorted(mod.state_dict()) == ["w13", "w2"]
    with pytest.raises(ValueError, match="^w13_scales: required with int8 experts w13"):
        torch.ops.cpukern.fused_moe(xt, tq13, tq2, T(tw), T(ids))
    with pytest.raises(TypeError, match="^w2: expected a 3-D torch.int8 tensor"):
        FusedMoE.from_int8(tq13, ts13, tq2.float(), ts2)
