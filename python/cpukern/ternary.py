"""Multiplication-free ternary layers (FairyFuse): a GEMV over {-1, 0, +1} weights and the
fused widely-linear complex layer (Fairy2i).

Results are torch tensors when the (first) array argument is one, numpy arrays otherwise.

Packed format (public, stable): 16 weights per uint32; weight k of a row goes to word k//16,
bit 2*(k%16)+1 set for +1, bit 2*(k%16) set for -1, both clear for 0; words past K are zero.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from cpukern import _ext
from cpukern._arrays import (empty, float32_scale, isa_arg, out_or_new, require_array, shape_of,
                             threads_arg)

TernaryWeights = _ext.TernaryWeights
WidelyLinearWeights = _ext.WidelyLinearWeights

__all__ = [
    "pack", "unpack", "quantize", "prepare", "gemv", "TernaryWeights",
    "phase_quantize", "widely_linear_dense", "prepare_widely_linear", "widely_linear",
    "WidelyLinearWeights", "save", "load",
]


def _words(k: int) -> int:
    return (k + 15) // 16


def pack(w: Any) -> np.ndarray:
    """Packs an integer (M, K) matrix of {-1, 0, +1} into uint32 (M, ceil(K/16)).

    Raises ValueError naming the index of the first value outside {-1, 0, +1}.
    """
    like = require_array(w, "w")
    w = np.asarray(like)
    if w.dtype.kind not in "iu":
        raise TypeError(f"w: expected an integer array of {{-1, 0, +1}}, got {w.dtype} array of shape {w.shape}")
    if w.ndim != 2:
        raise ValueError(f"w: expected 2 dimensions (M, K), got shape {w.shape}")
    if w.dtype != np.int8:
        bad = (w < -1) | (w > 1)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"w: values must be in {{-1, 0, +1}}, got {int(w[idx])} at index {list(idx)}")
        w = w.astype(np.int8)
    out = empty(like, (w.shape[0], _words(w.shape[1])), "uint32")
    _ext.ternary_pack(w, out)
    return out


def unpack(packed: Any, k: int) -> np.ndarray:
    """The inverse of pack: int8 (M, k). The invalid code 0b11 raises ValueError."""
    packed = require_array(packed, "packed")
    if int(k) < 0:
        raise ValueError(f"k: expected k >= 0, got {k}")
    out = empty(packed, (shape_of(packed)[0] if packed.ndim == 2 else 0, int(k)), "int8")
    _ext.ternary_unpack(packed, int(k), out)
    return out


def quantize(w: Any, granularity: str = "row") -> tuple[np.ndarray, np.ndarray]:
    """BitNet b1.58 absmean quantisation of a float32 (M, K) matrix.

    s = mean(|W|) per row ("row") or over the whole tensor ("tensor");
    q = clamp(round(W / s), -1, 1) (round half to even). Returns (packed uint32 (M, ceil(K/16)),
    scale float32 (M,)), so that W ~= scale[:, None] * unpack(packed, K).
    """
    if granularity not in ("row", "tensor"):
        raise ValueError(f"granularity: expected 'row' or 'tensor', got {granularity!r}")
    w = require_array(w, "w")
    if w.ndim != 2:
        raise ValueError(f"w: expected 2 dimensions (M, K), got shape {shape_of(w)}")
    m, k = shape_of(w)
    packed = empty(w, (m, _words(k)), "uint32")
    scale = empty(w, (m,), "float32")
    _ext.ternary_quantize(w, granularity == "tensor", packed, scale)
    return packed, scale


def _row_scale(scale: Any, m: int) -> Any:
    s = float32_scale(scale)
    if s is not None and s.ndim == 1 and s.shape[0] == 1 and m != 1:
        s = np.full((m,), s[0], dtype=np.float32)
    return s


def prepare(packed: Any, k: int, scale: Any = None, *, isa: Optional[str] = None) -> TernaryWeights:
    """Converts packed weights once into the selected (or forced) kernel's own layout.

    The result keeps K and the scale (None, a float or float32 (M,)); pass it to gemv.
    """
    packed = require_array(packed, "packed")
    m = shape_of(packed)[0] if packed.ndim >= 1 else 0
    return _ext.ternary_prepare(packed, int(k), _row_scale(scale, m), isa_arg(isa))


def gemv(weights: Union[TernaryWeights, Any], x: Any, scale: Any = None, *, act: str = "fp32",
         isa: Optional[str] = None, threads: Optional[int] = None, out: Any = None) -> Any:
    """y[..., m] = scale[m] * sum_k w[m, k] * x[..., k].

    weights: a packed uint32 (M, ceil(K/16)) array (converted on every call) or a
    TernaryWeights from prepare (the fast path; its scale is used unless `scale` is given).
    x: float32 (K,) or (B, K). scale: None (1), a float or float32 (M,).
    act="fp32": activations stay fp32 and weights act as masked add/subtract; the result is
    within 1e-5 * sum_k |w x| * |scale| of exact arithmetic (bitwise equal across variants
    when x holds small integers).
    act="int8": each row of x is quantised to int8 with absmax (q = round(127 x / max|x|)),
    integer dot products, one rescale per output: |y - y_exact| <= |scale| * max|x| / 254 *
    sum_k |w_k| + the fp32 bound above.
    threads: None = the default (cpukern.set_num_threads, else all cores); results are the
    same for any value. Returns float32 (M,) or (B, M) (a torch tensor for torch input).
    """
    x = require_array(x, "x")
    if isinstance(weights, TernaryWeights):
        if isa is not None and isa != weights.isa:
            raise ValueError(f"isa: the weights were prepared for '{weights.isa}', got isa={isa!r}; "
                             f"prepare them again with isa={isa!r}")
        w = weights
    else:
        if x.ndim not in (1, 2):
            raise ValueError(f"x: expected 1 or 2 dimensions, got shape {shape_of(x)}")
        w = prepare(weights, shape_of(x)[-1], isa=isa)
    m = w.shape[0]
    s = float32_scale(scale)
    out_shape = (m,) if x.ndim == 1 else (shape_of(x)[0], m)
    y = out_or_new(out, x, out_shape, "float32")
    _ext.ternary_gemv(w, x, s, act, threads_arg(threads), y)
    return y


# --- Fairy2i widely-linear layer -------------------------------------------------------

def phase_quantize(a: Any, stages: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Fairy2i quantisation of a real float32 (2n, 2m) weight (nn.Linear [out, in]).

    U_re=(A11+A22)/2, U_im=(A21-A12)/2, W_re=(A11-A22)/2, W_im=(A12+A21)/2; each stage maps
    every complex weight of U and of W to the nearest of {+1, -1, +i, -i} with per-tensor,
    per-axis scales, and the next stage quantises the residual. Returns planes uint32
    (stages, 4, n, ceil(m/16)) in the order U_re, U_im, W_re, W_im and scales float32 (stages, 4).
    """
    a = require_array(a, "a")
    if isinstance(stages, bool) or not isinstance(stages, (int, np.integer)) or stages < 1:
        raise ValueError(f"stages: expected an integer >= 1, got {stages!r}")
    if a.ndim != 2:
        raise ValueError(f"a: expected 2 dimensions (2n, 2m), got shape {shape_of(a)}")
    rows, cols = shape_of(a)
    n, m = rows // 2, cols // 2
    planes = empty(a, (int(stages), 4, n, _words(m)), "uint32")
    scales = empty(a, (int(stages), 4), "float32")
    _ext.widely_linear_phase_quantize(a, int(stages), planes, scales)
    return planes, scales


