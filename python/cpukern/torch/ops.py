"""torch.library ops of cpukern (namespace ``cpukern``) and their fake implementations:
ternary_gemv, widely_linear, fused_moe, linear, and the prepared-tensor forms ternary_gemv_prepared,
widely_linear_prepared, fused_moe_prepared and linear_prepared (see the cpukern.torch
docstring). vLLM-order ops: cpukern.torch.vllm."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

import cpukern as _cpukern
from cpukern import _ext, _packed
from cpukern import attention as _attention
from cpukern import linear as _dense
from cpukern import moe as _moe
from cpukern import ternary as _ternary
from cpukern import widely_linear as _widely_linear
from cpukern._arrays import native
from cpukern._dtypes import act_arg
from cpukern.torch._weight_cache import _CACHE, _fingerprint
from cpukern.torch.packed import known_weights, weights_of

__all__ = ["ternary_gemv", "widely_linear", "fused_moe", "ternary_gemv_prepared",
           "widely_linear_prepared", "prepare_ternary_tensor", "prepare_widely_linear_tensor",
           "fused_moe_prepared", "prepare_experts_tensor", "linear",
           "linear_prepared", "moe_router_prepared", "ternary_gemv_multi_prepared",
           "decode_attention"]

# variant= in the torch ops (isa= in the vLLM-order ops, vLLM's own name): "" or "auto" select
# automatically; any other name must be a variant of the op (cpukern.kernels(op)), else the op
# raises ValueError listing the known names. The
# MoE ops also take vLLM's isa names (vllm._custom_ops.cpu_fused_moe / prepack_moe_weight), by
# this explicit alias table, per architecture: they select automatically, unless the name is
# one of cpukern's own fused_moe variants this CPU runs (AArch64's "neon"; x86-64's "amx" on a
# CPU with usable AMX, which automatic selection picks anyway): forced. vLLM's own AMX check
# cannot see CPUKERN_DISABLE_FEATURES or a refused tile permission, so "amx" where cpukern
# cannot run it selects automatically too. No other name selects automatically (a vLLM name
# in a ternary op, "amx" on AArch64: ValueError).
AUTO_VARIANTS = ("", "auto")
VLLM_MOE_ISA_ALIASES = {"x86_64": ("amx", "vec"), "aarch64": ("neon", "vec")}
_MOE_VARIANTS: list = []


def _variant(variant: Optional[str], op: str = "ternary_gemv",
             arg: str = "variant") -> Optional[str]:
    """A forced variant name (checked by the op itself, whose ValueError lists the known
    names), or None for automatic selection: "" or "auto", and for the ops on the MoE kernels
    ("fused_moe", "linear") vLLM's names of VLLM_MOE_ISA_ALIASES for this architecture that are
    not fused_moe variants here. arg: the argument's name in messages ("isa" in the vLLM-order
    ops)."""
    if variant is None or variant in AUTO_VARIANTS:
        return None
    if not isinstance(variant, str):
        raise TypeError(f"{arg}: expected a variant name (str), got {type(variant).__name__}")
    if op in ("fused_moe", "linear") and \
            variant in VLLM_MOE_ISA_ALIASES.get(_cpukern.cpu_info()["arch"], ()):
        if not _MOE_VARIANTS:
            _MOE_VARIANTS.extend(v["name"] for v in _ext.moe_variants() if v["supported"])
        if variant not in _MOE_VARIANTS:
            return None
    return variant


def linear_variant(variant: Optional[str]) -> str:
    """The variant a dense layer packs for: the forced one (as _variant reads it), else the op
    "linear"'s default (CPUKERN_VARIANT="linear=<name>" included)."""
    return _ext.linear_variant(_variant(variant, "linear") or "")


# torch's thread count when this module last set the pool's polling (None: not yet).
_polling_set_for: Optional[int] = None


def _threads() -> Optional[int]:
    """torch.get_num_threads() unless cpukern.set_num_threads chose a count (then None: the
    kernels use that one). cpukern's pool polls between calls only while torch's own OpenMP
    threads, which poll too, are off (torch on one thread): two polling pools on the same
    cores take turns by the scheduler's time slice. Set when torch's count changes, so that
    an op's call crosses into C++ once."""
    global _polling_set_for
    n = torch.get_num_threads()
    if n != _polling_set_for:
        _ext.set_polling(n == 1)
        _polling_set_for = n
    return None if _cpukern.num_threads_is_set() else n


