"""FusedMoE: a Mixture-of-Experts block whose experts are packed (cpukern.torch.modules'
conventions: packed weights are the weights, any float activation dtype in and out)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from cpukern import moe as _moe
from cpukern._arrays import bool_arg, int_arg, str_arg
from cpukern._dtypes import act_arg
from cpukern.torch import forward as _forward
from cpukern.torch import ops as _ops
from cpukern.torch.modules import _float_weight, _variant_arg, _PackedModule
from cpukern.torch.packed import PackedWeightsTensor

__all__ = ["FusedMoE", "MoERouter"]


def _topk_arg(topk: Any, num_experts: int) -> int:
    topk = int_arg(topk, "topk", 1)
    if topk > num_experts:
        raise ValueError(f"topk: expected 1 <= topk <= num_experts = {num_experts}, got {topk}")
    return topk


class FusedMoE(_PackedModule):
    """A Mixture-of-Experts block (vLLM cpu_fused_moe semantics) on cpukern's kernel.

    ``w13`` (E, 2I, H) (rows [gate; up], or interleaved for "swigluoai") and ``w2`` (E, H, I):
    the experts packed in their format (bf16 ``from_experts``, MXFP4 ``from_mxfp4``, int8 W8A8
    ``from_int8``); optional ``w13_bias`` (E, 2I) / ``w2_bias`` (E, H) bf16. ``act``: "fp32"
    (exact) or, for MXFP4 experts only, "int8": W4A8 (int8 activations per token,
    cpukern.moe.prepare's act; its bound is in cpukern.moe's docstring).
    ``forward(x, router_logits)`` routes with softmax + top-k in torch (renormalised if
    ``renormalize``) and runs the experts; ``experts(x, topk_weights, topk_ids)`` takes the
    routing from the caller. x: (..., H) of any float dtype, rounded to bf16 for the kernel;
    returns x's dtype.

    Bound (tested): against a float32 torch oracle of ``experts(x, topk_weights, topk_ids)``
    (tests/python/moe_oracle.py: the activation output rounded to bf16 as the kernel does,
    the rest float32), |y - y_ref| <= 2e-3 + 2e-2 * |y_ref| (bf16 output rounding plus fp32
    summation order).
    """

    _PACKED = {"w13": "moe", "w2": "moe"}
    _act_dtype = torch.bfloat16

    def __init__(self, num_experts: int, hidden: int, intermediate: int, *, topk: int = 2,
                 activation: str = "silu", bias: Any = False, renormalize: bool = True,
                 act: str = "fp32", packed: Optional[dict] = None) -> None:
        super().__init__()
        self.num_experts = int_arg(num_experts, "num_experts", 1)
        self.hidden = int_arg(hidden, "hidden", 1)
        self.intermediate = int_arg(intermediate, "intermediate", 1)
        self.topk = _topk_arg(topk, self.num_experts)
        self.activation = str_arg(activation, "activation", _moe.ACTIVATIONS)
        self.renormalize = bool_arg(renormalize, "renormalize")
        self.act = act_arg(act, _moe.ACTS)
        e, h, i = self.num_experts, self.hidden, self.intermediate
        bias = bool_arg(bias, "bias")
        bf = torch.bfloat16
        self.register_buffer("w13_bias", torch.zeros(e, 2 * i, dtype=bf) if bias else None)
        self.register_buffer("w2_bias", torch.zeros(e, h, dtype=bf) if bias else None)
        self._init_packed(packed)

    def _packed_shape(self, name: str) -> tuple:
        e, h, i = self.num_experts, self.hidden, self.intermediate
        return (e, 2 * i, h) if name == "w13" else (e, h, i)

    def _check_fits(self, key: str, p: Any) -> None:
        want = self._packed_shape(key.rpartition(".")[2])
        if p.op != "moe" or tuple(p.shape) != want:
            raise ValueError(f"{key}: packed experts of shape {tuple(p.shape)} do not fit this "
                             f"layer {want}")
        if (p.format == "mxfp4_a8") != (self.act == "int8"):
            raise ValueError(f"{key}: packed as {p.format}, this layer runs act={self.act!r}")

    @classmethod
    def _packing(cls, w13: Tensor, w2: Tensor, s13: Optional[Tensor], s2: Optional[Tensor],
                 w13_bias: Optional[Tensor], w2_bias: Optional[Tensor], hidden: int, topk: int,
                 activation: str, renormalize: bool, variant: str, act: str) -> "FusedMoE":
        """The module of experts w13, w2 (any format ops.prepare_experts_tensor takes) packed
        now, with their optional biases (stored bf16)."""
        if (w13_bias is None) != (w2_bias is None):
            raise ValueError("w13_bias, w2_bias: give both or neither")
        biases = tuple(None if b is None else _float_weight(b, n).detach().to(torch.bfloat16).contiguous()
                       for n, b in (("w13_bias", w13_bias), ("w2_bias", w2_bias)))
        e, i2 = int(w13.shape[0]), int(w13.shape[1])
        if min(e, i2, hidden) < 1:
            raise ValueError(f"w13: expected E, 2I and H >= 1, got shape {tuple(w13.shape)}")
        act = act_arg(act, _moe.ACTS)
        variant = _variant_arg(variant)
        packed = {name: PackedWeightsTensor(_ops.prepare_experts_tensor(w, name, variant, s, act),
                                            verify=False, kind="moe")
                  for name, w, s in (("w13", w13, s13), ("w2", w2, s2))}
        mod = cls(e, hidden, i2 // 2, topk=topk, activation=activation, renormalize=renormalize,
                  act=act, packed=packed)
        mod.w13_bias, mod.w2_bias = biases
        return mod

    @classmethod
    def from_experts(cls, w13: Tensor, w2: Tensor, w13_bias: Optional[Tensor] = None,
                     w2_bias: Optional[Tensor] = None, *, topk: int = 2, activation: str = "silu",
                     renormalize: bool = True, variant: str = "") -> "FusedMoE":
        """w13 (E, 2I, H) and w2 (E, H, I) in nn.Linear [out, in] order (any float dtype,
        rounded to bf16 and packed)."""
        for name, t in (("w13", w13), ("w2", w2)):
            _float_weight(t, name)
        if w13.dim() != 3 or w2.dim() != 3:
            raise ValueError(f"w13, w2: expected 3 dimensions, got {tuple(w13.shape)}, {tuple(w2.shape)}")
        e, i2, h = (int(s) for s in w13.shape)
        if i2 % 2 or tuple(w2.shape) != (e, h, i2 // 2):
            raise ValueError(f"w2: expected shape {(e, h, i2 // 2)} to match w13 {tuple(w13.shape)}, "
                             f"got {tuple(w2.shape)}")
        bf = torch.bfloat16
        return cls._packing(w13.detach().to(bf).contiguous(), w2.detach().to(bf).contiguous(),
                            None, None, w13_bias, w2_bias, h, topk, activation, renormalize,
                            variant, "fp32")

    @classmethod
    def from_mxfp4(cls, w13_blocks: Tensor, w13_scales: Tensor, w2_blocks: Tensor,
                   w2_scales: Tensor, w13_bias: Optional[Tensor] = None,
                   w2_bias: Optional[Tensor] = None, *, topk: int = 4,
                   activation: str = "swigluoai", renormalize: bool = True,
                   variant: str = "", act: str = "fp32") -> "FusedMoE":
        """MXFP4 experts as gpt-oss stores them: blocks uint8 (E, O, I/32, 16), scales uint8
        (E, O, I/32) for w13 (O = 2I) and w2 (O = H), packed as MXFP4 (never expanded to
        bf16). act="int8": W4A8."""
        cls._check_quantized(torch.uint8, w13_blocks, w2_blocks)
        return cls._packing(w13_blocks, w2_blocks, w13_scales, w2_scales, w13_bias, w2_bias,
                            int(w13_blocks.shape[2]) * 32, topk, activation, renormalize,
                            variant, act)

    @classmethod
    def from_int8(cls, w13: Tensor, w13_scales: Tensor, w2: Tensor, w2_scales: Tensor,
                  w13_bias: Optional[Tensor] = None, w2_bias: Optional[Tensor] = None, *,
                  topk: int = 2, activation: str = "silu", renormalize: bool = True,
                  variant: str = "") -> "FusedMoE":
        """int8 W8A8 experts: w13 int8 (E, 2I, H), w2 int8 (E, H, I) with float32 per-channel
        scales (E, 2I) / (E, H) (cpukern.moe.quantize(w, format="int8") makes both);
        activations are quantised per token at run time."""
        cls._check_quantized(torch.int8, w13, w2)
        return cls._packing(w13, w2, w13_scales, w2_scales, w13_bias, w2_bias, int(w13.shape[2]),
                            topk, activation, renormalize, variant, "fp32")

    @staticmethod
    def _check_quantized(dtype: torch.dtype, w13: Any, w2: Any) -> None:
        dims = 4 if dtype == torch.uint8 else 3
        for name, t in (("w13", w13), ("w2", w2)):
            if not isinstance(t, Tensor) or t.dtype != dtype or t.dim() != dims:
                got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
                raise TypeError(f"{name}: expected a {dims}-D {dtype} tensor, got {got}")

    def route(self, router_logits: Tensor) -> tuple[Tensor, Tensor]:
        """(topk_weights float32 (T, k), topk_ids int32 (T, k)) from float logits (T, E)."""
        p = torch.softmax(router_logits.to(torch.float32), dim=-1)
        w, ids = torch.topk(p, self.topk, dim=-1)
        if self.renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        return w.contiguous(), ids.to(torch.int32)

    def experts(self, x: Tensor, topk_weights: Tensor, topk_ids: Tensor) -> Tensor:
        _forward.check_float(x, "x")
        for name in ("w13", "w2"):
            if getattr(self, name).is_empty:
                raise ValueError(f"{name}: holds no packed weights yet (load a state_dict or pack "
                                 f"the layer with a from_* constructor)")
        if x.dim() < 1 or x.shape[-1] != self.hidden:
            raise ValueError(f"x: expected {self.hidden} input features, got shape {tuple(x.shape)}")
        lead = tuple(x.shape[:-1])
        xb = x.reshape(-1, self.hidden).to(torch.bfloat16).contiguous()
        tw = topk_weights.reshape(-1, self.topk).to(torch.float32).contiguous()
        ids = topk_ids.reshape(-1, self.topk).contiguous()
        y = _forward.packed_fused_moe(xb, self.w13, self.w2, tw, ids, self.activation,
                                  self.w13_bias, self.w2_bias)
        return y.reshape(lead + (self.hidden,)).to(x.dtype)

    def forward(self, x: Tensor, router_logits: Tensor) -> Tensor:
        tw, ids = self.route(router_logits.reshape(-1, self.num_experts))
        return self.experts(x, tw, ids)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden={self.hidden}, intermediate="
                f"{self.intermediate}, topk={self.topk}, activation={self.activation!r}"
                + (f", act={self.act!r}" if self.act != "fp32" else ""))


class MoERouter(_PackedModule):
    """A Mixture-of-Experts router in one cpukern call: the logits GEMV on the dense kernel
    (``weight`` (E, H) packed bf16, ``bias`` bf16 (E,) or None), then the routing rule in C++
    (cpukern.moe.route's ``rule``: "softmax_topk" with ``renormalize``, Qwen3-MoE's router with
    norm_topk_prob; "topk_softmax", gpt-oss's). Stands in for transformers' top-k routers:
    ``forward(hidden_states (..., H))`` returns (logits (T, E), routing weights (T, topk), expert
    ids int64 (T, topk)) as they do, the logits and weights in the input's dtype. The input is
    rounded to bf16 for the kernel; the logits are bf16 (as the model's bf16 F.linear rounds
    them), the rule runs in float32 on them and the weights are rounded once.

    Against the stock bf16 router (tested): the same logits up to fp32 summation order (one
    bf16 rounding step apart at most), hence the same experts except where two candidates'
    logits are that close, and weights within one bf16 rounding of the stock ones.
    """

    _PACKED = {"weight": "linear"}
    _act_dtype = torch.bfloat16

    def __init__(self, hidden: int, num_experts: int, topk: int, *,
                 rule: str = "softmax_topk", renormalize: Optional[bool] = None,
                 bias: Any = False, weight: Optional[PackedWeightsTensor] = None) -> None:
        super().__init__()
        self.hidden = int_arg(hidden, "hidden", 1)
        self.num_experts = int_arg(num_experts, "num_experts", 1)
        self.topk = _topk_arg(topk, self.num_experts)
        self.rule = str_arg(rule, "rule", _moe.ROUTE_RULES)
        self.renormalize = (self.rule == "softmax_topk" if renormalize is None
                            else bool_arg(renormalize, "renormalize"))
        if self.renormalize and self.rule == "topk_softmax":
            raise ValueError("renormalize: topk_softmax weights already sum to 1; pass "
                             "renormalize=False")
        if isinstance(bias, Tensor):
            b = _float_weight(bias, "bias").detach().to(torch.bfloat16).contiguous()
            if tuple(b.shape) != (self.num_experts,):
                raise ValueError(f"bias: expected shape ({self.num_experts},), got "
                                 f"{tuple(b.shape)}")
        else:
            b = (torch.zeros(self.num_experts, dtype=torch.bfloat16)
                 if bool_arg(bias, "bias") else None)
        self.register_buffer("bias", b)
        self._init_packed(None if weight is None else {"weight": weight})

    def _packed_shape(self, name: str) -> tuple:
        return (self.num_experts, self.hidden)

    def _check_fits(self, key: str, p: Any) -> None:
        if p.op != "moe" or tuple(p.shape) != (1, self.num_experts, self.hidden):
            raise ValueError(f"{key}: packed weight of shape {tuple(p.shape)} does not fit this "
                             f"router (1, {self.num_experts}, {self.hidden})")
        if p.format != "bf16":
            raise ValueError(f"{key}: packed as {p.format}, a router's weight is bf16")

    @classmethod
    def from_weight(cls, weight: Tensor, topk: int, *, bias: Optional[Tensor] = None,
                    rule: str = "softmax_topk", renormalize: Optional[bool] = None,
                    variant: str = "") -> "MoERouter":
        """The router of a float weight (E, H) (rounded to bf16 and packed now) and optional
        bias (E,)."""
        _float_weight(weight, "weight")
        if weight.dim() != 2 or min(weight.shape) < 1:
            raise ValueError(f"weight: expected (num_experts, hidden), got shape "
                             f"{tuple(weight.shape)}")
        e, h = (int(d) for d in weight.shape)
        w = weight.detach().to(torch.bfloat16).contiguous().unsqueeze(0)
        blob = _ops.prepare_experts_tensor(w, "weight", _ops.linear_variant(_variant_arg(variant)))
        packed = PackedWeightsTensor(blob, verify=False, kind="linear")
        return cls(h, e, topk, rule=rule, renormalize=renormalize,
                   bias=False if bias is None else bias, weight=packed)

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        _forward.check_float(hidden_states, "hidden_states")
        if self.weight.is_empty:
            raise ValueError("weight: holds no packed weights yet (load a state_dict or pack the "
                             "router with from_weight)")
        if hidden_states.dim() < 1 or hidden_states.shape[-1] != self.hidden:
            raise ValueError(f"hidden_states: expected {self.hidden} features, got shape "
                             f"{tuple(hidden_states.shape)}")
        dtype = hidden_states.dtype
        x = hidden_states.reshape(-1, self.hidden)
        if dtype != torch.bfloat16:
            x = x.to(torch.bfloat16)
        logits, weights, ids = _forward.packed_router(
            x.contiguous(), self.weight, self.num_experts, self.bias, self.topk, self.rule,
            self.renormalize)
        if dtype != torch.bfloat16:
            logits, weights = logits.to(dtype), weights.to(dtype)
        return logits, weights, ids

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, num_experts={self.num_experts}, "
                f"topk={self.topk}, rule={self.rule!r}, renormalize={self.renormalize}, "
                f"bias={self.bias is not None}")
