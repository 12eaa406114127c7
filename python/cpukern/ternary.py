"""Multiplication-free ternary layers (FairyFuse): a GEMV over {-1, 0, +1} weights, and the
serialisation of prepared weights of both ternary ops (this GEMV and cpukern.widely_linear).

Results are torch tensors when the (first) array argument is one, numpy arrays otherwise.

Packed format (public, stable): 16 weights per uint32; weight k of a row goes to word k//16,
bit 2*(k%16)+1 set for +1, bit 2*(k%16) set for -1, both clear for 0; words past K are zero.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from cpukern import _ext, _log
from cpukern import _packed as packed_weights
from cpukern._dtypes import act_arg
from cpukern._arrays import (bool_arg, describe, ext_array, ext_out, float32_scale, int_arg,
                             is_torch, require_array, result, str_arg, threads_arg, variant_arg)

from cpukern._packed import PackedWeights, aligned_empty, check_op, import_buffer

__all__ = [
    "pack", "unpack", "quantize", "prepare", "gemv", "gemv_multi", "save", "load", "to_bytes", "from_buffer",
    "serialized_size", "aligned_empty", "ACTS",
]


# gemv's activation rules: fp32 (exact), int8 (cpukern's absmax), int8_bitnet (Hugging Face
# BitNet's: the same integer kernels, max|x| floored at 1e-5 as transformers' BitLinear does).
ACTS = ("fp32", "int8", "int8_bitnet")


def pack(w: Any) -> np.ndarray:
    """Packs an integer (M, K) matrix of {-1, 0, +1} into uint32 (M, ceil(K/16)).

    Raises ValueError naming the index of the first value outside {-1, 0, +1}.
    """
    like = require_array(w, "w")
    contiguous = bool(like.is_contiguous()) if is_torch(like) else bool(like.flags.c_contiguous)
    w = np.asarray(like)
    if w.dtype.kind not in "iu" or not w.dtype.isnative or not contiguous:
        raise TypeError(f"w: expected an integer array of {{-1, 0, +1}} (C-contiguous), got "
                        f"{'' if contiguous else 'a non-contiguous '}{describe(like)} "
                        f"(no silent copies: convert it first, e.g. numpy.ascontiguousarray)")
    if w.dtype != np.int8:  # converted to int8 once its values are; the rest: C++'s checks
        bad = (w < -1) | (w > 1)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"w: values must be in {{-1, 0, +1}}, got {int(w[idx])} at index {list(idx)}")
        w = w.astype(np.int8)
    return result(_ext.ternary_pack(w), like)


def unpack(packed: Any, k: int) -> np.ndarray:
    """The inverse of pack: int8 (M, k). The invalid code 0b11 raises ValueError, and so does a
    nonzero code past k (as prepare refuses them: the packed format keeps them zero)."""
    k = int_arg(k, "k", 0)
    return result(_ext.ternary_unpack(ext_array(packed, "packed"), k), packed)


def quantize(w: Any, granularity: str = "row") -> tuple[np.ndarray, np.ndarray]:
    """BitNet b1.58 absmean quantisation of a float32 (M, K) matrix.

    s = mean(|W|) per row ("row") or over the whole tensor ("tensor");
    q = clamp(round(W / s), -1, 1) (round half to even). Returns (packed uint32 (M, ceil(K/16)),
    scale float32 (M,)), so that W ~= scale[:, None] * unpack(packed, K).
    """
    str_arg(granularity, "granularity", ("row", "tensor"))
    packed, scale = _ext.ternary_quantize(ext_array(w, "w"), granularity == "tensor")
    return result(packed, w), result(scale, w)


def prepare(packed: Any, k: int, scale: Any = None, *, group_size: Optional[int] = None,
            variant: Optional[str] = None, threads: Optional[int] = None, int8: bool = False,
            out: Any = None) -> PackedWeights:
    """Converts packed weights once into the selected (or forced) kernel's own layout.

    The result keeps K and the scale (None, a float or float32 (M,)); pass it to gemv.
    group_size=G (a multiple of 16, e.g. 256 for GGUF TQ1_0/TQ2_0): scale is float32
    (M, ceil(K/G)), one per row and group of G columns; gemv then computes
    sum_g scale[m, g] * sum_{k in g} w[m, k] x[k] (multiplication-free inside a group, one
    multiply per row and group) and takes no `scale` of its own.
    threads: as in gemv (the layout does not depend on it).
    int8=True: pack the int8 layout (act="int8") now too, as to_bytes(w, int8=True) does.
    out: None, or a callable alloc(nbytes) called once with the size of the serialised form,
    returning a 1-D C-contiguous uint8 numpy array or torch tensor of exactly nbytes bytes,
    64-byte aligned (aligned_empty; torch memory: cpukern._packed.owned_tensor). The layouts
    are packed straight into it (no owned copy): its bytes are those of
    to_bytes(prepare(...)) (with int8 as given), and the result views it as from_buffer would.
    """
    return _prepare(packed, k, scale, variant, "packed", group_size, threads, int8, out)


def _prepare(packed: Any, k: Any, scale: Any, variant: Any, name: str, group_size: Any = None,
             threads: Any = None, int8: Any = False, out: Any = None) -> PackedWeights:
    k = int_arg(k, "k", 0)
    variant = variant_arg(variant)
    nthreads = threads_arg(threads)
    int8 = bool_arg(int8, "int8")
    # Shapes (words per row, a scale of M or 1 values, group scales, group_size a multiple of
    # 16): checked by the extension and ternary::prepare.
    p = ext_array(packed, name)
    g = 0 if group_size is None else int_arg(group_size, "group_size", 16)
    s = _scale_arg(scale, group_size)
    try:
        if out is None:
            prepared = _ext.ternary_prepare(p, k, s, variant, g, nthreads, int8)
        else:  # arrays converted again for the second call (one call consumes a DLPack capsule)
            prepared = packed_weights.prepare_into(
                out, lambda: _ext.ternary_prepared_size(p, k, s, variant, g, int8),
                lambda buf: _ext.ternary_prepare(ext_array(packed, name), k,
                                                 _scale_arg(scale, group_size), variant, g,
                                                 nthreads, int8, buf))
    except ValueError as e:  # the extension names "packed"; gemv's argument is "weights"
        if name != "packed" and str(e).startswith("packed: "):
            raise ValueError(f"{name}: {str(e)[len('packed: '):]}") from None
        raise
    _log.selection("ternary_gemv", prepared.variant, variant, _ext.ternary_variants)
    return prepared


def _scale_arg(scale: Any, group_size: Any) -> Any:
    """prepare's scale as the extension takes it: group scales as they are, else float32_scale."""
    if group_size is None:
        return float32_scale(scale)
    return None if scale is None else ext_array(scale, "scale")