# The ops a forward calls once per layer are defined with torch.library's low-level API: a
# kernel registered that way costs about 3 us a call through the dispatcher, against about
# 10 us for torch.library.custom_op's Python wrappers (its autograd and aliasing checks),
# which a compiled decode step paid on every layer. Inference only: these ops have no
# autograd kernel, and a tensor that requires grad is refused by name (cpukern._arrays).
_LIB = torch.library.Library("cpukern", "FRAGMENT")


def _hot_op(impl: Any) -> Any:
    """The op cpukern::<impl's name without its leading underscore>, schema inferred from
    impl's annotations (no argument mutated), whose CPU kernel is impl; returns its default
    overload."""
    name = impl.__name__.lstrip("_")
    _LIB.define(name + torch.library.infer_schema(impl, mutates_args=()))
    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    return getattr(torch.ops.cpukern, name).default


def _u32(t: Tensor, name: str) -> Tensor:
    if t.dtype == torch.int32:
        return t.view(torch.uint32)
    if t.dtype != torch.uint32:
        raise TypeError(f"{name}: expected a uint32 or int32 tensor, got {t.dtype} tensor of shape "
                        f"{tuple(t.shape)}")
    return t


def _check_2d_or_1d(x: Tensor, name: str) -> None:
    """Before K is read from x's last axis (the extension checks x itself)."""
    if x.dim() not in (1, 2):
        raise ValueError(f"{name}: expected 1 or 2 dimensions, got shape {tuple(x.shape)}")


@torch.library.custom_op("cpukern::ternary_gemv", mutates_args=())
def ternary_gemv(packed: Tensor, x: Tensor, scale: Optional[Tensor] = None, act: str = "fp32",
                 variant: str = "", group_size: int = 0) -> Tensor:
    """y[..., m] = scale[m] * sum_k w[m, k] x[..., k] (see cpukern.ternary.gemv); with
    group_size = G > 0, scale is (M, ceil(K/G)): one per row and group of G columns."""
    _check_2d_or_1d(x, "x")
    prepared = prepared_ternary(packed, int(x.shape[-1]), scale, variant, group_size)
    return _ternary.gemv(prepared, x, act=act, threads=_threads())


def prepared_ternary(packed: Tensor, k: int, scale: Optional[Tensor], variant: str,
                     group_size: int = 0) -> Any:
    """The prepared weights of packed (M, ceil(k/16)) with scale, from the cache or made now."""
    p = _u32(packed, "packed")

    def build() -> Any:
        s = scale
        if group_size:
            return _ternary.prepare(p, k, s, group_size=group_size, variant=_variant(variant))
        if s is not None and s.numel() == 1 and p.dim() == 2 and p.shape[0] != 1:
            s = s.reshape(1).expand(p.shape[0]).contiguous()
        return _ternary.prepare(p, k, s, variant=_variant(variant))

    return _CACHE.get(packed, (k, _fingerprint(scale), _variant(variant), group_size), build)


@ternary_gemv.register_fake
def _(packed, x, scale=None, act="fp32", variant="", group_size=0):
    torch._check(packed.dim() == 2, lambda: "packed: expected 2 dimensions (M, words)")
    torch._check(x.dim() in (1, 2), lambda: "x: expected 1 or 2 dimensions")
    torch._check(x.dtype == torch.float32, lambda: "x: expected float32")
    return x.new_empty(tuple(x.shape[:-1]) + (packed.shape[0],), dtype=torch.float32)


