"""cpukern.PackedWeights: weights packed once into one micro-kernel's layout, for every op
(ternary, widely_linear, moe), and their serialised form.

One class: `op`, `format`, `act`, `variant`, `ukernel`, `layout`, `shape`, `nbytes`,
`is_view`; `to_bytes()`, `PackedWeights.from_buffer(buf)`, pickling, copy and deepcopy (through
the serialised form; unpickling verifies the checksum).
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Iterable, Optional

import numpy as np

from cpukern import _ext
from cpukern._arrays import (MAX_ELEMS, bool_arg, describe, ext_array, ext_out, int_arg,
                             is_torch, method_of, name_arg, require_array, threads_arg,
                             variant_arg)

PackedWeights = _ext.PackedWeights


def check_op(weights: Any, ops: Optional[Iterable[str]], arg: str, expected: str) -> None:
    """TypeError naming `arg` unless `weights` are PackedWeights of one of `ops` (None: of any
    op, for a binding that checks the op itself)."""
    if isinstance(weights, PackedWeights) and (ops is None or weights.op in ops):
        return
    got = (f"packed weights of op '{weights.op}'" if isinstance(weights, PackedWeights)
           else type(weights).__name__)
    raise TypeError(f"{arg}: expected {expected}, got {got}")


# Data address -> weak reference to the numpy array cpukern allocated there for torch
# (owned_tensor): packed weights view such memory without a copy.
_OWNED: dict = {}


def _owned_empty(nbytes: int) -> np.ndarray:
    """aligned_empty(nbytes), registered as cpukern's own memory (owned_buffer finds it)."""
    arr = aligned_empty(nbytes)
    if arr.size:
        addr = arr.ctypes.data
        _OWNED[addr] = weakref.ref(arr, lambda r, a=addr: _OWNED.pop(a, None) if _OWNED.get(a) is r else None)
    return arr


