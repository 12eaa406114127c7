"""Fused MoE: routing, packing and every variant against an independent float64 model."""

import math

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import moe
from variants import UNDER_QEMU, variant_params

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(7)


def bf16(a):
    return np.asarray(a, np.float32).astype(BF16)


def activation(name, h, inter):
    if name == "swigluoai":
        gate, up = h[0::2], h[1::2]
        gate = np.minimum(gate, 7.0)
        up = np.clip(up, -7.0, 7.0)
        return (up + 1) * gate / (1 + np.exp(-1.702 * gate))
    gate, up = h[:inter], h[inter:]
    if name == "silu":
        return up * gate / (1 + np.exp(-gate))
    if name == "gelu":
        return up * 0.5 * gate * (1 + np.vectorize(math.erf)(gate / math.sqrt(2)))
    if name == "gelu_tanh":
        return up * 0.5 * gate * (1 + np.tanh(0.7978845608 * (gate + 0.044715 * gate ** 3)))
    raise AssertionError(name)


def model(x, w13, w2, tw, ids, act, b13=None, b2=None, skip=False):
    """float64 semantics of vLLM's cpu_fused_moe; the activation output is rounded to bf16."""
    t_count, h = x.shape
    inter = w2.shape[2]
    xf = x.astype(np.float64)
    out = np.zeros((t_count, h))
    for t in range(t_count):
        for j in range(ids.shape[1]):
            e = ids[t, j]
            g = w13[e].astype(np.float64) @ xf[t]
            if b13 is not None:
                g += b13[e].astype(np.float64)
            a = activation(act, g, inter).astype(np.float32).astype(BF16).astype(np.float64)
            o = w2[e].astype(np.float64) @ a
            if b2 is not None:
                o += b2[e].astype(np.float64)
            out[t] += (1.0 if skip else tw[t, j]) * o
    return out


def make_layer(e, h, inter, t, topk, bias, rng=RNG):
    x = bf16(rng.standard_normal((t, h)))
    w13 = bf16(rng.standard_normal((e, 2 * inter, h)) / math.sqrt(h))
    w2 = bf16(rng.standard_normal((e, h, inter)) / math.sqrt(inter))
    logits = rng.standard_normal((t, e)).astype(np.float32)
    b13 = bf16(rng.standard_normal((e, 2 * inter)) * 0.1) if bias else None
    b2 = bf16(rng.standard_normal((e, h)) * 0.1) if bias else None
    return x, w13, w2, logits, b13, b2


def check_close(got, want):
    got = got.astype(np.float64)
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=1.6e-2)


