"""W4A8 experts (MXFP4 weights, int8 activations: prepare(..., format="mxfp4", act="int8")):
a numpy oracle of the arithmetic (kernels/moe/w4a8_loop.h) that the kernels match bit for bit
on every variant, the documented error bound checked on that oracle against float64 on random
and extreme inputs (e8m0 scales 0, 1, 127, 254, flushed blocks; activations near 0 and near
bf16's maximum), batch- and thread-count invariance, pickle / to_bytes round trips and the
argument checks.

The GEMM is probed through fused_moe: E = 1, topk = 1, skip_weighted, H = I, w13 exact (bf16)
and w2 W4A8; a first call with w2 = the identity (bf16, exact) returns the activation rows a
that the W4A8 GEMM then multiplies (both calls run the same stage 1), and the output is
bf16(C), C the W4A8 GEMM's fp32 result."""

import pickle

import numpy as np
import pytest

from cpukern import moe
from test_moe import bf16
from test_moe_int8 import np_quantize_rows
from variants import UNDER_QEMU, variant_params

F32 = np.float32
TWICE = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int64)


def codes_of(blocks):
    """(..., nb, 16) uint8 -> (..., nb, 32) e2m1 codes in k order (low nibble first)."""
    return np.stack([blocks & 15, blocks >> 4], -1).reshape(blocks.shape[:-1] + (32,))


def w4a8_oracle(blocks, scales, a):
    """The contract in numpy: blocks (O, nb, 16), scales (O, nb) uint8, a (T, K) bf16 -> C (T, O)
    float32 bit for bit. The fp32 FMA of each block is a float32 multiply (exact: a 16-bit
    integer times a power of two >= 2**-126) and a float32 add, so it rounds once as fmaf."""
    q, sa = np_quantize_rows(a.astype(F32))
    t, k = q.shape
    nb = k // 32
    w2 = TWICE[codes_of(blocks)]
    isum = np.einsum("tbk,obk->tob", q.reshape(t, nb, 32).astype(np.int64), w2)
    emax = scales.max(1).astype(np.int64)
    d = emax[:, None] - scales.astype(np.int64)
    mult = np.where(d <= 126, np.ldexp(1.0, -np.minimum(d, 126)), 0.0).astype(F32)
    acc = np.zeros(isum.shape[:2], F32)
    for b in range(nb):
        acc = (isum[:, :, b].astype(F32) * mult[:, b]).astype(F32) + acc
    with np.errstate(invalid="ignore"):
        return (acc.astype(np.float64) * sa[:, None].astype(np.float64) *
                np.ldexp(1.0, emax - 128)).astype(F32)


def dequantized(blocks, scales):
    """(O, nb, 16), (O, nb) -> float64 (O, K): w2 * 2**(e - 128), exact."""
    w2 = TWICE[codes_of(blocks)].astype(np.float64)
    return (w2 * np.ldexp(1.0, scales.astype(np.int64) - 128)[..., None]).reshape(
        blocks.shape[0], -1)


def bound(blocks, scales, a):
    """The docstring's bound per (row, column): (sa/2 (1 + 2**-14) + 2**-143) sum|w| +
    (nb + 2) 2**-24 sum_b |T_b| + sum over flushed blocks |T_b| + 2**-149, T_b = block b of
    w . (sa qa)."""
    q, sa = np_quantize_rows(a.astype(F32))
    w = dequantized(blocks, scales)
    o, k = w.shape
    nb = k // 32
    ahat = q.astype(np.float64) * sa.astype(np.float64)[:, None]
    tb = np.abs(np.einsum("tbk,obk->tob", ahat.reshape(-1, nb, 32), w.reshape(o, nb, 32)))
    flushed = (scales.max(1)[:, None].astype(np.int64) - scales) > 126
    return ((sa.astype(np.float64)[:, None] / 2 * (1 + 2.0 ** -14) + 2.0 ** -143) *
            np.abs(w).sum(1) +
            (nb + 2) * 2.0 ** -24 * tb.sum(2) + (tb * flushed).sum(2) + 2.0 ** -149)


