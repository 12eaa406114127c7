"""Deterministic random weights for the whole-model benchmarks, written twice: as the model's own
Hugging Face checkpoint (safetensors + config.json) and as GGUF files of the same weights for
llama.cpp.

Every tensor is drawn from its own generator seeded by (SEED, crc32 of its HF name), so the two
writers regenerate the same values tensor by tensor and nothing larger than one tensor (one
safetensors shard) is held in memory. Files are cached under ~/.cache/cpukern/e2e/<model>/ and
reused while the stamp file (the spec's fingerprint) matches.

Models (the published configurations; see MODELS):
  bitnet     BitNet b1.58 2B-4T: HF packed ternary (4 per uint8 along the output dimension,
             value+1, plus a per-tensor bf16 `weight_scale` that the HF BitLinear divides by);
             GGUF TQ2_0 and TQ1_0 (exact: every 256-block holds 0 and +-1/weight_scale), and
             F16 under ik_llama.cpp's `bitnet-25` architecture (the source of its IQ2_BN).
  qwen3-moe  Qwen3-30B-A3B, bf16, the first `layers` of its 48 layers (memory); GGUF BF16.
  gpt-oss    gpt-oss-20b, MXFP4 experts (blocks + e8m0 scales, gate/up rows interleaved) and
             bf16 elsewhere, all 24 layers; GGUF with the same MXFP4 codes (ggml's nibble order).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import ml_dtypes
import numpy as np

SEED = 20261202
BF16 = ml_dtypes.bfloat16
CACHE = os.path.expanduser(os.environ.get("CPUKERN_E2E_CACHE", "~/.cache/cpukern/e2e"))


def rng_for(name: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([SEED, zlib.crc32(name.encode())]))


# ---------------------------------------------------------------- logical tensors

@dataclass
class Tensor:
    """One HF checkpoint tensor: name, numpy dtype, shape, and how to make it."""
    name: str
    shape: tuple
    dtype: np.dtype
    make: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def normal_bf16(name: str, shape: tuple, std: float = 0.02, mean: float = 0.0) -> Tensor:
    def make():
        r = rng_for(name)
        return (r.standard_normal(shape, dtype=np.float32) * std + mean).astype(BF16)
    return Tensor(name, tuple(shape), np.dtype(BF16), make)


def ternary(name: str, out: int, inp: int) -> tuple[np.ndarray, float]:
    """The logical BitNet weight: ternary codes (out, in) int8 and the HF weight_scale (the
    reciprocal of the weights' magnitude, rounded to bf16 as the checkpoint stores it)."""
    r = rng_for(name)
    t = (r.integers(0, 3, size=(out, inp), dtype=np.int8) - 1).astype(np.int8)
    ws = float(np.float32(1.0 / (0.015 + 0.01 * r.random())).astype(BF16))
    return t, ws


def pack_hf_ternary(t: np.ndarray) -> np.ndarray:
    """transformers' BitNet packing: row r + i*(out/4) goes to bits 2i of packed row r."""
    out = t.shape[0]
    assert out % 4 == 0, out
    q = (t + 1).astype(np.uint8)
    rd = out // 4
    packed = np.zeros((rd,) + t.shape[1:], np.uint8)
    for i in range(4):
        packed |= q[i * rd:(i + 1) * rd] << (2 * i)
    return packed


FP4_VALUES = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def mxfp4(name: str, lead: tuple, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Random MXFP4 in the gpt-oss layout: blocks (*lead, k/32, 16) uint8 (low nibble = even
    index) and scales (*lead, k/32) uint8 e8m0 around 2**-6 (weights of ~0.02-0.1)."""
    r = rng_for(name)
    blocks = r.integers(0, 256, size=lead + (k // 32, 16), dtype=np.uint8)
    scales = r.integers(119, 124, size=lead + (k // 32,), dtype=np.uint8)
    return blocks, scales


# ---------------------------------------------------------------- safetensors writer

_ST_DTYPE = {np.dtype(BF16): "BF16", np.dtype(np.uint8): "U8", np.dtype(np.float32): "F32",
             np.dtype(np.int8): "I8"}


def write_safetensors(path: str, tensors: list[Tensor]) -> None:
    """Streams tensors into one safetensors file (header first, then each tensor as made)."""
    header, off = {}, 0
    for t in tensors:
        header[t.name] = {"dtype": _ST_DTYPE[np.dtype(t.dtype)], "shape": list(t.shape),
                          "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for t in tensors:
            a = np.ascontiguousarray(t.make())
            assert a.dtype == t.dtype and a.shape == t.shape, (t.name, a.dtype, a.shape)
            f.write(a.tobytes())
    os.replace(path + ".tmp", path)


def write_hf_checkpoint(d: str, config: dict, tensors: list[Tensor],
                        shard_bytes: int = 2 << 30) -> None:
    os.makedirs(d, exist_ok=True)
    shards, cur, size = [], [], 0
    for t in tensors:
        if cur and size + t.nbytes > shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += t.nbytes
    shards.append(cur)
    weight_map = {}
    for i, s in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(d, fname), s)
        weight_map.update({t.name: fname for t in s})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.nbytes for t in tensors)},
                   "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


# ---------------------------------------------------------------- GGUF writer

@dataclass
class GTensor:
    """One GGUF tensor: numpy-order logical shape, ggml type, and how to make its bytes
    (already quantised: uint8 rows for block types, else the float array)."""
    name: str
    shape: tuple
    qtype: object
    make: Callable[[], np.ndarray]


def write_gguf(path: str, arch: str, kv: Callable, tensors: list[GTensor]) -> None:
    import gguf
    w = gguf.GGUFWriter(path + ".tmp", arch)
    kv(w)
    for t in tensors:
        if t.qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            dt = np.float32 if t.qtype == gguf.GGMLQuantizationType.F32 else np.float16
            shape = t.shape
        else:  # block types (and BF16) are given as rows of bytes
            dt, shape = np.uint8, gguf.quant_shape_to_byte_shape(t.shape, t.qtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        w.add_tensor_info(t.name, shape, np.dtype(dt), nbytes, raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in tensors:
        w.write_tensor_data(np.ascontiguousarray(t.make()))
    w.close()
    os.replace(path + ".tmp", path)


def gguf_tensor_bytes(path: str) -> dict[str, int]:
    """Bytes of every tensor in a GGUF file, from the header's data offsets (the distance to
    the next tensor, alignment padding included). Reads types that the gguf package does not
    know (ik_llama.cpp's IQ2_BN)."""
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as f:
        def u(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(u("Q"))

        def skip_value(vtype):
            if vtype == 8:
                string()
            elif vtype == 9:
                item, n = u("I"), u("Q")
                if item in scalar:
                    f.seek(scalar[item] * n, 1)
                else:
                    for _ in range(n):
                        skip_value(item)
            else:
                f.seek(scalar[vtype], 1)

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        u("I")  # version
        n_tensors, n_kv = u("Q"), u("Q")
        align = 32
        for _ in range(n_kv):
            key, vtype = string(), u("I")
            if key == b"general.alignment" and vtype == 4:
                align = u("I")
            else:
                skip_value(vtype)
        offsets = {}
        for _ in range(n_tensors):
            name = string().decode()
            f.seek(8 * u("I") + 4, 1)  # dims, type
            offsets[name] = u("Q")
        data = -(-f.tell() // align) * align
    end = os.path.getsize(path) - data
    ordered = sorted(offsets.items(), key=lambda kv: kv[1])
    return {n: (ordered[i + 1][1] if i + 1 < len(ordered) else end) - off
            for i, (n, off) in enumerate(ordered)}


def quantized(qtype, make_f32: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    import gguf

    def make():
        a = make_f32()
        if qtype == gguf.GGMLQuantizationType.F32:
            return a.astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F16:
            return a.astype(np.float16)
        return gguf.quants.quantize(a.astype(np.float32), qtype)
    return make


def exact(qtype, make_f32: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """quantized(), checked to round-trip (the ternary types hold BitNet weights exactly up to
    the fp16 block scale, which is compared at fp16 precision)."""
    import gguf

    def make():
        a = make_f32()
        q = gguf.quants.quantize(a, qtype)
        back = gguf.quants.dequantize(q, qtype)
        if not np.allclose(back, a, rtol=1e-3, atol=0):
            raise AssertionError(f"{qtype.name} does not hold these weights exactly")
        return q
    return make


def bf16_raw(make_bf16: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """bf16 tensor bytes as ggml BF16 (same bits), viewed as uint8 rows."""
    def make():
        a = make_bf16()
        return a.view(np.uint8).reshape(a.shape[:-1] + (a.shape[-1] * 2,))
    return make


# ---------------------------------------------------------------- models

@dataclass
class ModelSpec:
    key: str
    title: str
    config: dict
    gguf_types: tuple           # names of the GGUF variants written for llama.cpp
    hf_tensors: Callable[["ModelSpec"], list[Tensor]]
    gguf_file: Callable[["ModelSpec", str, str], None]
    note: str = ""
    experts: tuple = (0, 0)     # (E, topk) for bytes-per-token accounting; (0, 0) = dense
    # ik_llama.cpp's GGUF variants: type -> the GGUF type its llama-quantize makes it from
    # (None: the file is written here, as for llama.cpp).
    ik_types: dict = field(default_factory=dict)

    def fingerprint(self) -> str:
        return hashlib.sha1(json.dumps([SEED, self.config, WRITER_VERSION],
                                       sort_keys=True).encode()).hexdigest()[:12]

    @property
    def dir(self) -> str:
        return os.path.join(CACHE, f"{self.key}-{self.fingerprint()}")

    @property
    def hf_dir(self) -> str:
        return os.path.join(self.dir, "hf")

    def gguf_path(self, qtype: str) -> str:
        return os.path.join(self.dir, f"{self.key}-{qtype}.gguf")

    def ensure(self, log: Callable[[str], None], gguf_types: Optional[tuple] = None) -> None:
        """Writes what is missing (HF checkpoint, each GGUF)."""
        if not os.path.exists(os.path.join(self.hf_dir, "config.json")):
            log(f"{self.key}: writing the HF checkpoint under {self.hf_dir}")
            write_hf_checkpoint(self.hf_dir, self.config, self.hf_tensors(self))
        for q in gguf_types if gguf_types is not None else self.gguf_types:
            p = self.gguf_path(q)
            if not os.path.exists(p):
                log(f"{self.key}: writing {p}")
                self.gguf_file(self, q, p)


WRITER_VERSION = 1


# --- BitNet b1.58 2B-4T

def bitnet_config(layers: int = 30) -> dict:
    return {
        "architectures": ["BitNetForCausalLM"], "model_type": "bitnet",
        "vocab_size": 128256, "hidden_size": 2560, "intermediate_size": 6912,
        "num_hidden_layers": layers, "num_attention_heads": 20, "num_key_value_heads": 5,
        "hidden_act": "relu2", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "tie_word_embeddings": True, "bos_token_id": 128000,
        "eos_token_id": 128001, "torch_dtype": "bfloat16", "dtype": "bfloat16",
        "quantization_config": {"quant_method": "bitnet", "linear_class": "bitlinear",
                                "quantization_mode": "offline"},
    }


def _bitnet_linears(c: dict) -> list[tuple[str, int, int]]:
    h, i = c["hidden_size"], c["intermediate_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    out = []
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        out += [(p + "self_attn.q_proj", h, h), (p + "self_attn.k_proj", kv, h),
                (p + "self_attn.v_proj", kv, h), (p + "self_attn.o_proj", h, h),
                (p + "mlp.gate_proj", i, h), (p + "mlp.up_proj", i, h),
                (p + "mlp.down_proj", h, i)]
    return out


def _bitnet_norms(c: dict) -> list[tuple[str, int]]:
    h, i = c["hidden_size"], c["intermediate_size"]
    out = []
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        out += [(p + "input_layernorm.weight", h), (p + "post_attention_layernorm.weight", h),
                (p + "self_attn.attn_sub_norm.weight", h), (p + "mlp.ffn_sub_norm.weight", i)]
    return out + [("model.norm.weight", h)]


def hf_tensors(spec: ModelSpec) -> list[Tensor]:
    """The HF checkpoint: every tensor cpukern's adapter of the family loads
    (cpukern.torch.families.checkpoint_layout: names, shapes, dtypes), made by name: packed
    ternary rows with their weight_scale (BitNet), MXFP4 blocks and scales (gpt-oss), norms
    around 1, attention sinks, the rest normal bf16."""
    from cpukern.torch.families import checkpoint_layout
    layout = checkpoint_layout(spec.config)
    ts = []
    for name, (shape, dtype) in layout.items():
        base = name.rpartition(".")[0]
        if str(dtype) == "torch.uint8" and name.endswith(".weight"):  # BitLinear: 4 rows a byte
            o, k = shape[0] * 4, shape[1]
            ts.append(Tensor(name, shape, np.dtype(np.uint8),
                             lambda base=base, o=o, k=k: pack_hf_ternary(ternary(base, o, k)[0])))
        elif name.endswith(".weight_scale"):
            o, k = layout[base + ".weight"][0]
            ts.append(Tensor(name, shape, np.dtype(BF16), lambda base=base, o=o * 4, k=k:
                             np.array([ternary(base, o, k)[1]], BF16)))
        elif name.endswith(("_blocks", "_scales")):  # gpt-oss MXFP4 experts
            proj = name.rsplit("_", 1)[0]
            (e, rows, nb, *_), which = shape, int(name.endswith("_scales"))
            ts.append(Tensor(name, shape, np.dtype(np.uint8), lambda proj=proj, e=e, rows=rows,
                             k=nb * 32, which=which: mxfp4(proj, (e, rows), k)[which]))
        elif name.endswith("norm.weight"):
            ts.append(normal_bf16(name, shape, 0.05, 1.0))
        elif name.endswith(".sinks"):
            ts.append(normal_bf16(name, shape, 0.5))
        else:
            ts.append(normal_bf16(name, shape))
    return ts


def _tensor_map(arch_name: str, n: int):
    import gguf
    return gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch_name), n)


_EXTRA_NAMES = {"self_attn.attn_sub_norm": "attn_sub_norm", "mlp.ffn_sub_norm": "ffn_sub_norm"}


def _gguf_name(tmap, hf_name: str) -> str:
    parts = hf_name.split(".")
    if len(parts) == 6 and ".".join(parts[3:5]) in _EXTRA_NAMES:  # model.layers.L.x.y.weight
        return f"blk.{parts[2]}.{_EXTRA_NAMES['.'.join(parts[3:5])]}.{parts[5]}"
    g = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    if g is None:
        raise KeyError(f"no GGUF name for {hf_name}")
    return g


def _common_kv(c: dict, head_dim: int) -> Callable:
    def kv(w):
        w.add_context_length(c["max_position_embeddings"])
        w.add_embedding_length(c["hidden_size"])
        w.add_block_count(c["num_hidden_layers"])
        w.add_head_count(c["num_attention_heads"])
        w.add_head_count_kv(c["num_key_value_heads"])
        w.add_layer_norm_rms_eps(c["rms_norm_eps"])
        w.add_rope_freq_base(c["rope_theta"])
        w.add_rope_dimension_count(head_dim)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_vocab_size(c["vocab_size"])
        # No tokenizer: llama.cpp's "none" vocab with vocab_size dummy tokens (llama-bench
        # feeds random token ids).
        w.add_tokenizer_model("none")
    return kv


def bitnet_gguf(spec: ModelSpec, qname: str, path: str) -> None:
    """TQ2_0/TQ1_0 under llama.cpp's `bitnet` architecture; F16 under ik_llama.cpp's
    `bitnet-25` (BitNet b1.58 2B-4T there: relu2 FFN as in HF; its `bitnet` is the older 3B
    graph), the input of ik_llama.cpp's llama-quantize to IQ2_BN."""
    import gguf
    c = spec.config
    tmap = _tensor_map("BITNET", c["num_hidden_layers"])
    q = getattr(gguf.GGMLQuantizationType, qname)
    F32, F16 = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16
    emb = normal_bf16("model.embed_tokens.weight", (c["vocab_size"], c["hidden_size"]))
    ts = [GTensor("token_embd.weight", emb.shape, F16,
                  quantized(F16, lambda: emb.make().astype(np.float32)))]
    for n, k in _bitnet_norms(c):
        t = normal_bf16(n, (k,), 0.05, 1.0)
        ts.append(GTensor(_gguf_name(tmap, n), (k,), F32,
                          quantized(F32, lambda t=t: t.make().astype(np.float32))))
    for name, o, k in _bitnet_linears(c):
        def w(name=name, o=o, k=k):
            t, ws = ternary(name, o, k)
            return t.astype(np.float32) * np.float32(1.0 / ws)
        ts.append(GTensor(_gguf_name(tmap, name + ".weight"), (o, k), q, exact(q, w)))
    def kv(w):
        _common_kv(c, c["hidden_size"] // c["num_attention_heads"])(w)
        w.add_feed_forward_length(c["intermediate_size"])  # llama.cpp sizes ffn_sub_norm by it
    write_gguf(path, "bitnet-25" if qname == "F16" else "bitnet", kv, ts)


def bitnet(layers: int = 30) -> ModelSpec:
    return ModelSpec("bitnet", "BitNet b1.58 2B-4T" + ("" if layers == 30 else f" ({layers} of 30 layers)"),
                     bitnet_config(layers), ("TQ2_0", "TQ1_0"), hf_tensors, bitnet_gguf,
                     note="llama.cpp's bitnet graph uses SiLU-gated FFN, HF's relu2 (same weights)",
                     ik_types={"IQ2_BN": "F16"})


# --- Qwen3-30B-A3B

def qwen3_moe_config(layers: int = 48) -> dict:
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_hidden_layers": layers, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def _qwen3_dense(c: dict) -> list[Tensor]:
    """Every non-expert tensor (HF names), in checkpoint order."""
    h, v, hd = c["hidden_size"], c["vocab_size"], c["head_dim"]
    q, kv, e = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd, c["num_experts"]
    ts = [normal_bf16("model.embed_tokens.weight", (v, h))]
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        ts += [normal_bf16(p + "input_layernorm.weight", (h,), 0.05, 1.0),
               normal_bf16(p + "post_attention_layernorm.weight", (h,), 0.05, 1.0),
               normal_bf16(p + "self_attn.q_proj.weight", (q, h)),
               normal_bf16(p + "self_attn.k_proj.weight", (kv, h)),
               normal_bf16(p + "self_attn.v_proj.weight", (kv, h)),
               normal_bf16(p + "self_attn.o_proj.weight", (h, q)),
               normal_bf16(p + "self_attn.q_norm.weight", (hd,), 0.05, 1.0),
               normal_bf16(p + "self_attn.k_norm.weight", (hd,), 0.05, 1.0),
               normal_bf16(p + "mlp.gate.weight", (e, h))]
    return ts + [normal_bf16("model.norm.weight", (h,), 0.05, 1.0),
                 normal_bf16("lm_head.weight", (v, h))]


def _qwen3_expert(c: dict, L: int, e: int, which: str) -> Tensor:
    h, i = c["hidden_size"], c["moe_intermediate_size"]
    shape = (h, i) if which == "down_proj" else (i, h)
    return normal_bf16(f"model.layers.{L}.mlp.experts.{e}.{which}.weight", shape)




def qwen3_moe_gguf(spec: ModelSpec, qname: str, path: str) -> None:
    import gguf
    c = spec.config
    tmap = _tensor_map("QWEN3MOE", c["num_hidden_layers"])
    q = getattr(gguf.GGMLQuantizationType, qname)
    F32 = gguf.GGMLQuantizationType.F32

    def as_q(make_bf16):
        if q == gguf.GGMLQuantizationType.BF16:
            return bf16_raw(make_bf16)
        return quantized(q, lambda: make_bf16().astype(np.float32))

    ts = []
    for t in _qwen3_dense(c):
        name = _gguf_name(tmap, t.name)
        if len(t.shape) == 1:
            ts.append(GTensor(name, t.shape, F32, quantized(F32, lambda t=t: t.make().astype(np.float32))))
        else:
            ts.append(GTensor(name, t.shape, q, as_q(t.make)))
    for L in range(c["num_hidden_layers"]):
        for which, g in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"),
                         ("down_proj", "ffn_down_exps")):
            ex = [_qwen3_expert(c, L, e, which) for e in range(c["num_experts"])]
            ts.append(GTensor(f"blk.{L}.{g}.weight", (len(ex),) + ex[0].shape, q,
                              as_q(lambda ex=ex: np.stack([x.make() for x in ex]))))

    def kv(w):
        _common_kv(c, c["head_dim"])(w)
        w.add_feed_forward_length(c["intermediate_size"])
        w.add_expert_count(c["num_experts"])
        w.add_expert_used_count(c["num_experts_per_tok"])
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    write_gguf(path, "qwen3moe", kv, ts)


def qwen3_moe(layers: int = 8) -> ModelSpec:
    return ModelSpec("qwen3-moe", f"Qwen3-30B-A3B ({layers} of 48 layers)", qwen3_moe_config(layers),
                     ("BF16",), hf_tensors, qwen3_moe_gguf, experts=(128, 8),
                     ik_types={"BF16": None})


# --- gpt-oss-20b

def gpt_oss_config(layers: int = 24) -> dict:
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
        "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880,
        "num_hidden_layers": layers, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4,
        "experts_per_token": 4, "sliding_window": 128,
        "layer_types": ["sliding_attention" if L % 2 == 0 else "full_attention" for L in range(layers)],
        "rope_theta": 150000.0, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 4096},
        "initial_context_length": 4096, "rms_norm_eps": 1e-5, "attention_bias": True,
        "attention_dropout": 0.0, "swiglu_limit": 7.0, "tie_word_embeddings": False,
        "hidden_act": "silu", "router_aux_loss_coef": 0.9, "output_router_logits": False,
        "eos_token_id": 200002, "pad_token_id": 199999, "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head"]},
    }


def _gpt_oss_dense(c: dict) -> list[Tensor]:
    h, v, hd, e = c["hidden_size"], c["vocab_size"], c["head_dim"], c["num_local_experts"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    ts = [normal_bf16("model.embed_tokens.weight", (v, h))]
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        ts += [normal_bf16(p + "input_layernorm.weight", (h,), 0.05, 1.0),
               normal_bf16(p + "post_attention_layernorm.weight", (h,), 0.05, 1.0)]
        for n, o, k in (("q_proj", q, h), ("k_proj", kv, h), ("v_proj", kv, h), ("o_proj", h, q)):
            ts += [normal_bf16(p + f"self_attn.{n}.weight", (o, k)),
                   normal_bf16(p + f"self_attn.{n}.bias", (o,))]
        ts += [normal_bf16(p + "self_attn.sinks", (c["num_attention_heads"],), 0.5),
               normal_bf16(p + "mlp.router.weight", (e, h)),
               normal_bf16(p + "mlp.router.bias", (e,))]
    return ts + [normal_bf16("model.norm.weight", (h,), 0.05, 1.0),
                 normal_bf16("lm_head.weight", (v, h))]


def _gpt_oss_experts(c: dict, L: int) -> dict[str, Tensor]:
    """HF MXFP4 expert tensors of layer L: gate_up rows interleaved (even gate, odd up)."""
    h, i, e = c["hidden_size"], c["intermediate_size"], c["num_local_experts"]
    p = f"model.layers.{L}.mlp.experts."
    out = {}
    for n, rows, k in (("gate_up_proj", 2 * i, h), ("down_proj", h, i)):
        def part(which, n=n, rows=rows, k=k):
            return mxfp4(p + n, (e, rows), k)[which]
        out[n + "_blocks"] = Tensor(p + n + "_blocks", (e, rows, k // 32, 16), np.dtype(np.uint8),
                                    lambda part=part: part(0))
        out[n + "_scales"] = Tensor(p + n + "_scales", (e, rows, k // 32), np.dtype(np.uint8),
                                    lambda part=part: part(1))
        out[n + "_bias"] = normal_bf16(p + n + "_bias", (e, rows))
    return out




def ggml_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """OCP/HF MXFP4 (byte b = codes 2b | 2b+1 << 4) -> ggml block_mxfp4 rows: per 32 values the
    e8m0 byte, then qs[j] = code j | code j+16 << 4."""
    codes = np.empty(blocks.shape[:-1] + (32,), np.uint8)
    codes[..., 0::2] = blocks & 15
    codes[..., 1::2] = blocks >> 4
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    out = np.concatenate([scales[..., None], qs], axis=-1)  # (..., nb, 17)
    return out.reshape(out.shape[:-2] + (-1,))


def check_mxfp4_repack() -> None:
    """ggml_mxfp4 against gguf's own MXFP4 dequantiser and the e2m1 x e8m0 definition."""
    import gguf
    b, s = mxfp4("check", (4,), 128)
    codes = np.empty(b.shape[:-1] + (32,), np.uint8)
    codes[..., 0::2], codes[..., 1::2] = b & 15, b >> 4
    ref = (FP4_VALUES[codes] * np.exp2(s.astype(np.float32) - 127)[..., None]).reshape(4, 128)
    got = gguf.quants.dequantize(ggml_mxfp4(b, s), gguf.GGMLQuantizationType.MXFP4)
    if not np.array_equal(ref, got):
        raise AssertionError("MXFP4 repack differs from gguf's dequantiser")


def gpt_oss_gguf(spec: ModelSpec, qname: str, path: str) -> None:
    import gguf
    assert qname == "MXFP4", qname
    check_mxfp4_repack()
    c = spec.config
    tmap = _tensor_map("GPT_OSS", c["num_hidden_layers"])
    G = gguf.GGMLQuantizationType
    f32 = lambda t: quantized(G.F32, lambda: t.make().astype(np.float32))  # noqa: E731
    ts = []
    for t in _gpt_oss_dense(c):
        name = t.name + (".weight" if t.name.endswith("sinks") else "")
        g = _gguf_name(tmap, name)
        if len(t.shape) == 1:
            ts.append(GTensor(g, t.shape, G.F32, f32(t)))
        else:
            ts.append(GTensor(g, t.shape, G.BF16, bf16_raw(t.make)))
    e, h, i = c["num_local_experts"], c["hidden_size"], c["intermediate_size"]
    for L in range(c["num_hidden_layers"]):
        x = _gpt_oss_experts(c, L)
        gu = lambda sl, x=x: ggml_mxfp4(x["gate_up_proj_blocks"].make()[:, sl],  # noqa: E731
                                        x["gate_up_proj_scales"].make()[:, sl])
        ts += [GTensor(f"blk.{L}.ffn_gate_exps.weight", (e, i, h), G.MXFP4, lambda gu=gu: gu(slice(0, None, 2))),
               GTensor(f"blk.{L}.ffn_up_exps.weight", (e, i, h), G.MXFP4, lambda gu=gu: gu(slice(1, None, 2))),
               GTensor(f"blk.{L}.ffn_down_exps.weight", (e, h, i), G.MXFP4,
                       lambda x=x: ggml_mxfp4(x["down_proj_blocks"].make(), x["down_proj_scales"].make())),
               GTensor(f"blk.{L}.ffn_gate_exps.bias", (e, i), G.F32,
                       lambda x=x: x["gate_up_proj_bias"].make()[:, 0::2].astype(np.float32)),
               GTensor(f"blk.{L}.ffn_up_exps.bias", (e, i), G.F32,
                       lambda x=x: x["gate_up_proj_bias"].make()[:, 1::2].astype(np.float32)),
               GTensor(f"blk.{L}.ffn_down_exps.bias", (e, h), G.F32,
                       lambda x=x: x["down_proj_bias"].make().astype(np.float32))]

    def kv(w):
        _common_kv(c, c["head_dim"])(w)
        w.add_feed_forward_length(c["intermediate_size"])
        w.add_expert_count(e)
        w.add_expert_used_count(c["num_experts_per_tok"])
        w.add_expert_feed_forward_length(i)
        w.add_sliding_window(c["sliding_window"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(c["rope_scaling"]["factor"])
        w.add_rope_scaling_orig_ctx_len(c["rope_scaling"]["original_max_position_embeddings"])
    write_gguf(path, "gpt-oss", kv, ts)


def gpt_oss(layers: int = 24) -> ModelSpec:
    return ModelSpec("gpt-oss", "gpt-oss-20b" + ("" if layers == 24 else f" ({layers} of 24 layers)"),
                     gpt_oss_config(layers), ("MXFP4",), hf_tensors, gpt_oss_gguf, experts=(32, 4))
