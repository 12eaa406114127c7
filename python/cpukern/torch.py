"""PyTorch integration: custom ops (torch.library, namespace ``cpukern``) and nn.Modules.

Importing this module requires torch; ``import cpukern`` does not.

Ops (all with fake/meta implementations, so torch.compile(fullgraph=True) and torch.export
trace them without graph breaks; no autograd: inference only):

``torch.ops.cpukern.ternary_gemv(packed, x, scale=None, act="fp32", isa="") -> Tensor``
    packed: uint32 or int32 (M, ceil(K/16)) in cpukern.ternary's packed format (int32 is
    viewed as uint32, no copy); x: float32 (K,) or (B, K); scale: None or float32 (M,) or (1,).
    Returns float32 (M,) or (B, M).
``torch.ops.cpukern.widely_linear(planes, scales, x, isa="") -> Tensor``
    planes: uint32/int32 (S, 4, n, ceil(m/16)); scales float32 (S, 4) or (S, 4, n);
    x float32 (2m,) or (B, 2m). Returns float32 (2n,) or (B, 2n).
``torch.ops.cpukern.fused_moe(x, w13, w2, topk_weights, topk_ids, activation="silu",
w13_bias=None, w2_bias=None, skip_weighted=False, isa="") -> Tensor``
    cpukern.moe.fused_moe over bf16 expert weights w13 (E, 2I, H) and w2 (E, H, I).
``torch.ops.cpukern.prepack_moe_weight(weight, packed_weight, isa) -> ()``
``torch.ops.cpukern.cpu_fused_moe(output, input, w13, w2, w13_bias, w2_bias, topk_weights,
topk_id, skip_weighted, act, isa) -> ()``
    vLLM's argument order and meaning (vllm._custom_ops); ``isa`` may be one of cpukern's
    variant names (forced) or "", "auto" or a vLLM name ("amx", "vec", "neon": automatic).

Prepared weights (the kernels' own layouts: cpukern.ternary.prepare, moe.prepack) are not
tensors, so the op schemas take the plain weight tensors and each op keeps the prepared form
in a cache keyed by the weight tensor: its identity, data_ptr, shape and version counter
(``tensor._version``). The first call with given weights converts them (O(weights)); later
calls reuse the conversion; an in-place change through torch (``copy_``, ``load_state_dict``)
bumps the version and the next call converts again. The entry is dropped when the weight
tensor object is garbage collected. Writes that bypass torch's version counter (through a
numpy view, ``.data`` tricks, or another process) are not seen: call ``clear_cache()``.

vLLM's ``prepack_moe_weight(weight, packed_weight, isa)`` fills ``packed_weight`` (same shape
and dtype as ``weight``, as vLLM allocates it with ``empty_like``) with the weights and packs
them into the cache keyed by ``packed_weight``; ``cpu_fused_moe`` looks the packing up there
(and packs again if the entry is missing or stale, e.g. after loading a state dict). The
packed layout pads rows and columns to the micro-kernel's tile, so in general it does not fit
in a tensor of the weight's shape; keeping the bf16 weights in ``packed_weight`` keeps that
tensor self-describing (it can be saved, loaded and re-packed for another CPU) at the cost
of holding the weights twice (the tensor and the packing).
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from cpukern import moe as _moe
from cpukern import ternary as _ternary

__all__ = ["TernaryLinear", "WidelyLinear", "FusedMoE", "clear_cache", "cache_info"]

_VLLM_ISAS = ("", "auto", "amx", "vec", "neon")


def _isa(isa: Optional[str]) -> Optional[str]:
    if isa is None or isa in _VLLM_ISAS:
        return None
    return isa


# --- the prepared-weight cache ---------------------------------------------------------------

def _version(t: Tensor) -> int:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors track no version
        return -1


def _fingerprint(t: Optional[Tensor]) -> tuple:
    if t is None:
        return (None,)
    return (t.data_ptr(), _version(t), tuple(t.shape), t.dtype)


class _Cache:
    """anchor tensor object -> (key, prepared). One entry per live anchor."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[tuple, Any]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _drop(self, ident: int) -> None:
        with self._lock:
            self._entries.pop(ident, None)

    def get(self, anchor: Tensor, key: tuple, build: Callable[[], Any]) -> Any:
        ident = id(anchor)
        key = (_fingerprint(anchor),) + key
        with self._lock:
            entry = self._entries.get(ident)
            if entry is not None and entry[0] == key:
                self.hits += 1
                return entry[1]
        value = build()
        with self._lock:
            self.misses += 1
            fresh = ident not in self._entries
            self._entries[ident] = (key, value)
        if fresh:
            weakref.finalize(anchor, self._drop, ident)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