def _staged(planes: Any, scales: Any) -> tuple[Any, Any]:
    """(4, n, words) planes with (4,) or (4, n) scales mean one stage: add the axis (a view)."""
    planes = require_array(planes, "planes")
    scales = require_array(scales, "scales")
    if planes.ndim == 3:
        planes = planes[None]
        if scales.ndim in (1, 2):
            scales = scales[None]
    return planes, scales


def widely_linear_dense(planes: Any, scales: Any, m: int) -> np.ndarray:
    """The real float32 (2n, 2m) matrix a quantised widely-linear layer stands for."""
    planes, scales = _staged(planes, scales)
    n = shape_of(planes)[2] if planes.ndim == 4 else 0
    out = empty(planes, (2 * n, 2 * int(m)), "float32")
    _ext.widely_linear_dense(planes, scales, int(m), out)
    return out


def prepare_widely_linear(planes: Any, scales: Any, m: int, *,
                          isa: Optional[str] = None) -> WidelyLinearWeights:
    """Converts a widely-linear layer once into the selected (or forced) kernel's layout."""
    planes, scales = _staged(planes, scales)
    return _ext.widely_linear_prepare(planes, scales, int(m), isa_arg(isa))


def widely_linear(planes: Union[WidelyLinearWeights, Any], x: Any, scales: Any = None, *,
                  fused: bool = True, isa: Optional[str] = None, threads: Optional[int] = None,
                  out: Any = None) -> Any:
    """y = U x + W conj(x) as a real layer: x float32 (2m,) or (B, 2m) = [x_re | x_im];
    returns float32 (2n,) or (B, 2n) = [y_re | y_im], a drop-in for `a @ x` with
    a = widely_linear_dense(planes, scales, m).

    planes: uint32 (S, 4, n, ceil(m/16)) (or (4, n, words) for S = 1) with scales (S, 4) /
    (S, 4, n), or a WidelyLinearWeights (then scales may be None).
    fused=False runs the naive schedule (8 GEMV passes per stage) over the same bytes.
    """
    x = require_array(x, "x")
    if isinstance(planes, WidelyLinearWeights):
        if scales is not None:
            raise ValueError("scales: the prepared layer carries its scales; pass scales=None")
        if isa is not None and isa != planes.isa:
            raise ValueError(f"isa: the layer was prepared for '{planes.isa}', got isa={isa!r}")
        layer = planes
    else:
        if scales is None:
            raise ValueError("scales: required when planes is an array")
        if x.ndim not in (1, 2):
            raise ValueError(f"x: expected 1 or 2 dimensions, got shape {shape_of(x)}")
        layer = prepare_widely_linear(planes, scales, shape_of(x)[-1] // 2, isa=isa)
    rows = layer.shape[0]
    out_shape = (rows,) if x.ndim == 1 else (shape_of(x)[0], rows)
    y = out_or_new(out, x, out_shape, "float32")
    _ext.widely_linear_run(layer, x, bool(fused), threads_arg(threads), y)
    return y


# Weights on disk (safetensors, mapped on load): see cpukern.io.
from cpukern.io import load, save  # noqa: E402
