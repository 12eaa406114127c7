"""The fused widely-linear complex layer of Fairy2i: y = U x + W conj(x), with U and W
quantised to {+1, -1, +i, -i} per stage and run multiplication-free.

quantize (phase quantisation of a real (2n, 2m) weight) -> prepare (once, into the selected
kernel's layout) -> apply (per call). dense gives the real matrix the layer stands for.
Prepared layers serialise like ternary weights: layer.to_bytes(), cpukern.ternary.from_buffer.

Results are torch tensors when the (first) array argument is one, numpy arrays otherwise.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from cpukern import _ext, _log
from cpukern._arrays import (bool_arg, describe, ext_array, ext_out, int_arg, is_torch, result,
                             threads_arg, variant_arg)

from cpukern._packed import PackedWeights, prepare_into

__all__ = ["quantize", "dense", "prepare", "apply"]


def quantize(a: Any, stages: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Fairy2i quantisation of a real float32 (2n, 2m) weight (nn.Linear [out, in]).

    U_re=(A11+A22)/2, U_im=(A21-A12)/2, W_re=(A11-A22)/2, W_im=(A12+A21)/2; each stage maps
    every complex weight of U and of W to the nearest of {+1, -1, +i, -i} with per-tensor,
    per-axis scales, and the next stage quantises the residual. Returns planes uint32
    (stages, 4, n, ceil(m/16)) in the order U_re, U_im, W_re, W_im and scales float32 (stages, 4).
    """
    stages = int_arg(stages, "stages", 1)
    # a's shape and the result's size: checked by the extension, which returns both arrays.
    planes, scales = _ext.widely_linear_phase_quantize(ext_array(a, "a"), stages)
    return result(planes, a), result(scales, a)


def dense(planes: Any, scales: Any, m: int) -> np.ndarray:
    """The real float32 (2n, 2m) matrix a quantised widely-linear layer stands for."""
    m = int_arg(m, "m", 1)
    # Shapes ((4, n, words) planes: one stage): checked by the extension, which returns the
    # matrix once they agree.
    out = _ext.widely_linear_dense(ext_array(planes, "planes"), ext_array(scales, "scales"), m)
    return result(out, planes)


def prepare(planes: Any, scales: Any, m: int, *,
            variant: Optional[str] = None, out: Any = None) -> PackedWeights:
    """Converts a widely-linear layer once into the selected (or forced) kernel's layout.

    out: None, or a callable alloc(nbytes) returning a 1-D uint8 buffer of nbytes, 64-byte
    aligned: the layer is packed straight into it, as to_bytes would serialise it, and the
    result views it (cpukern.ternary.prepare's out=)."""
    m = int_arg(m, "m", 1)
    variant = variant_arg(variant)

    def arrays() -> tuple[Any, Any]:  # for each call: one call consumes a DLPack capsule
        return ext_array(planes, "planes"), ext_array(scales, "scales")

    if out is None:
        layer = _ext.widely_linear_prepare(*arrays(), m, variant)
    else:
        layer = prepare_into(out, lambda: _ext.widely_linear_prepared_size(*arrays(), m, variant),
                             lambda buf: _ext.widely_linear_prepare(*arrays(), m, variant, buf))
    _log.selection("widely_linear", layer.variant, variant, _ext.widely_linear_variants)
    return layer


def apply(planes: Union[PackedWeights, Any], x: Any, scales: Any = None, *,
          fused: bool = True, variant: Optional[str] = None, threads: Optional[int] = None,
          out: Any = None) -> Any:
    """y = U x + W conj(x) as a real layer: x float32 (2m,) or (B, 2m) = [x_re | x_im];
    returns float32 (2n,) or (B, 2n) = [y_re | y_im], a drop-in for `a @ x` with
    a = dense(planes, scales, m).

    planes: uint32 (S, 4, n, ceil(m/16)) (or (4, n, words) for S = 1) with scales (S, 4) /
    (S, 4, n), or PackedWeights from prepare (then scales may be None).
    fused=False runs the naive schedule (8 GEMV passes per stage) over the same bytes.
    """
    xa = ext_array(x, "x")
    fused = bool_arg(fused, "fused")
    nthreads = threads_arg(threads)
    check = ""
    if isinstance(planes, PackedWeights) and planes.op == "widely_linear":
        if scales is not None:
            raise ValueError("scales: expected None (the prepared layer carries its scales), got "
                             f"{type(scales).__name__}")
        layer, check = planes, variant_arg(variant)  # the extension checks it names its variant
    elif isinstance(planes, np.ndarray) or is_torch(planes):
        if scales is None:
            raise ValueError("scales: expected float32 scales when planes is an array, got None")
        cols = int(x.shape[-1]) if x.ndim else 0  # m comes from x here, so before prepare
        if cols % 2 or cols == 0:
            raise ValueError(f"x: expected an even number 2m >= 2 of columns [x_re | x_im], got "
                             f"{describe(x)}")
        layer = prepare(planes, scales, cols // 2, variant=variant)
    else:
        got = (f"packed weights of op '{planes.op}'" if isinstance(planes, PackedWeights)
               else type(planes).__name__)
        raise TypeError(f"planes: expected PackedWeights from cpukern.widely_linear.prepare or "
                        f"uint32 planes, got {got}")
    # x and out=: checked by the extension, which returns a new array without out=.
    y = _ext.widely_linear_run(layer, xa, fused, check, nthreads, ext_out(out))
    return out if out is not None else result(y, x)