_CACHE = _Cache()


def clear_cache() -> None:
    """Forgets every prepared weight (the next call of each op converts again)."""
    _CACHE.clear()


def cache_info() -> dict[str, int]:
    """{'entries', 'hits', 'misses'} of the prepared-weight cache."""
    return {"entries": len(_CACHE), "hits": _CACHE.hits, "misses": _CACHE.misses}


def _u32(t: Tensor, name: str) -> Tensor:
    if t.dtype == torch.int32:
        return t.view(torch.uint32)
    if t.dtype != torch.uint32:
        raise TypeError(f"{name}: expected a uint32 or int32 tensor, got {t.dtype} tensor of shape "
                        f"{tuple(t.shape)}")
    return t


def _check_2d_or_1d(x: Tensor, name: str) -> None:
    if x.dim() not in (1, 2):
        raise ValueError(f"{name}: expected 1 or 2 dimensions, got shape {tuple(x.shape)}")


# --- ops -------------------------------------------------------------------------------------

@torch.library.custom_op("cpukern::ternary_gemv", mutates_args=())
def ternary_gemv(packed: Tensor, x: Tensor, scale: Optional[Tensor] = None, act: str = "fp32",
                 isa: str = "") -> Tensor:
    """y[..., m] = scale[m] * sum_k w[m, k] x[..., k] (see cpukern.ternary.gemv)."""
    _check_2d_or_1d(x, "x")
    k = int(x.shape[-1])
    p = _u32(packed, "packed")

    def build() -> Any:
        s = scale
        if s is not None and s.numel() == 1 and p.dim() == 2 and p.shape[0] != 1:
            s = s.reshape(1).expand(p.shape[0]).contiguous()
        return _ternary.prepare(p, k, s, isa=_isa(isa))

    prepared = _CACHE.get(packed, (k, _fingerprint(scale), _isa(isa)), build)
    return _ternary.gemv(prepared, x, act=act)


@ternary_gemv.register_fake
def _(packed, x, scale=None, act="fp32", isa=""):
    torch._check(packed.dim() == 2, lambda: "packed: expected 2 dimensions (M, words)")
    torch._check(x.dim() in (1, 2), lambda: "x: expected 1 or 2 dimensions")
    torch._check(x.dtype == torch.float32, lambda: "x: expected float32")
    return x.new_empty(tuple(x.shape[:-1]) + (packed.shape[0],), dtype=torch.float32)


@torch.library.custom_op("cpukern::widely_linear", mutates_args=())
def widely_linear(planes: Tensor, scales: Tensor, x: Tensor, isa: str = "") -> Tensor:
    """y = U x + W conj(x) as a real layer (see cpukern.ternary.widely_linear)."""
    _check_2d_or_1d(x, "x")
    m = int(x.shape[-1]) // 2
    p = _u32(planes, "planes")
    layer = _CACHE.get(planes, (m, _fingerprint(scales), _isa(isa)),
                       lambda: _ternary.prepare_widely_linear(p, scales, m, isa=_isa(isa)))
    return _ternary.widely_linear(layer, x)


@widely_linear.register_fake
def _(planes, scales, x, isa=""):
    torch._check(planes.dim() in (3, 4), lambda: "planes: expected (S, 4, n, words)")
    torch._check(x.dim() in (1, 2), lambda: "x: expected 1 or 2 dimensions")
    torch._check(x.dtype == torch.float32, lambda: "x: expected float32")
    return x.new_empty(tuple(x.shape[:-1]) + (2 * planes.shape[-2],), dtype=torch.float32)


def _packed_experts(w: Tensor, name: str, isa: Optional[str]) -> Any:
    if w.dtype != torch.bfloat16:
        raise TypeError(f"{name}: expected a bfloat16 tensor (E, O, I), got {w.dtype} tensor of "
                        f"shape {tuple(w.shape)}")
    return _CACHE.get(w, (isa,), lambda: _moe.prepack(w, isa=isa))


