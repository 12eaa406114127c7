"""Qwen3-MoE (``Qwen3MoeForCausalLM``): ``Qwen3MoeExperts`` -> ``FusedMoE`` on bf16 experts
(``format="bf16"``, the default) or int8 W8A8 (``format="int8"``, lossy: warns), rows
[gate; up], the model's activation. ``Qwen3MoeTopKRouter`` -> ``MoERouter`` (its bf16 logits,
softmax, top-k and ``norm_topk_prob`` in one call).
Checkpoints store one gate/up/down weight per expert; transformers merges them."""

from __future__ import annotations

import re
from typing import Any, Optional

from torch import nn

from cpukern.torch.families.common import Family, MoEExperts, Options, Step, fused_moe

ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_new": "gelu_tanh"}
_PER_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


class Qwen3Moe(Family):
    model_type = "qwen3_moe"
    formats = ("bf16", "int8")
    config_sizes = Family.config_sizes + ("num_experts", "num_experts_per_tok",
                                          "moe_intermediate_size", "head_dim")

    def plan_module(self, name: str, mod: nn.Module, model: nn.Module, opts: Options) -> Any:
        from transformers.models.qwen3_moe.modeling_qwen3_moe import (Qwen3MoeExperts,
                                                                      Qwen3MoeTopKRouter)
        if type(mod) is Qwen3MoeTopKRouter:
            return self.plan_router(name, mod, opts, "softmax_topk", bool(mod.norm_topk_prob))
        if type(mod) is not Qwen3MoeExperts:
            return None
        hf_act = str(getattr(model.config, "hidden_act", "silu"))
        activation = ACTIVATIONS.get(hf_act)
        if activation is None:
            return f"activation {hf_act!r} has no cpukern kernel"
        fmt = opts.format or "bf16"
        topk = int(model.config.num_experts_per_tok)
        return Step(name, type(mod).__name__, f"FusedMoE {fmt} {activation}",
                    lambda: MoEExperts(fused_moe(mod.gate_up_proj.detach(), mod.down_proj.detach(),
                                                 None, None, fmt=fmt, topk=topk,
                                                 activation=activation, variant=opts.variant)),
                    "format='int8' (experts rounded to int8)" if fmt == "int8" else None)

    def expected_tensor(self, key: str, model: nn.Module) -> Optional[list]:
        m = _PER_EXPERT.match(key)
        if m is None:
            return super().expected_tensor(key, model)
        try:
            experts = model.get_submodule(m.group(1))
        except AttributeError:
            return None
        e, (_, i2, h) = int(m.group(2)), experts.gate_up_proj.shape
        if e >= experts.gate_up_proj.shape[0]:
            raise ValueError(f"tensor {key!r}: expert {e} is past the model's "
                             f"{experts.gate_up_proj.shape[0]} experts")
        return [((h, i2 // 2) if m.group(3) == "down_proj" else (i2 // 2, h), True)]


FAMILY = Qwen3Moe()
