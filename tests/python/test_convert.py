"""cpukern.convert: BitNet (transformers layout) and GGUF TQ1_0/TQ2_0 files, written here in
each source's own layout, converted and run, against the source's own dequantisation."""

import subprocess
import sys

import numpy as np
import pytest

from cpukern import convert, io, ternary
from variants import UNDER_QEMU, variant_params

pytest.importorskip("safetensors", reason="the safetensors package is not installed here: cpukern.convert tests skipped")

RNG = np.random.default_rng(23)


def bitnet_pack(w):
    """transformers' BitLinear packing, written from its description: (out, in) {-1,0,1} ->
    uint8 (out/4, in), weight row i*out/4 + r in bits 2i of byte row r, as w + 1."""
    rows = w.shape[0] // 4
    codes = (w + 1).astype(np.uint8).reshape(4, rows, w.shape[1])
    return np.bitwise_or.reduce([codes[i] << (2 * i) for i in range(4)]).astype(np.uint8)


def gemv_bound(dense_abs, x, scale_abs=1.0):
    """|y - y_exact| <= 1e-5 * sum |W| |x| (the fp32 bound of ternary.gemv) + tiny."""
    return 1e-5 * (dense_abs @ np.abs(x)) * scale_abs + 1e-30


# --- BitNet ---------------------------------------------------------------------------------

def write_bitnet(path, out=32, inp=70, scale=np.float32(2.75)):
    from safetensors.numpy import save_file

    w = RNG.integers(-1, 2, size=(out, inp)).astype(np.int8)
    tensors = {"model.layers.0.mlp.down_proj.weight": bitnet_pack(w),
               "model.layers.0.mlp.down_proj.weight_scale": np.array([scale], np.float32),
               "model.norm.weight": RNG.standard_normal(inp).astype(np.float16)}
    save_file(tensors, str(path))
    return w, tensors


def test_bitnet_unpack_inverts_the_layout():
    w = RNG.integers(-1, 2, size=(12, 9)).astype(np.int8)
    np.testing.assert_array_equal(convert.bitnet_unpack(bitnet_pack(w)), w)
    bad = bitnet_pack(w)
    bad[1, 4] |= 0b11 << 4  # code 3 for weight [2*3 + 1, 4]
    with pytest.raises(ValueError, match=r"code 3 for weight \[7, 4\]"):
        convert.bitnet_unpack(bad)


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
def test_bitnet_file_converts_and_runs(tmp_path, variant):
    w, src = write_bitnet(tmp_path / "hf.safetensors")
    report = convert.convert(tmp_path / "hf.safetensors", tmp_path / "ck.safetensors")
    assert "ternary" in report["model.layers.0.mlp.down_proj.weight"]
    ck = ternary.load(tmp_path / "ck.safetensors")
    name = "model.layers.0.mlp.down_proj.weight"
    np.testing.assert_array_equal(ternary.unpack(ck[name], ck.k(name)), w)
    scale = ck[convert.scale_name(name)]
    np.testing.assert_array_equal(scale, np.full(32, np.float32(1) / np.float32(2.75)))
    np.testing.assert_array_equal(ck["model.norm.weight"], src["model.norm.weight"])
    assert ck.group_size(name) is None
    # Against the source's own dequantisation: y = (x @ w.T) / weight_scale.
    x = RNG.standard_normal((3, 70)).astype(np.float32)
    y = ternary.gemv(ternary.prepare(ck[name], ck.k(name), scale, variant=variant), x)
    exact = (x.astype(np.float64) @ w.T.astype(np.float64)) / 2.75
    bound = gemv_bound(np.abs(w).astype(np.float64), x.T).T / 2.75 + 1e-7 * np.abs(exact)
    assert np.all(np.abs(y - exact) <= bound)


def test_bitnet_bad_scale_is_refused(tmp_path):
    from safetensors.numpy import save_file

    w = RNG.integers(-1, 2, size=(8, 16)).astype(np.int8)
    save_file({"a.weight": bitnet_pack(w), "a.weight_scale": np.array([0.0], np.float32)},
              str(tmp_path / "hf.safetensors"))
    with pytest.raises(ValueError, match="a.weight_scale"):
        convert.convert(tmp_path / "hf.safetensors", tmp_path / "ck.safetensors")


# --- GGUF -----------------------------------------------------------------------------------