def _fused_moe_into(out: Tensor, x: Tensor, w13: Tensor, w2: Tensor, topk_weights: Tensor,
                    topk_ids: Tensor, activation: str, w13_bias: Optional[Tensor],
                    w2_bias: Optional[Tensor], skip_weighted: bool, isa: str) -> None:
    forced = _isa(isa)
    p13 = _packed_experts(w13, "w13", forced)
    p2 = _packed_experts(w2, "w2", forced)
    if topk_ids.dtype == torch.int64:  # torch.topk's index dtype; the kernel reads int32
        topk_ids = topk_ids.to(torch.int32)
    _moe.fused_moe(x, p13, p2, topk_weights, topk_ids, activation=activation, w13_bias=w13_bias,
                   w2_bias=w2_bias, skip_weighted=skip_weighted, out=out)


@torch.library.custom_op("cpukern::fused_moe", mutates_args=())
def fused_moe(x: Tensor, w13: Tensor, w2: Tensor, topk_weights: Tensor, topk_ids: Tensor,
              activation: str = "silu", w13_bias: Optional[Tensor] = None,
              w2_bias: Optional[Tensor] = None, skip_weighted: bool = False,
              isa: str = "") -> Tensor:
    """bf16 fused MoE (see cpukern.moe.fused_moe); w13 (E, 2I, H), w2 (E, H, I) bf16."""
    out = torch.empty_like(x)
    _fused_moe_into(out, x, w13, w2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                    skip_weighted, isa)
    return out


@fused_moe.register_fake
def _(x, w13, w2, topk_weights, topk_ids, activation="silu", w13_bias=None, w2_bias=None,
      skip_weighted=False, isa=""):
    torch._check(x.dim() == 2, lambda: "x: expected (T, H)")
    torch._check(x.dtype == torch.bfloat16, lambda: "x: expected bfloat16")
    return torch.empty_like(x)


@torch.library.custom_op("cpukern::prepack_moe_weight", mutates_args=("packed_weight",))
def prepack_moe_weight(weight: Tensor, packed_weight: Tensor, isa: str) -> None:
    """vLLM order: packs bf16 weight (E, O, I) for cpu_fused_moe; packed_weight: a tensor of
    the same shape and dtype (torch.empty_like(weight)) that receives the weights and keys the
    packing."""
    if weight.dtype != torch.bfloat16 or packed_weight.dtype != torch.bfloat16:
        raise TypeError(f"weight, packed_weight: expected bfloat16 tensors, got {weight.dtype} and "
                        f"{packed_weight.dtype}")
    if weight.dim() != 3 or tuple(packed_weight.shape) != tuple(weight.shape):
        raise ValueError(f"packed_weight: expected shape {tuple(weight.shape)} (E, O, I) like "
                         f"weight, got {tuple(packed_weight.shape)}")
    if not packed_weight.is_contiguous():
        raise TypeError("packed_weight: expected a contiguous tensor")
    if packed_weight.data_ptr() != weight.data_ptr():
        packed_weight.copy_(weight)
    # Pack now (the load-time cost belongs here). The custom-op machinery bumps the version
    # of packed_weight once more after this returns: the first cpu_fused_moe adopts the
    # packing if the version is the one seen here or the next (see _adopt).
    _PENDING[id(packed_weight)] = (packed_weight.data_ptr(), tuple(packed_weight.shape),
                                   _version(packed_weight), _isa(isa),
                                   _moe.prepack(packed_weight, isa=_isa(isa)))
    weakref.finalize(packed_weight, _PENDING.pop, id(packed_weight), None)


@prepack_moe_weight.register_fake
def _(weight, packed_weight, isa):
    return None


# Packings made by prepack_moe_weight, adopted by the first cpu_fused_moe call on that tensor.
_PENDING: dict[int, tuple] = {}


def _adopt(w: Tensor, isa: Optional[str]) -> None:
    pending = _PENDING.pop(id(w), None)
    if pending is None:
        return
    ptr, shape, version, pisa, packed = pending
    if (ptr == w.data_ptr() and shape == tuple(w.shape) and pisa == isa
            and _version(w) in (version, version + 1)):
        _CACHE.get(w, (isa,), lambda: packed)


