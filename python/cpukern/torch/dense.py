"""Dense layers on cpukern.linear (the fused-MoE GEMM micro-kernels, one expert, no routing),
two ways: ``pack_linear_(linear)`` packs an nn.Linear's weight in place (the layer keeps its
class: what the model-family adapters do), ``Linear.from_linear(linear)`` makes a stand-in
module with cpukern.torch.modules' conventions."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

from cpukern import moe as _moe
from cpukern._arrays import str_arg
from cpukern.torch import ops as _ops
from cpukern.torch.modules import _bias_of, _float_weight, _PackedLinear, _variant_arg
from cpukern.torch.packed import PackedWeightsTensor

__all__ = ["Linear", "pack_linear_", "set_packed_weight", "adopt_dense_weight"]


class Linear(_PackedLinear):
    """A dense nn.Linear on cpukern's fused-MoE GEMM micro-kernels (the op "linear",
    cpukern.linear: one expert, no routing): bf16 activations in, fp32 accumulation, bf16 out,
    the arithmetic of torch's bf16 nn.Linear up to the summation order. For the bf16 layers of
    a model that are not ternary or experts: attention projections, the LM head.

    ``weight``: packed bf16 (``format="bf16"``) or int8 W8A8 (``format="int8"``: per-channel
    int8 weights, activations quantised per token at run time; faster, not exact); ``bias`` bf16
    (out,) or None. x: any float dtype (..., in), rounded to bf16 for the kernel; returns x's
    dtype.

    Bound (tested on K in-features, bf16 weights): against the exact x @ W.T + bias of the bf16
    values, |y - y_ref| <= 2**-8 * |y_ref| + (K + 1) * 2**-23 * (sum_k |x_k w_k| + |bias|)
    + 2**-126 * (2K + 2 + sum_k (|x_k| + |w_k|)) (the bf16 rounding of the output, the fp32
    sums, and underflow: cpukern.linear's bound).
    """

    _PACKED = {"weight": "linear"}
    _act_dtype = torch.bfloat16

    def __init__(self, in_features: int, out_features: int, bias: Any = True, *,
                 format: str = "bf16", weight: Optional[PackedWeightsTensor] = None) -> None:
        super().__init__()
        self.format = str_arg(format, "format", ("bf16", "int8"))
        self._init_linear(in_features, out_features, bias, weight, torch.bfloat16)

    def _check_fits(self, key: str, p: Any) -> None:
        _check_dense(key, p, self.out_features, self.in_features)
        if p.format != self.format:
            raise ValueError(f"{key}: packed as {p.format}, this layer is {self.format}")

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, format: str = "bf16", variant: str = "") -> "Linear":
        """The layer of an nn.Linear's weights, packed now (format "bf16": rounded to bf16;
        "int8": W8A8, per-channel int8 weights from cpukern.moe.quantize)."""
        weight = _pack_dense(linear, format, variant)
        return cls(linear.in_features, linear.out_features, _bias_of(linear, torch.bfloat16),
                   format=weight.weights.format, weight=weight)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, format={self.format!r}")


def _pack_dense(linear: Any, format: Any, variant: Any) -> PackedWeightsTensor:
    """An nn.Linear's weight packed for cpukern.linear (kind "linear")."""
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"linear: expected an nn.Linear, got {type(linear).__name__}")
    format = str_arg(format, "format", ("bf16", "int8"))
    _float_weight(linear.weight, "linear.weight")
    with torch.no_grad():
        w = linear.weight.detach().to(torch.bfloat16).contiguous().unsqueeze(0)
        scales = None
        if format == "int8":
            w, scales = _moe.quantize(w, format="int8")
        blob = _ops.prepare_experts_tensor(w, "weight",
                                           _ops.linear_variant(_variant_arg(variant)), scales)
    return PackedWeightsTensor(blob, verify=False, kind="linear")


def pack_linear_(linear: nn.Linear, *, format: str = "bf16", variant: str = "") -> nn.Linear:
    """Packs an nn.Linear's weight in place for cpukern.linear and returns the layer: it keeps
    its class, forward and bias (frozen, as the packed weight is); ``weight`` becomes a PackedWeightsTensor Parameter (kind
    "linear", format "bf16" or "int8" as in Linear.from_linear), which F.linear runs on
    cpukern, eagerly and compiled. load_state_dict takes its packed bytes (a 1-D uint8 blob
    is checked and wrapped); the float weight is no longer referenced by the layer."""
    return set_packed_weight(linear, _pack_dense(linear, format, variant))


def set_packed_weight(linear: nn.Linear, weight: PackedWeightsTensor) -> nn.Linear:
    """`weight` (checked by adopt_dense_weight or packed by _pack_dense) as the weight Parameter
    of `linear`, with the load_state_dict hook that checks packed bytes."""
    linear.weight = nn.Parameter(weight, requires_grad=False)
    if linear.bias is not None:
        # inference only, as the weight: a compiled graph hands the bias Parameter to the op
        # as it is, and the ops refuse tensors that require grad
        linear.bias.requires_grad_(False)
    if not any(getattr(h, "hook", h) is _wrap_dense_blob
               for h in linear._load_state_dict_pre_hooks.values()):
        linear.register_load_state_dict_pre_hook(_wrap_dense_blob)
    return linear


def adopt_dense_weight(linear: nn.Linear, key: str, t: Tensor) -> PackedWeightsTensor:
    """`t` (a PackedWeightsTensor or its 1-D uint8 blob) checked as the packed weight of
    nn.Linear `linear` (header, checksum, kind, shape: ValueError naming `key`)."""
    if not (isinstance(t, PackedWeightsTensor) and t.kind == "linear" and not t.is_empty):
        t = PackedWeightsTensor(t.blob if isinstance(t, PackedWeightsTensor) else t, name=key,
                                kind="linear")
    _check_dense(key, t.weights, linear.out_features, linear.in_features)
    return t


def _check_dense(key: str, p: Any, out_features: int, in_features: int) -> None:
    if p.op != "moe" or tuple(p.shape) != (1, out_features, in_features):
        raise ValueError(f"{key}: packed weight of shape {tuple(p.shape)} does not fit this "
                         f"layer (1, {out_features}, {in_features})")


def _wrap_dense_blob(module: nn.Linear, state_dict: dict, prefix: str, *args) -> None:
    """load_state_dict pre-hook of an nn.Linear with a packed weight (pack_linear_)."""
    key = prefix + "weight"
    if isinstance(state_dict.get(key), Tensor) and isinstance(module.weight, PackedWeightsTensor):
        state_dict[key] = adopt_dense_weight(module, key, state_dict[key])