def write_gguf(path, tensors):
    """tensors: name -> (float32 weights, GGML type name)."""
    gguf = pytest.importorskip("gguf", reason="the gguf package is not installed here (host-only test dependency)")
    writer = gguf.GGUFWriter(str(path), arch="llama")
    raw = {}
    for name, (a, kind) in tensors.items():
        qt = gguf.GGMLQuantizationType[kind]
        if kind in ("F32", "F16"):
            writer.add_tensor(name, a.astype(np.float32 if kind == "F32" else np.float16))
        else:
            q = gguf.quants.quantize(a, qt)
            raw[name] = (q, qt)
            writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {n: gguf.quants.dequantize(q, qt) for n, (q, qt) in raw.items()}


@pytest.mark.parametrize("kind", ["TQ1_0", "TQ2_0"])
def test_tq_unpack_matches_gguf_dequantize(kind):
    gguf = pytest.importorskip("gguf", reason="the gguf package is not installed here (host-only test dependency)")
    a = RNG.standard_normal((7, 768)).astype(np.float32)
    a[2, :256] = 0  # an all-zero block: d = 0
    q = gguf.quants.quantize(a, gguf.GGMLQuantizationType[kind])
    w, d = convert.tq_unpack(q, kind, 768)
    assert w.dtype == np.int8 and d.shape == (7, 3) and d[2, 0] == 0
    np.testing.assert_array_equal(np.repeat(d, 256, axis=1) * w,
                                  gguf.quants.dequantize(q, gguf.GGMLQuantizationType[kind]))


def test_tq2_invalid_code_is_refused():
    gguf = pytest.importorskip("gguf", reason="the gguf package is not installed here (host-only test dependency)")
    q = gguf.quants.quantize(RNG.standard_normal((2, 256)).astype(np.float32), gguf.GGMLQuantizationType.TQ2_0)
    q[1, 5] |= 0b11  # weight 5 of row 1 gets code 3
    with pytest.raises(ValueError, match=r"code 3 is not ternary at weight \[1, 5\]"):
        convert.tq_unpack(q, "TQ2_0", 256)
    with pytest.raises(ValueError, match="K = 300"):
        convert.tq_unpack(q, "TQ2_0", 300)


