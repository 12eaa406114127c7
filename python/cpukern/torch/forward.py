"""What a PackedWeightsTensor runs: ``F.linear`` on one (``packed_linear``) and FusedMoE's
experts (``packed_fused_moe``). One implementation per op serves both modes: in eager mode
the op's implementation is called directly on the packed object (no dispatcher round trip);
while torch.compile or torch.export trace, the cpukern op goes into the graph, and the graph
calls that same implementation with the blob (which finds its packed object again)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from cpukern.torch.ops import (_fused_moe_prepared, _linear_prepared, _moe_router_prepared,
                               _ternary_gemv_multi_prepared, _ternary_gemv_prepared,
                               _widely_linear_prepared, fused_moe_prepared, linear_prepared,
                               moe_router_prepared, ternary_gemv_multi_prepared,
                               ternary_gemv_prepared, widely_linear_prepared)
from cpukern.torch.packed import PackedWeightsTensor

__all__ = ["packed_linear", "packed_linears", "packed_fused_moe", "packed_router", "check_float",
           "FLOATS"]


FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_float(x: Any, name: str) -> None:
    if not isinstance(x, Tensor) or x.dtype not in FLOATS:
        got = f"{x.dtype} tensor" if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"{name}: expected a float32, float16, bfloat16 or float64 tensor, got {got}")


def _run(op: Any, impl: Any, *args: Any) -> Any:
    """The op's implementation called directly in eager mode (no dispatcher round trip; under
    torch.profiler in a record_function of the op's name), the op itself while torch.compile or
    torch.export trace (the graph calls the same implementation with the blobs)."""
    if torch.compiler.is_compiling():
        return op(*args)
    if torch.autograd._profiler_enabled():
        with torch.profiler.record_function(op.name()):
            return impl(*args)
    return impl(*args)


def packed_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """F.linear(x, weight, bias) for a PackedWeightsTensor weight of kind ternary,
    widely_linear or linear: x of any float dtype (..., in) through the kernel the weights
    carry (ternary and widely-linear: in float32, the bias added in float32; linear: in bf16,
    the bias (rounded to bf16) added in the kernel's fp32 sums), returned in x's dtype."""
    if not isinstance(weight, PackedWeightsTensor) or weight.kind == "moe":
        got = weight.kind if isinstance(weight, PackedWeightsTensor) else type(weight).__name__
        raise TypeError(f"weight: expected packed weights of a linear layer, got {got}")
    check_float(x, "x")
    if weight.is_empty:
        raise ValueError("weight: holds no packed weights yet (load a state_dict or pack the "
                         "layer with a from_* constructor)")
    if bias is not None and bias.requires_grad:
        bias = bias.detach()  # inference only: a Parameter's requires_grad is not an error
    out_features, in_features = weight.dims
    shape = x.shape
    if not shape or shape[-1] != in_features:
        raise ValueError(f"x: expected {in_features} input features, got shape {tuple(shape)}")
    # Each conversion only where needed: a decode step makes hundreds of these calls, and
    # every torch call costs about a microsecond.
    x2 = x if len(shape) == 2 else x.reshape(-1, in_features)
    kind, dtype = weight.kind, x.dtype
    if kind == "linear":
        if dtype != torch.bfloat16:
            x2 = x2.to(torch.bfloat16)
        if bias is not None and bias.dtype != torch.bfloat16:
            bias = bias.to(torch.bfloat16)
        y = _run(linear_prepared, _linear_prepared, x2.contiguous(), weight, out_features, bias)
        return _layer_result(y, None, shape, out_features, dtype)
    x2 = x2 if dtype == torch.float32 else x2.to(torch.float32)
    if kind == "ternary":
        y = _run(ternary_gemv_prepared, _ternary_gemv_prepared, weight, x2.contiguous(),
                 out_features, weight.act)
    else:
        y = _run(widely_linear_prepared, _widely_linear_prepared, weight, x2.contiguous(),
                 out_features)
    return _layer_result(y, bias, shape, out_features, dtype)


def _layer_result(y: Tensor, bias: Optional[Tensor], shape: Any, out_features: int,
                  dtype: torch.dtype) -> Tensor:
    """A kernel's (T, out) result as the layer returns it: the bias added in float32 (where
    given), x's leading dimensions, x's dtype."""
    if bias is not None:
        y = y + (bias if bias.dtype == torch.float32 else bias.to(torch.float32))
    if len(shape) != 2:
        y = y.reshape(shape[:-1] + (out_features,))
    return y if y.dtype == dtype else y.to(dtype)


def packed_linears(x: Tensor, layers: list) -> list:
    """[layer(x) for layer in layers] for ternary layers (TernaryLinear, or any module with a
    packed ternary ``weight``, ``bias`` and ``out_features``) of the same in_features and act,
    in one cpukern call (ternary_gemv_multi_prepared: x quantised once in int8 modes); the same
    results, bitwise, in x's dtype."""
    check_float(x, "x")
    shape, dtype = x.shape, x.dtype
    x2 = x.reshape(-1, shape[-1]) if len(shape) != 2 else x
    x2 = x2 if dtype == torch.float32 else x2.to(torch.float32)
    outs = _run(ternary_gemv_multi_prepared, _ternary_gemv_multi_prepared,
                [layer.weight for layer in layers], x2.contiguous(),
                [layer.out_features for layer in layers], layers[0].weight.act)
    return [_layer_result(y, layer.bias, shape, layer.out_features, dtype)
            for layer, y in zip(layers, outs)]


def packed_fused_moe(x: Tensor, w13: Tensor, w2: Tensor, topk_weights: Tensor, topk_ids: Tensor,
                     activation: str = "silu", w13_bias: Optional[Tensor] = None,
                     w2_bias: Optional[Tensor] = None) -> Tensor:
    """fused_moe_prepared on x (T, H) bf16 with PackedWeightsTensor experts, the same way
    (eager: the implementation itself; traced: the op)."""
    return _run(fused_moe_prepared, _fused_moe_prepared, x, w13, w2, topk_weights, topk_ids,
                activation, w13_bias, w2_bias, False)


def packed_router(x: Tensor, weight: Tensor, num_experts: int, bias: Optional[Tensor], topk: int,
                  rule: str, renormalize: bool) -> tuple:
    """moe_router_prepared on x (T, H) bf16 with a PackedWeightsTensor router matrix, the same
    way (eager: the implementation itself; traced: the op)."""
    return _run(moe_router_prepared, _moe_router_prepared, x, weight, num_experts, bias, topk,
                rule, renormalize)