def gemv(weights: Union[PackedWeights, Any], x: Any, scale: Any = None, *, act: str = "fp32",
         variant: Optional[str] = None, threads: Optional[int] = None, out: Any = None) -> Any:
    """y[..., m] = scale[m] * sum_k w[m, k] * x[..., k].

    weights: a packed uint32 (M, ceil(K/16)) array (converted on every call) or a
    PackedWeights from prepare (the fast path; its scale is used unless `scale` is given;
    weights with group scales take none here).
    x: float32 (K,) or (B, K). scale: None (1), a float or float32 (M,).
    act="fp32": activations stay fp32 and weights act as masked add/subtract; the result is
    within 1e-5 * sum_k |w x| * |scale| of exact arithmetic (bitwise equal across variants
    when x holds small integers).
    act="int8": each row of x is quantised to int8 with absmax (q = round(127 x / max|x|)),
    integer dot products, one rescale per output: |y - y_exact| <= |scale| * max|x| / 254 *
    sum_k |w_k| + the fp32 bound above (+ 2**-149 where y is subnormal), for every finite x
    (a row with max|x| < 2**-100 is quantised as x * 2**64, exactly, and rescaled by 2**-64).
    act="int8_bitnet": Hugging Face BitNet's per-token rule (transformers' BitLinear /
    ActQuant): s = 127 / max(max|x|, 1e-5), q = clamp(round(x * s), -128, 127), y = scale *
    sum(w q) / s. The same q as act="int8" except on rows with max|x| < 1e-5 (smaller codes
    there, as the model computes them); the bound above holds with max(max|x|, 1e-5).
    K <= 16909320 in int8 modes (127 * K must fit the int32 accumulators), else ValueError.
    No intermediate overflows where the exact result is finite: a row with K * max|x| > 2**120
    runs as x * 2**-e (an exact power of two; the same sums, exactly scaled) and the rescale
    (fp32 and int8, group scales too) is computed in double and rounded to fp32 once, so y is
    inf only where the exact result is past fp32's range.
    threads: None or 0 = the default (cpukern.set_num_threads, else all cores), or
    1..cpukern.MAX_THREADS (the same for every op); results are the same for any value. Returns float32 (M,) or (B, M) (a torch tensor for torch input).
    """
    xa = ext_array(x, "x")
    act = act_arg(act)  # the name: checked by the extension (one of ACTS)
    nthreads = threads_arg(threads)
    s = float32_scale(scale)
    check = ""
    if isinstance(weights, PackedWeights) and weights.op == "ternary":
        w, check = weights, variant_arg(variant)  # the extension checks it names their variant
    elif isinstance(weights, np.ndarray) or is_torch(weights):
        cols = tuple(x.shape[-1:])  # () for a 0-d x, which the extension refuses
        w = _prepare(weights, int(cols[0]) if cols else 0, None, variant, "weights")
    else:
        raise TypeError(f"weights: expected PackedWeights from cpukern.ternary.prepare or a packed "
                        f"uint32 array, got {type(weights).__name__}")
    # x, the scale and out=: checked by the extension, which returns a new array without out=.
    y = _ext.ternary_gemv(w, xa, s, act, check, nthreads, ext_out(out))
    return out if out is not None else result(y, x)


