"""Fused Mixture-of-Experts on bf16 weights (vLLM cpu_fused_moe semantics).

bf16 arrays are numpy arrays of ml_dtypes.bfloat16 or torch.bfloat16 tensors, taken
without a copy.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from cpukern import _ext
from cpukern._arrays import (bf16_bits, is_torch, isa_arg, out_or_new, require_array, shape_of,
                             threads_arg)

PackedExperts = _ext.PackedExperts

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai")

__all__ = ["route", "prepack", "fused_moe", "PackedExperts", "ACTIVATIONS"]


def route(router_logits: Any, topk: int, *, renormalize: bool = True) -> tuple[Any, Any]:
    """Softmax over experts, then top-k (ties to the lower id).

    router_logits: float32 (T, E). Returns (topk_weights float32 (T, k), topk_ids int32 (T, k));
    renormalize divides the k weights by their sum.
    """
    logits = require_array(router_logits, "router_logits")
    if isinstance(topk, bool) or not isinstance(topk, (int, np.integer)):
        raise TypeError(f"topk: expected an integer, got {type(topk).__name__}")
    if logits.ndim != 2:
        raise ValueError(f"router_logits: expected 2 dimensions (T, E), got shape {shape_of(logits)}")
    t = shape_of(logits)[0]
    weights = out_or_new(None, logits, (t, int(topk)) if topk >= 0 else (t, 0), "float32")
    ids = out_or_new(None, logits, (t, int(topk)) if topk >= 0 else (t, 0), "int32")
    _ext.moe_route(logits, int(topk), bool(renormalize), weights, ids)
    return weights, ids


def prepack(w: Any, *, isa: Optional[str] = None) -> PackedExperts:
    """Packs bf16 expert weights (E, O, I) (nn.Linear [out, in] order) once for the selected
    (or forced) kernel family. Any O, I >= 1 (padded internally)."""
    return _ext.moe_prepack(bf16_bits(w, "w"), isa_arg(isa))


def fused_moe(x: Any, w13: PackedExperts, w2: PackedExperts, topk_weights: Any, topk_ids: Any, *,
              activation: str = "silu", w13_bias: Any = None, w2_bias: Any = None,
              skip_weighted: bool = False, isa: Optional[str] = None, threads: Optional[int] = None,
              out: Any = None) -> Any:
    """out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]), bf16 (T, H).

    expert_e(x) = w2_e @ round_bf16(act(w13_e @ x + b13_e)) + b2_e, fp32 accumulation.
    x bf16 (T, H); w13 packed from (E, 2I, H); w2 packed from (E, H, I), both by prepack with
    the same isa. activation: "silu", "gelu", "gelu_tanh" (w13 rows = [gate ; up]) or
    "swigluoai" (rows interleaved: even gate, odd up; alpha 1.702, limit 7).
    skip_weighted=True (weight 1.0) only with topk == 1. isa, if given, must be the one the
    weights were packed for.
    """
    for name, w in (("w13", w13), ("w2", w2)):
        if not isinstance(w, PackedExperts):
            raise TypeError(f"{name}: expected PackedExperts from cpukern.moe.prepack, got {type(w).__name__}")
    if isa is not None and isa != w13.isa:
        raise ValueError(f"isa: the weights were packed for '{w13.isa}', got isa={isa!r}")
    xb = bf16_bits(x, "x")
    tw = require_array(topk_weights, "topk_weights")
    ti = require_array(topk_ids, "topk_ids")
    b13 = None if w13_bias is None else bf16_bits(w13_bias, "w13_bias")
    b2 = None if w2_bias is None else bf16_bits(w2_bias, "w2_bias")
    y = out_or_new(out, x, shape_of(x), "bfloat16")
    yb = bf16_bits(y, "out")
    _ext.moe_fused_moe(xb, w13, w2, tw, ti, activation, b13, b2, bool(skip_weighted),
                       threads_arg(threads), yb)
    return y
