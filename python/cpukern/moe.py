"""Fused Mixture-of-Experts on bf16 weights (vLLM cpu_fused_moe semantics).

bf16 arrays are numpy arrays of ml_dtypes.bfloat16 or torch.bfloat16 tensors, taken
without a copy.
"""

from __future__ import annotations

from typing import Any, Optional

from cpukern import _ext
from cpukern._arrays import (bf16_bits, bool_arg, c_int, check_array, describe, is_torch, isa_arg,
                             out_or_new, shape_of, str_arg, threads_arg)

PackedExperts = _ext.PackedExperts

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai")

__all__ = ["route", "prepack", "fused_moe", "PackedExperts", "ACTIVATIONS"]


def route(router_logits: Any, topk: int, *, renormalize: bool = True) -> tuple[Any, Any]:
    """Softmax over experts, then top-k (ties to the lower id).

    router_logits: float32 (T, E). Returns (topk_weights float32 (T, k), topk_ids int32 (T, k));
    renormalize divides the k weights by their sum.
    """
    logits = check_array(router_logits, "router_logits", "float32", (2,))
    topk = c_int(topk, "topk")  # E >= 1, 1 <= topk <= E: checked by the extension
    renormalize = bool_arg(renormalize, "renormalize")
    weights, ids = _ext.moe_route(logits, topk, renormalize)
    if is_torch(router_logits):
        import torch

        return torch.from_numpy(weights), torch.from_numpy(ids)
    return weights, ids


def prepack(w: Any, *, isa: Optional[str] = None) -> PackedExperts:
    """Packs bf16 expert weights (E, O, I) (nn.Linear [out, in] order) once for the selected
    (or forced) kernel family. Any O, I >= 1 (padded internally)."""
    isa = isa_arg(isa)
    wb = bf16_bits(w, "w", (3,))
    e, o, i = shape_of(wb)
    if min(e, o, i) < 1:
        raise ValueError(f"w: expected (E, O, I) with E, O, I >= 1, got {describe(w)}")
    return _ext.moe_prepack(wb, isa)


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
    weights were packed for. threads: None or 0 = the default, or 1..cpukern.MAX_THREADS.
    """
    for name, w in (("w13", w13), ("w2", w2)):
        if not isinstance(w, PackedExperts):
            raise TypeError(f"{name}: expected PackedExperts from cpukern.moe.prepack, got {type(w).__name__}")
    isa = isa_arg(isa)
    if isa and isa != w13.isa:
        raise ValueError(f"isa: expected None or '{w13.isa}' (the variant the weights were packed "
                         f"for), got {isa!r}")
    if w2.isa != w13.isa:
        raise ValueError(f"w2: expected weights packed for '{w13.isa}' like w13, got '{w2.isa}'")
    activation = str_arg(activation, "activation", ACTIVATIONS)
    skip_weighted = bool_arg(skip_weighted, "skip_weighted")
    nthreads = threads_arg(threads)
    xb = bf16_bits(x, "x", (2,))
    t, h = shape_of(xb)
    # Shapes (x / w13 / w2 / topk_ids / topk_weights / biases agree, 1 <= topk <= E,
    # skip_weighted only with topk == 1): checked by the extension and moe::fused_moe.
    ti = check_array(topk_ids, "topk_ids", "int32", (2,))
    tw = check_array(topk_weights, "topk_weights", "float32", (2,))
    b13 = None if w13_bias is None else bf16_bits(w13_bias, "w13_bias", (2,))
    b2 = None if w2_bias is None else bf16_bits(w2_bias, "w2_bias", (2,))
    y = out_or_new(out, x, (t, h), "bfloat16", (2,))
    yb = bf16_bits(y, "out")
    _ext.moe_fused_moe(xb, w13, w2, tw, ti, activation, b13, b2, skip_weighted, nthreads, yb)
    return y
