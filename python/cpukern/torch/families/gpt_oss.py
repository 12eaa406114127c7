"""gpt-oss (``GptOssForCausalLM``): the experts -> ``FusedMoE`` with ``swigluoai`` (alpha 1.702,
limit 7, both biases, gate/up rows interleaved as the model stores them); ``GptOssTopKRouter``
-> ``MoERouter`` (its bf16 logits with the bias, top-k, softmax over the k, in one call).

Expert formats: an MXFP4 checkpoint (``*_blocks`` / ``*_scales``) loads its blocks straight
into the MXFP4 layout (``format=None`` or ``"mxfp4"``; never expanded to bf16), or runs them
W4A8 (``"mxfp4_a8"``) or dequantised (``"bf16"``). bf16 experts stay bf16 unless their values
are exactly MXFP4 (then packing loses nothing and they are packed); ``format="mxfp4"`` or
``"mxfp4_a8"`` packs them anyway, with a warning, as that rounds them.

Other swiglu constants (config ``swiglu_alpha`` / ``swiglu_limit``) have no cpukern kernel: such
experts stay transformers' ``GptOssExperts`` (an MXFP4 checkpoint's dequantised to bf16 once
loaded, with a warning), and the report says why."""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from cpukern import moe as _moe
from cpukern.torch._pages import drop_mapped_pages
from cpukern.torch.families.common import (Family, MoEExperts, Options, Step, fused_moe,
                                           is_exact_mxfp4)
from cpukern.torch.experts import FusedMoE

SWIGLU = (1.702, 7.0)  # cpukern's swigluoai constants (alpha, limit)
_A8 = "format='mxfp4_a8' (experts' activations rounded to int8)"
_DEQUANTISED = (" (the checkpoint's MXFP4 weights dequantised to bf16, run by transformers' "
                "GptOssExperts)")


