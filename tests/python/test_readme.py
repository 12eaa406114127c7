"""Every ```python block of README.md runs as written against the built package (the big
shapes shrunk; files the snippets name are written here first)."""
import pathlib
import re

import numpy as np
import pytest

# The runfiles copy (tests/python/BUILD data), two levels above this file.
README = pathlib.Path(__file__).parent.parent.parent / "README.md"


def blocks():
    text = README.read_text()
    return {m.start(): m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)}


def heading_of(start):
    text = README.read_text()[:start]
    return re.findall(r"^#+ (.*)$", text, re.M)[-1]


def block(heading):
    found = [b for s, b in blocks().items() if heading_of(s).startswith(heading)]
    assert len(found) == 1, (heading, len(found))
    return found[0]


def shrink(src, sizes):
    for big, small in sizes.items():
        src = re.sub(rf"\b{big}\b", str(small), src)
    return src


def test_every_python_block_is_covered():
    assert sorted(heading_of(s) for s in blocks()) == sorted(
        ["Python API", "Importing ternary checkpoints (`cpukern.convert`)",
         "MXFP4 MoE experts (gpt-oss's format)", "PyTorch"])


def test_python_api_block():
    src = shrink(block("Python API"), {4096: 128, 14336: 1024})
    *body, last = src.rstrip("\n").split("\n\n")   # the last paragraph shows the error
    g = {}
    exec("\n\n".join(body), g)
    with pytest.raises(ValueError, match="expected K = 1024 columns"):
        exec(last, g)


def test_mxfp4_block(tmp_path, monkeypatch):
    st = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed here")
    import ml_dtypes
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    E, H, I = 4, 64, 32
    mx = lambda shape, k: (rng.integers(0, 256, shape + (k // 32, 16), dtype=np.uint8),
                           rng.integers(118, 128, shape + (k // 32,), dtype=np.uint8))
    bf = lambda *s: rng.standard_normal(s).astype(ml_dtypes.bfloat16)
    pre = "model.layers.0.mlp.experts."
    (b13, s13), (b2, s2) = mx((E, 2 * I), H), mx((E, H), I)
    st.save_file({pre + "gate_up_proj_blocks": b13, pre + "gate_up_proj_scales": s13,
                  pre + "gate_up_proj_bias": bf(E, 2 * I), pre + "down_proj_blocks": b2,
                  pre + "down_proj_scales": s2, pre + "down_proj_bias": bf(E, H)},
                 "model-00001.safetensors")
    g = {}  # the block defines every name it uses
    exec(block("MXFP4"), g)
    assert g["y"].shape == (g["T"], g["H"])
    assert sorted(g["layer"]) == ["activation", "w13", "w13_bias", "w2", "w2_bias"]


def test_convert_block(tmp_path, monkeypatch):
    gguf = pytest.importorskip("gguf", reason="the gguf package is not installed here (host-only)")
    pytest.importorskip("torch", reason="torch is not installed here")
    monkeypatch.chdir(tmp_path)
    w = gguf.GGUFWriter("model.gguf", arch="llama")
    qt = gguf.GGMLQuantizationType.TQ2_0
    q = gguf.quants.quantize(np.random.default_rng(1).standard_normal((32, 512)).astype(np.float32), qt)
    w.add_tensor("blk.0.ffn_up.weight", q, raw_shape=q.shape, raw_dtype=qt)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    g = {}
    exec(block("Importing ternary checkpoints"), g)
    assert g["fc"].in_features == 512 and g["fc"].out_features == 32


def test_pytorch_block():
    pytest.importorskip("torch", reason="torch is not installed here")
    g = {}
    exec(shrink(block("PyTorch"), {2560: 256, 6912: 512}), g)
    assert tuple(g["y"].shape) == (4, 512)
