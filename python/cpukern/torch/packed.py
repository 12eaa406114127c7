"""PackedWeightsTensor: packed weights of any cpukern op as one torch tensor that carries its
kernel.

A wrapper tensor subclass whose only data is the packed weights in their serialised form (one
1-D uint8 blob: cpukern.ternary.to_bytes / cpukern.moe.to_bytes's format, header + kernel
layout + scales; the bytes packing wrote, viewed without a copy). Its outer shape is the
logical shape of the weights: (M, K) for a ternary layer, (2n, 2m) for a widely-linear one,
(O, I) for a dense layer (``kind`` "linear"), (E, O, I) for experts (``kind`` "moe"); its dtype
uint8; it never requires grad. ``kind`` and ``act`` (a ternary layer's activation rule) say which
kernel runs it: ``F.linear(x, t, bias)`` on a tensor of kind ternary, widely_linear or linear
runs that kernel (so an ``nn.Linear`` whose weight is such a tensor runs cpukern), eagerly
straight on the packed object and, under torch.compile / torch.export, as the cpukern op on the
blob: one implementation for both (cpukern.torch.ops).

Semantics:
  * ``detach()`` (state_dict, nn.Parameter(t)) shares the blob and the packed object;
    ``clone()`` and ``copy.deepcopy`` copy the blob; ``dst.copy_(src)`` makes ``dst`` hold
    ``src``'s blob (load_state_dict uses it; shapes and kinds must match; ``dst`` keeps its act).
  * ``.to(device="cpu")`` and ``.to(torch.uint8)`` return a copy; any other dtype or
    device is refused (TypeError / ValueError): packed weights have one format and run on the
    CPU. A module's ``.to(dtype)`` / ``.half()`` leave them unchanged (they are not floating
    point).
  * pickle and torch.save store the blob; loading checks its header and checksum
    (torch.load(weights_only=True) accepts it: the rebuild function is a registered safe
    global).
  * torch.compile / torch.export see the blob as the tensor's one inner tensor
    (``__tensor_flatten__``; kind, act and shape are its metadata).
  * An empty tensor (``PackedWeightsTensor.empty(shape, kind)``, a 0-byte blob) stands for
    weights not loaded yet; ``weights`` then raises RuntimeError.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from cpukern import _ext, _packed

__all__ = ["PackedWeightsTensor", "KINDS"]

_aten = torch.ops.aten
_ALIGN = 64  # from_buffer's alignment; torch's CPU allocator gives it to new tensors
# What a packed tensor holds, so which kernel runs it (a dense layer is one expert packed by
# the MoE packer: its header says op "moe", its kind "linear").
KINDS = ("ternary", "widely_linear", "linear", "moe")
_ACTS = ("fp32", "int8", "int8_bitnet")  # a ternary layer's activation rules (cpukern.ternary)


class _BlobIndex:
    """blob -> its packed object, keyed by identity, weakly: what the op, handed the blob (a
    compiled graph unwraps the tensor), runs without reading the header again. Not an attribute
    of the blob, which pickling would carry. A dict on id() holding a weak reference that
    confirms the identity and drops the entry with the blob: a lookup is one dict read and one
    call, where torch's WeakIdKeyDictionary makes a weak reference per lookup (about 3 us, paid
    by every layer of a compiled decode step)."""

    def __init__(self) -> None:
        self._entries: dict = {}

    def get(self, blob: Tensor) -> Any:
        entry = self._entries.get(id(blob))
        return entry[1] if entry is not None and entry[0]() is blob else None

    def __setitem__(self, blob: Tensor, weights: Any) -> None:
        key, entries = id(blob), self._entries

        def forget(ref: Any) -> None:
            if entries.get(key, (None,))[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(blob, forget), weights)

    def pop(self, blob: Tensor, default: Any = None) -> Any:
        entry = self._entries.get(id(blob))
        if entry is None or entry[0]() is not blob:
            return default
        del self._entries[id(blob)]
        return entry[1]


_BY_BLOB = _BlobIndex()


def _new_blob(nbytes: int) -> Tensor:
    """A new blob tensor: memory cpukern owns, which torch cannot resize (_packed.owned_tensor)."""
    return _packed.owned_tensor(nbytes)


def _load(blob: Tensor, verify: bool, name: str) -> Any:
    """The packed object viewing `blob` (cpukern.from_buffer: the op its header names)."""
    return _packed.from_buffer(blob, verify=verify, name=name)


def _unwrap(a: Any) -> Any:
    """An op's argument with each PackedWeightsTensor (also inside a list: Tensor[] arguments)
    replaced by its blob."""
    if isinstance(a, PackedWeightsTensor):
        return a._blob
    if isinstance(a, (list, tuple)):
        return type(a)(_unwrap(b) for b in a)
    return a


def _is_eager(t: Tensor) -> bool:
    """A real CPU tensor (not a fake, functional or meta one being traced)."""
    return type(t) is Tensor and t.device.type == "cpu"


def _remember(blob: Tensor, weights: Any) -> None:
    """Notes `weights` as the packed object of `blob` (_BY_BLOB)."""
    if weights is not None and _is_eager(blob):
        _BY_BLOB[blob] = weights


def _kind_of(weights: Any, kind: Optional[str], name: str) -> str:
    op = weights.op
    if kind is None:
        return op
    if kind != op and not (kind == "linear" and op == "moe" and int(weights.shape[0]) == 1):
        raise ValueError(f"{name}: holds packed weights of op '{op}' (shape "
                         f"{tuple(weights.shape)}), not of a {kind} layer")
    return kind


def _logical_shape(weights: Any, kind: str) -> tuple:
    shape = tuple(int(d) for d in weights.shape)
    return shape[1:] if kind == "linear" else shape


def _packed_linear() -> Any:
    """cpukern.torch.forward.packed_linear (which imports this module), looked up once."""
    global _PACKED_LINEAR
    if _PACKED_LINEAR is None:
        from cpukern.torch.forward import packed_linear
        _PACKED_LINEAR = packed_linear
    return _PACKED_LINEAR


_PACKED_LINEAR: Any = None


class PackedWeightsTensor(Tensor):
    """Packed weights held as one uint8 blob, with the kernel that runs them (see the module
    docstring).

    PackedWeightsTensor(blob, *, name="blob", verify=True, kind=None, act=None): blob a 1-D
    uint8 CPU tensor written by to_bytes (copied once if it is not 64-byte aligned); its header
    is checked (ValueError naming `name`), and with verify its payload checksum. kind: None
    (the op the header names) or "linear" for one expert of a dense layer; act: a ternary
    layer's activation rule ("fp32" by default). A ternary layout (or widely-linear's public
    one) made for a variant this CPU cannot run is unpacked and packed again for it, and that
    packing's bytes replace the blob (one copy: the tensor then holds, and saves, this CPU's
    layout); other layouts of such a variant (MoE and dense packings, widely-linear lookup
    layouts) cannot be unpacked: ValueError."""

    @staticmethod
    def __new__(cls, blob: Tensor, *, name: str = "blob", verify: bool = True,
                kind: Optional[str] = None, act: Optional[str] = None,
                _shape: Optional[tuple] = None, _weights: Any = None) -> "PackedWeightsTensor":
        if not isinstance(blob, Tensor) or blob.dtype != torch.uint8 or blob.dim() != 1:
            got = (f"{blob.dtype} tensor of shape {tuple(blob.shape)}" if isinstance(blob, Tensor)
                   else type(blob).__name__)
            raise TypeError(f"{name}: expected a 1-D uint8 tensor of packed weights "
                            f"(cpukern.ternary.to_bytes / cpukern.moe.to_bytes), got {got}")
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind: expected None or one of {KINDS}, got {kind!r}")
        weights = _weights
        if _is_eager(blob):
            if blob.requires_grad or type(blob) is not Tensor:
                blob = blob.detach()
            if not blob.is_contiguous() or blob.data_ptr() % _ALIGN:
                blob = _new_blob(blob.numel()).copy_(blob)
            # memory torch cannot free under the cached view (else a copy: _packed.owned_buffer)
            blob = _packed.owned_tensor_of(blob)
            if blob.numel() and weights is None:
                try:
                    weights = _load(blob, verify, name)
                except _ext.LayoutNotRunnableError:
                    raise ValueError(f"{name}: packed for a variant this CPU cannot run, in a "
                                     f"layout that cannot be unpacked (MoE and dense packings, "
                                     f"widely-linear lookup layouts); pack the weights again here "
                                     f"from their checkpoint") from None
                if not weights.is_view:
                    # Packed again for this CPU: that packing, serialised, becomes the blob
                    # (one copy, and what saving writes), the other CPU's blob is dropped.
                    int8 = kind in (None, "ternary") and act not in (None, "fp32")
                    blob = _packed.to_owned_tensor(weights, int8)
                    weights = _load(blob, False, name)
            if weights is not None:
                kind = _kind_of(weights, kind, name)
                shape = _logical_shape(weights, kind)
                if _shape is not None and tuple(_shape) != shape:
                    raise ValueError(f"{name}: packed weights of shape {shape} do not fit "
                                     f"{tuple(_shape)}")
                _shape = shape
        elif blob.device.type not in ("cpu", "meta"):
            raise ValueError(f"{name}: packed weights live on the CPU, got device {blob.device}")
        if _shape is None or kind is None:
            raise ValueError(f"{name}: the logical shape and kind are needed for an empty or "
                             f"traced blob")
        if kind == "ternary":
            act = "fp32" if act is None else act
            if act not in _ACTS:
                raise ValueError(f"act: expected one of {_ACTS}, got {act!r}")
        elif act is not None:
            raise ValueError(f"act: only ternary weights take an activation rule, got {act!r} "
                             f"for {kind}")
        self = Tensor._make_wrapper_subclass(cls, tuple(_shape), dtype=torch.uint8,
                                             device=blob.device, requires_grad=False)
        self._blob, self._weights, self._kind, self._act = blob, weights, kind, act
        self._dims = tuple(int(d) for d in _shape)  # .shape goes through __torch_function__
        _remember(blob, weights)
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    # --- construction -------------------------------------------------------------------

    @classmethod
    def empty(cls, shape: tuple, kind: str, act: Optional[str] = None) -> "PackedWeightsTensor":
        """A tensor of logical `shape` and `kind` holding no weights yet (a 0-byte blob)."""
        return cls(torch.empty(0, dtype=torch.uint8), kind=kind, act=act,
                   _shape=tuple(int(s) for s in shape))

    @classmethod
    def from_weights(cls, weights: Any, *, int8: bool = False, kind: Optional[str] = None,
                     act: Optional[str] = None) -> "PackedWeightsTensor":
        """cpukern.PackedWeights (any op) in a new blob (int8: with the ternary int8 layout
        too); the cached object views the blob."""
        blob = _packed.to_owned_tensor(weights, int8)
        return cls(blob, verify=False, kind=kind, act=act)

    def _alias(self, blob: Tensor, weights: Any) -> "PackedWeightsTensor":
        return PackedWeightsTensor(blob, verify=False, kind=self._kind, act=self._act,
                                   _shape=tuple(self.shape), _weights=weights)

    # --- what it holds ------------------------------------------------------------------

    @property
    def blob(self) -> Tensor:
        """The serialised packed weights (1-D uint8; empty when none)."""
        return self._blob

    @property
    def kind(self) -> str:
        """Which kernel runs the weights: one of KINDS."""
        return self._kind

    @property
    def act(self) -> Optional[str]:
        """A ternary layer's activation rule ("fp32", "int8", "int8_bitnet"); None otherwise."""
        return self._act

    @property
    def dims(self) -> tuple:
        """The logical shape as a tuple of ints (``tuple(self.shape)``, read without torch's
        dispatch: the kernels' hot path reads it)."""
        return self._dims

    @property
    def is_empty(self) -> bool:
        return self._blob.numel() == 0

    @property
    def weights(self) -> Any:
        """The packed object viewing the blob (made at first use after share_memory_)."""
        w = self._weights
        if w is None:
            if self.is_empty:
                raise RuntimeError("PackedWeightsTensor: holds no packed weights yet")
            w = self._weights = _load(self._blob, False, "packed")
            _remember(self._blob, w)
        return w

    def share_memory_(self) -> "PackedWeightsTensor":
        """Moves the blob into shared memory (torch's own share_memory_ on it; what
        ``module.share_memory()`` and torch.multiprocessing call); the packed object is made
        again over the shared bytes at next use (the old one stays valid while anyone holds
        it). torch's Tensor.share_memory_ would reach the storage of this wrapper, which has
        none."""
        if self._blob.numel() and not self._blob.is_shared():
            self._blob.share_memory_()
            if _is_eager(self._blob):
                self._weights = None
                _BY_BLOB.pop(self._blob, None)
        return self

    def is_shared(self) -> bool:
        return bool(self._blob.numel()) and self._blob.is_shared()

    def numpy(self, *, force: bool = False) -> Any:
        """The blob as a numpy array (what cpukern.ternary.from_buffer / moe.from_buffer read)."""
        return self._blob.numpy(force=force)

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        act = f", act={self._act!r}" if self._act else ""
        if self.is_empty:
            return f"PackedWeightsTensor(shape={tuple(self.shape)}, kind={self._kind!r}{act}, empty)"
        what = ""
        if _is_eager(self._blob):
            what = f", variant={self.weights.variant!r}"
        return (f"PackedWeightsTensor(shape={tuple(self.shape)}, kind={self._kind!r}{act}{what}, "
                f"nbytes={self._blob.numel()})")

    # --- torch protocols ----------------------------------------------------------------

    def __tensor_flatten__(self) -> tuple:
        return ["_blob"], (tuple(self.shape), self._kind, self._act)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: tuple, outer_size: Any, outer_stride: Any
                             ) -> "PackedWeightsTensor":
        shape, kind, act = ctx
        blob = inner["_blob"]
        return PackedWeightsTensor(blob, verify=False, kind=kind, act=act, _shape=shape,
                                   _weights=_BY_BLOB.get(blob) if _is_eager(blob) else None)

    def __reduce_ex__(self, protocol: int) -> tuple:
        return (_rebuild, (self._blob, tuple(self.shape), self._kind, self._act))

    def _stable_hash_for_caching(self) -> str:
        # What a compiled graph depends on: the blob is an input, so its bytes do not count.
        return f"PackedWeightsTensor:{self._kind}:{self._act}:{tuple(self.shape)}"

    def __deepcopy__(self, memo: dict) -> "PackedWeightsTensor":
        if id(self) not in memo:
            memo[id(self)] = _clone(self)
        return memo[id(self)]

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        if func is F.linear:  # the kernel the weights carry
            return _packed_linear()(*args, **(kwargs or {}))
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        handler = _ATEN.get(func)
        if handler is not None:
            return handler(*args, **kwargs)
        if func.namespace == "cpukern":  # the op on the blobs (the packed objects ride along)
            return func(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()})
        raise NotImplementedError(f"PackedWeightsTensor: {func} is not supported (the tensor holds "
                                  "packed weights for cpukern's ops; use .weights or .blob)")


