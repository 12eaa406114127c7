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
from cpukern._arrays import (bool_arg, check_array, describe, int_arg, is_torch, isa_arg,
                             native, out_or_new, shape_of, threads_arg)

from cpukern._packed import PackedWeights

# The former name of cpukern.PackedWeights (kept for one release).
WidelyLinearWeights = PackedWeights

__all__ = ["quantize", "dense", "prepare", "apply", "WidelyLinearWeights"]


def quantize(a: Any, stages: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Fairy2i quantisation of a real float32 (2n, 2m) weight (nn.Linear [out, in]).

    U_re=(A11+A22)/2, U_im=(A21-A12)/2, W_re=(A11-A22)/2, W_im=(A12+A21)/2; each stage maps
    every complex weight of U and of W to the nearest of {+1, -1, +i, -i} with per-tensor,
    per-axis scales, and the next stage quantises the residual. Returns planes uint32
    (stages, 4, n, ceil(m/16)) in the order U_re, U_im, W_re, W_im and scales float32 (stages, 4).
    """
    stages = int_arg(stages, "stages", 1)
    a = check_array(a, "a", "float32", (2,))
    # a's shape and the result's size: checked by the extension, which returns both arrays.
    planes, scales = _ext.widely_linear_phase_quantize(native(a, "a"), stages)
    if is_torch(a):
        import torch

        return torch.from_numpy(planes), torch.from_numpy(scales)
    return planes, scales


def _staged(planes: Any, scales: Any) -> tuple[Any, Any]:
    """(4, n, words) planes with (4,) or (4, n) scales mean one stage: add the axis (a view)."""
    planes = check_array(planes, "planes", "uint32", (3, 4))
    scales = check_array(scales, "scales", "float32", (1, 2, 3))
    if planes.ndim == 3:
        planes = planes[None]
        if scales.ndim in (1, 2):
            scales = scales[None]
    return planes, scales


def dense(planes: Any, scales: Any, m: int) -> np.ndarray:
    """The real float32 (2n, 2m) matrix a quantised widely-linear layer stands for."""
    m = int_arg(m, "m", 1)
    planes, scales = _staged(planes, scales)
    # Shapes: checked by the extension, which returns the matrix once they agree.
    out = _ext.widely_linear_dense(native(planes, "planes"), native(scales, "scales"), m)
    if is_torch(planes):
        import torch

        return torch.from_numpy(out)
    return out


def prepare(planes: Any, scales: Any, m: int, *,
            isa: Optional[str] = None) -> WidelyLinearWeights:
    """Converts a widely-linear layer once into the selected (or forced) kernel's layout."""
    m = int_arg(m, "m", 1)
    isa = isa_arg(isa)
    planes, scales = _staged(planes, scales)
    layer = _ext.widely_linear_prepare(native(planes, "planes"), native(scales, "scales"), m, isa)
    _log.selection("widely_linear", layer.isa, isa, _ext.widely_linear_variants)
    return layer


def apply(planes: Union[WidelyLinearWeights, Any], x: Any, scales: Any = None, *,
          fused: bool = True, isa: Optional[str] = None, threads: Optional[int] = None,
          out: Any = None) -> Any:
    """y = U x + W conj(x) as a real layer: x float32 (2m,) or (B, 2m) = [x_re | x_im];
    returns float32 (2n,) or (B, 2n) = [y_re | y_im], a drop-in for `a @ x` with
    a = dense(planes, scales, m).

    planes: uint32 (S, 4, n, ceil(m/16)) (or (4, n, words) for S = 1) with scales (S, 4) /
    (S, 4, n), or a WidelyLinearWeights (then scales may be None).
    fused=False runs the naive schedule (8 GEMV passes per stage) over the same bytes.
    """
    x = check_array(x, "x", "float32", (1, 2))
    fused = bool_arg(fused, "fused")
    nthreads = threads_arg(threads)
    if isinstance(planes, PackedWeights) and planes.op == "widely_linear":
        if scales is not None:
            raise ValueError("scales: expected None (the prepared layer carries its scales), got "
                             f"{type(scales).__name__}")
        _ext.packed_check_isa(planes, isa_arg(isa))  # "" or the variant it was prepared for
        layer = planes
    elif isinstance(planes, np.ndarray) or is_torch(planes):
        if scales is None:
            raise ValueError("scales: expected float32 scales when planes is an array, got None")
        cols = shape_of(x)[-1]
        if cols % 2 or cols == 0:
            raise ValueError(f"x: expected an even number 2m >= 2 of columns [x_re | x_im], got "
                             f"{describe(x)}")
        layer = prepare(planes, scales, cols // 2, isa=isa)
    else:
        got = (f"packed weights of op '{planes.op}'" if isinstance(planes, PackedWeights)
               else type(planes).__name__)
        raise TypeError(f"planes: expected WidelyLinearWeights or uint32 planes, got {got}")
    rows = layer.shape[0]  # x's columns: checked by the extension
    out_shape = (rows,) if x.ndim == 1 else (shape_of(x)[0], rows)
    y = out_or_new(out, x, out_shape, "float32")
    _ext.widely_linear_run(layer, native(x, "x"), fused, nthreads, native(y, "out"))
    return y
