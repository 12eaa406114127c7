"""BitNet b1.58 (``BitNetForCausalLM`` with transformers' BitNet quantization): ``BitLinear``
(packed uint8 weights, 4 ternary rows per byte row, ``y = (W q) / (s * weight_scale)``) and
``AutoBitLinear`` (unpacked ternary weights times ``weight_scale``, or
``quantization_mode="online"``: per-tensor absmean of float weights) -> ``TernaryLinear``. The
activation rule is ``act`` ("int8_bitnet", the model's own per-token rule, by default). A
layer's optional ``rms_norm`` stays in torch in front of it. Once packed, each attention layer
runs its q, k and v projections, and each MLP its gate and up, as one cpukern call
(``packed_linears``: the input quantised once, one pass over the thread pool; bitwise the
separate calls' results), through these modules' own forwards (``fuse_projections``). A BitNet model without a
quantization config runs float ``nn.Linear`` layers in transformers: those stay float (bf16 ones
go to cpukern's Linear, as in every family)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
import sys
import types

from torch import Tensor, nn

from cpukern.convert import bitnet_unpack
from cpukern.torch.forward import packed_linears
from cpukern.torch.modules import TernaryLinear
from cpukern.torch.families.common import Family, Options, Step, ternary_linear


def inverse_scale(ws: Tensor, name: str) -> float:
    """1 / weight_scale in float32 (BitLinear divides by it), checked: one finite nonzero."""
    w = ws.detach().to(torch.float32).reshape(-1)
    if w.numel() != 1 or not torch.isfinite(w).all() or float(w[0]) == 0.0:
        raise ValueError(f"{name}: expected one finite nonzero weight_scale, got {w[:4].tolist()}")
    inv = np.float32(1.0) / np.float32(float(w[0]))
    if not np.isfinite(inv):
        raise ValueError(f"{name}: weight_scale {float(w[0])} has no finite reciprocal in float32")
    return float(inv)


def check_bitlinear(mod: nn.Module, name: str) -> float:
    """BitLinear's packed uint8 weight (out/4, in) checked; returns 1 / weight_scale."""
    packed = mod.weight
    want = (mod.out_features // 4, mod.in_features)
    if packed.dtype != torch.uint8 or tuple(packed.shape) != want:
        raise ValueError(f"{name}.weight: expected packed uint8 of shape {want}, got "
                         f"{packed.dtype} {tuple(packed.shape)}")
    return inverse_scale(mod.weight_scale, name + ".weight_scale")


def bitlinear_codes(mod: nn.Module, name: str) -> tuple:
    """BitLinear: packed uint8 (out/4, in) -> (codes (out, in), scale)."""
    scale = check_bitlinear(mod, name)
    return bitnet_unpack(mod.weight.detach().numpy()), scale


def check_autobitlinear(mod: nn.Module, name: str) -> None:
    """An offline AutoBitLinear holds ternary weights and one finite weight_scale."""
    if mod.online_quant:
        return
    w = mod.weight.detach()
    if not bool(((w == -1) | (w == 0) | (w == 1)).all()):
        raise ValueError(f"{name}.weight: offline AutoBitLinear weights are not all in "
                         f"{{-1, 0, +1}}")
    ws = mod.weight_scale.detach().to(torch.float32).reshape(-1)
    if ws.numel() != 1 or not torch.isfinite(ws).all():
        raise ValueError(f"{name}.weight_scale: expected one finite value, got {ws[:4].tolist()}")


def autobitlinear_codes(mod: nn.Module, name: str) -> tuple:
    """AutoBitLinear: online (transformers' WeightQuant, per-tensor absmean of the float
    weights) or offline (ternary weights stored unpacked, output times weight_scale)."""
    check_autobitlinear(mod, name)
    w = mod.weight.detach().to(torch.float32)
    if mod.online_quant:
        inv = 1.0 / w.abs().mean().clamp(min=1e-5)  # WeightQuant's scale, float32
        return ((w * inv).round().clamp(-1, 1).to(torch.int8).numpy(),
                float(np.float32(1.0) / np.float32(float(inv))))
    scale = float(mod.weight_scale.detach().to(torch.float32).reshape(-1)[0])
    return w.to(torch.int8).numpy(), scale


def ternary_from(mod: nn.Module, name: str, act: str, variant: str) -> nn.Module:
    """The prepared TernaryLinear (behind the layer's rms_norm) of a BitLinear / AutoBitLinear."""
    conv = bitlinear_codes if type(mod).__name__ == "BitLinear" else autobitlinear_codes
    codes, scale = conv(mod, name)
    return ternary_linear(codes, scale, mod.bias, act, variant, mod.rms_norm)


class BitNet(Family):
    model_type = "bitnet"
    ops = ("ternary_gemv",)

    @staticmethod
    def _classes() -> tuple:
        from transformers.integrations.bitnet import AutoBitLinear, BitLinear
        return BitLinear, AutoBitLinear

    def plan_module(self, name: str, mod: nn.Module, model: nn.Module, opts: Options) -> Any:
        bitlinear, auto = self._classes()
        if type(mod) not in (bitlinear, auto):
            return None
        cls = type(mod).__name__
        if cls == "BitLinear" and mod.out_features % 4:
            return "out_features not a multiple of 4"
        (check_bitlinear if cls == "BitLinear" else check_autobitlinear)(mod, name)
        what = f"TernaryLinear act={opts.act}" + (
            " (rms_norm kept in front)" if mod.rms_norm is not None else "")
        return Step(name, cls, what, lambda: ternary_from(mod, name, opts.act, opts.variant))

    def after_apply(self, model: nn.Module) -> None:
        fuse_projections(model)

    def float_linear_reason(self, model: nn.Module) -> Optional[str]:
        if getattr(model.config, "quantization_config", None) is None:
            return ("float weights: this BitNet model has no quantization_config, so "
                    "transformers runs it in float; ternarising would change its arithmetic")
        return None

    def before_loading(self, model: nn.Module, source: Optional[dict]) -> None:
        if not source:
            return
        if source.get("quant_method") != "bitnet":
            super().before_loading(model, source)
        from transformers import BitNetQuantConfig
        from transformers.integrations.bitnet import replace_with_bitnet_linear
        from transformers.quantizers.base import HfQuantizer
        qc = {k: v for k, v in source.items() if k != "quant_method"}
        config = BitNetQuantConfig(**qc)
        skip = HfQuantizer.get_modules_to_not_convert(model, config.modules_to_not_convert,
                                                      model._keep_in_fp32_modules)
        replace_with_bitnet_linear(model, modules_to_not_convert=skip, quantization_config=config)

    def load_operations(self, source: Optional[dict]) -> tuple:
        if (source or {}).get("linear_class") == "autobitlinear" and \
                source.get("quantization_mode", "offline") == "offline":
            from transformers.integrations.bitnet import BitNetDeserialize
            return {"deserialize": BitNetDeserialize}, {"weight": ["weight"]}
        return {}, {}

    def expected_tensor(self, key: str, model: nn.Module) -> Optional[list]:
        want = super().expected_tensor(key, model)
        _, auto = self._classes()
        if want and key.endswith(".weight"):
            mod = model.get_submodule(key[: -len(".weight")])
            if type(mod) is auto and not mod.online_quant and mod.out_features % 4 == 0:
                # an offline AutoBitLinear also loads packed rows (BitNetDeserialize)
                want.append(((mod.out_features // 4, mod.in_features), False))
        return want


def _shares_input(*layers: nn.Module) -> bool:
    """Whether layers can run as one packed_linears call: plain TernaryLinear layers (no
    norm in front) of one input size and one activation rule."""
    return (all(type(m) is TernaryLinear for m in layers)
            and len({(m.in_features, m.weight.act) for m in layers}) == 1)


def _attention_forward(self, hidden_states: Tensor, position_embeddings: tuple,
                       attention_mask: Optional[Tensor], past_key_values: Any = None,
                       **kwargs: Any) -> tuple:
    """BitNetAttention's forward with q, k and v from one call (the rest as transformers
    computes it: RoPE, the cache, the attention function the config names, attn_sub_norm,
    o_proj)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    model = sys.modules[type(self).__module__]
    lead = hidden_states.shape[:-1]
    heads = (*lead, -1, self.head_dim)
    q, k, v = (t.view(heads).transpose(1, 2) for t in
               packed_linears(hidden_states, [self.q_proj, self.k_proj, self.v_proj]))
    cos, sin = position_embeddings
    q, k = model.apply_rotary_pos_emb(q, k, cos, sin)
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, self.layer_idx)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                      model.eager_attention_forward)
    out, weights = attention(self, q, k, v, attention_mask,
                             dropout=0.0 if not self.training else self.attention_dropout,
                             scaling=self.scaling, **kwargs)
    out = self.attn_sub_norm(out.reshape(*lead, -1).contiguous())
    return self.o_proj(out), weights


def _mlp_forward(self, x: Tensor) -> Tensor:
    """BitNetMLP's forward with gate and up from one call."""
    gate, up = packed_linears(x, [self.gate_proj, self.up_proj])
    return self.down_proj(self.ffn_sub_norm(self.act_fn(gate) * up))


def fuse_projections(model: nn.Module) -> int:
    """Installs the one-call forwards on every BitNet attention layer whose q, k, v, and MLP
    whose gate, up, are packed layers that can share their input; returns how many."""
    from transformers.models.bitnet.modeling_bitnet import BitNetAttention, BitNetMLP
    n = 0
    for mod in model.modules():
        if type(mod) is BitNetAttention and _shares_input(mod.q_proj, mod.k_proj, mod.v_proj):
            mod.forward = types.MethodType(_attention_forward, mod)
        elif type(mod) is BitNetMLP and _shares_input(mod.gate_proj, mod.up_proj):
            mod.forward = types.MethodType(_mlp_forward, mod)
        else:
            continue
        n += 1
    return n


FAMILY = BitNet()
