"""One-token decode attention for transformers models, through transformers' own extension
points (``AttentionInterface`` / ``AttentionMaskInterface``), no monkeypatching.

Why: torch's CPU SDPA (its flash-attention kernel) in bf16 on a CPU without AMX computes one
query token with scalar code: about 9 us per cached token for BitNet b1.58 2B-4T's 20 heads of
128 (1.2 ms a layer at 272 cached tokens, against 0.13 ms in float32), a third of a whole
decode step on a Zen 4 (docs/performance/e2e.md). transformers' eager path repeats the KV heads
(a copy of the cache) and rounds the scores to bf16.

``use_decode_attention(model)`` switches a model whose attention implementation is transformers'
"sdpa" or "eager" to "cpukern_sdpa" or "cpukern_eager": the same function and the same masks as
the stock one for every call except one query token (decode), which runs cpukern's C++ op
``torch.ops.cpukern.decode_attention`` (cpukern.attention.decode, on cpukern's thread pool):
the query heads grouped onto their KV head (no repeated copies), scores, softmax and the
weighted sum in float32 over the cache as transformers hands it (a StaticCache's whole length
with its mask, a DynamicCache's valid length; bf16 caches read as they are), attention sinks
(gpt-oss) as an extra logit, the output in the query's dtype. float16 and float64 models, and
calls that autograd records, run the same computation in torch's float32 ops. Masks follow
torch SDPA's rules (bool or float, broadcasting to (B, Hq, 1, L), per-head masks too; any
other mask is a ValueError); a row with every key masked out gives what the stock function
gives (SDPA: 0; eager: NaN, or 0 with a sink). The same Python runs eager and under
torch.compile. Other implementations (flash, flex, paged) are left as they are;
``model.set_attn_implementation("sdpa")`` goes back.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch
from torch import nn

__all__ = ["use_decode_attention", "decode_attention", "IMPLEMENTATIONS"]

# transformers' implementation -> the one registered here that replaces it
IMPLEMENTATIONS = {"sdpa": "cpukern_sdpa", "eager": "cpukern_eager"}


def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: Optional[torch.Tensor], scaling: float,
                     sinks: Optional[torch.Tensor] = None,
                     fully_masked: str = "zero") -> torch.Tensor:
    """Attention of one query token: query (B, Hq, 1, D), key and value (B, Hkv, L, D) with Hq a
    multiple of Hkv (query head h reads KV head h // (Hq / Hkv), as transformers' repeat_kv);
    sinks None or (Hq,): one more logit per head that takes part in the softmax and adds nothing
    to the output. Float32 inside; returns (B, 1, Hq, D) in query's dtype (the layout
    transformers' attention functions return).

    attention_mask: None (every key), bool (True = attend) or additive float, of 2 to 4 dims
    that broadcast to (B, Hq, 1, L) as torch's SDPA broadcasts them: (B or 1, Hq or 1, 1, L or
    1), leading dims of 1 may be left out (so (1, L) and (Hq, 1, L) are masks, (L,) and (B, L)
    with B > 1 are not). Anything else (integer dtypes, other shapes) is a ValueError.
    fully_masked: a row whose keys are all masked out (bool all False, float all -inf), without
    a sink, gives "zero" (torch's SDPA) or "nan" (a plain softmax, as transformers' eager
    attention); with a sink it gives 0 either way (the softmax's weight is all on the sink)."""
    b, hq, tokens, d = query.shape
    hkv, length = key.shape[1], key.shape[2]
    if tokens != 1 or hq % hkv or key.shape != value.shape or key.shape[::3] != query.shape[::3]:
        raise ValueError(f"query, key, value: expected (B, Hq, 1, D), (B, Hkv, L, D) twice with "
                         f"Hq a multiple of Hkv, got {tuple(query.shape)}, {tuple(key.shape)}, "
                         f"{tuple(value.shape)}")
    if fully_masked not in ("zero", "nan"):
        raise ValueError(f"fully_masked: expected 'zero' or 'nan', got {fully_masked!r}")
    if query.dtype in (torch.float32, torch.bfloat16) and not _needs_grad(query, key, value, sinks):
        from cpukern.torch import ops
        mask = None if attention_mask is None else _op_mask(attention_mask, b, hq, hkv, length)
        out = ops.decode_attention(
            query.reshape(b, hq, d).contiguous(), key.to(query.dtype), value.to(query.dtype),
            mask, None if sinks is None else sinks.to(torch.float32).reshape(hq), float(scaling),
            fully_masked == "nan")
        return out.reshape(b, 1, hq, d)
    return _decode_attention_torch(query, key, value, attention_mask, scaling, sinks,
                                   fully_masked)


def _needs_grad(*tensors: Optional[torch.Tensor]) -> bool:
    """Whether autograd would record this call (the op is inference only)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _op_mask(mask: torch.Tensor, b: int, hq: int, hkv: int, length: int) -> torch.Tensor:
    """attention_mask checked as _decode_mask does, as the op takes it: (B or 1, Hq or 1, L),
    bool or float32 (a view where it can be one)."""
    m = _decode_mask(mask, b, hq, hkv, length)  # (B or 1, Hkv or 1, G or 1, L or 1)
    m = m.reshape(m.shape[0], m.shape[1] * m.shape[2], m.shape[3]).expand(-1, -1, length)
    return m if m.dtype in (torch.bool, torch.float32) else m.to(torch.float32)


def _decode_attention_torch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: Optional[torch.Tensor], scaling: float,
                            sinks: Optional[torch.Tensor], fully_masked: str) -> torch.Tensor:
    """decode_attention in torch's float32 ops: for the dtypes the op does not take (float16,
    float64), and where autograd records the call."""
    b, hq, _, d = query.shape
    hkv, length = key.shape[1], key.shape[2]
    groups = hq // hkv
    q = query.reshape(b, hkv, groups, d).float()
    scores = torch.matmul(q, key.float().transpose(-1, -2)) * scaling  # (B, Hkv, G, L)
    if attention_mask is not None:
        mask = _decode_mask(attention_mask, b, hq, hkv, length)  # broadcasts as (B, Hkv, G, L)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    if sinks is not None:
        sink = sinks.float().reshape(1, hkv, groups, 1).expand(b, hkv, groups, 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :length]
    else:
        probs = torch.softmax(scores, dim=-1)
        if attention_mask is not None and fully_masked == "zero":
            # SDPA's rule: a row with no key left attends to nothing (softmax alone gives NaN)
            empty = scores.amax(dim=-1, keepdim=True) == float("-inf")
            probs = probs.masked_fill(empty, 0.0)
    out = torch.matmul(probs, value.float())  # (B, Hkv, G, D)
    return out.reshape(b, 1, hq, d).to(query.dtype)


def _decode_mask(mask: Any, b: int, hq: int, hkv: int, length: int) -> torch.Tensor:
    """attention_mask checked against torch SDPA's rules for a (B, Hq, 1, L) score and viewed
    as (B or 1, Hkv or 1, G or 1, L or 1): query head h = kv * G + g."""
    shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else None
    full = (1,) * (4 - len(shape)) + shape if shape is not None and 2 <= len(shape) <= 4 else None
    if (full is None or not (mask.dtype == torch.bool or mask.dtype.is_floating_point)
            or full[0] not in (1, b) or full[1] not in (1, hq) or full[2] != 1
            or full[3] not in (1, length)):
        got = f"shape {shape}, dtype {mask.dtype}" if shape is not None else type(mask).__name__
        raise ValueError(f"attention_mask: expected None or a bool or float tensor of 2 to 4 dims "
                         f"broadcasting to (B, Hq, 1, L) = ({b}, {hq}, 1, {length}), got {got}")
    if full[1] == hq:  # per query head: split the head dim into (KV head, query in its group)
        return mask.reshape(full[0], hkv, hq // hkv, full[3])
    return mask.reshape(full[0], 1, 1, full[3])


def _one_token(query: torch.Tensor, module: nn.Module, dropout: float, kwargs: dict) -> bool:
    """Whether this call is one that decode_attention computes as the stock function would."""
    return (query.shape[2] == 1 and not (dropout and module.training)
            and not kwargs.get("output_attentions") and kwargs.get("softcap") is None
            and kwargs.get("position_bias") is None)


def _stock_eager(module: nn.Module) -> Callable:
    """The model's own eager attention function (what transformers calls for "eager"), from the
    module that defines the attention layer."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise TypeError(f"{type(module).__name__}: its module defines no eager_attention_forward "
                        f"for attention implementation 'cpukern_eager'")
    return fn


