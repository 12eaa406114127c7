"""nn.Modules whose weights are packed: TernaryLinear, WidelyLinear (stand-ins for nn.Linear)
and, on the same base, Linear (cpukern.torch.dense) and FusedMoE (cpukern.torch.experts).

Packed weights are the weights: each module holds them as cpukern.torch.PackedWeightsTensor
buffers (``weight``; FusedMoE: ``w13`` and ``w2``) and keeps no float or plain copy, no
second cache and no record of what they were made from. The tensor carries its kernel: a
linear layer's forward is ``F.linear(x, self.weight, self.bias)``, which the tensor runs on its
op (cpukern.torch.forward.packed_linear: straight on the packed object in eager mode, the cpukern
op on the blob under torch.compile / torch.export). An ``nn.Linear`` whose weight is such a
tensor runs the same way.

Weights are packed once, by the constructors: ``from_linear``, ``from_checkpoint`` and
``from_packed`` (TernaryLinear), ``from_linear`` (WidelyLinear, Linear), ``from_experts``,
``from_mxfp4`` and ``from_int8`` (FusedMoE). ``Module(sizes...)`` alone makes a layer holding
no weights yet (empty tensors), which a state_dict fills. state_dict, load_state_dict,
torch.save, pickle, copy.deepcopy and ``.to()`` carry the packed bytes through the tensor
subclass. Loading checks each packed tensor (header, checksum, that it fits the layer:
ValueError naming the key, before anything is replaced); bytes packed for a variant this CPU
cannot run are packed again here from their own layout (ternary, widely-linear's public
layout), or refused (other layouts cannot be unpacked: load the checkpoint on this CPU). A plain 1-D
uint8 blob in a state_dict (a safetensors file) is wrapped and checked the same way.

dtypes: the weights stay in their own formats whatever ``.to(dtype)``, ``.half()``,
``.bfloat16()``, ``.float()`` or ``.double()`` is applied (those set only the module's
``dtype``, the activation dtype it reports). Every module accepts float32, float16, bfloat16
and float64 activations and returns the input's dtype; the kernels compute in their own
precision (fp32 for the ternary layers, bf16 in/out with fp32 accumulation for Linear and
FusedMoE).

Constructor arguments are checked when the module is made (sizes >= 1 and integers, topk in
[1, num_experts], act / activation names, group_size): ValueError or TypeError naming the
argument."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

from cpukern import ternary as _ternary
from cpukern import widely_linear as _widely_linear
from cpukern._arrays import bool_arg, int_arg
from cpukern._dtypes import act_arg
from cpukern.torch import forward as _forward
from cpukern.torch import ops as _ops
from cpukern.torch.packed import PackedWeightsTensor

__all__ = ["TernaryLinear", "WidelyLinear"]

def _variant_arg(variant: str) -> Optional[str]:
    """variant= of a constructor: "" (automatic) or a variant name (checked by the packer)."""
    if not isinstance(variant, str):
        raise TypeError(f"variant: expected a variant name (str; '' for automatic), got "
                        f"{type(variant).__name__} {variant!r}")
    return variant


def _float_weight(t: Any, name: str) -> Tensor:
    """A weight the caller converts to its own float format: integer, bool and complex tensors
    are refused (a conversion would take their values, or drop the imaginary part)."""
    if not isinstance(t, Tensor) or not t.is_floating_point():
        got = (f"{t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, Tensor)
               else type(t).__name__)
        raise TypeError(f"{name}: expected a floating-point tensor, got {got}")
    return t


def _bias_of(linear: nn.Linear, dtype: torch.dtype) -> Optional[Tensor]:
    if linear.bias is None:
        return None
    return _float_weight(linear.bias, "linear.bias").detach().to(dtype).clone()


class _PackedModule(nn.Module):
    """A module whose packed weights are PackedWeightsTensor buffers (``_PACKED``: name ->
    kind). Module dtype conversions (.to(dtype), .half(), ...) set the activation dtype
    (``dtype``) and leave every weight in its own format."""

    _PACKED: dict = {}
    _act_dtype = torch.float32

    def _packed_shape(self, name: str) -> tuple:
        raise NotImplementedError

    def _packed_act(self, name: str) -> Optional[str]:
        return None

    def _check_fits(self, key: str, w: Any) -> None:
        """ValueError naming `key` unless packed object `w` fits this layer."""

    def _init_packed(self, packed: Optional[dict] = None) -> None:
        """Registers the packed buffers: `packed` (name -> PackedWeightsTensor) or empty ones."""
        for name, kind in self._PACKED.items():
            t = (packed or {}).get(name)
            if t is None:
                t = PackedWeightsTensor.empty(self._packed_shape(name), kind, self._packed_act(name))
            elif t.kind != kind or t.act != self._packed_act(name):
                raise ValueError(f"{name}: expected packed {kind} weights (act "
                                 f"{self._packed_act(name)!r}), got {t.kind} (act {t.act!r})")
            else:
                self._check_fits(name, t.weights)
            self.register_buffer(name, t)
        self.register_load_state_dict_pre_hook(_wrap_blobs)

    @property
    def dtype(self) -> torch.dtype:
        """The activation dtype (set by .to(dtype) / .half() / ...; inputs of any float dtype
        are accepted and the result has the input's dtype)."""
        return self._act_dtype

    def _apply(self, fn, recurse=True):
        # What fn does to a float32 and a float16 tensor tells whether it converts dtypes.
        to32, to16 = fn(torch.zeros(1)), fn(torch.zeros(1, dtype=torch.float16))
        if to32.dtype == torch.float32 and to16.dtype == torch.float16:
            return super()._apply(fn, recurse)
        if to32.dtype in _forward.FLOATS:
            self._act_dtype = to32.dtype
        return super()._apply(lambda t: t if t.is_floating_point() else fn(t), recurse)


def _wrap_blobs(module: _PackedModule, state_dict: dict, prefix: str, *args) -> None:
    """load_state_dict pre-hook: every packed tensor checked before any is loaded (header,
    checksum, fit: ValueError naming the key); plain 1-D uint8 blobs (safetensors files) are
    wrapped with the layer's kind and act; an empty blob stands for "no weights"."""
    for name, kind in module._PACKED.items():
        key = prefix + name
        v = state_dict.get(key)
        if not isinstance(v, Tensor):
            continue
        shape, act = module._packed_shape(name), module._packed_act(name)
        if isinstance(v, PackedWeightsTensor) and v.kind == kind and not v.is_empty:
            t = v  # checked when it was made
        elif (v.blob if isinstance(v, PackedWeightsTensor) else v).numel() == 0:
            state_dict[key] = PackedWeightsTensor.empty(shape, kind, act)
            continue
        else:
            blob = v.blob if isinstance(v, PackedWeightsTensor) else v
            t = state_dict[key] = PackedWeightsTensor(blob, name=key, kind=kind, act=act)
        module._check_fits(key, t.weights)
        if tuple(t.shape) != shape:
            raise ValueError(f"{key}: packed weights of shape {tuple(t.shape)} do not fit this "
                             f"layer {shape}")


class _PackedLinear(_PackedModule):
    """What the layers standing in for an nn.Linear share: ``weight`` (packed, logical shape
    (out, in)), ``bias``, and nn.Linear's forward: F.linear on the packed weight."""

    def _packed_shape(self, name: str) -> tuple:
        return (self.out_features, self.in_features)

    def _init_linear(self, in_features: int, out_features: int, bias: Any,
                     weight: Optional[PackedWeightsTensor], bias_dtype: torch.dtype) -> None:
        self.in_features = int_arg(in_features, "in_features", 1)
        self.out_features = int_arg(out_features, "out_features", 1)
        if isinstance(bias, Tensor) or bias is None:
            b = bias
        else:
            b = torch.zeros(self.out_features, dtype=bias_dtype) if bool_arg(bias, "bias") else None
        self.register_buffer("bias", b)
        self._init_packed(None if weight is None else {"weight": weight})

    def forward(self, x: Tensor) -> Tensor:
        # F.linear(x, self.weight, self.bias), without torch's __torch_function__ dispatch
        return _forward.packed_linear(x, self.weight, self.bias)

    def _identity_rows(self) -> Tensor:
        """The layer on the unit vectors: row k is the weights' column k as the kernel computes
        it (O(in^2 * out) work: for checks on small layers)."""
        w = self.weight
        if w.kind == "ternary":  # exact: the fp32 rule on a unit vector
            w = PackedWeightsTensor(w.blob, verify=False, kind="ternary", act="fp32",
                                    _shape=tuple(w.shape), _weights=w.weights)
        eye = torch.eye(self.in_features, dtype=torch.float32)
        return torch.cat([_forward.packed_linear(eye[i:i + 256], w)
                          for i in range(0, self.in_features, 256)])

    def dequantized(self) -> nn.Linear:
        """The float nn.Linear this layer computes, read back from the packed weights by
        running the kernel on the unit vectors (exact for ternary weights with act="fp32"; small
        layers only: O(in^2 * out))."""
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        with torch.no_grad():
            lin.weight.copy_(self._identity_rows().T)
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin


class TernaryLinear(_PackedLinear):
    """A BitNet b1.58 ternary nn.Linear running cpukern's multiplication-free GEMV.

    ``weight``: the packed ternary rows with their scales (one per row or, with
    ``group_size=G``, one per row and group of G inputs, as GGUF TQ1_0/TQ2_0 store them);
    ``bias`` float32 (out,) or None. ``act`` (carried by the weight): the activation rule,
    "fp32", "int8" or "int8_bitnet" (cpukern.ternary.gemv's act). Input (..., in) of any float
    dtype, computed in float32; output in the input's dtype.

    Bounds (tested):
      * against ``dequantized()`` (the nn.Linear with weight = scale * the ternary weights),
        act="fp32": |y - y_ref| <= 1e-5 * (|x| @ |W_q|.T) + 1e-6; act="int8": additionally
        + |scale| * max|x| / 254 * sum_k |w_k| per output.
      * against the float module it was made from (``from_linear``): absmean quantisation
        error, data dependent; for Gaussian weights and inputs the outputs have cosine
        similarity >= 0.8 with the float outputs (measured 0.88 at 128 x 256).
    """

    _PACKED = {"weight": "ternary"}

    def __init__(self, in_features: int, out_features: int, bias: Any = True, *,
                 act: str = "fp32", group_size: int = 0,
                 weight: Optional[PackedWeightsTensor] = None) -> None:
        super().__init__()
        self._act = act_arg(act, _ternary.ACTS)
        self.group_size = int_arg(group_size, "group_size", 0)
        if self.group_size % 16:
            raise ValueError(f"group_size: expected 0 (one scale per row) or a multiple of 16, got "
                             f"{self.group_size}")
        self._init_linear(in_features, out_features, bias, weight, torch.float32)

    @property
    def act(self) -> str:
        return self.weight.act

    def _packed_act(self, name: str) -> str:
        return self._act

    def _check_fits(self, key: str, w: Any) -> None:
        if (w.op != "ternary" or w.group_size != self.group_size
                or tuple(w.shape) != (self.out_features, self.in_features)):
            raise ValueError(f"{key}: packed weights of shape {tuple(w.shape)} (group_size "
                             f"{w.group_size if w.op == 'ternary' else None}) do not fit this "
                             f"layer ({self.out_features}, {self.in_features}) (group_size "
                             f"{self.group_size})")

    @classmethod
    def from_packed(cls, packed: Tensor, in_features: int, scale: Optional[Tensor] = None,
                    bias: Optional[Tensor] = None, *, act: str = "fp32", variant: str = "",
                    group_size: int = 0) -> "TernaryLinear":
        """The layer of ternary rows in cpukern.ternary's packed format, packed (M,
        ceil(in/16)) uint32/int32, with scale float32 (M,), (1,) or None (1), or (M,
        ceil(in/G)) with group_size=G; bias float (M,) or None."""
        act = act_arg(act, _ternary.ACTS)
        variant = _variant_arg(variant)
        w = _ops.prepare_ternary_tensor(packed, int_arg(in_features, "in_features", 1), scale,
                                        variant, int_arg(group_size, "group_size", 0),
                                        int8=act != "fp32")
        weight = PackedWeightsTensor(w, verify=False, kind="ternary", act=act)
        if bias is not None:
            bias = _float_weight(bias, "bias").detach().to(torch.float32).clone()
        return cls(in_features, int(weight.shape[0]), bias, act=act, group_size=group_size,
                   weight=weight)

    @classmethod
    def from_checkpoint(cls, ckpt, name: str, *, bias: Optional[str] = None, act: str = "fp32",
                        variant: str = "") -> "TernaryLinear":
        """The layer stored as packed rows ``name`` (K and any group size in the header) with
        its scale under ``cpukern.convert.scale_name(name)`` (``<p>.weight`` -> ``<p>.scale``)
        and an optional bias tensor, from ``ternary.load``."""
        from cpukern.convert import scale_name

        for key in (scale_name(name), bias):  # float tensors: never integers taken by value
            if key is not None and ckpt[key].dtype.kind in "biuc":
                raise TypeError(f"ckpt[{key!r}]: expected a floating-point tensor, got "
                                f"{ckpt[key].dtype} tensor of shape {tuple(ckpt[key].shape)}")
        g = ckpt.group_size(name) or 0
        scale = torch.from_numpy(ckpt[scale_name(name)].astype("float32"))
        if not g:
            scale = scale.reshape(-1)
        b = None if bias is None else torch.from_numpy(ckpt[bias].astype("float32"))
        return cls.from_packed(torch.from_numpy(ckpt[name].view("int32").copy()), ckpt.k(name),
                               scale, b, act=act, variant=variant, group_size=g)

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, granularity: str = "row", act: str = "fp32",
                    variant: str = "") -> "TernaryLinear":
        """Quantises ``linear.weight`` with BitNet absmean (per row or per tensor)."""
        w = _float_weight(linear.weight, "linear.weight").detach().to(torch.float32).contiguous()
        bias = _bias_of(linear, torch.float32)
        packed, scale = _ternary.quantize(w, granularity)
        if scale.numel() == 1:
            scale = scale.reshape(1).expand(linear.out_features).contiguous()
        return cls.from_packed(packed, linear.in_features, scale, bias, act=act, variant=variant)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, act={self.act!r}"
                + (f", group_size={self.group_size}" if self.group_size else ""))