def test_route_softmax_topk_ties_to_lower_id():
    logits = np.array([[1.0, 3.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    w, ids = moe.route(logits, 2, renormalize=False)
    np.testing.assert_array_equal(ids, [[1, 2], [0, 1]])
    p = np.exp(logits[0] - 3) / np.exp(logits[0] - 3).sum()
    np.testing.assert_allclose(w[0], [p[1], p[2]], rtol=1e-6)
    w, ids = moe.route(logits, 2)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-6)
    assert w.dtype == np.float32 and ids.dtype == np.int32
    with pytest.raises(ValueError, match="topk"):
        moe.route(logits, 5)


CASES = [  # (E, topk, H, I, T, activation, bias)
    (1, 1, 1, 1, 1, "silu", False),
    (8, 2, 31, 176, 7, "gelu", True),
    (8, 4, 32, 32, 7, "gelu_tanh", False),
    (8, 4, 128, 31, 16, "swigluoai", True),
    (4, 4, 40, 24, 5, "silu", True),
]
if not UNDER_QEMU:
    CASES += [(32, 8, 128, 176, 64, "swigluoai", True), (8, 2, 176, 128, 64, "gelu_tanh", False)]


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("e,topk,h,inter,t,act,bias", CASES)
def test_fused_moe_matches_float64_model(variant, e, topk, h, inter, t, act, bias):
    x, w13, w2, logits, b13, b2 = make_layer(e, h, inter, t, topk, bias)
    tw, ids = moe.route(logits, topk)
    p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
    assert p13.variant == variant and p13.shape == (e, 2 * inter, h) and p2.shape == (e, h, inter)
    out = moe.fused_moe(x, p13, p2, tw, ids, activation=act, w13_bias=b13, w2_bias=b2)
    assert out.dtype == BF16 and out.shape == (t, h)
    check_close(out, model(x, w13, w2, tw, ids, act, b13, b2))
    for threads in (1, 3):
        again = moe.fused_moe(x, p13, p2, tw, ids, activation=act, w13_bias=b13, w2_bias=b2,
                              threads=threads)
        np.testing.assert_array_equal(again.view(np.uint16), out.view(np.uint16))


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
def test_fused_moe_near_underflow_within_the_gemm_bound(variant):
    """Each fused_moe GEMM meets cpukern.linear's bound, underflow term included: w2's products
    a_k w2_k lie below 2**-126 (vdpbf16ps flushes them to zero), the exact output is a normal
    float of about 7e-38."""
    h = inter = 32
    x = np.ones((1, h), BF16)
    w13 = np.full((1, 2 * inter, h), 2.0**-5, BF16)  # gate = up = 1 exactly
    w2 = np.full((1, h, inter), 2.0**-128, BF16)
    tw, ids = moe.route(np.zeros((1, 1), np.float32), 1)
    out = moe.fused_moe(x, moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant), tw, ids)
    a = float(np.float32(1 / (1 + math.exp(-1))).astype(BF16))  # round_bf16(silu(1) * 1)
    ref = inter * a * 2.0**-128
    bound = 2.0**-6 * ref + (inter + 1) * 2.0**-23 * ref + (2 * inter + 2 + inter * (a + 2.0**-128)) * 2.0**-126
    assert np.all(np.abs(out.astype(np.float64) - ref) <= bound), (out, ref)


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
def test_repeated_ids_empty_experts_skip_weighted_and_empty_batch(variant):
    e, h, inter = 6, 33, 20
    x, w13, w2, _, _, _ = make_layer(e, h, inter, 4, 2, False)
    p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
    ids = np.array([[1, 1], [1, 1], [4, 1], [1, 4]], np.int32)  # experts 0, 2, 3, 5 unused
    tw = np.full((4, 2), 0.5, np.float32)
    out = moe.fused_moe(x, p13, p2, tw, ids)
    check_close(out, model(x, w13, w2, tw, ids, "silu"))
    ids1 = ids[:, :1].copy()
    tw1 = np.full((4, 1), 0.25, np.float32)
    out = moe.fused_moe(x, p13, p2, tw1, ids1, skip_weighted=True)
    check_close(out, model(x, w13, w2, tw1, ids1, "silu", skip=True))
    empty = moe.fused_moe(x[:0], p13, p2, tw[:0], ids[:0])
    assert empty.shape == (0, h)


def test_fused_moe_bad_input_names_the_argument():
    e, h, inter = 4, 16, 8
    x, w13, w2, logits, _, _ = make_layer(e, h, inter, 3, 2, False)
    tw, ids = moe.route(logits, 2)
    p13, p2 = moe.prepare(w13), moe.prepare(w2)
    with pytest.raises(TypeError, match="x: expected a C-contiguous bfloat16"):
        moe.fused_moe(x.astype(np.float32), p13, p2, tw, ids)
    with pytest.raises(ValueError, match="activation"):
        moe.fused_moe(x, p13, p2, tw, ids, activation="relu")
    bad = ids.copy()
    bad[1, 1] = e
    with pytest.raises(ValueError, match="topk_ids"):
        moe.fused_moe(x, p13, p2, tw, bad)
    with pytest.raises(ValueError, match="skip_weighted"):
        moe.fused_moe(x, p13, p2, tw, ids, skip_weighted=True)
    with pytest.raises(ValueError, match="w2|w13"):
        moe.fused_moe(x, p13, p13, tw, ids)
    with pytest.raises(TypeError, match="w13: expected PackedWeights"):
        moe.fused_moe(x, w13, p2, tw, ids)
    with pytest.raises(ValueError, match="x"):
        moe.fused_moe(x[:, :5].copy(), p13, p2, tw, ids)


# ---- batch invariance ---------------------------------------------------------------------

def _mx_layer(rng, e, h, inter):
    """MXFP4 experts (blocks, scales) of w13 and w2."""
    def mx(shape, k):
        return (rng.integers(0, 256, shape + (k // 32, 16), dtype=np.uint8),
                rng.integers(120, 126, shape + (k // 32,), dtype=np.uint8))
    return mx((e, 2 * inter), h), mx((e, h), inter)


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("e,topk,act", [(1, 1, "swigluoai"), (4, 2, "silu")])
def test_fused_moe_is_batch_invariant(variant, fmt, e, topk, act):
    """A token's output is the same bits whatever tokens share its call: the whole batch, each
    token alone, random chunks, any thread count (H and I past one K block of 256)."""
    rng = np.random.default_rng(11 + e)
    h, inter, t = 288, 320, 20 if UNDER_QEMU else 70
    x, w13, w2, logits, b13, b2 = make_layer(e, h, inter, t, topk, True, rng)
    tw, ids = moe.route(logits, topk)
    if fmt == "mxfp4":
        (q13, s13), (q2, s2) = _mx_layer(rng, e, h, inter)
        p13 = moe.prepare(q13, format="mxfp4", scales=s13, variant=variant)
        p2 = moe.prepare(q2, format="mxfp4", scales=s2, variant=variant)
    else:
        p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)

    def call(t0, t1, threads):
        return moe.fused_moe(x[t0:t1], p13, p2, tw[t0:t1], ids[t0:t1], activation=act,
                             w13_bias=b13, w2_bias=b2, threads=threads).view(np.uint16)

    # A variant with AMX tiles runs them for calls of more than tiles_min_rows rows per expert
    # (from the call's shapes only): those calls give the whole batch's bits, the others
    # each token alone's.
    min_rows = next(v for v in cpukern.kernels("fused_moe") if v["name"] == variant).get("tiles_min_rows")

    def tiles(n):
        return bool(min_rows) and n * topk > min_rows * e

    alone = np.concatenate([call(q, q + 1, 1) for q in range(t)])
    whole = call(0, t, 1) if tiles(t) else alone

    def want(t0, t1):
        return (whole if tiles(t1 - t0) else alone)[t0:t1]

    for n in (1, 4, 5, 8, 9, 45, 64, 70):
        for threads in (1, 2, 3):
            if n <= t:
                np.testing.assert_array_equal(call(0, n, threads), want(0, n),
                                              err_msg=f"batch of {n}, threads={threads}")
    for _ in range(2):
        t0 = 0
        while t0 < t:
            t1 = min(t, t0 + int(rng.integers(1, 20)))
            threads = int(rng.integers(1, 4))
            np.testing.assert_array_equal(call(t0, t1, threads), want(t0, t1),
                                          err_msg=f"chunk [{t0}, {t1}), threads={threads}")
            t0 = t1


# ---- K blocking against the float64 model --------------------------------------------------

@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("h,inter,act", [(320, 288, "swigluoai"), (288, 544, "silu")])
def test_fused_moe_k_blocks_match_float64_model(variant, h, inter, act):
    """H and I past the kernels' K block (256 k): experts with several row blocks (12+ rows)
    sum K in blocks continued through C; a block that overwrote instead of adding fails here."""
    rng = np.random.default_rng(h + inter)
    e, topk, t = 2, 2, 13
    x, w13, w2, logits, b13, b2 = make_layer(e, h, inter, t, topk, True, rng)
    tw, ids = moe.route(logits, topk)  # topk == e: every expert gets all 13 tokens
    p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
    out = moe.fused_moe(x, p13, p2, tw, ids, activation=act, w13_bias=b13, w2_bias=b2)
    check_close(out, model(x, w13, w2, tw, ids, act, b13, b2))


# ---- every branch of every activation ------------------------------------------------------

# Gate and up values (exact in bf16) that reach every branch of activations.h and of the
# float64 model: exp's clamps (|x| > 87.3 / 88.3, through sigmoid, erf and tanh), the sign
# branches of erf and tanh, 0, and swigluoai's clamps (gate > 7; up > 7 and up < -7) with
# values on both sides of each limit.
GATES = [-100.0, -90.0, -60.0, -20.0, -8.0, -7.5, -3.0, -1.0, -0.5, -0.01, 0.0, 0.01, 0.5, 1.0,
         3.0, 6.5, 6.9375, 7.0, 7.0625, 7.5, 8.0, 20.0, 60.0, 90.0, 100.0]
UPS = [-10.0, -7.5, -7.0625, -7.0, -6.9375, -1.0, 0.0, 0.5, 6.9375, 7.0, 7.0625, 7.5, 10.0]


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_tanh", "swigluoai"])
@pytest.mark.parametrize("bias", [False, True])
def test_every_activation_branch_matches_float64_model(variant, act, bias):
    """Token t is one-hot at k = t, so its gate/up pre-activations are exactly the w13 entries
    of column t (plus the bias); w2 is the identity, so out[t, j] = bf16(act(gate, up)) of
    pair j alone, checked against the float64 model value by value."""
    g, u = np.meshgrid(GATES, UPS, indexing="ij")
    pairs = np.stack([g.ravel(), u.ravel()], 1)  # every (gate, up) combination
    inter = h = 64
    t = -(-len(pairs) // inter)
    pairs = np.concatenate([pairs, np.zeros((t * inter - len(pairs), 2))])
    gate, up = pairs[:, 0].reshape(t, inter), pairs[:, 1].reshape(t, inter)
    b13 = None
    if bias:  # a bias that moves a few values across the clamps (applied before them)
        rng = np.random.default_rng(3)
        b13 = bf16(rng.choice([-0.5, 0.0, 0.25, 0.5], (1, 2 * inter)))
        bg = b13[0, 0::2] if act == "swigluoai" else b13[0, :inter]
        bu = b13[0, 1::2] if act == "swigluoai" else b13[0, inter:]
        gate, up = gate - bg.astype(np.float64), up - bu.astype(np.float64)
    w13 = np.zeros((1, 2 * inter, h), np.float64)
    gr = np.arange(inter) * 2 if act == "swigluoai" else np.arange(inter)
    ur = gr + 1 if act == "swigluoai" else np.arange(inter) + inter
    w13[0, gr, :t] = gate.T
    w13[0, ur, :t] = up.T
    w13 = bf16(w13)
    x = bf16(np.eye(t, h))
    w2 = bf16(np.eye(h, inter)[None])
    ids = np.zeros((t, 1), np.int32)
    tw = np.ones((t, 1), np.float32)
    out = moe.fused_moe(x, moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant), tw, ids,
                        activation=act, w13_bias=b13, skip_weighted=True).astype(np.float64)
    want = model(x, w13, w2, tw, ids, act, b13, None, skip=True)
    # Rounding to bf16 may differ by one ulp (2**-8 relative); erf and tanh are approximated
    # to ~2e-7 absolute, which 1 + erf / 1 + tanh scale by |0.5 gate up|.
    g_eff = w13[0, gr, :t].T.astype(np.float64) + (0 if b13 is None else
                                                   b13[0, gr].astype(np.float64))
    u_eff = w13[0, ur, :t].T.astype(np.float64) + (0 if b13 is None else
                                                   b13[0, ur].astype(np.float64))
    tol = 2.0 ** -7 * np.abs(want) + 4e-7 * np.abs(g_eff * u_eff) + 1e-30
    bad = np.argwhere(~(np.abs(out - want) <= tol))
    assert not len(bad), "; ".join(
        f"gate={g_eff[i, j]} up={u_eff[i, j]}: {out[i, j]} vs float64 {want[i, j]}"
        for i, j in bad[:5])
