"""MXFP4 experts (gpt-oss's format): quantize / dequantize, prepare validation, fused_moe on
MXFP4 == fused_moe on the dequantized bf16 experts bit for bit (every variant, activation, bias,
skip_weighted, mixed formats), the gpt-oss safetensors loader, and the torch op."""

import ml_dtypes
import numpy as np
import pytest

from cpukern import moe
from variants import variant_params

BF16 = ml_dtypes.bfloat16
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def np_dequantize(blocks, scales):
    """Independent numpy model: e2m1 table times 2**(s - 127), in float64, rounded to bf16."""
    lo, hi = blocks & 15, blocks >> 4
    codes = np.stack([lo, hi], -1).reshape(blocks.shape[:-1] + (32,))
    vals = E2M1[codes] * np.exp2(scales.astype(np.float64) - 127)[..., None]
    with np.errstate(over="ignore"):  # 6 * 2**127 is inf in bf16 as in float32
        return vals.reshape(scales.shape[:-1] + (-1,)).astype(np.float32).astype(BF16)


def random_mx(rng, shape, k, extremes=False):
    blocks = rng.integers(0, 256, shape + (k // 32, 16), dtype=np.uint8)
    scales = rng.integers(118, 128, shape + (k // 32,), dtype=np.uint8)
    if extremes:
        flat = scales.reshape(-1)
        flat[::5] = rng.choice(np.array([0, 1, 127, 254], np.uint8), flat[::5].shape)
    return blocks, scales


def test_dequantize_matches_numpy_model_every_code_and_scale():
    blocks = np.arange(256, dtype=np.uint8).reshape(1, 16, 16)[:, :, :]  # every byte
    blocks = np.repeat(blocks, 255, 0).reshape(255, 16, 16)
    scales = np.repeat(np.arange(255, dtype=np.uint8)[:, None], 16, 1)
    got = moe.dequantize(blocks, scales)
    want = np_dequantize(blocks, scales)
    assert got.dtype == BF16 and got.shape == (255, 512)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_quantize_round_trip_and_scale_choice():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((6, 96)) * 0.05).astype(BF16)
    blocks, scales = moe.quantize(w)
    assert blocks.shape == (6, 3, 16) and scales.shape == (6, 3)
    d = moe.dequantize(blocks, scales)
    b2, s2 = moe.quantize(d)
    np.testing.assert_array_equal(blocks, b2)
    np.testing.assert_array_equal(scales, s2)
    amax = np.abs(w.astype(np.float32)).reshape(6, 3, 32).max(-1)
    np.testing.assert_array_equal(scales, np.floor(np.log2(amax)).astype(int) - 2 + 127)
    # half the grid spacing (<= scale), or up to 2 * scale where amax / scale > 6 saturates (OCP)
    step = 2 * np.exp2(scales.astype(np.float64) - 127)
    err = np.abs(w.astype(np.float64) - d.astype(np.float64)).reshape(6, 3, 32).max(-1)
    assert (err <= step).all()


def test_prepare_validation_names_the_argument():
    rng = np.random.default_rng(2)
    blocks, scales = random_mx(rng, (2, 3), 64)
    p = moe.prepare(blocks, format="mxfp4", scales=scales)
    assert p.format == "mxfp4" and p.shape == (2, 3, 64) and "mxfp4" in repr(p)
    bad = scales.copy()
    bad[1, 2, 0] = 255
    with pytest.raises(ValueError, match=r"^scales: .*NaN.*expert 1, row 2, block 0"):
        moe.prepare(blocks, format="mxfp4", scales=bad)
    with pytest.raises(ValueError, match="^scales:"):
        moe.dequantize(blocks, bad)
    with pytest.raises(ValueError, match="^scales:"):
        moe.prepare(blocks, format="mxfp4")
    with pytest.raises(ValueError, match="^scales:"):
        moe.prepare(blocks[:, :, 0].astype(np.float32).astype(BF16), scales=scales)
    with pytest.raises(ValueError, match="^scales:"):
        moe.prepare(blocks, format="mxfp4", scales=scales[:, :, :1].copy())
    with pytest.raises(TypeError, match="^w:"):
        moe.prepare(blocks.astype(np.int8), format="mxfp4", scales=scales)
    with pytest.raises(ValueError, match="^format:"):
        moe.prepare(blocks, format="int4", scales=scales)
    with pytest.raises(ValueError, match="^w:"):
        moe.quantize(np.zeros((2, 48), BF16))


def run(x, w13, w2, tw, ids, act, b13, b2, skip, variant, threads=1):
    return moe.fused_moe(x, w13, w2, tw, ids, activation=act, w13_bias=b13, w2_bias=b2,
                         skip_weighted=skip, variant=variant, threads=threads)


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("act,bias,topk,t", [("silu", False, 2, 5), ("gelu", True, 2, 1),
                                             ("gelu_tanh", False, 1, 9), ("swigluoai", True, 4, 17),
                                             ("swigluoai", True, 1, 3)])
def test_fused_moe_mxfp4_equals_bf16_of_dequantized(variant, act, bias, topk, t):
    rng = np.random.default_rng(hash((act, bias, topk, t)) % 2**32)
    e, h, inter = 8, 96, 64
    q13 = random_mx(rng, (e, 2 * inter), h, extremes=False)
    q2 = random_mx(rng, (e, h), inter, extremes=False)
    x = rng.standard_normal((t, h)).astype(BF16)
    ids = np.stack([rng.permutation(e)[:topk] for _ in range(t)]).astype(np.int32)
    tw = rng.uniform(0.1, 1, (t, topk)).astype(np.float32)
    b13 = rng.standard_normal((e, 2 * inter)).astype(BF16) if bias else None
    b2 = rng.standard_normal((e, h)).astype(BF16) if bias else None
    skip = topk == 1 and act == "swigluoai"
    m13 = moe.prepare(q13[0], format="mxfp4", scales=q13[1], variant=variant)
    m2 = moe.prepare(q2[0], format="mxfp4", scales=q2[1], variant=variant)
    d13 = moe.prepare(moe.dequantize(*q13), variant=variant)
    d2 = moe.prepare(moe.dequantize(*q2), variant=variant)
    want = run(x, d13, d2, tw, ids, act, b13, b2, skip, variant).view(np.uint16)
    for w13, w2, th in ((m13, m2, 1), (m13, d2, 2), (d13, m2, 2), (m13, m2, 3)):
        got = run(x, w13, w2, tw, ids, act, b13, b2, skip, variant, th).view(np.uint16)
        np.testing.assert_array_equal(got, want, err_msg=f"{w13.format}/{w2.format} threads={th}")


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
def test_fused_moe_mxfp4_e8m0_extremes_bitwise(variant):
    rng = np.random.default_rng(3)
    e, h, inter, t = 4, 64, 32, 6
    q13 = random_mx(rng, (e, 2 * inter), h, extremes=True)
    q2 = random_mx(rng, (e, h), inter, extremes=True)
    x = (rng.standard_normal((t, h)) * 1e-3).astype(BF16)
    ids = np.stack([rng.permutation(e)[:2] for _ in range(t)]).astype(np.int32)
    tw = np.full((t, 2), 0.5, np.float32)
    want = run(x, moe.prepare(moe.dequantize(*q13), variant=variant), moe.prepare(moe.dequantize(*q2), variant=variant),
               tw, ids, "silu", None, None, False, variant).view(np.uint16)
    got = run(x, moe.prepare(q13[0], format="mxfp4", scales=q13[1], variant=variant),
              moe.prepare(q2[0], format="mxfp4", scales=q2[1], variant=variant),
              tw, ids, "silu", None, None, False, variant).view(np.uint16)
    # Extreme scales give inf * 0 = NaN; which NaN (sign, payload) differs by architecture and
    # instruction (x86's default NaN is negative, AArch64's positive): compare NaNs as NaNs.
    np.testing.assert_array_equal(_canonical_nans(got), _canonical_nans(want))


def _canonical_nans(bits):
    nan = (bits & 0x7F80) == 0x7F80
    nan &= (bits & 0x007F) != 0
    return np.where(nan, np.uint16(0x7FC0), bits)


def test_load_gpt_oss_from_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(4)
    e, h, inter, layer = 4, 64, 32, 3
    pre = f"model.layers.{layer}.mlp.experts."
    g13, g2 = random_mx(rng, (e, 2 * inter), h), random_mx(rng, (e, h), inter)
    b13 = rng.standard_normal((e, 2 * inter)).astype(BF16)
    b2 = rng.standard_normal((e, h)).astype(BF16)
    tensors = {pre + "gate_up_proj_blocks": g13[0], pre + "gate_up_proj_scales": g13[1],
               pre + "gate_up_proj_bias": b13, pre + "down_proj_blocks": g2[0],
               pre + "down_proj_scales": g2[1], pre + "down_proj_bias": b2,
               "model.layers.0.input_layernorm.weight": np.ones(h, BF16)}
    path = tmp_path / "model.safetensors"
    st.save_file(tensors, str(path))
    layer_w = moe.load_gpt_oss(path, layer)
    assert layer_w["w13"].format == "mxfp4" and layer_w["w13"].shape == (e, 2 * inter, h)
    assert layer_w["w2"].shape == (e, h, inter) and layer_w["activation"] == "swigluoai"
    assert layer_w["w13"].nbytes * 32 == e * 2 * inter * h * 17  # 4.25 bits per weight
    np.testing.assert_array_equal(layer_w["w13_bias"].view(np.uint16), b13.view(np.uint16))
    x = rng.standard_normal((3, h)).astype(BF16)
    ids = np.array([[0, 1], [2, 3], [1, 2]], np.int32)
    tw = np.full((3, 2), 0.5, np.float32)
    got = moe.fused_moe(x, layer_w["w13"], layer_w["w2"], tw, ids, activation="swigluoai",
                        w13_bias=layer_w["w13_bias"], w2_bias=layer_w["w2_bias"])
    want = moe.fused_moe(x, moe.prepare(moe.dequantize(*g13)), moe.prepare(moe.dequantize(*g2)),
                         tw, ids, activation="swigluoai", w13_bias=b13, w2_bias=b2)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    with pytest.raises(KeyError, match="layers.7"):
        moe.load_gpt_oss(path, 7)


def test_torch_op_and_module_take_mxfp4():
    torch = pytest.importorskip("torch")
    import cpukern.torch  # noqa: F401  registers the ops
    from cpukern.torch import FusedMoE

    rng = np.random.default_rng(5)
    e, h, inter, t = 4, 64, 32, 5
    g13, g2 = random_mx(rng, (e, 2 * inter), h), random_mx(rng, (e, h), inter)
    x = torch.from_numpy(rng.standard_normal((t, h)).astype(np.float32)).to(torch.bfloat16)
    ids = torch.tensor([[0, 1], [2, 3], [1, 2], [3, 0], [0, 2]], dtype=torch.int32)
    tw = torch.full((t, 2), 0.5)
    T = torch.from_numpy
    got = torch.ops.cpukern.fused_moe(x, T(g13[0]), T(g2[0]), tw, ids, "silu", None, None, False,
                                      "", T(g13[1]), T(g2[1]))
    d13 = moe.dequantize(T(g13[0]), T(g13[1]))
    d2 = moe.dequantize(T(g2[0]), T(g2[1]))
    want = torch.ops.cpukern.fused_moe(x, d13, d2, tw, ids, "silu")
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    mod = FusedMoE.from_mxfp4(T(g13[0]), T(g13[1]), T(g2[0]), T(g2[1]), topk=2, activation="silu")
    assert torch.equal(mod.experts(x, tw, ids).view(torch.int16), want.view(torch.int16))
    # packed as MXFP4, never expanded to bf16: the module holds the packed experts only
    assert mod.w13.weights.format == "mxfp4" and mod.w2.weights.format == "mxfp4"
    assert sorted(mod.state_dict()) == ["w13", "w2"]