class WidelyLinear(_PackedLinear):
    """A Fairy2i widely-linear ternary layer standing in for an nn.Linear with even in/out
    features: the real weight is read as a complex (n, m) matrix, quantised to {+-1, +-i}
    in ``stages`` residual stages (cpukern.widely_linear.quantize) and run by the fused kernel.

    ``weight``: the packed layer (logical shape (out, in)); ``bias`` float32 or None. Input
    (..., 2m) of any float dtype, computed in float32; output (..., 2n) in the input's dtype.

    Bounds (tested):
      * against ``dequantized()`` (nn.Linear with weight = widely_linear.dense(planes, scales)):
        |y - y_ref| <= 1e-4 * (|x| @ |A_q|.T) + 1e-5.
      * against the float module it was made from: quantisation error, data dependent; for
        Gaussian weights the relative Frobenius error of the outputs is <= 0.7 with 1 stage and
        <= 0.45 with 2 stages (measured 0.59-0.64 and 0.35-0.37 at 128 x 256).
    """

    _PACKED = {"weight": "widely_linear"}

    def __init__(self, in_features: int, out_features: int, bias: Any = True, *, stages: int = 2,
                 weight: Optional[PackedWeightsTensor] = None) -> None:
        super().__init__()
        self.stages = int_arg(stages, "stages", 1)
        if (isinstance(in_features, int) and isinstance(out_features, int)
                and (in_features % 2 or out_features % 2 or in_features < 2 or out_features < 2)):
            raise ValueError(f"in_features, out_features: expected even sizes >= 2, got "
                             f"{in_features}, {out_features}")
        self._init_linear(in_features, out_features, bias, weight, torch.float32)

    def _check_fits(self, key: str, layer: Any) -> None:
        if (layer.op != "widely_linear" or layer.stages != self.stages
                or tuple(layer.shape) != (self.out_features, self.in_features)):
            raise ValueError(f"{key}: a packed layer of shape {tuple(layer.shape)} with "
                             f"{getattr(layer, 'stages', None)} stages does not fit this layer "
                             f"({self.out_features}, {self.in_features}) with {self.stages} stages")

    @classmethod
    def from_linear(cls, linear: nn.Linear, stages: int = 2, *,
                    variant: str = "") -> "WidelyLinear":
        a = _float_weight(linear.weight, "linear.weight").detach().to(torch.float32).contiguous()
        bias = _bias_of(linear, torch.float32)
        stages = int_arg(stages, "stages", 1)
        planes, scales = _widely_linear.quantize(a, stages=stages)
        blob = _ops.prepare_widely_linear_tensor(planes, scales, linear.in_features // 2,
                                                 _variant_arg(variant))
        weight = PackedWeightsTensor(blob, verify=False, kind="widely_linear")
        return cls(linear.in_features, linear.out_features, bias, stages=stages, weight=weight)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"stages={self.stages}, bias={self.bias is not None}")
