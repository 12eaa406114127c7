"""cpukern under Hugging Face transformers models: ``patch(model)`` swaps, in place, every
module cpukern runs; ``from_pretrained(path)`` loads a local checkpoint straight into cpukern
layouts. Needs ``transformers`` (the ``hf`` extra; tested with 5.22.2).

What is replaced, and by what (everything else stays in torch: attention, norms, RoPE,
routing, embeddings):

* BitNet (``BitNetForCausalLM`` with transformers' BitNet quantization): ``BitLinear``
  (packed uint8 weights, ``y = (W q) / (s * weight_scale)``) and ``AutoBitLinear`` (unpacked
  ternary weights times ``weight_scale``, or ``quantization_mode="online"``: per-tensor absmean
  of float weights) -> ``TernaryLinear``. Activations: ``act="int8_bitnet"`` by default, the
  model's own per-token rule (s = 127 / max(max|x|, 1e-5), q = clamp(round(x s), -128, 127)),
  computed in float32 with exact int32 sums; ``act="int8"`` (cpukern's rule) or ``"fp32"``
  (exact, no activation quantisation) on request. A layer's optional ``rms_norm`` stays in
  torch in front of it. A BitNet model without a quantization config runs float
  ``nn.Linear`` layers in transformers: those are left alone (ternarising them would change
  the model).
* gpt-oss (``GptOssForCausalLM``): ``GptOssExperts`` -> ``FusedMoE`` with ``swigluoai``
  (alpha 1.702, limit 7, both biases, gate/up rows interleaved as the model stores them) on
  MXFP4 experts (``format="mxfp4"``, the default: bf16 experts are quantised with
  ``cpukern.moe.quantize``, exact for weights that came from MXFP4), the same MXFP4 experts
  with int8 activations (``format="mxfp4_a8"``, W4A8: faster, not exact; the bound is in
  ``cpukern.moe``'s docstring) or bf16 (``format="bf16"``). The router stays (softmax over the top-k logits).
* Qwen3-MoE (``Qwen3MoeForCausalLM``): ``Qwen3MoeExperts`` -> ``FusedMoE`` on bf16 experts
  (``format="bf16"``, default) or int8 W8A8 (``format="int8"``), rows [gate; up], the model's
  activation (silu). The router stays (softmax, top-k, ``norm_topk_prob``).
* Every other ``nn.Linear`` with bf16 weights (attention projections, the LM head, the
  layers of a bf16 BitNet without a quantization config) -> ``cpukern.torch.Linear``
  (``dense="bf16"``, the default: bf16 in, fp32 accumulation, bf16 out, torch's own
  arithmetic up to the summation order), or W8A8 with ``dense="int8"``
  (faster, not exact), or left in torch with ``dense=None``. Linear layers with float32
  weights stay in torch (cpukern's dense kernels compute in bf16). A tied LM head keeps the
  embedding's weights in torch and holds its own packed copy.

Numerics against stock transformers (tests/python/test_hf_models.py): float32 BitNet models
compute the same int8 codes and the same integer sums; the rescale differs in the last bits.
In bf16 models transformers computes s and x * s in bf16 and rounds the integer sums to bf16;
cpukern keeps float32 / int32 there. The MoE kernels take bf16 activations, add biases and
sum experts in float32 and round the activation output and the result to bf16 once (stock
transformers rounds after every bf16 op).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import mmap
import os
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor, nn

import cpukern
from cpukern import io as _io
from cpukern import moe as _moe
from cpukern import ternary as _ternary
from cpukern._arrays import str_arg
from cpukern.convert import bitnet_unpack
from cpukern.torch.modules import FusedMoE, Linear, TernaryLinear, _PreparedBuffer

__all__ = ["patch", "from_pretrained", "PatchReport", "MoEExperts"]

SUPPORTED = ("bitnet", "gpt_oss", "qwen3_moe")
_MOE_ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
                    "gelu_new": "gelu_tanh"}
_GPT_OSS_SWIGLU = (1.702, 7.0)  # cpukern's swigluoai constants (alpha, limit)


@dataclasses.dataclass
class PatchReport:
    """What ``patch`` / ``from_pretrained`` did: ``replaced`` and ``left`` are lists of
    (module name, its class, what replaced it / why it stayed)."""

    replaced: list = dataclasses.field(default_factory=list)
    left: list = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"replaced {len(self.replaced)} modules:"]
        lines += [f"  {n} ({c}) -> {w}" for n, c, w in self.replaced]
        by_reason: dict = {}
        for n, c, why in self.left:
            by_reason.setdefault((c, why), []).append(n)
        lines.append(f"left alone {len(self.left)} modules:")
        for (c, why), names in by_reason.items():
            shown = ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
            lines.append(f"  {c}: {why}: {shown}")
        return "\n".join(lines)


class MoEExperts(nn.Module):
    """Stands in for a transformers experts module (``GptOssExperts``, ``Qwen3MoeExperts``):
    called as they are, ``(hidden_states (T, H), top_k_index (T, k), top_k_weights (T, k))``,
    and runs ``moe`` (a FusedMoE) with that routing; returns hidden_states' dtype."""

    def __init__(self, moe: FusedMoE) -> None:
        super().__init__()
        self.moe = moe

    def forward(self, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
        return self.moe.experts(hidden_states, top_k_weights, top_k_index.to(torch.int32))


# --- arguments ----------------------------------------------------------------------------

def _kind(config: Any) -> str:
    return str(getattr(config, "model_type", "") or "")


DENSE = ("bf16", "int8")


def _options(kind: str, isa: Any, act: Any, format: Any, threads: Any,
             dense: Any = "bf16") -> tuple:
    if isa is not None and not isinstance(isa, str):
        raise TypeError(f"isa: expected None or a variant name (str), got {type(isa).__name__}")
    if dense is not None:
        str_arg(dense, "dense", DENSE)
    if act is not None:
        str_arg(act, "act", _ternary.ACTS)
    if format is not None:
        allowed = {"gpt_oss": ("mxfp4", "mxfp4_a8", "bf16"), "qwen3_moe": ("bf16", "int8")}.get(kind, ())
        if format not in allowed:
            raise ValueError(f"format: expected None or one of {allowed} for a {kind or 'this'} "
                             f"model, got {format!r}")
    if threads is not None:
        cpukern.set_num_threads(threads)
    return isa or "", act or "int8_bitnet", format


# --- building cpukern modules from the model's tensors -----------------------------------

def _ternary_linear(codes: np.ndarray, scale: float, bias: Optional[Tensor], act: str,
                    isa: str, norm: Optional[nn.Module] = None) -> nn.Module:
    """TernaryLinear (prepared) over int8 {-1, 0, +1} codes (out, in) times a per-tensor
    float32 scale; behind the layer's optional RMSNorm (kept in torch)."""
    out_f, in_f = codes.shape
    tl = TernaryLinear(in_f, out_f, bias is not None, act=act, isa=isa)
    with torch.no_grad():
        tl.packed.copy_(torch.from_numpy(_ternary.pack(np.ascontiguousarray(codes)).view(np.int32)))
        tl.scale.fill_(float(scale))
        if bias is not None:
            tl.bias.copy_(bias.detach().to(torch.float32))
    tl.prepare()
    return tl if norm is None else nn.Sequential(norm, tl)


def _inverse_scale(ws: Tensor, name: str) -> float:
    """1 / weight_scale in float32 (BitLinear divides by it), checked finite and nonzero."""
    w = ws.detach().to(torch.float32).reshape(-1)
    if w.numel() != 1 or not torch.isfinite(w).all() or float(w[0]) == 0.0:
        raise ValueError(f"{name}: expected one finite nonzero weight_scale, got {w[:4].tolist()}")
    inv = np.float32(1.0) / np.float32(float(w[0]))
    if not np.isfinite(inv):
        raise ValueError(f"{name}: weight_scale {float(w[0])} has no finite reciprocal in float32")
    return float(inv)


def _bitlinear_codes(packed: np.ndarray, out_features: int, ws: Tensor, name: str) -> tuple:
    """transformers' BitLinear: packed uint8 (out/4, in), y = (W q) / (s * weight_scale)."""
    return bitnet_unpack(packed)[:out_features], _inverse_scale(ws, name)


def _autobitlinear_codes(w: Tensor, ws: Optional[Tensor], name: str) -> tuple:
    """AutoBitLinear: online (ws None: transformers' WeightQuant, per-tensor absmean of the
    float weights) or offline (ternary weights stored unpacked, output times weight_scale)."""
    w = w.detach().to(torch.float32)
    if ws is None:
        inv = 1.0 / w.abs().mean().clamp(min=1e-5)  # WeightQuant's scale, float32
        return ((w * inv).round().clamp(-1, 1).to(torch.int8).numpy(),
                float(np.float32(1.0) / np.float32(float(inv))))
    if not bool(((w == -1) | (w == 0) | (w == 1)).all()):
        raise ValueError(f"{name}: offline AutoBitLinear weights are not all in {{-1, 0, +1}}")
    return w.to(torch.int8).numpy(), float(ws.detach().to(torch.float32).reshape(-1)[0])


def _from_bitlinear(mod: nn.Module, name: str, act: str, isa: str) -> nn.Module:
    codes, scale = _bitlinear_codes(mod.weight.detach().numpy(), mod.out_features,
                                    mod.weight_scale, name)
    return _ternary_linear(codes, scale, mod.bias, act, isa, mod.rms_norm)


def _from_autobitlinear(mod: nn.Module, name: str, act: str, isa: str) -> nn.Module:
    codes, scale = _autobitlinear_codes(mod.weight, None if mod.online_quant else mod.weight_scale,
                                        name)
    return _ternary_linear(codes, scale, mod.bias, act, isa, mod.rms_norm)


def _fused_moe(w13: Tensor, w2: Tensor, b13: Optional[Tensor], b2: Optional[Tensor], *,
               fmt: str, topk: int, activation: str, isa: str) -> FusedMoE:
    """FusedMoE from bf16 experts w13 (E, 2I, H), w2 (E, H, I) in format fmt."""
    kw = dict(topk=topk, activation=activation, isa=isa)
    if fmt == "bf16":
        mod = FusedMoE.from_experts(w13, w2, b13, b2, **kw)
    else:
        qfmt = "int8" if fmt == "int8" else "mxfp4"
        q13, s13 = _moe.quantize(w13.to(torch.bfloat16).contiguous(), format=qfmt)
        q2, s2 = _moe.quantize(w2.to(torch.bfloat16).contiguous(), format=qfmt)
        if qfmt == "int8":
            mod = FusedMoE.from_int8(q13, s13, q2, s2, b13, b2, **kw)
        else:
            mod = FusedMoE.from_mxfp4(q13, s13, q2, s2, b13, b2, **kw,
                                      act="int8" if fmt == "mxfp4_a8" else "float")
    return mod.prepare()


def _gpt_oss_format(fmt: Optional[str], h: int, i: int) -> tuple[str, str]:
    """(format, note): MXFP4 needs H and I multiples of 32 (blocks of 32 along each input)."""
    fmt = fmt or "mxfp4"
    if fmt in ("mxfp4", "mxfp4_a8") and (h % 32 or i % 32):
        return "bf16", f" (bf16: MXFP4 needs hidden and intermediate multiples of 32, got {h}, {i})"
    return fmt, ""


def _swiglu_reason(mod: nn.Module) -> Optional[str]:
    got = (float(getattr(mod, "alpha", 1.702)), float(getattr(mod, "limit", 7.0)))
    if not np.allclose(got, _GPT_OSS_SWIGLU, rtol=0, atol=1e-6):
        return (f"swigluoai with alpha={got[0]}, limit={got[1]}: cpukern's kernel fixes "
                f"alpha=1.702, limit=7")
    return None


def _from_gpt_oss_experts(mod: nn.Module, topk: int, fmt: Optional[str], isa: str) -> tuple:
    w13 = mod.gate_up_proj.detach().transpose(1, 2)  # (E, H, 2I) -> (E, 2I, H), interleaved
    w2 = mod.down_proj.detach().transpose(1, 2)  # (E, I, H) -> (E, H, I)
    fmt, note = _gpt_oss_format(fmt, int(w13.shape[2]), int(w2.shape[2]))
    moe = _fused_moe(w13, w2, mod.gate_up_proj_bias.detach(), mod.down_proj_bias.detach(),
                     fmt=fmt, topk=topk, activation="swigluoai", isa=isa)
    return MoEExperts(moe), f"FusedMoE {fmt} swigluoai{note}"


def _moe_activation(config: Any) -> tuple[Optional[str], str]:
    act = str(getattr(config, "hidden_act", "silu"))
    return _MOE_ACTIVATIONS.get(act), act


def _from_qwen3_experts(mod: nn.Module, topk: int, activation: str, fmt: Optional[str],
                        isa: str) -> tuple:
    fmt = fmt or "bf16"
    moe = _fused_moe(mod.gate_up_proj.detach(), mod.down_proj.detach(), None, None, fmt=fmt,
                     topk=topk, activation=activation, isa=isa)
    return MoEExperts(moe), f"FusedMoE {fmt} {activation}"


def _hf_classes() -> dict:
    """transformers' module classes cpukern replaces (those this transformers has)."""
    out = {}
    with contextlib.suppress(ImportError):
        from transformers.integrations.bitnet import AutoBitLinear, BitLinear
        out["BitLinear"], out["AutoBitLinear"] = BitLinear, AutoBitLinear
    with contextlib.suppress(ImportError):
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
        out["GptOssExperts"] = GptOssExperts
    with contextlib.suppress(ImportError):
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts
        out["Qwen3MoeExperts"] = Qwen3MoeExperts
    return out


def _linear_reason(kind: str, model: nn.Module) -> str:
    if kind == "bitnet" and getattr(model.config, "quantization_config", None) is None:
        return ("float weights: this BitNet model has no quantization_config, so transformers "
                "runs it in float; ternarising would change its arithmetic (load a packed "
                "checkpoint with from_pretrained)")
    return "float nn.Linear: cpukern's dense kernels compute in bf16"


def _dense_isa(isa: str) -> str:
    """Dense layers run fused_moe's variants: a forced name of another op's (a ternary_gemv
    variant, for BitNet) leaves them on automatic selection."""
    return isa if isa in [v["name"] for v in cpukern.kernels("fused_moe")] else ""


def _from_dense(mod: nn.Linear, kind: str, model: nn.Module, dense: Optional[str],
                isa: str) -> tuple:
    """(cpukern Linear or None, what replaced it / why it stays)."""
    if dense is None:
        return None, "dense=None: dense layers stay in torch"
    if mod.weight.dtype != torch.bfloat16:
        if kind == "bitnet" and getattr(model.config, "quantization_config", None) is None:
            return None, _linear_reason(kind, model)
        return None, (f"{mod.weight.dtype} weights: cpukern's dense kernels compute in bf16, "
                      f"this layer in {mod.weight.dtype}")
    new = Linear.from_linear(mod, format=dense, isa=_dense_isa(isa)).prepare()
    return new, f"Linear {dense}"


def patch(model: nn.Module, *, isa: Optional[str] = None, act: Optional[str] = None,
          format: Optional[str] = None, dense: Optional[str] = "bf16",
          threads: Optional[int] = None, keep_plain_weights: bool = False) -> PatchReport:
    """Replaces, in place, every module of a transformers model that cpukern runs (see the
    module docstring) and returns a PatchReport (also kept as ``model.cpukern_report``).

    isa: force a variant (cpukern.kernels(op)) for every replaced module; None: automatic
    (dense layers run fused_moe's variants: a ternary_gemv name leaves them automatic).
    act: ternary layers' activation rule, "int8_bitnet" (default, the model's), "int8" or
    "fp32". format: expert weights, gpt-oss "mxfp4" (default, exact), "mxfp4_a8" (W4A8) or
    "bf16"; Qwen3-MoE "bf16" (default) or "int8". dense: the other bf16 nn.Linear layers,
    "bf16" (default), "int8" (W8A8) or None (left in torch). threads:
    cpukern.set_num_threads(threads) (process-wide). keep_plain_weights: keep the plain
    weights next to the prepared kernel layouts (twice the memory; needed to prepare again
    for another isa, or for dequantized()); by default they are dropped
    (``drop_plain_weights()``)."""
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model: expected a transformers PreTrainedModel, got {type(model).__name__}")
    kind = _kind(model.config)
    isa, act, format = _options(kind, isa, act, format, threads, dense)
    classes = _hf_classes()
    report = PatchReport()
    topk = int(getattr(model.config, "num_experts_per_tok", 0) or 0)
    done: list[str] = []
    # Names, not modules: a replaced module's weights are freed as the loop goes on (with
    # keep_plain_weights=False one layer at a time holds two copies, not the whole model).
    for name in [n for n, _ in model.named_modules()]:
        if any(name.startswith(d + ".") for d in done):
            continue  # inside a replaced module
        mod = model.get_submodule(name)
        cls = type(mod).__name__
        new, what = None, None
        with torch.no_grad():
            if cls in ("BitLinear", "AutoBitLinear") and isinstance(mod, classes.get(cls, ())):
                if cls == "BitLinear" and mod.out_features % 4:
                    report.left.append((name, cls, "out_features not a multiple of 4"))
                    continue
                conv = _from_bitlinear if cls == "BitLinear" else _from_autobitlinear
                new = conv(mod, name, act, isa)
                what = f"TernaryLinear act={act}"
                if mod.rms_norm is not None:
                    what += " (rms_norm kept in front)"
            elif cls == "GptOssExperts" and isinstance(mod, classes.get(cls, ())):
                why = _swiglu_reason(mod)
                if why:
                    report.left.append((name, cls, why))
                    continue
                new, what = _from_gpt_oss_experts(mod, topk, format, isa)
            elif cls == "Qwen3MoeExperts" and isinstance(mod, classes.get(cls, ())):
                activation, hf_act = _moe_activation(model.config)
                if activation is None:
                    report.left.append((name, cls, f"activation {hf_act!r} has no cpukern kernel"))
                    continue
                new, what = _from_qwen3_experts(mod, topk, activation, format, isa)
            elif isinstance(mod, nn.Linear):
                new, what = _from_dense(mod, kind, model, dense, isa)
                if new is None:
                    report.left.append((name, cls, what))
                    continue
        if new is None:
            continue
        _place(model, name, new, keep_plain_weights)
        del mod, new
        done.append(name)
        report.replaced.append((name, cls, what))
    model.cpukern_report = report
    return report


def _drop_plain_weights(model: nn.Module) -> None:
    for mod in model.modules():
        if isinstance(mod, _PreparedBuffer) and not mod.plain_weights_dropped:
            mod.drop_plain_weights()


# --- from_pretrained ---------------------------------------------------------------------

@contextlib.contextmanager
def _params_on_meta():
    """Module parameters are created on the meta device (no memory); buffers stay real (RoPE's
    inverse frequencies are computed in __init__ and are not in checkpoints)."""
    register = nn.Module.register_parameter

    def on_meta(self, name, param):
        register(self, name, param)
        if param is not None:
            p = self._parameters[name]
            self._parameters[name] = nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def _read_checkpoint(path: str) -> dict[str, np.ndarray]:
    """Every tensor of the directory's *.safetensors files (mapped, through cpukern's one
    validated safetensors reader)."""
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise ValueError(f"path: no *.safetensors file in {path!r}")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        t, _ = _io.read_safetensors(f)
        dup = set(t) & set(tensors)
        if dup:
            raise ValueError(f"path: tensor {sorted(dup)[0]!r} is in two files of {path!r}")
        tensors.update(t)
    return tensors


def _torch(a: np.ndarray, dtype: Optional[torch.dtype] = None) -> Tensor:
    """A torch copy of a (mapped, read-only) checkpoint array; bf16 arrays stay bf16."""
    if a.dtype.name == "bfloat16":
        t = torch.from_numpy(np.array(a).view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.array(a))
    return t if dtype is None else t.to(dtype)


def _take(tensors: dict, used: set, key: str, dtype: Optional[torch.dtype] = None) -> Tensor:
    if key not in tensors:
        raise ValueError(f"path: the checkpoint has no tensor {key!r}")
    used.add(key)
    t = _torch(tensors[key], dtype)
    _unmap_pages(tensors[key])
    return t


def _unmap_pages(a: np.ndarray) -> None:
    """Drops the pages of a mapped checkpoint array from this process once it is copied (a
    later touch reads them again from the file), so a load holds one copy of the weights in
    memory, not the copy plus the mapped file."""
    base: Any = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if not isinstance(base, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED") or a.nbytes == 0:
        return
    start = a.ctypes.data - np.frombuffer(base, np.uint8).ctypes.data
    lo = start // mmap.PAGESIZE * mmap.PAGESIZE
    base.madvise(mmap.MADV_DONTNEED, lo, min(len(base), start + a.nbytes) - lo)


def _place(model: nn.Module, name: str, mod: nn.Module, keep: bool) -> None:
    """Puts a prepared cpukern module in place (its plain weights dropped unless `keep`: one
    layer's plain copy at a time is alive while a checkpoint loads)."""
    if not keep:
        _drop_plain_weights(mod)
    model.set_submodule(name, mod)


def _load_bitnet(model: nn.Module, tensors: dict, used: set, act: str, isa: str,
                 report: PatchReport, keep: bool) -> None:
    """Every linear layer the BitNet quantization config quantises: packed (BitLinear) or
    unpacked ternary / float weights (AutoBitLinear offline / online)."""
    qc = getattr(model.config, "quantization_config", None)
    qc = qc.to_dict() if hasattr(qc, "to_dict") else (qc or {})
    if not qc:
        return  # a float BitNet: transformers runs its nn.Linear layers in float
    auto = qc.get("linear_class", "bitlinear") == "autobitlinear"
    online = auto and qc.get("quantization_mode", "offline") == "online"
    skip = set(qc.get("modules_to_not_convert") or ["lm_head"])
    for name, mod in list(model.named_modules()):
        key = name + ".weight"
        if not isinstance(mod, nn.Linear) or key not in tensors or name in skip:
            continue
        packed = tensors[key].dtype == np.uint8
        if not online and name + ".weight_scale" not in tensors:
            raise ValueError(f"path: BitNet weight {key!r} has no {name}.weight_scale")
        ws = None if online else _take(tensors, used, name + ".weight_scale")
        if packed and auto:  # AutoBitLinear unpacks packed checkpoints (BitNetDeserialize)
            used.add(key)
            codes = torch.from_numpy(bitnet_unpack(tensors[key])[: mod.out_features])
            codes, scale = _autobitlinear_codes(codes, ws, key)
        elif packed:
            used.add(key)
            codes, scale = _bitlinear_codes(tensors[key], mod.out_features, ws, key)
        elif auto:
            codes, scale = _autobitlinear_codes(_take(tensors, used, key), ws, key)
        else:
            raise ValueError(f"path: BitLinear weight {key!r} is {tensors[key].dtype}, expected "
                             f"packed uint8")
        bias = _take(tensors, used, name + ".bias") if mod.bias is not None else None
        norm = None
        if qc.get("use_rms_norm", False):
            from transformers.models.llama.modeling_llama import LlamaRMSNorm
            norm = LlamaRMSNorm(mod.in_features, eps=qc.get("rms_norm_eps", 1e-6))
            norm.weight = nn.Parameter(_take(tensors, used, name + ".rms_norm.weight",
                                             model.dtype), requires_grad=False)
        _place(model, name, _ternary_linear(codes, scale, bias, act, isa, norm), keep)
        report.replaced.append((name, "BitNet weight", f"TernaryLinear act={act}"))


def _load_gpt_oss(model: nn.Module, tensors: dict, used: set, fmt: Optional[str], isa: str,
                  report: PatchReport, keep: bool) -> None:
    topk = int(model.config.num_experts_per_tok)
    for name, mod in list(model.named_modules()):
        if type(mod).__name__ != "GptOssExperts":
            continue
        why = _swiglu_reason(mod)
        if why:
            raise ValueError(f"path: {name}: {why}")
        b13 = _take(tensors, used, name + ".gate_up_proj_bias", torch.bfloat16)
        b2 = _take(tensors, used, name + ".down_proj_bias", torch.bfloat16)
        if name + ".gate_up_proj_blocks" in tensors and fmt in (None, "mxfp4", "mxfp4_a8"):
            # MXFP4 blocks straight into the kernel layout: never expanded to bf16
            q = {k: _take(tensors, used, f"{name}.{k}") for k in
                 ("gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales")}
            moe = FusedMoE.from_mxfp4(q["gate_up_proj_blocks"], q["gate_up_proj_scales"],
                                      q["down_proj_blocks"], q["down_proj_scales"], b13, b2,
                                      topk=topk, activation="swigluoai", isa=isa,
                                      act="int8" if fmt == "mxfp4_a8" else "float").prepare()
            what = f"FusedMoE {fmt or 'mxfp4'} swigluoai (from the checkpoint's MXFP4 blocks)"
        else:
            if name + ".gate_up_proj_blocks" in tensors:  # format="bf16" asked of an MXFP4 checkpoint
                w13 = _moe.dequantize(_take(tensors, used, name + ".gate_up_proj_blocks"),
                                      _take(tensors, used, name + ".gate_up_proj_scales"))
                w2 = _moe.dequantize(_take(tensors, used, name + ".down_proj_blocks"),
                                     _take(tensors, used, name + ".down_proj_scales"))
            else:
                w13 = _take(tensors, used, name + ".gate_up_proj", torch.bfloat16).transpose(1, 2)
                w2 = _take(tensors, used, name + ".down_proj", torch.bfloat16).transpose(1, 2)
            f, note = _gpt_oss_format(fmt, int(w13.shape[2]), int(w2.shape[2]))
            moe = _fused_moe(w13, w2, b13, b2, fmt=f, topk=topk, activation="swigluoai", isa=isa)
            what = f"FusedMoE {f} swigluoai{note}"
        _place(model, name, MoEExperts(moe), keep)
        report.replaced.append((name, "GptOssExperts", what))


def _load_qwen3_moe(model: nn.Module, tensors: dict, used: set, fmt: Optional[str], isa: str,
                    report: PatchReport, keep: bool) -> None:
    topk = int(model.config.num_experts_per_tok)
    activation, hf_act = _moe_activation(model.config)
    for name, mod in list(model.named_modules()):
        if type(mod).__name__ != "Qwen3MoeExperts":
            continue
        if activation is None:
            raise ValueError(f"path: {name}: activation {hf_act!r} has no cpukern kernel")
        if name + ".gate_up_proj" in tensors:  # fused layout
            w13 = _take(tensors, used, name + ".gate_up_proj", torch.bfloat16)
            w2 = _take(tensors, used, name + ".down_proj", torch.bfloat16)
        else:  # per-expert nn.Linear weights, as Qwen3-MoE checkpoints store them
            e = int(mod.num_experts)
            per = lambda p: [_take(tensors, used, f"{name}.{j}.{p}.weight", torch.bfloat16)
                             for j in range(e)]
            w13 = torch.cat([torch.stack(per("gate_proj")), torch.stack(per("up_proj"))], dim=1)
            w2 = torch.stack(per("down_proj"))
        f = fmt or "bf16"
        moe = _fused_moe(w13, w2, None, None, fmt=f, topk=topk, activation=activation, isa=isa)
        del w13, w2
        _place(model, name, MoEExperts(moe), keep)
        report.replaced.append((name, "Qwen3MoeExperts", f"FusedMoE {f} {activation}"))


def _fill_params(model: nn.Module, tensors: dict, used: set, dtype: torch.dtype) -> None:
    """Every parameter still on the meta device, from the checkpoint (tied lm_head shares the
    embedding)."""
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    for mname, mod in model.named_modules():
        for pname, p in list(mod._parameters.items()):
            if p is None or not p.is_meta:
                continue
            key = f"{mname}.{pname}" if mname else pname
            if key not in tensors and tied and key == "lm_head.weight":
                continue
            t = _take(tensors, used, key)
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"path: tensor {key!r} has shape {tuple(t.shape)}, the model "
                                 f"expects {tuple(p.shape)}")
            mod._parameters[pname] = nn.Parameter(t.to(dtype if t.is_floating_point() else t.dtype),
                                                  requires_grad=False)
    if tied:
        model.lm_head.weight = model.get_input_embeddings().weight


def from_pretrained(path: str | os.PathLike, *, isa: Optional[str] = None,
                    act: Optional[str] = None, format: Optional[str] = None,
                    dense: Optional[str] = "bf16", threads: Optional[int] = None,
                    dtype: Optional[torch.dtype] = None,
                    keep_plain_weights: bool = False) -> nn.Module:
    """A transformers causal LM from a local checkpoint directory (config.json + safetensors)
    with cpukern modules built straight from the stored tensors: BitNet packed ternary weights
    -> TernaryLinear, gpt-oss MXFP4 blocks -> FusedMoE MXFP4 (no bf16 copy of either),
    Qwen3-MoE per-expert weights -> FusedMoE. The model skeleton is made with parameters on
    the meta device, then filled. Options as in ``patch``; dtype: of the torch parts (None:
    the config's ``dtype``, else float32). Each layer's plain weights are dropped once it is
    prepared, unless ``keep_plain_weights``, so the cpukern layers hold one copy of the
    weights. The report is ``model.cpukern_report``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"path: expected a directory with config.json, got {path!r}")
    with open(os.path.join(path, "config.json")) as f:
        kind = str(json.load(f).get("model_type", ""))
    if kind not in SUPPORTED:
        raise ValueError(f"path: model_type {kind!r} is not one of {SUPPORTED}")
    isa, act, format = _options(kind, isa, act, format, threads, dense)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if dtype is None:
        dtype = getattr(config, "dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    tensors = _read_checkpoint(path)
    with _params_on_meta():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    report, used = PatchReport(), set()
    with torch.no_grad():
        if kind == "bitnet":
            _load_bitnet(model, tensors, used, act, isa, report, keep_plain_weights)
        elif kind == "gpt_oss":
            _load_gpt_oss(model, tensors, used, format, isa, report, keep_plain_weights)
        else:
            _load_qwen3_moe(model, tensors, used, format, isa, report, keep_plain_weights)
        _fill_params(model, tensors, used, dtype)
        for name in [n for n, m in model.named_modules() if type(m) is nn.Linear]:
            new, what = _from_dense(model.get_submodule(name), kind, model, dense, isa)
            if new is None:
                report.left.append((name, "Linear", what))
            else:
                _place(model, name, new, keep_plain_weights)
                report.replaced.append((name, "Linear", what))
    unused = sorted(set(tensors) - used)
    if unused:
        raise ValueError(f"path: {len(unused)} checkpoint tensors have no place in the model, "
                         f"first {unused[0]!r}")
    model.eval()
    model.cpukern_report = report
    return model