@torch.library.custom_op("cpukern::cpu_fused_moe", mutates_args=("output",))
def cpu_fused_moe(output: Tensor, input: Tensor, w13: Tensor, w2: Tensor,
                  w13_bias: Optional[Tensor], w2_bias: Optional[Tensor], topk_weights: Tensor,
                  topk_id: Tensor, skip_weighted: bool, act: str, isa: str) -> None:
    """vLLM order: output (T, H) bf16 <- fused MoE of input with the packed w13, w2."""
    for w in (w13, w2):
        _adopt(w, _isa(isa))
    _fused_moe_into(output, input, w13, w2, topk_weights, topk_id, act, w13_bias, w2_bias,
                    skip_weighted, isa)


@cpu_fused_moe.register_fake
def _(output, input, w13, w2, w13_bias, w2_bias, topk_weights, topk_id, skip_weighted, act, isa):
    return None


# --- modules ---------------------------------------------------------------------------------

def _flatten(x: Tensor, features: int, name: str) -> tuple[Tensor, tuple]:
    if x.shape[-1] != features:
        raise ValueError(f"{name}: expected {features} input features, got shape {tuple(x.shape)}")
    lead = tuple(x.shape[:-1])
    return x.reshape(-1, features), lead


class _LinearLike(nn.Module):
    """The forward shared by the layers that stand in for an nn.Linear: rows of float32 x
    through the subclass's `_kernel`, then the bias."""

    def forward(self, x: Tensor) -> Tensor:
        x2, lead = _flatten(x, self.in_features, "x")
        y = self._kernel(x2.to(torch.float32).contiguous())
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(lead + (self.out_features,))