@torch.library.custom_op("cpukern::widely_linear", mutates_args=())
def widely_linear(planes: Tensor, scales: Tensor, x: Tensor, variant: str = "") -> Tensor:
    """y = U x + W conj(x) as a real layer (see cpukern.widely_linear.apply)."""
    _check_2d_or_1d(x, "x")
    layer = prepared_widely_linear(planes, scales, int(x.shape[-1]) // 2, variant)
    return _widely_linear.apply(layer, x, threads=_threads())


def prepared_widely_linear(planes: Tensor, scales: Tensor, m: int, variant: str) -> Any:
    """The prepared layer of planes and scales, from the cache or made now."""
    p = _u32(planes, "planes")
    forced = _variant(variant, "widely_linear")
    return _CACHE.get(planes, (m, _fingerprint(scales), forced),
                      lambda: _widely_linear.prepare(p, scales, m, variant=forced))


@widely_linear.register_fake
def _(planes, scales, x, variant=""):
    torch._check(planes.dim() in (3, 4), lambda: "planes: expected (S, 4, n, words)")
    torch._check(x.dim() in (1, 2), lambda: "x: expected 1 or 2 dimensions")
    torch._check(x.dtype == torch.float32, lambda: "x: expected float32")
    return x.new_empty(tuple(x.shape[:-1]) + (2 * planes.shape[-2],), dtype=torch.float32)


# --- prepared weights as plain uint8 tensors (no cache) ---------------------------------

class _Blob:
    """The `out=` of a packer: the one new blob (a uint8 tensor over memory cpukern owns,
    _packed.owned_tensor) the layouts are packed straight into; no second copy is made."""

    def __init__(self) -> None:
        self.tensor: Optional[Tensor] = None

    def __call__(self, nbytes: int) -> Tensor:
        self.tensor = _packed.owned_tensor(nbytes)
        return self.tensor


def prepare_ternary_tensor(packed: Tensor, k: int, scale: Optional[Tensor], variant: str = "",
                           group_size: int = 0, int8: bool = False) -> Tensor:
    """packed (M, ceil(k/16)) with its scale, prepared for this CPU (or the forced variant) as
    one uint8 tensor for ternary_gemv_prepared (cpukern.ternary.to_bytes's format); int8:
    include the int8 layout (for act="int8"). Not cached: the tensor is the prepared form."""
    p = _u32(packed, "packed")
    s, blob = scale, _Blob()
    if not group_size and s is not None and s.numel() == 1 and p.dim() == 2 and p.shape[0] != 1:
        s = s.reshape(1).expand(p.shape[0]).contiguous()
    _ternary.prepare(p, k, s, group_size=group_size or None, variant=_variant(variant),
                     threads=_threads(), int8=int8, out=blob)
    return blob.tensor


def prepare_widely_linear_tensor(planes: Tensor, scales: Tensor, m: int,
                                 variant: str = "") -> Tensor:
    """The widely-linear layer prepared for this CPU as one uint8 tensor for
    widely_linear_prepared."""
    blob = _Blob()
    _widely_linear.prepare(_u32(planes, "planes"), scales, m,
                           variant=_variant(variant, "widely_linear"), out=blob)
    return blob.tensor


def _ternary_gemv_prepared(prepared: Tensor, x: Tensor, out_features: int,
                           act: str = "fp32") -> Tensor:
    """y[..., m] = sum_g scale[m, g] * sum_k w[m, k] x[..., k] from packed weights (a
    PackedWeightsTensor, or a uint8 blob: prepare_ternary_tensor / cpukern.ternary.to_bytes;
    the scale is inside). out_features: M, which the weights must hold (the fake kernel needs
    it). A blob's header is validated on every call (O(1)) unless it is a PackedWeightsTensor's
    (a compiled graph hands those over); nothing is cached or packed here."""
    w = known_weights(prepared, "prepared", ("ternary",))
    if w is None:  # a plain blob: runs as it is (another CPU's layout or no int8 one: refused)
        y = x.new_empty(tuple(x.shape[:-1]) + (int(out_features),), dtype=torch.float32)
        _ext.ternary_gemv_buffer(native(prepared, "prepared"), int(out_features), native(x, "x"),
                                 act_arg(act), _threads_or_zero(), native(y, "out"))
        return y
    _check_rows(w, out_features)
    return _ternary.gemv(w, x, act=act, threads=_threads())


ternary_gemv_prepared = _hot_op(_ternary_gemv_prepared)


def _check_rows(w: Any, out_features: int) -> None:
    if int(w.shape[0]) != int(out_features):
        raise ValueError(f"prepared: holds {w.shape[0]} output rows, the op was given "
                         f"{out_features}")


def _ternary_gemv_multi_prepared(prepared: list[Tensor], x: Tensor, out_features: list[int],
                                 act: str = "int8") -> list[Tensor]:
    """The ternary layers of one model layer that share x (cpukern.ternary.gemv_multi), each a
    PackedWeightsTensor or blob with its out_features: one float32 output each, bitwise what
    ternary_gemv_prepared gives it."""
    if len(prepared) != len(out_features) or not prepared:
        raise ValueError(f"out_features: expected one per prepared matrix ({len(prepared)}), got "
                         f"{len(out_features)}")
    ws = []
    for t, m in zip(prepared, out_features):
        w = weights_of(t, "prepared", ("ternary",))
        _check_rows(w, m)
        ws.append(w)
    lead = tuple(x.shape[:-1])
    outs = [x.new_empty(lead + (int(m),), dtype=torch.float32) for m in out_features]
    _ext.ternary_gemv_multi(ws, native(x, "x"), act_arg(act), _threads_or_zero(),
                            [native(y, "out") for y in outs])
    return outs


ternary_gemv_multi_prepared = _hot_op(_ternary_gemv_multi_prepared)


@torch.library.register_fake("cpukern::ternary_gemv_multi_prepared")
def _(prepared, x, out_features, act="int8"):
    torch._check(x.dim() in (1, 2), lambda: "x: expected 1 or 2 dimensions")
    torch._check(x.dtype == torch.float32, lambda: "x: expected float32")
    return [x.new_empty(tuple(x.shape[:-1]) + (m,), dtype=torch.float32) for m in out_features]


@torch.library.register_fake("cpukern::ternary_gemv_prepared")
def _(prepared, x, out_features, act="fp32"):
    torch._check(prepared.dim() == 1, lambda: "prepared: expected a 1-D uint8 tensor")
    torch._check(prepared.dtype == torch.uint8, lambda: "prepared: expected uint8")
    torch._check(x.dim() in (1, 2), lambda: "x: expected 1 or 2 dimensions")
    torch._check(x.dtype == torch.float32, lambda: "x: expected float32")
    return x.new_empty(tuple(x.shape[:-1]) + (out_features,), dtype=torch.float32)


def _widely_linear_prepared(prepared: Tensor, x: Tensor, out_features: int) -> Tensor:
    """y = U x + W conj(x) from a packed layer (a PackedWeightsTensor or a uint8 blob:
    prepare_widely_linear_tensor); out_features = 2n, which it must hold."""
    layer = known_weights(prepared, "prepared", ("widely_linear",))
    if layer is None:  # a plain blob: runs as it is (another CPU's layout: refused)
        y = x.new_empty(tuple(x.shape[:-1]) + (int(out_features),), dtype=torch.float32)
        _ext.widely_linear_run_buffer(native(prepared, "prepared"), int(out_features),
                                      native(x, "x"), _threads_or_zero(), native(y, "out"))
        return y
    _check_rows(layer, out_features)
    return _widely_linear.apply(layer, x, threads=_threads())


widely_linear_prepared = _hot_op(_widely_linear_prepared)


@torch.library.register_fake("cpukern::widely_linear_prepared")
def _(prepared, x, out_features):
    torch._check(prepared.dim() == 1, lambda: "prepared: expected a 1-D uint8 tensor")
    torch._check(x.dim() in (1, 2), lambda: "x: expected 1 or 2 dimensions")
    torch._check(x.dtype == torch.float32, lambda: "x: expected float32")
    return x.new_empty(tuple(x.shape[:-1]) + (out_features,), dtype=torch.float32)


def prepare_experts_tensor(w: Tensor, name: str, variant: str = "",
                           scales: Optional[Tensor] = None, act: str = "fp32") -> Tensor:
    """Expert weights (bf16 (E, O, I), MXFP4 blocks uint8 or int8 (E, O, I), the last two with
    their scales) packed for this CPU as one uint8 tensor for fused_moe_prepared (cpukern.moe.to_bytes's format).
    act="int8" (MXFP4 only): W4A8, int8 activations (cpukern.moe.prepare)."""
    blob = _Blob()
    _moe.prepare(w, format=_expert_format(w, name, scales), scales=scales, act=act,
                 variant=_variant(variant, "fused_moe"), out=blob)
    return blob.tensor


_EXPERT_FORMATS = {torch.bfloat16: "bf16", torch.uint8: "mxfp4", torch.int8: "int8"}


def _expert_format(w: Tensor, name: str, scales: Optional[Tensor]) -> str:
    """The weight format of one expert tensor, from its dtype: bf16 (E, O, I); uint8 MXFP4
    blocks (E, O, I/32, 16) with uint8 scales (E, O, I/32); int8 (E, O, I) with float32
    per-channel scales (E, O)."""
    fmt = _EXPERT_FORMATS.get(w.dtype) if isinstance(w, Tensor) else None
    if fmt is None:
        got = f"{w.dtype} tensor of shape {tuple(w.shape)}" if isinstance(w, Tensor) else type(w).__name__
        raise TypeError(f"{name}: expected bfloat16 (E, O, I), uint8 MXFP4 blocks or int8 "
                        f"(E, O, I) experts, got {got}")
    if fmt != "bf16" and scales is None:
        raise ValueError(f"{name}_scales: required with {fmt} experts {name}")
    if fmt == "bf16" and scales is not None:
        raise ValueError(f"{name}_scales: only with uint8 (MXFP4) or int8 experts {name}")
    return fmt


def _fused_moe_prepared(x: Tensor, w13_prepared: Tensor, w2_prepared: Tensor, topk_weights: Tensor,
                       topk_ids: Tensor, activation: str = "silu",
                       w13_bias: Optional[Tensor] = None, w2_bias: Optional[Tensor] = None,
                       skip_weighted: bool = False) -> Tensor:
    """Fused MoE from packed experts held in uint8 tensors (prepare_experts_tensor /
    cpukern.moe.to_bytes; any weight format). Headers validated per call (O(1)); nothing is
    cached or packed here."""
    p13 = weights_of(w13_prepared, "w13_prepared", ("moe",))
    p2 = weights_of(w2_prepared, "w2_prepared", ("moe",))
    out = torch.empty_like(x)
    _call_fused_moe(x, p13, p2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                    skip_weighted, out)
    return out


fused_moe_prepared = _hot_op(_fused_moe_prepared)


@torch.library.register_fake("cpukern::fused_moe_prepared")
def _(x, w13_prepared, w2_prepared, topk_weights, topk_ids, activation="silu", w13_bias=None,
      w2_bias=None, skip_weighted=False):
    torch._check(x.dim() == 2, lambda: "x: expected (T, H)")
    torch._check(x.dtype == torch.bfloat16, lambda: "x: expected bfloat16")
    torch._check(w13_prepared.dtype == torch.uint8 and w2_prepared.dtype == torch.uint8,
                 lambda: "w13_prepared, w2_prepared: expected uint8 tensors")
    return torch.empty_like(x)


def _threads_or_zero() -> int:
    t = _threads()
    return 0 if t is None else int(t)


def experts_cache_key(fmt: str, scales: Optional[Tensor], variant: Optional[str]) -> tuple:
    """The cache key of packed experts beside their weight tensor (also vllm.prepack_moe_weight's)."""
    return (fmt, _fingerprint(scales), variant)


def prepared_experts(w: Tensor, name: str, variant: Optional[str],
                     scales: Optional[Tensor] = None, act: str = "fp32") -> Any:
    """The packed experts of one expert tensor (any format, see _expert_format), from the cache
    or made now (variant: a forced variant name or None; act: "fp32", or "int8" for W4A8 on
    MXFP4 blocks, cached apart from the exact packing)."""
    fmt = _expert_format(w, name, scales)
    key = fmt if act == "fp32" else f"{fmt}/act={act}"
    return _CACHE.get(w, experts_cache_key(key, scales, variant),
                      lambda: _moe.prepare(w, format=fmt, scales=scales, act=act,
                                           variant=variant))


def _call_fused_moe(x: Tensor, p13: Any, p2: Any, topk_weights: Tensor, topk_ids: Tensor,
                    activation: str, w13_bias: Optional[Tensor], w2_bias: Optional[Tensor],
                    skip_weighted: bool, out: Tensor, out_name: str = "out") -> None:
    """cpukern.moe.fused_moe into `out` (named out_name in messages), with torch.topk's int64
    ids taken as they are (the kernel reads them once and range-checks them before narrowing:
    2**32 + 1 never becomes expert 1)."""
    wide = topk_ids.dtype == torch.int64
    if wide and not topk_ids.is_contiguous():
        topk_ids = topk_ids.contiguous()
    _moe._fused_moe(x, p13, p2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                    skip_weighted, None, _threads(), out, "int64" if wide else "int32", out_name)


def _fused_moe_into(out: Tensor, x: Tensor, w13: Tensor, w2: Tensor, topk_weights: Tensor,
                    topk_ids: Tensor, activation: str, w13_bias: Optional[Tensor],
                    w2_bias: Optional[Tensor], skip_weighted: bool, variant: str,
                    w13_scales: Optional[Tensor] = None, w2_scales: Optional[Tensor] = None,
                    act: str = "fp32") -> None:
    forced = _variant(variant, "fused_moe")
    act = act_arg(act, _moe.ACTS)
    if act == "int8" and torch.uint8 not in (w13.dtype, w2.dtype):
        raise ValueError(f"act: expected 'fp32' with {w13.dtype} / {w2.dtype} experts (int8 "
                         f"activations only with uint8 MXFP4 blocks), got 'int8'")
    p13 = prepared_experts(w13, "w13", forced, w13_scales, act if w13.dtype == torch.uint8 else "fp32")
    p2 = prepared_experts(w2, "w2", forced, w2_scales, act if w2.dtype == torch.uint8 else "fp32")
    _call_fused_moe(x, p13, p2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                    skip_weighted, out, "output")


@torch.library.custom_op("cpukern::fused_moe", mutates_args=())
def fused_moe(x: Tensor, w13: Tensor, w2: Tensor, topk_weights: Tensor, topk_ids: Tensor,
              activation: str = "silu", w13_bias: Optional[Tensor] = None,
              w2_bias: Optional[Tensor] = None, skip_weighted: bool = False,
              variant: str = "", w13_scales: Optional[Tensor] = None,
              w2_scales: Optional[Tensor] = None, act: str = "fp32") -> Tensor:
    """Fused MoE (see cpukern.moe.fused_moe); w13 (E, 2I, H), w2 (E, H, I) bf16, or either as
    MXFP4 blocks uint8 (E, O, I/32, 16) with its scales uint8 (E, O, I/32) in w13_scales /
    w2_scales (gpt-oss's layout), or as int8 (E, O, I) with float32 per-channel scales (E, O)
    (cpukern.moe.quantize(w, format="int8")). act="int8": the MXFP4 weights run W4A8 (int8
    activations, cpukern.moe.prepare's act; the default "fp32" is exact)."""
    out = torch.empty_like(x)
    _fused_moe_into(out, x, w13, w2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                    skip_weighted, variant, w13_scales, w2_scales, act)
    return out


@fused_moe.register_fake
def _(x, w13, w2, topk_weights, topk_ids, activation="silu", w13_bias=None, w2_bias=None,
      skip_weighted=False, variant="", w13_scales=None, w2_scales=None, act="fp32"):
    torch._check(x.dim() == 2, lambda: "x: expected (T, H)")
    torch._check(x.dtype == torch.bfloat16, lambda: "x: expected bfloat16")
    return torch.empty_like(x)


# ---- dense layers: the op "linear" on the MoE micro-kernels (cpukern.linear) --------------

def _linear_prepared(x: Tensor, prepared: Tensor, out_features: int,
                    bias: Optional[Tensor] = None) -> Tensor:
    """x bf16 (T, I) @ W.T + bias -> bf16 (T, out_features), W one matrix packed as one expert
    in a uint8 tensor (prepare_experts_tensor of W[None]; any weight format). The header is
    checked per call (O(1)) and must hold out_features outputs; nothing is packed here."""
    w = weights_of(prepared, "prepared", ("moe",))
    if int(w.shape[1]) != out_features:
        raise ValueError(f"prepared: holds {w.shape[1]} outputs, expected out_features = "
                         f"{out_features}")
    out = x.new_empty((x.shape[0] if x.dim() else 0, out_features))
    _dense.linear(x, w, bias, threads=_threads(), out=out)
    return out


linear_prepared = _hot_op(_linear_prepared)


@torch.library.register_fake("cpukern::linear_prepared")
def _(x, prepared, out_features, bias=None):
    torch._check(x.dim() == 2, lambda: "x: expected (T, I)")
    torch._check(x.dtype == torch.bfloat16, lambda: "x: expected bfloat16")
    torch._check(prepared.dtype == torch.uint8, lambda: "prepared: expected a uint8 tensor")
    return x.new_empty((x.shape[0], out_features))


def _moe_router_prepared(x: Tensor, prepared: Tensor, num_experts: int, bias: Optional[Tensor],
                         topk: int, rule: str, renormalize: bool) -> tuple[Tensor, Tensor, Tensor]:
    """A bf16 MoE router in one call (cpukern.moe's router): x bf16 (T, H), the router's matrix
    (E, H) packed as one expert (any dense packing), bias None or bf16 (E,) -> (logits bf16
    (T, E), routing weights bf16 (T, topk), expert ids int64 (T, topk)). rule: "softmax_topk"
    (renormalize: the k weights divided by their sum) or "topk_softmax" (renormalize False).
    num_experts: E, which the packed matrix must hold (the fake kernel needs it)."""
    w = weights_of(prepared, "prepared", ("moe",))
    e = int(w.shape[1])
    if e != num_experts:
        raise ValueError(f"prepared: holds {e} outputs, expected num_experts = {num_experts}")
    if not 1 <= topk <= e:
        raise ValueError(f"topk: expected 1 <= topk <= E = {e}, got {topk}")
    t = x.shape[0] if x.dim() else 0
    logits = x.new_empty((t, e))
    weights = x.new_empty((t, topk))
    ids = x.new_empty((t, topk), dtype=torch.int64)
    _ext.moe_router(native(x, "x"), w, native(bias, "bias"), topk, rule, renormalize,
                    _threads_or_zero(), native(logits, "logits"), native(weights, "weights"),
                    native(ids, "ids"))
    return logits, weights, ids


moe_router_prepared = _hot_op(_moe_router_prepared)


@torch.library.register_fake("cpukern::moe_router_prepared")
def _(x, prepared, num_experts, bias, topk, rule, renormalize):
    torch._check(x.dim() == 2, lambda: "x: expected (T, H)")
    torch._check(x.dtype == torch.bfloat16, lambda: "x: expected bfloat16")
    torch._check(prepared.dtype == torch.uint8, lambda: "prepared: expected a uint8 tensor")
    t, e = x.shape[0], num_experts
    return (x.new_empty((t, e)), x.new_empty((t, topk)),
            x.new_empty((t, topk), dtype=torch.int64))


# ---- attention of one token over a KV cache (cpukern.attention) --------------------------

def _decode_attention(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor],
                      sinks: Optional[Tensor], scale: float, nan_if_empty: bool) -> Tensor:
    """cpukern.attention.decode: query (B, Hq, D), key and value (B, Hkv, L, D) (views of a
    longer cache allowed), float32 or bf16 alike; mask None or bool / float32 (B or 1, Hq or 1,
    L); sinks None or float32 (Hq,) -> (B, Hq, D) in query's dtype."""
    out = query.new_empty(query.shape)
    if sinks is not None and sinks.requires_grad:
        # a model's parameter: a compiled graph hands it over as it is (inference only here)
        sinks = sinks.detach()
    _attention.decode(query, key, value, mask=mask, sinks=sinks, scale=scale,
                      fully_masked="nan" if nan_if_empty else "zero", threads=_threads(),
                      out=out)
    return out