def _attention_function(stock: str) -> Callable:
    def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                  scaling: Optional[float] = None, **kwargs: Any) -> tuple:
        if _one_token(query, module, dropout, kwargs):
            scale = query.shape[-1] ** -0.5 if scaling is None else scaling
            # each stock function's result for a row with every key masked out
            return decode_attention(query, key, value, attention_mask, scale,
                                    kwargs.get("s_aux"),
                                    "zero" if stock == "sdpa" else "nan"), None
        if stock == "sdpa":
            from transformers.integrations.sdpa_attention import sdpa_attention_forward
            fn = sdpa_attention_forward
        else:
            fn = _stock_eager(module)
        return fn(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                  **kwargs)

    attention.__name__ = f"cpukern_{stock}_attention"
    return attention


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    for stock, name in IMPLEMENTATIONS.items():
        if name not in ALL_ATTENTION_FUNCTIONS:
            AttentionInterface.register(name, _attention_function(stock))
            # the stock implementation's masks (bool or None for sdpa, additive float for eager)
            AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[stock])


def use_decode_attention(model: nn.Module) -> Optional[str]:
    """Sets a transformers model's attention implementation from "sdpa" / "eager" to
    "cpukern_sdpa" / "cpukern_eager" (module docstring) and returns the new name; other
    implementations, and models that cannot switch, stay as they are (returns None)."""
    config = getattr(model, "config", None)
    name = IMPLEMENTATIONS.get(getattr(config, "_attn_implementation", None))
    if name is None or not hasattr(model, "set_attn_implementation"):
        return None
    _register()
    model.set_attn_implementation(name)
    # a model whose attention layers do not go through AttentionInterface keeps its own
    return name if model.config._attn_implementation == name else None