def _rebuild(blob: Tensor, shape: tuple, kind: str, act: Optional[str]) -> PackedWeightsTensor:
    """Unpickling: the blob checked (header, checksum)."""
    if blob.numel() == 0:
        return PackedWeightsTensor.empty(shape, kind, act)
    return PackedWeightsTensor(blob, verify=True, kind=kind, act=act, _shape=tuple(shape))


torch.serialization.add_safe_globals([PackedWeightsTensor, _rebuild])


# --- aten ops ------------------------------------------------------------------------

def _detach(t: PackedWeightsTensor) -> PackedWeightsTensor:
    # A normal tensor also under inference_mode (state_dict, nn.Parameter there): torch sets
    # the version counter of what detach returns, which an inference tensor has none of.
    with torch.inference_mode(False):
        return t._alias(t._blob, t._weights)


def _clone(t: PackedWeightsTensor, memory_format: Any = None) -> PackedWeightsTensor:
    copy = _new_blob(t._blob.numel()).copy_(t._blob) if _is_eager(t._blob) else t._blob.clone()
    return t._alias(copy, None)


def _to_copy(t: PackedWeightsTensor, *, dtype: Any = None, layout: Any = None,
             device: Any = None, pin_memory: Any = None, non_blocking: bool = False,
             memory_format: Any = None) -> PackedWeightsTensor:
    if dtype is not None and dtype != torch.uint8:
        raise TypeError(f"PackedWeightsTensor: packed weights keep their own format; .to({dtype}) "
                        "cannot convert them (a module's .to(dtype) leaves them as they are)")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"PackedWeightsTensor: packed weights run on the CPU only, got device "
                         f"{torch.device(device)}")
    return _clone(t)