def gemv_multi(weights: Any, x: Any, *, act: str = "int8", threads: Optional[int] = None,
               out: Any = None) -> list:
    """The matrices of one layer that share their input (q, k and v; gate and up) in one call:
    returns [gemv(w, x, act=act, threads=threads) for w in weights], bitwise, each with its own
    prepared scale. In int8 modes (act "int8" / "int8_bitnet"), with every matrix prepared for
    the same variant without group scales, x is quantised once and the rows of all matrices
    share one pass over the thread pool; otherwise the calls run one after another.

    weights: a list of PackedWeights from prepare, all of the same K. x: float32 (K,) or (B, K).
    out: None or one output per matrix (float32 (M_i,) or (B, M_i))."""
    if not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError(f"weights: expected a non-empty list of PackedWeights from "
                        f"cpukern.ternary.prepare, got {type(weights).__name__}")
    for i, w in enumerate(weights):
        if not isinstance(w, PackedWeights) or w.op != "ternary":
            raise TypeError(f"weights: expected PackedWeights from cpukern.ternary.prepare, got "
                            f"{type(w).__name__} at index {i}")
    outs = [None] * len(weights) if out is None else out
    if not isinstance(outs, (list, tuple)) or len(outs) != len(weights):
        raise ValueError(f"out: expected None or one output per matrix ({len(weights)})")
    ys = _ext.ternary_gemv_multi(list(weights), ext_array(x, "x"), act_arg(act),
                                 threads_arg(threads), [ext_out(o) for o in outs])
    return list(outs) if out is not None else [result(y, x) for y in ys]


# --- serialised prepared weights ------------------------------------------------------

_OPS = ("ternary", "widely_linear")


def serialized_size(weights: PackedWeights, *, int8: bool = False) -> int:
    """Bytes of to_bytes(weights, int8=int8)."""
    check_op(weights, _OPS, "weights", "PackedWeights of op 'ternary' or 'widely_linear'")
    return packed_weights.serialized_size(weights, int8=int8)


def to_bytes(weights: PackedWeights, *, int8: bool = False,
             threads: Optional[int] = None, out: Any = None) -> Any:
    """The prepared weights as one contiguous uint8 array (64-byte aligned): a versioned header
    (magic, format version, op, variant and micro-kernel name, layout word, shapes, group size,
    section offsets, a payload checksum) and 64-byte aligned sections (the kernel layout, the
    scales, optionally the int8 layout). Store it anywhere a uint8 tensor or array goes
    (torch buffer, state_dict, torch.save, pickle, np.save) and use it with from_buffer.

    int8=True (op "ternary"): include the int8 layout too (packed now if needed), so that
    act="int8" on the imported weights packs nothing; included anyway when already packed.
    out: None (a new numpy array) or a 1-D uint8 array / tensor of serialized_size(weights,
    int8=int8) bytes, 64-byte aligned (torch.empty(n, dtype=torch.uint8) is)."""
    check_op(weights, _OPS, "weights", "PackedWeights of op 'ternary' or 'widely_linear'")
    return packed_weights.to_bytes(weights, int8=int8, threads=threads, out=out)


def from_buffer(buf: Any, *, verify: bool = False, variant: Optional[str] = None,
                threads: Optional[int] = None, name: str = "buffer") -> PackedWeights:
    """Prepared weights from a buffer written by to_bytes (a 1-D uint8 numpy array or torch
    tensor, 64-byte aligned): the result views a numpy `buf` without copying and keeps it
    alive; torch memory is viewed only where torch cannot free or move it, else copied once
    (cpukern.PackedWeights.from_buffer; docs/guarantees.md).

    The header is validated against the buffer's size on every import (O(1)): a truncated,
    corrupted or hostile buffer raises ValueError naming `buf`, never reads out of bounds.
    verify=True also checks the payload checksum (one pass over the bytes); use it for
    anything read from disk or the network. The payload is not re-verified per call: the
    prepared bytes are weights like any other, and edits to them in place are the caller's
    (memory-safe, but the results are whatever the edited bytes say).

    A buffer prepared for a variant this CPU cannot run (e.g. AVX-512 on an AVX2 machine) or
    another than `variant` is unpacked to the public ternary format and prepared again for this
    CPU (a copy; PackedWeights.is_view is then False); widely-linear layouts other than the
    public one cannot be unpacked and raise ValueError instead."""
    w = import_buffer(buf, _OPS, verify, variant, threads, name)
    op = "widely_linear" if w.op == "widely_linear" else "ternary_gemv"
    _log.selection(op, w.variant, variant_arg(variant) or None,
                   _ext.widely_linear_variants if w.op == "widely_linear" else _ext.ternary_variants)
    return w


# Weights on disk (safetensors, mapped on load): see cpukern.io.
from cpukern.io import load, save  # noqa: E402
