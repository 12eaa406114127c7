"""The dense layer, op "linear": out = x @ W.T + bias, bf16 (T, O), on the fused-MoE GEMM
micro-kernels (one expert, no routing).

prepare (once, for the selected or forced variant) -> linear (per call). The op's variants are
fused_moe's (cpukern.kernels("linear"): the same kernel list, micro-kernels and priorities),
selected and forced for this op alone: variant= or CPUKERN_VARIANT="linear=<name>".

The weights: bf16 (O, I); MXFP4 blocks uint8 (O, I/32, 16) with scales uint8 (O, I/32)
(act="int8": W4A8); int8 (O, I) in [-127, 127] with float32 scales (O,) (cpukern.moe's
formats and their rules, for one matrix). The packing is one expert: PackedWeights of op "moe"
with shape (1, O, I), serialised as cpukern.moe.to_bytes writes them, so a one-expert packing
from cpukern.moe.prepare (or a saved one) runs here as it is.

Guarantees (every variant, every format): each output is one full-K dot product in fp32,
rounded once to bf16, so the result does not depend on the thread count or on the other rows
of x (an AMX variant runs its tiles for more than tiles_min_rows rows, see cpukern.kernels).
Bound (bf16 weights, K in-features), against the exact x @ W.T + bias of the bf16 values:
    |y - y_ref| <= 2**-8 |y_ref| + (K + 1) 2**-23 (sum_k |x_k w_k| + |bias|)
                   + 2**-126 (2K + 2 + sum_k (|x_k| + |w_k|))
The last term is underflow: avx512_bf16's vdpbf16ps reads bf16 subnormals as zero and flushes
products and sums below 2**-126 (fp32's smallest normal) to zero, so an output made of such
products can be 0 where the exact value is a small normal float. MXFP4 weights give the bits of
their dequantized bf16 weights; int8 and W4A8 follow cpukern.moe's rules (module docstring).
"""

from __future__ import annotations

from typing import Any, Optional

from cpukern import _experts, _ext, _log
from cpukern._arrays import (describe, ext_array, ext_out, require_array, result, shape_of,
                             threads_arg, variant_arg)
from cpukern._packed import PackedWeights, check_op

__all__ = ["prepare", "linear"]

# One matrix's arrays per format: the weights' dimensions, the scales' (None: no scales) and
# what the scales are.
_NDIMS = {"bf16": (2, None, ""), "mxfp4": (3, 2, "uint8 (O, I/32)"), "int8": (2, 1, "float32 (O,)")}


def _one_expert(a: Any, name: str, ndim: int) -> Any:
    """One matrix's array (`ndim` dimensions) as one expert: a view with a leading axis of 1."""
    a = require_array(a, name)
    if len(shape_of(a)) != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got {describe(a)}")
    return a[None]


def prepare(w: Any, *, format: str = "bf16", scales: Any = None, act: str = "fp32",
            variant: Optional[str] = None, out: Any = None) -> PackedWeights:
    """Packs one weight matrix (nn.Linear [out, in] order) once for linear's selected (or
    forced) variant.

    format="bf16": w bf16 (O, I), O, I >= 1. format="mxfp4": w = blocks uint8 (O, I/32, 16),
    scales uint8 (O, I/32); act="int8" runs it W4A8. format="int8": w = q int8 (O, I), scales
    float32 (O,) (cpukern.moe.quantize(w, format="int8") makes both). Never copied to bf16;
    the rules of each format are cpukern.moe.prepare's. out: None, or a callable
    alloc(nbytes): packed straight into its buffer, the serialised form (cpukern.moe.prepare's
    out=).
    """
    variant = variant_arg(variant)
    # An unknown format or act, and scales with bf16: refused by the extension (cpukern.moe's
    # rules and messages).
    w_ndim, scales_ndim, scales_are = _NDIMS.get(format, (None, None, "")) \
        if isinstance(format, str) else (None, None, "")
    if w_ndim is not None:
        w = _one_expert(w, "w", w_ndim)
        if 0 in shape_of(w):
            raise ValueError(f"w: expected one matrix (O, I) with O, I >= 1, got {describe(w[0])}")
    if scales_ndim is not None:
        if scales is None:
            raise ValueError(f"scales: required with format={format!r} ({scales_are})")
        scales = _one_expert(scales, "scales", scales_ndim)
    packed = _experts.pack(w, format, scales, act, _ext.linear_variant(variant), out)
    _log.selection("linear", packed.variant, variant, _ext.linear_variants)
    return packed


def linear(x: Any, w: PackedWeights, bias: Any = None, *, threads: Optional[int] = None,
           out: Any = None, variant: Optional[str] = None) -> Any:
    """out = x @ W.T + bias, bf16 (T, O): x bf16 (T, I), any T >= 0; w from prepare (or any
    one-expert packing of cpukern.moe.prepare); bias None or bf16 (O,). fp32 accumulation,
    rounded once to bf16 (what torch's bf16 nn.Linear computes, up to the summation order);
    the guarantees and the bound are in the module docstring. threads: None or 0 = the
    default, or 1..cpukern.MAX_THREADS. variant, if given, must be the variant w was packed for.
    out: None (a new array) or a bf16 (T, O) array to write."""
    check_op(w, ("moe",), "w", "PackedWeights from cpukern.linear.prepare")
    nthreads = threads_arg(threads)
    # x, bias, variant (w's variant) and out= against w (E = 1, in-features): checked by the
    # extension and moe::linear.
    y = _ext.moe_linear(ext_array(x, "x"), w, None if bias is None else ext_array(bias, "bias"),
                        variant_arg(variant), nthreads, ext_out(out))
    return out if out is not None else result(y, x, bf16=True)
