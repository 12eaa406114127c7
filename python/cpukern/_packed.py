"""cpukern.PackedWeights: weights packed once into one micro-kernel's layout, for every op
(ternary, widely_linear, moe), and their serialised form.

One class: `op`, `format`, `act`, `variant` (= `isa`), `ukernel`, `layout`, `shape`, `nbytes`,
`is_view`; `to_bytes()`, `PackedWeights.from_buffer(buf)`, pickling, copy and deepcopy (through
the serialised form; unpickling verifies the checksum). cpukern.ternary.TernaryWeights,
cpukern.widely_linear.WidelyLinearWeights and cpukern.moe.PackedExperts are aliases of it.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterable, Optional

import numpy as np

from cpukern import _ext
from cpukern._arrays import (MAX_ELEMS, bool_arg, ext_array, ext_out, int_arg, isa_arg,
                             method_of, name_arg, threads_arg)

PackedWeights = _ext.PackedWeights


def check_op(weights: Any, ops: Optional[Iterable[str]], arg: str, expected: str) -> None:
    """TypeError naming `arg` unless `weights` are PackedWeights of one of `ops` (None: of any
    op, for a binding that checks the op itself)."""
    if isinstance(weights, PackedWeights) and (ops is None or weights.op in ops):
        return
    got = (f"packed weights of op '{weights.op}'" if isinstance(weights, PackedWeights)
           else type(weights).__name__)
    raise TypeError(f"{arg}: expected {expected}, got {got}")


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised 1-D uint8 numpy array of nbytes, 64-byte aligned (what from_buffer
    needs; torch's CPU allocator gives 64-byte aligned tensors too)."""
    nbytes = int_arg(nbytes, "nbytes", 0, MAX_ELEMS)
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + nbytes]


def _with_int8(weights: Any, int8: bool) -> bool:
    # Ternary weights whose int8 layout exists carry it: the imported weights pack nothing.
    return int8 or (weights.op == "ternary" and weights.int8_ready)


def serialized_size(weights: Any, *, int8: bool = False) -> int:
    """Bytes of to_bytes(weights, int8=int8)."""
    check_op(weights, ("ternary", "widely_linear", "moe"), "weights", "PackedWeights")
    return int(_ext.packed_serialized_size(weights, _with_int8(weights, bool_arg(int8, "int8"))))


def to_bytes(weights: Any, *, int8: bool = False, threads: Optional[int] = None,
             out: Any = None) -> Any:
    """The packed weights as one contiguous uint8 array (64-byte aligned): a versioned header
    (magic, format version, op, variant and micro-kernel name, layout word, dims, section
    offsets, a checksum of header and payload) and 64-byte aligned sections (the kernel
    layouts, the scales). Store it anywhere a uint8 tensor or array goes (torch buffer,
    state_dict, torch.save, pickle, np.save) and use it with from_buffer.

    int8=True (ternary): include the int8 layout too (packed now if needed), so that
    act="int8" on the imported weights packs nothing; included anyway when already packed.
    out: None (a new numpy array) or a 1-D uint8 array / tensor of serialized_size(weights,
    int8=int8) bytes, 64-byte aligned (torch.empty(n, dtype=torch.uint8) is)."""
    size = serialized_size(weights, int8=int8)
    nthreads = threads_arg(threads)
    if out is None:
        out = aligned_empty(size)
    # out='s dtype, size and alignment: checked by the extension
    _ext.packed_serialize(weights, _with_int8(weights, bool(int8)), nthreads, ext_out(out))
    return out


def import_buffer(buf: Any, ops: tuple[str, ...], verify: Any, isa: Any, threads: Any,
                  name: Any) -> Any:
    """The weights of a buffer written by to_bytes whose header names one of `ops` (() = any
    op; the extension reads and checks the header); the arguments as the public from_buffer
    functions take them."""
    verify = bool_arg(verify, "verify")
    isa = isa_arg(isa)
    nthreads = threads_arg(threads)
    name = name_arg(name)
    return _ext.packed_from_buffer(ext_array(buf, name), list(ops), verify, isa, nthreads, name)


def from_buffer(buf: Any, *, verify: bool = False, isa: Optional[str] = None,
                threads: Optional[int] = None, name: str = "buffer") -> Any:
    """Packed weights of any op from a buffer written by to_bytes (a 1-D uint8 numpy array or
    torch tensor, 64-byte aligned), without copying: the result views `buf` and keeps it
    alive. The header is validated against the buffer's size (O(1)); verify=True also checks
    the checksum (one pass). A buffer for a variant this CPU cannot run (or not `isa`) is
    prepared again where the op can unpack its layout (ternary; widely_linear's public
    layout), else ValueError naming `buf` (MoE packings cannot be unpacked)."""
    return import_buffer(buf, (), verify, isa, threads, name)


def aligned(buf: np.ndarray) -> np.ndarray:
    """buf, or a 64-byte aligned copy of it (unpickled arrays need not be aligned)."""
    if buf.ctypes.data % 64 == 0:
        return buf
    copy = aligned_empty(buf.size)
    copy[...] = buf
    return copy


def _from_pickle(buf: np.ndarray) -> Any:
    return from_buffer(aligned(buf), verify=True)


def _reduce(self: Any) -> tuple:
    return (_from_pickle, (to_bytes(self),))


def _to_bytes(self: Any, int8: bool = False) -> Any:
    """cpukern.to_bytes(self, int8=int8): the serialised form (see cpukern.ternary.to_bytes)."""
    return to_bytes(self, int8=int8)


# Pickling (copy, deepcopy, multiprocessing, torch.save of a module attribute): the serialised
# form, and unpickling verifies the checksum. Defined here, in Python, rather than in the
# extension: a binding that calls back into Python could be stopped there by interpreter exit
# with C++ frames on its stack.
method_of(PackedWeights, "__reduce__", _reduce)
method_of(PackedWeights, "to_bytes", _to_bytes)


def _static_from_buffer(buf: Any, *, verify: bool = False, isa: Optional[str] = None,
                        threads: Optional[int] = None, name: str = "buffer") -> Any:
    return from_buffer(buf, verify=verify, isa=isa, threads=threads, name=name)


# Named as the class's own, so that the stubs list it with the class (as method_of does).
_static_from_buffer.__doc__ = from_buffer.__doc__
_static_from_buffer.__module__ = PackedWeights.__module__
_static_from_buffer.__name__ = "from_buffer"
_static_from_buffer.__qualname__ = "PackedWeights.from_buffer"
_static_from_buffer.__signature__ = inspect.signature(_static_from_buffer).replace(  # type: ignore[attr-defined]
    parameters=[p.replace(annotation=inspect.Parameter.empty)
                for p in inspect.signature(_static_from_buffer).parameters.values()],
    return_annotation="PackedWeights")
PackedWeights.from_buffer = staticmethod(_static_from_buffer)