class TernaryLinear(_LinearLike):
    """A BitNet b1.58 ternary nn.Linear running cpukern's multiplication-free GEMV.

    Weights: ``packed`` int32 (out, ceil(in/16)) (cpukern.ternary's packed format, viewed as
    int32 so that every torch tool handles it), ``scale`` float32 (out,), optional ``bias``.
    Input: float32 (..., in) (other dtypes are converted, which copies); output float32
    (..., out).

    Bounds (tested):
      * against ``dequantized()`` (an nn.Linear with weight = scale[:, None] * unpack(packed)),
        the module it stands for: act="fp32": |y - y_ref| <= 1e-5 * (|x| @ |W_q|.T) + 1e-6;
        act="int8": additionally + |scale| * max|x| / 254 * sum_k |w_k| per output.
      * against the float module it was made from (``from_linear``): absmean quantisation
        error, data dependent; for Gaussian weights and inputs the outputs have cosine
        similarity >= 0.8 with the float outputs (measured 0.88 at 128 x 256).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 act: str = "fp32", isa: str = "") -> None:
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.act, self.isa = act, isa
        words = (self.in_features + 15) // 16
        self.register_buffer("packed", torch.zeros(self.out_features, words, dtype=torch.int32))
        self.register_buffer("scale", torch.ones(self.out_features, dtype=torch.float32))
        self.register_buffer("bias", torch.zeros(self.out_features) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, granularity: str = "row", act: str = "fp32",
                    isa: str = "") -> "TernaryLinear":
        """Quantises ``linear.weight`` with BitNet absmean (per row or per tensor)."""
        w = linear.weight.detach().to(torch.float32).contiguous()
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, act=act, isa=isa)
        packed, scale = _ternary.quantize(w, granularity)
        mod.packed.copy_(packed.view(torch.int32))
        mod.scale.copy_(scale)
        if linear.bias is not None:
            mod.bias.copy_(linear.bias.detach().to(torch.float32))
        return mod

    def dequantized(self) -> nn.Linear:
        """The float nn.Linear this layer computes (scale * ternary weights)."""
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        w = _ternary.unpack(self.packed.view(torch.uint32), self.in_features).to(torch.float32)
        with torch.no_grad():
            lin.weight.copy_(w * self.scale[:, None])
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    def _kernel(self, x2: Tensor) -> Tensor:
        return torch.ops.cpukern.ternary_gemv(self.packed, x2, self.scale, self.act, self.isa)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, act={self.act!r}")


class WidelyLinear(_LinearLike):
    """A Fairy2i widely-linear ternary layer standing in for an nn.Linear with even in/out
    features: the real weight is read as a complex (n, m) matrix, quantised to {+-1, +-i}
    in ``stages`` residual stages (cpukern.ternary.phase_quantize) and run by the fused kernel.

    Buffers: ``planes`` int32 (stages, 4, n, ceil(m/16)), ``scales`` float32 (stages, 4),
    optional ``bias``. Input float32 (..., 2m); output float32 (..., 2n).

    Bounds (tested):
      * against ``dequantized()`` (nn.Linear with weight = widely_linear_dense(planes, scales)):
        |y - y_ref| <= 1e-4 * (|x| @ |A_q|.T) + 1e-5.
      * against the float module it was made from: quantisation error, data dependent; for
        Gaussian weights the relative Frobenius error of the outputs is <= 0.7 with 1 stage and
        <= 0.45 with 2 stages (measured 0.59-0.64 and 0.35-0.37 at 128 x 256).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, stages: int = 2,
                 isa: str = "") -> None:
        super().__init__()
        if in_features % 2 or out_features % 2 or in_features < 2 or out_features < 2:
            raise ValueError(f"in_features, out_features: expected even sizes >= 2, got "
                             f"{in_features}, {out_features}")
        self.in_features, self.out_features, self.stages = int(in_features), int(out_features), int(stages)
        self.isa = isa
        n, m = self.out_features // 2, self.in_features // 2
        self.register_buffer("planes", torch.zeros(self.stages, 4, n, (m + 15) // 16, dtype=torch.int32))
        self.register_buffer("scales", torch.zeros(self.stages, 4, dtype=torch.float32))
        self.register_buffer("bias", torch.zeros(self.out_features) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, stages: int = 2, *, isa: str = "") -> "WidelyLinear":
        a = linear.weight.detach().to(torch.float32).contiguous()
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, stages=stages, isa=isa)
        planes, scales = _ternary.phase_quantize(a, stages=stages)
        mod.planes.copy_(planes.view(torch.int32))
        mod.scales.copy_(scales)
        if linear.bias is not None:
            mod.bias.copy_(linear.bias.detach().to(torch.float32))
        return mod

    def dequantized(self) -> nn.Linear:
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        dense = _ternary.widely_linear_dense(self.planes.view(torch.uint32), self.scales,
                                             self.in_features // 2)
        with torch.no_grad():
            lin.weight.copy_(dense)
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    def _kernel(self, x2: Tensor) -> Tensor:
        return torch.ops.cpukern.widely_linear(self.planes, self.scales, x2, self.isa)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"stages={self.stages}, bias={self.bias is not None}")


class FusedMoE(nn.Module):
    """A bf16 Mixture-of-Experts block (vLLM cpu_fused_moe semantics) on cpukern's kernel.

    Buffers: ``w13`` bf16 (E, 2I, H) (rows [gate; up], or interleaved for "swigluoai"), ``w2``
    bf16 (E, H, I), optional ``w13_bias`` (E, 2I) / ``w2_bias`` (E, H) bf16.
    ``forward(x, router_logits)`` routes with softmax + top-k in torch (renormalised if
    ``renormalize``) and runs ``torch.ops.cpukern.fused_moe``; ``experts(x, topk_weights,
    topk_ids)`` takes the routing from the caller. x: bf16 (..., H); returns bf16 (..., H).

    Bound (tested): against ``reference(x, topk_weights, topk_ids)`` (float32 torch: the
    activation output rounded to bf16 as the kernel does, the rest float32),
    |y - y_ref| <= 2e-3 + 2e-2 * |y_ref| (bf16 output rounding plus fp32 summation order).
    """

    def __init__(self, num_experts: int, hidden: int, intermediate: int, *, topk: int = 2,
                 activation: str = "silu", bias: bool = False, renormalize: bool = True,
                 isa: str = "") -> None:
        super().__init__()
        if activation not in _moe.ACTIVATIONS:
            raise ValueError(f"activation: expected one of {_moe.ACTIVATIONS}, got {activation!r}")
        self.num_experts, self.hidden, self.intermediate = int(num_experts), int(hidden), int(intermediate)
        self.topk, self.activation, self.renormalize, self.isa = int(topk), activation, renormalize, isa
        e, h, i = self.num_experts, self.hidden, self.intermediate
        bf = torch.bfloat16
        self.register_buffer("w13", torch.zeros(e, 2 * i, h, dtype=bf))
        self.register_buffer("w2", torch.zeros(e, h, i, dtype=bf))
        self.register_buffer("w13_bias", torch.zeros(e, 2 * i, dtype=bf) if bias else None)
        self.register_buffer("w2_bias", torch.zeros(e, h, dtype=bf) if bias else None)

    @classmethod
    def from_experts(cls, w13: Tensor, w2: Tensor, w13_bias: Optional[Tensor] = None,
                     w2_bias: Optional[Tensor] = None, *, topk: int = 2, activation: str = "silu",
                     renormalize: bool = True, isa: str = "") -> "FusedMoE":
        """w13 (E, 2I, H) and w2 (E, H, I) in nn.Linear [out, in] order (any float dtype,
        stored as bf16)."""
        if w13.dim() != 3 or w2.dim() != 3:
            raise ValueError(f"w13, w2: expected 3 dimensions, got {tuple(w13.shape)}, {tuple(w2.shape)}")
        e, i2, h = (int(s) for s in w13.shape)
        if i2 % 2 or tuple(w2.shape) != (e, h, i2 // 2):
            raise ValueError(f"w2: expected shape {(e, h, i2 // 2)} to match w13 {tuple(w13.shape)}, "
                             f"got {tuple(w2.shape)}")
        mod = cls(e, h, i2 // 2, topk=topk, activation=activation, bias=w13_bias is not None,
                  renormalize=renormalize, isa=isa)
        if (w13_bias is None) != (w2_bias is None):
            raise ValueError("w13_bias, w2_bias: give both or neither")
        with torch.no_grad():
            mod.w13.copy_(w13)
            mod.w2.copy_(w2)
            if w13_bias is not None:
                mod.w13_bias.copy_(w13_bias)
                mod.w2_bias.copy_(w2_bias)
        return mod

    def route(self, router_logits: Tensor) -> tuple[Tensor, Tensor]:
        """(topk_weights float32 (T, k), topk_ids int32 (T, k)) from float logits (T, E)."""
        p = torch.softmax(router_logits.to(torch.float32), dim=-1)
        w, ids = torch.topk(p, self.topk, dim=-1)
        if self.renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        return w.contiguous(), ids.to(torch.int32)

    def experts(self, x: Tensor, topk_weights: Tensor, topk_ids: Tensor) -> Tensor:
        x2, lead = _flatten(x, self.hidden, "x")
        y = torch.ops.cpukern.fused_moe(x2.contiguous(), self.w13, self.w2,
                                        topk_weights.reshape(-1, self.topk).contiguous(),
                                        topk_ids.reshape(-1, self.topk).contiguous(),
                                        self.activation, self.w13_bias, self.w2_bias, False, self.isa)
        return y.reshape(lead + (self.hidden,))

    def forward(self, x: Tensor, router_logits: Tensor) -> Tensor:
        tw, ids = self.route(router_logits.reshape(-1, self.num_experts))
        return self.experts(x, tw, ids)

    def reference(self, x: Tensor, topk_weights: Tensor, topk_ids: Tensor) -> Tensor:
        """float32 torch semantics of the kernel (slow; for tests), returned as float32."""
        x2 = x.reshape(-1, self.hidden).to(torch.float32)
        tw = topk_weights.reshape(-1, self.topk).to(torch.float32)
        ids = topk_ids.reshape(-1, self.topk).to(torch.int64)
        out = torch.zeros_like(x2)
        i = self.intermediate
        for t in range(x2.shape[0]):
            for j in range(self.topk):
                e = int(ids[t, j])
                g = self.w13[e].float() @ x2[t]
                if self.w13_bias is not None:
                    g = g + self.w13_bias[e].float()
                a = _activation(self.activation, g, i).to(torch.bfloat16).float()
                o = self.w2[e].float() @ a
                if self.w2_bias is not None:
                    o = o + self.w2_bias[e].float()
                out[t] += tw[t, j] * o
        return out.reshape(tuple(x.shape))

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden={self.hidden}, intermediate="
                f"{self.intermediate}, topk={self.topk}, activation={self.activation!r}")


def _activation(name: str, h: Tensor, inter: int) -> Tensor:
    if name == "swigluoai":
        gate, up = h[0::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)
        return (up + 1) * gate * torch.sigmoid(1.702 * gate)
    gate, up = h[:inter], h[inter:]
    if name == "silu":
        return up * gate * torch.sigmoid(gate)
    if name == "gelu":
        return up * 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2)))
    return up * 0.5 * gate * (1 + torch.tanh(0.7978845608 * (gate + 0.044715 * gate ** 3)))