def _copy_(dst: PackedWeightsTensor, src: Tensor, non_blocking: bool = False) -> PackedWeightsTensor:
    if not isinstance(src, PackedWeightsTensor):
        raise TypeError(f"src: expected a PackedWeightsTensor to copy into packed weights, got "
                        f"{type(src).__name__} {src.dtype}")
    if tuple(src.shape) != tuple(dst.shape) or src._kind != dst._kind:
        raise ValueError(f"src: packed {src._kind} weights of shape {tuple(src.shape)} do not fit "
                         f"{dst._kind} {tuple(dst.shape)}")
    dst._blob, dst._weights = src._blob, src._weights
    return dst


def _equal(a: Tensor, b: Tensor) -> bool:
    return (isinstance(a, PackedWeightsTensor) and isinstance(b, PackedWeightsTensor)
            and tuple(a.shape) == tuple(b.shape) and torch.equal(a._blob, b._blob))


_ATEN: dict = {_aten.detach.default: _detach, _aten.alias.default: _detach,
               _aten.clone.default: _clone, _aten._to_copy.default: _to_copy,
               _aten.copy_.default: _copy_, _aten.equal.default: _equal}


def known_weights(t: Tensor, name: str, ops: tuple = ()) -> Any:
    """The packed object of `t` when it has one: a PackedWeightsTensor's, or that of its blob as
    a compiled graph hands it over; None for any other (plain) uint8 blob. ValueError naming
    `name` unless its op is one of `ops` (() = any op)."""
    if isinstance(t, PackedWeightsTensor):
        if t.is_empty:
            raise ValueError(f"{name}: holds no packed weights yet (load a state_dict or pack "
                             f"the layer first)")
        w = t.weights
    elif not isinstance(t, Tensor) or t.dtype != torch.uint8 or t.dim() != 1:
        raise TypeError(f"{name}: expected a PackedWeightsTensor or a 1-D uint8 tensor of packed "
                        f"weights, got {t.dtype if isinstance(t, Tensor) else type(t).__name__}")
    else:
        w = _BY_BLOB.get(t) if _is_eager(t) else None
    if w is not None and ops and w.op not in ops:
        raise ValueError(f"{name}: expected prepared weights of {' or '.join(ops)}, got op "
                         f"{w.op!r}")
    return w


def weights_of(t: Tensor, name: str, ops: tuple = ()) -> Any:
    """known_weights(t), else the packed object of a plain uint8 blob made now for this call
    only (a view, no copy; header checked, O(1); refused unless the header names one of
    `ops`, () = any op)."""
    w = known_weights(t, name, ops)
    if w is not None:
        return w
    return _packed.import_buffer(t, ops, False, None, None, name, keep=False)
