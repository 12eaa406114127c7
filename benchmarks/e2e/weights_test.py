"""The e2e weight writers on tiny configurations: the HF BitNet packing against transformers'
own unpack_weights, HF and GGUF files holding the same values (BitNet TQ2_0/TQ1_0 and the F16
source of ik_llama.cpp's IQ2_BN, Qwen3-MoE BF16, gpt-oss MXFP4 with its gate/up split), the
header-only tensor sizes against gguf's reader, deterministic regeneration. Host only."""

import importlib.util
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weights as W  # noqa: E402


def read_safetensors(d: str) -> dict:
    out = {}
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    for f in sorted(set(idx["weight_map"].values())):
        raw = open(os.path.join(d, f), "rb").read()
        n = int.from_bytes(raw[:8], "little")
        hdr = json.loads(raw[8:8 + n])
        dt = {"BF16": W.BF16, "U8": np.uint8, "F32": np.float32}
        for k, v in hdr.items():
            a, b = v["data_offsets"]
            out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dt[v["dtype"]]).reshape(v["shape"])
    return out


def read_gguf(path: str) -> dict:
    import gguf
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            out[t.name] = np.asarray(t.data, np.float32).reshape(shape)
        else:
            out[t.name] = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape)
    return out


def check_tensor_bytes(path: str) -> None:
    """weights.gguf_tensor_bytes (the header's offsets) against gguf's own reader: the same
    bytes up to the alignment padding after each tensor."""
    import gguf
    got = W.gguf_tensor_bytes(path)
    r = gguf.GGUFReader(path)
    assert sorted(got) == sorted(t.name for t in r.tensors), path
    align = r.alignment
    for t in r.tensors:
        assert int(t.n_bytes) <= got[t.name] < int(t.n_bytes) + align, (path, t.name, got[t.name])


def tiny(spec: W.ModelSpec, **cfg) -> W.ModelSpec:
    spec.config.update(cfg)
    return spec


def check_bitnet(tmp: str) -> None:
    import torch
    from transformers.integrations.bitnet import unpack_weights
    t, _ = W.ternary("x", 12, 5)
    got = unpack_weights(torch.from_numpy(W.pack_hf_ternary(t)), dtype=torch.float32).numpy()
    assert np.array_equal(got, t), "HF BitNet packing"
    s = tiny(W.bitnet(1), hidden_size=512, intermediate_size=768, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=300)
    s.ensure(print, gguf_types=("TQ2_0", "TQ1_0", "F16"))  # F16: ik_llama.cpp's source
    hf = read_safetensors(s.hf_dir)
    for q in ("TQ2_0", "TQ1_0", "F16"):
        check_tensor_bytes(s.gguf_path(q))
        g = read_gguf(s.gguf_path(q))
        for hn, gn in (("model.layers.0.mlp.down_proj", "blk.0.ffn_down.weight"),
                       ("model.layers.0.self_attn.k_proj", "blk.0.attn_k.weight")):
            codes = unpack_weights(torch.from_numpy(hf[hn + ".weight"].copy()), dtype=torch.float32).numpy()
            w = codes / hf[hn + ".weight_scale"].astype(np.float32)[0]
            assert g[gn].shape == w.shape, (q, gn, g[gn].shape, w.shape)
            np.testing.assert_allclose(g[gn], w, rtol=1e-3, err_msg=f"{q} {gn}")
        np.testing.assert_array_equal(g["token_embd.weight"], hf["model.embed_tokens.weight"].astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(g["blk.0.attn_sub_norm.weight"], hf["model.layers.0.self_attn.attn_sub_norm.weight"].astype(np.float32))


def check_qwen3(tmp: str) -> None:
    s = tiny(W.qwen3_moe(1), hidden_size=256, moe_intermediate_size=64, intermediate_size=128,
             num_experts=4, num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=32, vocab_size=300)
    s.ensure(print)
    check_tensor_bytes(s.gguf_path("BF16"))
    hf, g = read_safetensors(s.hf_dir), read_gguf(s.gguf_path("BF16"))
    for e in range(4):
        np.testing.assert_array_equal(g["blk.0.ffn_down_exps.weight"][e],
                                      hf[f"model.layers.0.mlp.experts.{e}.down_proj.weight"].astype(np.float32))
        np.testing.assert_array_equal(g["blk.0.ffn_gate_exps.weight"][e],
                                      hf[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"].astype(np.float32))
    np.testing.assert_array_equal(g["output.weight"], hf["lm_head.weight"].astype(np.float32))


def check_gpt_oss(tmp: str) -> None:
    s = tiny(W.gpt_oss(1), hidden_size=128, intermediate_size=64, num_local_experts=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=300,
             pad_token_id=299)  # a pad id inside the vocabulary, as transformers requires
    s.ensure(print)
    check_tensor_bytes(s.gguf_path("MXFP4"))
    hf, g = read_safetensors(s.hf_dir), read_gguf(s.gguf_path("MXFP4"))
    p = "model.layers.0.mlp.experts."

    def deq(b, sc):
        codes = np.empty(b.shape[:-1] + (32,), np.uint8)
        codes[..., 0::2], codes[..., 1::2] = b & 15, b >> 4
        v = W.FP4_VALUES[codes] * np.exp2(sc.astype(np.float32) - 127)[..., None]
        return v.reshape(v.shape[:-2] + (-1,))
    gu = deq(hf[p + "gate_up_proj_blocks"], hf[p + "gate_up_proj_scales"])
    np.testing.assert_array_equal(g["blk.0.ffn_gate_exps.weight"], gu[:, 0::2])
    np.testing.assert_array_equal(g["blk.0.ffn_up_exps.weight"], gu[:, 1::2])
    np.testing.assert_array_equal(g["blk.0.ffn_down_exps.weight"],
                                  deq(hf[p + "down_proj_blocks"], hf[p + "down_proj_scales"]))
    np.testing.assert_array_equal(g["blk.0.ffn_up_exps.bias"], hf[p + "gate_up_proj_bias"][:, 1::2].astype(np.float32))
    np.testing.assert_array_equal(g["blk.0.attn_sinks.weight"], hf["model.layers.0.self_attn.sinks"].astype(np.float32))


def main() -> None:
    missing = [m for m in ("gguf", "torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"SKIP: weights_test needs {missing} (requirements-host.txt)")
        return
    try:  # the HF writer takes its tensor names from cpukern.torch.families
        import cpukern  # noqa: F401
    except ImportError as e:  # a cross leg: the package is built for the other architecture
        print(f"SKIP: weights_test runs on the host; the built cpukern does not load here ({e})")
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        W.CACHE = tmp
        a = W.ternary("same", 8, 8)
        assert np.array_equal(a[0], W.ternary("same", 8, 8)[0]), "deterministic"
        for f in (check_bitnet, check_qwen3, check_gpt_oss):
            f(tmp)
            print(f"{f.__name__}: ok")
    print("3 passed, 0 failed")


if __name__ == "__main__":
    main()