decode_attention = _hot_op(_decode_attention)


@torch.library.register_fake("cpukern::decode_attention")
def _(query, key, value, mask, sinks, scale, nan_if_empty):
    torch._check(query.dim() == 3, lambda: "query: expected (B, Hq, D)")
    return query.new_empty(query.shape)


@torch.library.custom_op("cpukern::linear", mutates_args=())
def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, variant: str = "",
           weight_scales: Optional[Tensor] = None) -> Tensor:
    """x bf16 (T, I) @ W.T + bias -> bf16 (T, O) (cpukern.linear.linear). weight: bf16 (O, I),
    MXFP4 blocks uint8 (O, I/32, 16) with uint8 scales (O, I/32), or int8 (O, I) with float32
    per-channel scales (O,) in weight_scales. Packed once per weight tensor (the cache)."""
    if not isinstance(weight, Tensor) or weight.dim() not in (2, 3):
        raise TypeError("weight: expected a 2-D bf16 / int8 or 3-D uint8 (MXFP4 blocks) tensor")
    w = prepared_experts(weight.unsqueeze(0), "weight", linear_variant(variant),
                         None if weight_scales is None else weight_scales.unsqueeze(0))
    out = x.new_empty((x.shape[0], int(w.shape[1])))
    _dense.linear(x, w, bias, threads=_threads(), out=out)
    return out


@linear.register_fake
def _(x, weight, bias=None, variant="", weight_scales=None):
    torch._check(x.dim() == 2, lambda: "x: expected (T, I)")
    torch._check(x.dtype == torch.bfloat16, lambda: "x: expected bfloat16")
    return x.new_empty((x.shape[0], weight.shape[0]))