def owned_tensor(nbytes: int) -> Any:
    """A new 1-D uint8 torch tensor over memory cpukern owns (64-byte aligned): its storage is
    not resizable (torch refuses resize_), and packed weights view it without a copy while
    holding the memory itself, whatever torch later does to the tensor (set_, share_memory_)."""
    import torch

    return torch.from_numpy(_owned_empty(nbytes))


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised 1-D uint8 numpy array of nbytes, 64-byte aligned (what from_buffer
    needs; torch's CPU allocator gives 64-byte aligned tensors too), in the memory cpukern packs
    weights into: transparent huge pages from 64 KiB on Linux (unless CPUKERN_HUGEPAGES=0), so
    weights streamed from it cross no 4 KiB page boundary."""
    return _ext.weight_memory(int_arg(nbytes, "nbytes", 0, MAX_ELEMS))


def _with_int8(weights: Any, int8: bool) -> bool:
    # Ternary weights whose int8 layout exists carry it: the imported weights pack nothing.
    return int8 or (weights.op == "ternary" and weights.int8_ready)


def serialized_size(weights: Any, *, int8: bool = False) -> int:
    """Bytes of to_bytes(weights, int8=int8) (as the weights stand now: another thread's first
    act="int8" call can add the int8 layout, and with it bytes, to a later to_bytes)."""
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
    return serialize(weights, int8, threads, aligned_empty if out is None else (lambda n: out))


def serialize(weights: Any, int8: Any, threads: Any, alloc: Callable[[int], Any]) -> Any:
    """to_bytes into alloc(size): the size is taken once, so that another thread's first
    act="int8" call (which adds the int8 layout) cannot change it between the size and the
    export."""
    check_op(weights, ("ternary", "widely_linear", "moe"), "weights", "PackedWeights")
    with_int8 = _with_int8(weights, bool_arg(int8, "int8"))
    nthreads = threads_arg(threads)
    out = alloc(int(_ext.packed_serialized_size(weights, with_int8)))
    # out='s dtype, size and alignment: checked by the extension
    _ext.packed_serialize(weights, with_int8, nthreads, ext_out(out))
    return out


def to_owned_tensor(weights: Any, int8: Any = False, threads: Any = None) -> Any:
    """to_bytes into a new owned_tensor (the blob cpukern's torch layer keeps)."""
    import torch

    return torch.from_numpy(serialize(weights, int8, threads, _owned_empty))


def _torch_memory(buf: Any) -> Any:
    """The torch tensor whose memory `buf` is (buf itself, or the tensor at the end of a numpy
    array's base chain: tensor.numpy()), else None."""
    while isinstance(buf, np.ndarray):
        buf = buf.base
    return buf if is_torch(buf) and hasattr(buf, "untyped_storage") else None


def stable_memory(buf: Any) -> Any:
    """`buf`, or an object over the same memory, that packed weights may view for as long as
    they live; None where that memory is torch's to free or move. torch can free or move a
    tensor's memory under any view of it (resize_ of the tensor or of its storage, set_,
    share_memory_ of a storage not yet shared), so torch memory is viewed as it is only where
    none of that can happen: a storage that is not resizable and already shared (a tensor
    torch.multiprocessing handed over, or one share_memory_() moved), through a tensor object
    of our own (set_ on the caller's tensor leaves it), and cpukern's own memory (owned_tensor),
    through the numpy array that holds it. numpy arrays over memory numpy owns are viewed as
    they are, and so is what the extension does not take as a buffer (it names what is wrong)."""
    t = _torch_memory(buf)
    if t is None:
        return buf
    storage = t.untyped_storage()
    if t is buf and not storage.resizable() and buf.is_shared():
        return buf.detach()
    if is_torch(buf):  # (not .numpy(): it would mark the caller's storage not resizable)
        fits = (str(buf.dtype) == "torch.uint8" and buf.dim() == 1 and buf.is_contiguous()
                and buf.data_ptr() % 64 == 0)
        addr, size = buf.data_ptr(), buf.numel()
    else:
        fits = buf.dtype == np.uint8 and buf.ndim == 1 and buf.flags.c_contiguous and buf.ctypes.data % 64 == 0
        addr, size = buf.ctypes.data, buf.size
    if not fits:
        return buf  # not a buffer the extension takes: it names what is wrong
    if not storage.resizable():
        # cpukern's own memory (owned_tensor): a view of the array, which holds that memory
        start = storage.data_ptr()
        ref = _OWNED.get(start)
        owner = ref() if ref is not None else None
        if owner is not None and owner.ctypes.data == start and 0 <= addr - start <= owner.size - size:
            return owner[addr - start:addr - start + size]
    return None


def owned_buffer(buf: Any) -> Any:
    """`buf` as a buffer packed weights may view for as long as they live: stable_memory(buf),
    else (torch memory torch can free or move) a copy, made once, in memory cpukern owns."""
    stable = stable_memory(buf)
    if stable is not None:
        return stable
    size = buf.numel() if is_torch(buf) else buf.size
    copy = _owned_empty(size)
    if is_torch(buf):
        import torch

        torch.from_numpy(copy).copy_(buf)
    else:
        copy[...] = buf
    return copy


def owned_tensor_of(blob: Any) -> Any:
    """A 1-D uint8 torch tensor `blob` as one packed weights may view for as long as they live:
    itself where owned_buffer views it, else a copy in owned_tensor memory."""
    import torch

    stable = owned_buffer(blob)
    if isinstance(stable, np.ndarray) and stable.ctypes.data != blob.data_ptr():
        return torch.from_numpy(stable)
    return blob


def prepare_into(out: Any, size: Callable[[], int], prepare: Callable[[Any], Any]) -> Any:
    """The `out=` of every op's prepare: packing straight into out(nbytes), the serialised form
    (the bytes of to_bytes(prepare(...)), checksum included), without an owned copy of the
    layout. size() is that form's size for the call's arguments (the extension checks them
    first); `out` is called once with it and must return a 1-D C-contiguous uint8 numpy array
    or torch tensor of exactly that many bytes, 64-byte aligned and writeable (the extension
    checks dtype, size and alignment, naming `out`); prepare(buffer) packs into it and returns
    weights that view it, keeping it alive (as from_buffer's view). torch memory that torch can
    free or move under a view (stable_memory) is refused: return owned_tensor(nbytes), or a
    numpy array (aligned_empty)."""
    if not callable(out):
        raise TypeError(f"out: expected a callable alloc(nbytes) returning a 1-D uint8 array "
                        f"(e.g. cpukern.ternary.aligned_empty), got {type(out).__name__}")
    nbytes = int(size())
    buf = require_array(out(nbytes), "out")
    stable = stable_memory(buf)
    if stable is None:
        raise ValueError(f"out: returned a {describe(buf)} whose memory torch can free or move "
                         f"under packed weights that view it (resize_, set_, share_memory_); "
                         f"return cpukern._packed.owned_tensor(nbytes) or a numpy array "
                         f"(cpukern.ternary.aligned_empty(nbytes))")
    return prepare(ext_out(stable, "out"))


def import_buffer(buf: Any, ops: tuple[str, ...], verify: Any, variant: Any, threads: Any,
                  name: Any, *, keep: bool = True) -> Any:
    """The weights of a buffer written by to_bytes whose header names one of `ops` (() = any
    op; the extension reads and checks the header); the arguments as the public from_buffer
    functions take them. keep=False: a view used within one call and dropped (no copy of
    torch memory: nothing can resize it while the caller holds the GIL or the tensor)."""
    verify = bool_arg(verify, "verify")
    variant = variant_arg(variant)
    nthreads = threads_arg(threads)
    name = name_arg(name)
    arr = ext_array(buf, name)  # checks the kind of argument before any copy
    if keep:
        stable = owned_buffer(buf)
        if stable is not buf:
            arr = ext_array(stable, name)
    return _ext.packed_from_buffer(arr, list(ops), verify, variant, nthreads, name)


def from_buffer(buf: Any, *, verify: bool = False, variant: Optional[str] = None,
                threads: Optional[int] = None, name: str = "buffer") -> Any:
    """Packed weights of any op from a buffer written by to_bytes (a 1-D uint8 numpy array or
    torch tensor, 64-byte aligned). A numpy array is viewed without copying (the result keeps
    it alive); torch memory is viewed only where torch cannot free or move it (a non-resizable,
    shared storage), else copied once (owned_buffer: torch can resize or re-home any other
    storage under a view). The header is validated against the buffer's size (O(1));
    verify=True also checks the checksum (one pass). A buffer for a variant this CPU cannot run
    (or not `variant`) is prepared again where the op can unpack its layout (ternary;
    widely_linear's public layout), else ValueError naming `buf` (MoE packings cannot be
    unpacked)."""
    return import_buffer(buf, (), verify, variant, threads, name)


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


def _static_from_buffer(buf: Any, *, verify: bool = False, variant: Optional[str] = None,
                        threads: Optional[int] = None, name: str = "buffer") -> Any:
    return from_buffer(buf, verify=verify, variant=variant, threads=threads, name=name)


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