def test_gguf_file_converts_exactly(tmp_path):
    a1 = RNG.standard_normal((24, 512)).astype(np.float32)
    a2 = RNG.standard_normal((9, 256)).astype(np.float32)
    norm = RNG.standard_normal(512).astype(np.float32)
    deq = write_gguf(tmp_path / "m.gguf", {"blk.0.ffn_up.weight": (a1, "TQ2_0"),
                                           "blk.0.ffn_down.weight": (a2, "TQ1_0"),
                                           "output_norm.weight": (norm, "F32")})
    report = convert.convert(tmp_path / "m.gguf", tmp_path / "ck.safetensors")
    assert "TQ2_0" in report["blk.0.ffn_up.weight"] and "TQ1_0" in report["blk.0.ffn_down.weight"]
    ck = ternary.load(tmp_path / "ck.safetensors")
    for name, ref in deq.items():
        k = ck.k(name)
        assert ck.group_size(name) == 256
        scale = ck[convert.scale_name(name)]
        assert scale.dtype == np.float32 and scale.shape == (ref.shape[0], k // 256)
        dense = np.repeat(scale, 256, axis=1) * ternary.unpack(ck[name], k)
        np.testing.assert_array_equal(dense, ref)  # the fp16 scales are kept exactly
    np.testing.assert_array_equal(ck["output_norm.weight"], norm)


def test_gguf_other_quant_types_are_named(tmp_path):
    a = RNG.standard_normal((4, 256)).astype(np.float32)
    write_gguf(tmp_path / "m.gguf", {"tok.weight": (a, "Q8_0"), "n.weight": (a[0], "F16")})
    with pytest.raises(ValueError, match="'tok.weight': GGUF type Q8_0"):
        convert.convert(tmp_path / "m.gguf", tmp_path / "ck.safetensors")
    report = convert.convert(tmp_path / "m.gguf", tmp_path / "ck.safetensors", skip_unsupported=True)
    assert report["tok.weight"] == "skipped (Q8_0)"
    assert set(ternary.load(tmp_path / "ck.safetensors")) == {"n.weight"}


@pytest.mark.skipif(UNDER_QEMU, reason="under QEMU: qemu-user cannot start guest subprocesses")
def test_command_line(tmp_path):
    write_bitnet(tmp_path / "hf.safetensors")
    r = subprocess.run([sys.executable, "-m", "cpukern.convert", str(tmp_path / "hf.safetensors"),
                        str(tmp_path / "out.safetensors")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "model.layers.0.mlp.down_proj.weight: ternary" in r.stdout and "wrote" in r.stdout
    assert io.load(tmp_path / "out.safetensors").k("model.layers.0.mlp.down_proj.weight") == 70


# --- group scales through the kernels -------------------------------------------------------

@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
@pytest.mark.parametrize("act", ["fp32", "int8"])
def test_gguf_tensors_run_within_the_bound_of_their_dequantisation(tmp_path, variant, act):
    a = RNG.standard_normal((40, 768)).astype(np.float32)
    deq = write_gguf(tmp_path / "m.gguf", {"blk.0.attn_q.weight": (a, "TQ2_0")})["blk.0.attn_q.weight"]
    convert.convert(tmp_path / "m.gguf", tmp_path / "ck.safetensors")
    ck = ternary.load(tmp_path / "ck.safetensors")
    name = "blk.0.attn_q.weight"
    w = ternary.prepare(ck[name], ck.k(name), ck[convert.scale_name(name)], group_size=256, variant=variant)
    assert w.group_size == 256
    x = RNG.standard_normal((3, 768)).astype(np.float32)
    y = ternary.gemv(w, x, act=act)
    exact = x.astype(np.float64) @ deq.T.astype(np.float64)
    bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(deq).T.astype(np.float64))
    if act == "int8":  # + max|x| / 254 * sum |W| per output (the int8 bound with group scales)
        bound += np.abs(x).max(axis=1, keepdims=True) / 254 * np.abs(deq).sum(axis=1)
    assert np.all(np.abs(y - exact) <= bound + 1e-30)


def test_group_scale_arguments_are_checked():
    packed = ternary.pack(np.ones((4, 64), np.int8))
    s = np.ones((4, 2), np.float32)
    with pytest.raises(ValueError, match="group_size: expected a multiple of 16"):
        ternary.prepare(packed, 64, s, group_size=40)
    with pytest.raises(ValueError, match="group_size: expected an integer in"):
        ternary.prepare(packed, 64, s, group_size=8)
    with pytest.raises(ValueError, match=r"scale: expected shape \(4, 2\)"):
        ternary.prepare(packed, 64, np.ones((4, 3), np.float32), group_size=32)
    with pytest.raises(ValueError, match="scale: expected float32 group scales"):
        ternary.prepare(packed, 64, None, group_size=32)
    w = ternary.prepare(packed, 64, np.array([[1, 2], [1, 2], [1, 2], [1, 2]], np.float32), group_size=32)
    np.testing.assert_array_equal(ternary.gemv(w, np.ones(64, np.float32)), np.full(4, 96, np.float32))
    with pytest.raises(ValueError, match="scale: expected none: the weights carry their group scales"):
        ternary.gemv(w, np.ones(64, np.float32), scale=2.0)


def test_ternary_linear_from_a_converted_gguf(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed here: TernaryLinear test skipped")
    import cpukern.torch as ct

    a = RNG.standard_normal((24, 512)).astype(np.float32)
    deq = write_gguf(tmp_path / "m.gguf", {"blk.0.ffn_up.weight": (a, "TQ1_0")})["blk.0.ffn_up.weight"]
    convert.convert(tmp_path / "m.gguf", tmp_path / "ck.safetensors")
    mod = ct.TernaryLinear.from_checkpoint(ternary.load(tmp_path / "ck.safetensors"), "blk.0.ffn_up.weight")
    assert mod.group_size == 256 and mod.weight.weights.group_size == 256
    np.testing.assert_array_equal(mod.dequantized().weight.detach().numpy(), deq)
    x = torch.randn(5, 512)
    exact = x.double() @ torch.from_numpy(deq).double().T
    bound = 1e-5 * (x.abs().double() @ torch.from_numpy(np.abs(deq)).double().T)
    assert bool(((mod(x).double() - exact).abs() <= bound + 1e-30).all())
    y16 = mod.bfloat16()(x.bfloat16())
    assert y16.dtype == torch.bfloat16
