"""Deterministic random checkpoints in each model's own format, from the published
configurations (BitNet b1.58 2B-4T, gpt-oss-20b, Qwen3-30B-A3B); ``layers`` shrinks a model
where memory forces it. Weights are random bit patterns of the stored types (nothing from the
hub), small enough that activations stay finite."""

from __future__ import annotations

import json
import os

import numpy as np

# config.json fields of the published models (checked against what transformers accepts).
CONFIGS = {
    "bitnet": dict(
        model_type="bitnet", architectures=["BitNetForCausalLM"], vocab_size=128256,
        hidden_size=2560, intermediate_size=6912, num_hidden_layers=30, num_attention_heads=20,
        num_key_value_heads=5, hidden_act="relu2", max_position_embeddings=4096,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=128000,
        eos_token_id=128001, dtype="bfloat16",
        quantization_config={"quant_method": "bitnet", "linear_class": "bitlinear",
                             "quantization_mode": "offline", "modules_to_not_convert": ["lm_head"]}),
    "gpt_oss": dict(
        model_type="gpt_oss", architectures=["GptOssForCausalLM"], vocab_size=201088,
        hidden_size=2880, intermediate_size=2880, num_hidden_layers=24, num_attention_heads=64,
        num_key_value_heads=8, head_dim=64, num_local_experts=32, num_experts_per_tok=4,
        sliding_window=128, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
        tie_word_embeddings=False, bos_token_id=199998, eos_token_id=200002, dtype="bfloat16",
        quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head"]}),
    "qwen3_moe": dict(
        model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], vocab_size=151936,
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        bos_token_id=151643, eos_token_id=151645, dtype="bfloat16"),
}


def _bf16(rng, shape, std):
    """bf16 bit patterns (uint16) of N(0, std) values."""
    x = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).view(np.uint32)
    return ((x + 0x8000) >> 16).astype(np.uint16)  # round to nearest


def _bitnet_pack(codes):
    """transformers' BitNet layout: (out/4, in) uint8, row i*out/4 + r in bits 2i of row r."""
    q = (codes + 1).astype(np.uint8).reshape(4, codes.shape[0] // 4, codes.shape[1])
    return q[0] | (q[1] << 2) | (q[2] << 4) | (q[3] << 6)


def write(kind: str, path: str, layers: int | None = None, seed: int = 0) -> dict:
    """Writes config.json and model.safetensors under path (skipped when the same config is
    there already); returns the config."""
    import torch
    from safetensors.torch import save_file

    cfg = dict(CONFIGS[kind])
    if layers:
        cfg["num_hidden_layers"] = int(layers)
    if kind == "gpt_oss":
        cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                              for i in range(cfg["num_hidden_layers"])]
    cfg_file = os.path.join(path, "config.json")
    if os.path.exists(cfg_file) and os.path.exists(os.path.join(path, "model.safetensors")):
        with open(cfg_file) as f:
            if json.load(f) == cfg:
                return cfg
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    h, n = cfg["hidden_size"], cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q_out, kv_out = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    t: dict[str, np.ndarray] = {}
    bf = lambda shape, std=0.02: _bf16(rng, shape, std)  # noqa: E731
    ones = lambda m: np.full((m,), 0x3F80, np.uint16)  # noqa: E731 - bf16 1.0
    t["model.embed_tokens.weight"] = bf((cfg["vocab_size"], h))
    t["model.norm.weight"] = ones(h)
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = bf((cfg["vocab_size"], h))
    for i in range(n):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ones(h)
        t[p + "post_attention_layernorm.weight"] = ones(h)
        attn = {"q_proj": (q_out, h), "k_proj": (kv_out, h), "v_proj": (kv_out, h), "o_proj": (h, q_out)}
        if kind == "bitnet":
            mlp = {"gate_proj": (cfg["intermediate_size"], h), "up_proj": (cfg["intermediate_size"], h),
                   "down_proj": (h, cfg["intermediate_size"])}
            for name, shape in {**{"self_attn." + k: v for k, v in attn.items()},
                                **{"mlp." + k: v for k, v in mlp.items()}}.items():
                codes = rng.integers(-1, 2, size=shape, dtype=np.int8)
                t[p + name + ".weight"] = _bitnet_pack(codes)
                # BitLinear divides by weight_scale (bf16, as the published checkpoint stores it)
                # of 16 (bf16 0x4180): W = codes / 16
                t[p + name + ".weight_scale"] = np.array([0x4180], np.uint16)
            t[p + "self_attn.attn_sub_norm.weight"] = ones(h)
            t[p + "mlp.ffn_sub_norm.weight"] = ones(cfg["intermediate_size"])
            continue
        for name, shape in attn.items():
            t[p + "self_attn." + name + ".weight"] = bf(shape)
        if kind == "gpt_oss":
            for name, shape in attn.items():
                t[p + "self_attn." + name + ".bias"] = bf(shape[:1])
            t[p + "self_attn.sinks"] = bf((cfg["num_attention_heads"],), 1.0)
            e, inter = cfg["num_local_experts"], cfg["intermediate_size"]
            t[p + "mlp.router.weight"] = bf((e, h))
            t[p + "mlp.router.bias"] = bf((e,))
            for name, (o, k) in {"gate_up_proj": (2 * inter, h), "down_proj": (h, inter)}.items():
                t[p + f"mlp.experts.{name}_blocks"] = rng.integers(0, 256, (e, o, k // 32, 16), dtype=np.uint8)
                # e8m0 scales near 2**-7: weights of about 0.02
                t[p + f"mlp.experts.{name}_scales"] = rng.integers(118, 122, (e, o, k // 32), dtype=np.uint8)
                t[p + f"mlp.experts.{name}_bias"] = bf((e, o))
        else:
            t[p + "self_attn.q_norm.weight"] = ones(hd)
            t[p + "self_attn.k_norm.weight"] = ones(hd)
            e, inter = cfg["num_experts"], cfg["moe_intermediate_size"]
            t[p + "mlp.gate.weight"] = bf((e, h))
            for j in range(e):
                t[p + f"mlp.experts.{j}.gate_proj.weight"] = bf((inter, h))
                t[p + f"mlp.experts.{j}.up_proj.weight"] = bf((inter, h))
                t[p + f"mlp.experts.{j}.down_proj.weight"] = bf((h, inter))
    tensors = {k: (torch.from_numpy(v).view(torch.bfloat16) if v.dtype == np.uint16 else torch.from_numpy(v))
               for k, v in t.items()}
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(cfg_file, "w") as f:
        json.dump(cfg, f)
    return cfg