class GptOssMxfp4Experts(nn.Module):
    """Holds a gpt-oss checkpoint's MXFP4 experts as stored (blocks uint8 (E, O, I/32, 16),
    scales uint8 (E, O, I/32), O = 2I for gate_up and H for down; float biases) while
    transformers loads them; replaced by a FusedMoE once loaded (it never runs)."""

    def __init__(self, experts: int, hidden: int, intermediate: int, dtype: torch.dtype,
                 alpha: float, limit: float) -> None:
        super().__init__()
        self.num_experts, self.alpha, self.limit = experts, alpha, limit
        u8 = dict(dtype=torch.uint8, device="meta")
        shapes = {"gate_up_proj": (2 * intermediate, hidden), "down_proj": (hidden, intermediate)}
        for proj, (o, i) in shapes.items():
            for part, shape in (("blocks", (experts, o, i // 32, 16)),
                                ("scales", (experts, o, i // 32))):
                self.register_parameter(f"{proj}_{part}", nn.Parameter(
                    torch.empty(shape, **u8), requires_grad=False))
            self.register_parameter(f"{proj}_bias", nn.Parameter(
                torch.empty(experts, o, dtype=dtype, device="meta"), requires_grad=False))

    def forward(self, *args: Any) -> None:
        raise RuntimeError("GptOssMxfp4Experts only holds a checkpoint's tensors while it loads")


def _dequantised(mod: GptOssMxfp4Experts, config: Any) -> nn.Module:
    """transformers' own GptOssExperts (its swiglu constants read from config) on the
    placeholder's MXFP4 weights dequantised (exact): what stock transformers computes."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    with torch.device("meta"):
        new = GptOssExperts(config)
    dtype = mod.gate_up_proj_bias.dtype
    for proj in ("gate_up_proj", "down_proj"):
        w = _moe.dequantize(getattr(mod, f"{proj}_blocks"), getattr(mod, f"{proj}_scales"))
        # (E, O, I) as stored -> (E, I, O): gate_up (E, H, 2I), down (E, I, H)
        w = w.transpose(1, 2).to(dtype).contiguous()
        setattr(new, proj, nn.Parameter(w, requires_grad=False))
        setattr(new, f"{proj}_bias", nn.Parameter(getattr(mod, f"{proj}_bias").detach(),
                                                  requires_grad=False))
    return new


def _swiglu_reason(mod: nn.Module) -> Optional[str]:
    got = (float(getattr(mod, "alpha", SWIGLU[0])), float(getattr(mod, "limit", SWIGLU[1])))
    if not np.allclose(got, SWIGLU, rtol=0, atol=1e-6):
        return (f"swiglu_alpha={got[0]}, swiglu_limit={got[1]}: cpukern's swigluoai kernel "
                f"fixes alpha=1.702, limit=7")
    return None


class GptOss(Family):
    model_type = "gpt_oss"
    formats = ("mxfp4", "mxfp4_a8", "bf16")
    config_sizes = Family.config_sizes + ("num_local_experts", "num_experts_per_tok", "head_dim")

    def plan_module(self, name: str, mod: nn.Module, model: nn.Module, opts: Options) -> Any:
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts, GptOssTopKRouter
        if type(mod) is GptOssTopKRouter:
            return self.plan_router(name, mod, opts, "topk_softmax", False)
        if type(mod) not in (GptOssExperts, GptOssMxfp4Experts):
            return None
        why = _swiglu_reason(mod)
        if why and isinstance(mod, GptOssMxfp4Experts):
            # The placeholder never runs: transformers' own module on the dequantised weights
            # takes its place (computing what stock transformers does), and the plan leaves it.
            model.set_submodule(name, _dequantised(mod, model.config))
            drop_mapped_pages(mod.parameters(), [*model.parameters(), *model.buffers()])
            why += _DEQUANTISED
            warnings.warn(f"cpukern: gpt-oss experts left in torch: {why}", UserWarning,
                          stacklevel=4)
        if why:
            return why
        topk = int(model.config.num_experts_per_tok)
        kw = dict(topk=topk, activation="swigluoai", variant=opts.variant)
        b13, b2 = mod.gate_up_proj_bias.detach(), mod.down_proj_bias.detach()
        cls = type(mod).__name__
        if isinstance(mod, GptOssMxfp4Experts):
            fmt = opts.format or "mxfp4"
            if fmt == "bf16":
                return Step(name, cls, "FusedMoE bf16 swigluoai (MXFP4 blocks dequantised)",
                            lambda: MoEExperts(fused_moe(
                                _moe.dequantize(mod.gate_up_proj_blocks, mod.gate_up_proj_scales),
                                _moe.dequantize(mod.down_proj_blocks, mod.down_proj_scales),
                                b13, b2, fmt="bf16", **kw)))
            return Step(name, cls, f"FusedMoE {fmt} swigluoai (from the checkpoint's MXFP4 blocks)",
                        lambda: MoEExperts(FusedMoE.from_mxfp4(
                            mod.gate_up_proj_blocks, mod.gate_up_proj_scales, mod.down_proj_blocks,
                            mod.down_proj_scales, b13, b2, **kw,
                            act="int8" if fmt == "mxfp4_a8" else "fp32")),
                        _A8 if fmt == "mxfp4_a8" else None)
        w13 = mod.gate_up_proj.detach().transpose(1, 2)  # (E, H, 2I) -> (E, 2I, H), interleaved
        w2 = mod.down_proj.detach().transpose(1, 2)  # (E, I, H) -> (E, H, I)
        h, i = int(w13.shape[2]), int(w2.shape[2])
        fmt, note, lossy = opts.format, "", None
        if fmt in ("mxfp4", "mxfp4_a8") and (h % 32 or i % 32):
            fmt = "bf16"
            note = f" (bf16: MXFP4 needs hidden and intermediate multiples of 32, got {h}, {i})"
        elif fmt is None:
            exact = h % 32 == 0 and i % 32 == 0 and is_exact_mxfp4(w13) and is_exact_mxfp4(w2)
            fmt = "mxfp4" if exact else "bf16"
            note = (" (bf16 experts whose values are exactly MXFP4: packed without loss)" if exact
                    else " (bf16 experts kept bf16: format='mxfp4' packs them, lossily)")
        elif fmt in ("mxfp4", "mxfp4_a8") and not (is_exact_mxfp4(w13) and is_exact_mxfp4(w2)):
            note = " (bf16 experts rounded to MXFP4)"
            lossy = f"format={fmt!r} (bf16 experts rounded to MXFP4)"
        if fmt == "mxfp4_a8" and lossy is None:
            lossy = _A8
        return Step(name, cls, f"FusedMoE {fmt} swigluoai{note}",
                    lambda: MoEExperts(fused_moe(w13, w2, b13, b2, fmt=fmt, **kw)), lossy)

    def required_tensors(self, model: nn.Module) -> list:
        # The placeholder's tensors: transformers initialises none of them when missing.
        return [f"{name}.{p}" for name, mod in model.named_modules()
                if isinstance(mod, GptOssMxfp4Experts) for p, _ in mod.named_parameters()]

    def before_loading(self, model: nn.Module, source: Optional[dict]) -> None:
        if not source:
            return
        if source.get("quant_method") != "mxfp4":
            super().before_loading(model, source)
        qc = getattr(model.config, "quantization_config", None)
        get = qc.get if isinstance(qc, dict) else lambda k: getattr(qc, k, None)
        if get("quant_method") == "cpukern" and get("prepared_modules"):
            # cpukern's own save: its experts are prepared modules (put in place from their
            # description) or GptOssExperts stored in bf16 (swiglu cpukern does not run)
            return
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
        c = model.config
        for name, mod in list(model.named_modules()):
            if type(mod) is GptOssExperts:
                model.set_submodule(name, GptOssMxfp4Experts(
                    int(c.num_local_experts), int(c.hidden_size), int(c.intermediate_size),
                    mod.gate_up_proj_bias.dtype, float(getattr(mod, "alpha", SWIGLU[0])),
                    float(getattr(mod, "limit", SWIGLU[1]))))


FAMILY = GptOss()