def random_mx(rng, o, k, scale_lo=110, scale_hi=132):
    blocks = rng.integers(0, 256, (o, k // 32, 16), dtype=np.uint8)
    scales = rng.integers(scale_lo, scale_hi + 1, (o, k // 32), dtype=np.uint8)
    return blocks, scales


def extreme_scales(rng, o, nb):
    """Scales 0, 1, 127, 254 mixed, and columns whose blocks lie more than 126 apart."""
    s = rng.choice(np.array([0, 1, 127, 254], np.uint8), (o, nb))
    s[::3, 0] = 254
    s[::3, 1:] = rng.integers(0, 100, (len(s[::3]), nb - 1))
    return s.astype(np.uint8)


def activation_rows(rng, t, k):
    a = rng.standard_normal((t, k))
    a[1 % t] *= 1e-30            # near 0
    a[2 % t] *= 3e38 / np.abs(a[2 % t]).max()  # near bf16's maximum
    a[3 % t] = 0                 # amax 0
    a[4 % t] *= 1e-39            # subnormal (the 2**64 pre-scale)
    return bf16(a)


@pytest.mark.parametrize("k", [32, 96, 2880])
def test_oracle_within_documented_bound(k):
    rng = np.random.default_rng(k)
    a = activation_rows(rng, 6, k).astype(F32)
    for extreme in (False, True):
        blocks, scales = random_mx(rng, 40, k)
        if extreme:
            scales = extreme_scales(rng, 40, k // 32)
        with np.errstate(over="ignore", invalid="ignore"):
            c = w4a8_oracle(blocks, scales, a).astype(np.float64)
            exact = a.astype(np.float64) @ dequantized(blocks, scales).T
            tol = bound(blocks, scales, a)
        # Finite unless the exact result itself leaves fp32's range.
        ok = np.isfinite(c) & np.isfinite(exact)
        assert extreme or ok[[0, 1, 3, 4, 5]].all()  # row 2 (near bf16 max) may overflow
        assert ok.sum() > ok.size // 3
        assert (np.abs(c - exact)[ok] <= tol[ok]).all(), float((np.abs(c - exact) - tol)[ok].max())
    # the activation rounding the bound assumes: |a - sa qa| <= (sa / 2)(1 + 2**-14) + 2**-143
    # (sa subnormal for tiny rows: 127 times its half-step 2**-150)
    q, sa = np_quantize_rows(a)
    fin = np.isfinite(sa)
    err = np.abs(a.astype(np.float64) - q * sa.astype(np.float64)[:, None])[fin]
    assert (err <= sa[fin, None].astype(np.float64) / 2 * (1 + 2.0 ** -14) + 2.0 ** -143).all()


def probe(variant, blocks, scales, x, w13, threads=None):
    """(a, bf16(C)): the activation rows and the W4A8 GEMM's output through fused_moe."""
    h = x.shape[1]
    ids = np.zeros((x.shape[0], 1), np.int32)
    tw = np.ones((x.shape[0], 1), F32)
    p13 = moe.prepare(w13[None], variant=variant)
    eye = moe.prepare(np.eye(h, dtype=F32).astype(bf16(0).dtype)[None], variant=variant)
    w2 = moe.prepare(blocks[None], format="mxfp4", scales=scales[None], act="int8", variant=variant)
    assert w2.format == "mxfp4_a8" and w2.shape == (1, h, h)
    a = moe.fused_moe(x, p13, eye, tw, ids, activation="silu", skip_weighted=True)
    c = moe.fused_moe(x, p13, w2, tw, ids, activation="silu", skip_weighted=True, threads=threads)
    return a, c


def layer(rng, h, t, x_scale=1.0):
    x = bf16(rng.standard_normal((t, h)) * x_scale)
    w13 = bf16(rng.standard_normal((2 * h, h)) / np.sqrt(h))
    return x, w13


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("h,extreme", [(32, False), (96, True), (320, False), (320, True)])
def test_kernel_equals_oracle_bitwise(variant, h, extreme):
    rng = np.random.default_rng(h + extreme)
    t = 9
    x, w13 = layer(rng, h, t)
    # activations near 1e-30 after the silu product (normal: the bf16 eye GEMM of the probe
    # flushes subnormal inputs on BF16 hardware)
    x[2] = bf16(x[2].astype(F32) * F32(1e-15))
    x[5] = 0
    blocks, scales = random_mx(rng, h, h)
    if extreme:
        scales = extreme_scales(rng, h, h // 32)
        blocks[:, :, :] &= 0x33  # small codes: C stays finite at scale 254
    a, c = probe(variant, blocks, scales, x, w13)
    with np.errstate(over="ignore"):  # stage 3 adds C to 0.0f: a -0 result comes out +0
        want = (F32(0) + w4a8_oracle(blocks, scales, a.astype(F32))).astype(bf16(0).dtype)
    np.testing.assert_array_equal(c.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
def test_batch_and_thread_invariance(variant):
    rng = np.random.default_rng(7)
    e, topk, h, inter, t = 8, 4, 64, 96, 70 if not UNDER_QEMU else 20
    x = bf16(rng.standard_normal((t, h)))
    # scales near 2**-5 keep stage 1 within the swigluoai clamps (no amplified flips)
    b13, s13 = random_mx(rng, e * 2 * inter, h, 118, 124)
    b2, s2 = random_mx(rng, e * h, inter, 118, 124)
    w13 = moe.prepare(b13.reshape(e, 2 * inter, h // 32, 16), format="mxfp4",
                      scales=s13.reshape(e, 2 * inter, h // 32), act="int8", variant=variant)
    w2 = moe.prepare(b2.reshape(e, h, inter // 32, 16), format="mxfp4",
                     scales=s2.reshape(e, h, inter // 32), act="int8", variant=variant)
    tw, ids = moe.route(rng.standard_normal((t, e)).astype(F32), topk)
    whole = moe.fused_moe(x, w13, w2, tw, ids, activation="swigluoai", threads=1)
    for threads in (2, 3):
        again = moe.fused_moe(x, w13, w2, tw, ids, activation="swigluoai", threads=threads)
        np.testing.assert_array_equal(again.view(np.uint16), whole.view(np.uint16))
    for t0, n in ((0, 1), (1, 5), (6, 17), (t - 1, 1)):
        part = moe.fused_moe(x[t0:t0 + n], w13, w2, tw[t0:t0 + n], ids[t0:t0 + n],
                             activation="swigluoai", threads=2)
        np.testing.assert_array_equal(part.view(np.uint16), whole[t0:t0 + n].view(np.uint16))
    empty = moe.fused_moe(x[:0], w13, w2, tw[:0], ids[:0], activation="swigluoai")
    assert empty.shape == (0, h)
    # W4A8 is close to the exact MXFP4 path (not equal: int8 activations)
    e13 = moe.prepare(b13.reshape(e, 2 * inter, h // 32, 16), format="mxfp4",
                      scales=s13.reshape(e, 2 * inter, h // 32), variant=variant)
    e2 = moe.prepare(b2.reshape(e, h, inter // 32, 16), format="mxfp4",
                     scales=s2.reshape(e, h, inter // 32), variant=variant)
    exact = moe.fused_moe(x, e13, e2, tw, ids, activation="swigluoai").astype(np.float64)
    rel = np.abs(whole.astype(np.float64) - exact).max() / np.abs(exact).max()
    assert rel < 0.05, rel


def test_serialize_and_pickle_round_trip():
    rng = np.random.default_rng(8)
    blocks, scales = random_mx(rng, 64, 96)
    p = moe.prepare(blocks[None], format="mxfp4", scales=scales[None], act="int8")
    assert p.format == "mxfp4_a8" and "mxfp4_a8" in repr(p)
    q = pickle.loads(pickle.dumps(p))
    assert q.format == "mxfp4_a8" and q.variant == p.variant and q.shape == p.shape
    r = moe.from_buffer(moe.to_bytes(p))
    assert r.format == "mxfp4_a8"
    np.testing.assert_array_equal(moe.to_bytes(q), moe.to_bytes(p))
    np.testing.assert_array_equal(moe.to_bytes(r), moe.to_bytes(p))


def test_bad_arguments_name_the_argument():
    rng = np.random.default_rng(9)
    blocks, scales = random_mx(rng, 4, 64)
    assert "act" not in moe.FORMATS and moe.ACTS == ("fp32", "int8")
    with pytest.raises(ValueError, match="^act: expected 'fp32' with format='bf16'"):
        moe.prepare(bf16(np.ones((1, 4, 64))), act="int8")
    q8, s8 = moe.quantize(bf16(np.ones((1, 4, 64))), format="int8")
    with pytest.raises(ValueError, match="^act: expected 'fp32' with format='int8'"):
        moe.prepare(q8, format="int8", scales=s8, act="int8")
    with pytest.raises(ValueError, match="^act: expected 'fp32' or 'int8', got 'int4'"):
        moe.prepare(blocks[None], format="mxfp4", scales=scales[None], act="int4")
    with pytest.raises(TypeError, match="^act:"):
        moe.prepare(blocks[None], format="mxfp4", scales=scales[None], act=8)
    bad = scales.copy()
    bad[1, 1] = 255
    with pytest.raises(ValueError, match="^scales: e8m0 scale 255"):
        moe.prepare(blocks[None], format="mxfp4", scales=bad[None], act="int8")
    with pytest.raises(ValueError, match="^scales: required"):
        moe.prepare(blocks[None], format="mxfp4", act="int8")


def test_torch_op_act_int8():
    torch = pytest.importorskip("torch")
    import cpukern.torch  # noqa: F401  (registers the ops)

    rng = np.random.default_rng(10)
    e, h, inter, t = 4, 64, 32, 5
    b13, s13 = random_mx(rng, e * 2 * inter, h, 118, 124)
    b2, s2 = random_mx(rng, e * h, inter, 118, 124)
    b13, s13 = b13.reshape(e, 2 * inter, h // 32, 16), s13.reshape(e, 2 * inter, h // 32)
    b2, s2 = b2.reshape(e, h, inter // 32, 16), s2.reshape(e, h, inter // 32)
    x = bf16(rng.standard_normal((t, h)))
    tw, ids = moe.route(rng.standard_normal((t, e)).astype(F32), 2)
    want = moe.fused_moe(x, moe.prepare(b13, format="mxfp4", scales=s13, act="int8"),
                         moe.prepare(b2, format="mxfp4", scales=s2, act="int8"), tw, ids,
                         activation="swigluoai")
    T = torch.from_numpy
    xt = T(x.view(np.int16)).view(torch.bfloat16)
    args = (xt, T(b13), T(b2), T(tw), T(ids))
    got = torch.ops.cpukern.fused_moe(*args, activation="swigluoai", w13_scales=T(s13),
                                      w2_scales=T(s2), act="int8")
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), want.view(np.int16))
    exact = torch.ops.cpukern.fused_moe(*args, activation="swigluoai", w13_scales=T(s13),
                                        w2_scales=T(s2))
    assert not torch.equal(exact, got)  # the default stays exact (cached apart)
    with pytest.raises(ValueError, match="^act:"):
        bw = T(bf16(rng.standard_normal((e, 2 * inter, h))).view(np.int16)).view(torch.bfloat16)
        bw2 = T(bf16(rng.standard_normal((e, h, inter))).view(np.int16)).view(torch.bfloat16)
        torch.ops.cpukern.fused_moe(xt, bw, bw2, T(tw), T(ids), act="int8")


def test_fused_moe_module_act_int8():
    """FusedMoE.from_mxfp4(act="int8") runs W4A8: the same bits as the op, packed as
    mxfp4_a8; a state_dict of the other act is refused naming the key, never run as the wrong
    mode."""
    torch = pytest.importorskip("torch")
    from cpukern.torch import FusedMoE

    rng = np.random.default_rng(11)
    e, h, inter, t = 4, 64, 32, 3
    b13, s13 = random_mx(rng, e * 2 * inter, h, 118, 124)
    b2, s2 = random_mx(rng, e * h, inter, 118, 124)
    T = torch.from_numpy
    q = (T(b13.reshape(e, 2 * inter, h // 32, 16)), T(s13.reshape(e, 2 * inter, h // 32)),
         T(b2.reshape(e, h, inter // 32, 16)), T(s2.reshape(e, h, inter // 32)))
    x = T(bf16(rng.standard_normal((t, h))).view(np.int16)).view(torch.bfloat16)
    tw, ids = (T(a) for a in moe.route(rng.standard_normal((t, e)).astype(F32), 2))
    want = torch.ops.cpukern.fused_moe(x, q[0], q[2], tw, ids, activation="swigluoai",
                                       w13_scales=q[1], w2_scales=q[3], act="int8")
    a8 = FusedMoE.from_mxfp4(*q, topk=2, act="int8")
    exact = FusedMoE.from_mxfp4(*q, topk=2)
    assert a8.act == "int8" and exact.act == "fp32" and "act='int8'" in repr(a8)
    assert torch.equal(a8.experts(x, tw, ids), want)
    assert moe.from_buffer(a8.w13.numpy()).format == "mxfp4_a8"
    assert a8.w2.weights.format == "mxfp4_a8" and exact.w13.weights.format == "mxfp4"
    y_exact = exact.experts(x, tw, ids)
    assert not torch.equal(y_exact, want)
    # The exact module's packed weights loaded into the W4A8 module (and back): refused.
    with pytest.raises(ValueError, match=r"^w13: packed as mxfp4, this layer runs act='int8'"):
        a8.load_state_dict(exact.state_dict())
    with pytest.raises(ValueError, match=r"^w13: packed as mxfp4_a8, this layer runs act='fp32'"):
        exact.load_state_dict(a8.state_dict())
    assert torch.equal(a8.experts(x, tw, ids), want)  # nothing replaced
    assert torch.equal(exact.experts(x, tw, ids), y_exact)
    # a module made empty with act="int8" takes the W4A8 state_dict
    empty = FusedMoE(e, h, inter, topk=2, activation="swigluoai", act="int8")
    empty.load_state_dict(a8.state_dict())
    assert torch.equal(empty.experts(x, tw, ids), want)
    with pytest.raises(ValueError, match="^act:"):
        FusedMoE.from_mxfp4(*q, topk=2, act="int4")
