"""The float32 torch oracle of cpukern.torch.FusedMoE (slow; tests only): the kernel's
semantics with the activation output rounded to bf16 as the kernel does, the rest float32."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def fused_moe_reference(m, x: Tensor, topk_weights: Tensor, topk_ids: Tensor) -> Tensor:
    """What FusedMoE `m`'s experts(x, topk_weights, topk_ids) computes, as float32."""
    x2 = x.reshape(-1, m.hidden).to(torch.float32)
    tw = topk_weights.reshape(-1, m.topk).to(torch.float32)
    ids = topk_ids.reshape(-1, m.topk).to(torch.int64)
    out = torch.zeros_like(x2)
    i = m.intermediate
    for t in range(x2.shape[0]):
        for j in range(m.topk):
            e = int(ids[t, j])
            g = m.w13[e].float() @ x2[t]
            if m.w13_bias is not None:
                g = g + m.w13_bias[e].float()
            a = activation(m.activation, g, i).to(torch.bfloat16).float()
            o = m.w2[e].float() @ a
            if m.w2_bias is not None:
                o = o + m.w2_bias[e].float()
            out[t] += tw[t, j] * o
    return out.reshape(tuple(x.shape))


def activation(name: str, h: Tensor, inter: int) -> Tensor:
    if name == "swigluoai":
        gate, up = h[0::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)
        return (up + 1) * gate * torch.sigmoid(1.702 * gate)
    gate, up = h[:inter], h[inter:]
    if name == "silu":
        return up * gate * torch.sigmoid(gate)
    if name == "gelu":
        return up * 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2)))
    return up * 0.5 * gate * (1 + torch.tanh(0.7978845608 * (gate + 0.044715 * gate ** 3)))
