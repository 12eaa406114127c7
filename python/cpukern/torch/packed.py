"""PackedWeightsTensor: prepared weights of any cpukern op as one torch tensor.

A wrapper tensor subclass whose only data is the serialised prepared weights (one 1-D uint8
blob: cpukern.ternary.to_bytes / cpukern.moe.to_bytes's format, header + kernel layout +
scales). Its outer shape is the logical shape of the weights ((M, K) for a ternary layer,
(2n, 2m) for a widely-linear one, (E, O, I) for packed experts, (1, O, I) for a dense
Linear), its dtype uint8, and it never requires grad. The prepared Python object
(cpukern.PackedWeights of the op its header names) is made from the blob at first use
(``weights``; a zero-copy view) and kept on the tensor, so a forward never rebuilds it.

Semantics:
  * ``detach()`` (state_dict, nn.Parameter(t)) shares the blob and the prepared object;
    ``clone()`` and ``copy.deepcopy`` copy the blob; ``dst.copy_(src)`` makes ``dst`` hold
    ``src``'s blob (load_state_dict uses it; the shapes must match, as for any tensor).
  * ``.to(device="cpu")`` and ``.to(torch.uint8)`` return a copy; any other dtype or
    device is refused (TypeError / ValueError): packed weights have one format and run on the
    CPU. A module's ``.to(dtype)`` / ``.half()`` leave them unchanged (they are not floating
    point).
  * pickle and torch.save store the blob; loading checks its header and checksum
    (torch.load(weights_only=True) accepts it: the rebuild function is a registered safe
    global).
  * torch.compile / torch.export see the blob as the tensor's one inner tensor
    (``__tensor_flatten__``); the cpukern ops called with this tensor run on the cached
    prepared object in eager mode and on the blob when traced.
  * An empty tensor (``PackedWeightsTensor.empty(shape)``, a 0-byte blob) stands for weights
    not prepared yet; ``weights`` then raises RuntimeError.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from cpukern import _ext, _packed

__all__ = ["PackedWeightsTensor"]

_aten = torch.ops.aten
_ALIGN = 64  # from_buffer's alignment; torch's CPU allocator gives it to new tensors


def _new_blob(nbytes: int) -> Tensor:
    """A new blob tensor: memory cpukern owns, which torch cannot resize (_packed.owned_tensor)."""
    return _packed.owned_tensor(nbytes)


def _load(blob: Tensor, verify: bool, name: str, isa: Optional[str] = None) -> Any:
    """The prepared object viewing `blob` (cpukern.from_buffer: the op its header names)."""
    return _packed.from_buffer(blob, verify=verify, isa=isa, name=name)


def _is_eager(t: Tensor) -> bool:
    """A real CPU tensor (not a fake, functional or meta one being traced)."""
    return type(t) is Tensor and t.device.type == "cpu"


class PackedWeightsTensor(Tensor):
    """Prepared weights held as one uint8 blob (see the module docstring).

    PackedWeightsTensor(blob, *, name="blob", verify=True): blob a 1-D uint8 CPU tensor
    written by to_bytes (copied once if it is not 64-byte aligned); its header is checked
    (ValueError naming `name`), and with verify its payload checksum. A ternary layout made
    for a variant this CPU cannot run is unpacked and prepared again for it (the cached object
    is then a copy); a MoE packing of such a variant (which cannot be unpacked) is a
    ValueError, except where a module wraps it with its own logical shape: it is kept
    (``runs_here`` is False) and the module packs again from its plain weights."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, blob: Tensor, *, name: str = "blob", verify: bool = True,
                _shape: Optional[tuple] = None, _weights: Any = None) -> "PackedWeightsTensor":
        if not isinstance(blob, Tensor) or blob.dtype != torch.uint8 or blob.dim() != 1:
            got = (f"{blob.dtype} tensor of shape {tuple(blob.shape)}" if isinstance(blob, Tensor)
                   else type(blob).__name__)
            raise TypeError(f"{name}: expected a 1-D uint8 tensor of prepared weights "
                            f"(cpukern.ternary.to_bytes / cpukern.moe.to_bytes), got {got}")
        weights, runs_here = _weights, True
        if _is_eager(blob):
            if blob.requires_grad or type(blob) is not Tensor:
                blob = blob.detach()
            if not blob.is_contiguous() or blob.data_ptr() % _ALIGN:
                blob = _new_blob(blob.numel()).copy_(blob)
            # memory torch cannot free under the cached view (else a copy: _packed.owned_buffer)
            blob = _packed.owned_tensor_of(blob)
            if blob.numel() and weights is None and (verify or _shape is None):
                try:
                    weights = _load(blob, verify, name)
                except _ext.LayoutNotRunnableError:
                    runs_here = False
            if _shape is None:
                if weights is None and blob.numel():
                    raise ValueError(f"{name}: prepared for a variant this CPU cannot run; "
                                     "prepare the weights again here")
                _shape = tuple(weights.shape) if weights is not None else (0,)
        elif blob.device.type != "cpu" and blob.device.type != "meta":
            raise ValueError(f"{name}: packed weights live on the CPU, got device {blob.device}")
        if _shape is None:
            raise ValueError(f"{name}: the logical shape is needed for a traced blob")
        self = Tensor._make_wrapper_subclass(cls, _shape, dtype=torch.uint8, device=blob.device,
                                             requires_grad=False)
        self._blob = blob
        self._weights = weights
        self._runs_here = runs_here
        self._token = object()  # new for every new blob: modules compare it to see changes
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    # --- construction -------------------------------------------------------------------

    @classmethod
    def empty(cls, shape: tuple) -> "PackedWeightsTensor":
        """A tensor of logical `shape` holding no weights yet (a 0-byte blob)."""
        return cls(torch.empty(0, dtype=torch.uint8), _shape=tuple(int(s) for s in shape))

    @classmethod
    def from_weights(cls, weights: Any, *, int8: bool = False) -> "PackedWeightsTensor":
        """cpukern.PackedWeights (any op) serialised into a new blob
        (int8: with the ternary int8 layout too); the cached object views the blob."""
        blob = _packed.to_owned_tensor(weights, int8)
        return cls(blob, verify=False)

    def _alias(self, blob: Tensor, weights: Any, same_blob: bool) -> "PackedWeightsTensor":
        out = PackedWeightsTensor(blob, verify=False, _shape=tuple(self.shape), _weights=weights)
        out._runs_here = self._runs_here
        if same_blob:
            out._token = self._token
        return out

    # --- what it holds ------------------------------------------------------------------

    @property
    def blob(self) -> Tensor:
        """The serialised prepared weights (1-D uint8; empty when none)."""
        return self._blob

    @property
    def is_empty(self) -> bool:
        return self._blob.numel() == 0

    @property
    def runs_here(self) -> bool:
        """Whether it holds a layout this CPU runs (False: empty, or made for another CPU)."""
        if self.is_empty:
            return False
        try:
            self.weights
        except RuntimeError:
            return False
        return True

    @property
    def weights(self) -> Any:
        """The prepared object viewing the blob, made at first use and kept."""
        w = self._weights
        if w is None:
            if self.is_empty:
                raise RuntimeError("PackedWeightsTensor: holds no prepared weights yet")
            if self._runs_here:
                try:
                    w = self._weights = _load(self._blob, False, "prepared")
                except _ext.LayoutNotRunnableError:
                    self._runs_here = False
            if w is None:
                raise RuntimeError("PackedWeightsTensor: prepared for a variant this CPU cannot "
                                   "run; prepare the weights again here")
        return w

    def share_memory_(self) -> "PackedWeightsTensor":
        """Moves the blob into shared memory (torch's own share_memory_ on it; what
        ``module.share_memory()`` and torch.multiprocessing call); the prepared object is made
        again over the shared bytes at next use (the old one stays valid while anyone holds
        it). torch's Tensor.share_memory_ would reach the storage of this wrapper, which has
        none."""
        if self._blob.numel() and not self._blob.is_shared():
            self._blob.share_memory_()
            if self._runs_here and _is_eager(self._blob):
                self._weights = None
        return self

    def is_shared(self) -> bool:
        return bool(self._blob.numel()) and self._blob.is_shared()

    def numpy(self, *, force: bool = False) -> Any:
        """The blob as a numpy array (what cpukern.ternary.from_buffer / moe.from_buffer
        read), as ``prepared.numpy()`` gave when prepared weights were plain uint8 tensors."""
        return self._blob.numpy(force=force)

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        if self.is_empty:
            return f"PackedWeightsTensor(shape={tuple(self.shape)}, empty)"
        what = ""
        if self._runs_here and _is_eager(self._blob):
            w = self.weights
            what = f", op={type(w).__name__}, isa={w.isa!r}"
        return f"PackedWeightsTensor(shape={tuple(self.shape)}{what}, nbytes={self._blob.numel()})"

    # --- torch protocols ----------------------------------------------------------------

    def __tensor_flatten__(self) -> tuple:
        return ["_blob"], (tuple(self.shape),)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: tuple, outer_size: Any, outer_stride: Any
                             ) -> "PackedWeightsTensor":
        return PackedWeightsTensor(inner["_blob"], verify=False, _shape=ctx[0])

    def __reduce_ex__(self, protocol: int) -> tuple:
        return (_rebuild, (self._blob, tuple(self.shape)))

    def __deepcopy__(self, memo: dict) -> "PackedWeightsTensor":
        if id(self) not in memo:
            memo[id(self)] = _clone(self)
        return memo[id(self)]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        handler = _ATEN.get(func)
        if handler is not None:
            return handler(*args, **kwargs)
        if func.namespace == "cpukern":
            return _run_cpukern_op(func, args, kwargs)
        raise NotImplementedError(f"PackedWeightsTensor: {func} is not supported (the tensor holds "
                                  "packed weights for cpukern's ops; use .weights or .blob)")


def _rebuild(blob: Tensor, shape: tuple) -> PackedWeightsTensor:
    """Unpickling: the blob checked (header, checksum)."""
    if blob.numel() == 0:
        return PackedWeightsTensor.empty(shape)
    return PackedWeightsTensor(blob, verify=True, _shape=tuple(shape))


torch.serialization.add_safe_globals([PackedWeightsTensor, _rebuild])


# --- aten ops ------------------------------------------------------------------------

def _detach(t: PackedWeightsTensor) -> PackedWeightsTensor:
    return t._alias(t._blob, t._weights, True)


def _clone(t: PackedWeightsTensor, memory_format: Any = None) -> PackedWeightsTensor:
    copy = _new_blob(t._blob.numel()).copy_(t._blob) if _is_eager(t._blob) else t._blob.clone()
    return t._alias(copy, None, False)


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
    if tuple(src.shape) != tuple(dst.shape):
        raise ValueError(f"src: packed weights of shape {tuple(src.shape)} do not fit "
                         f"{tuple(dst.shape)}")
    dst._blob, dst._weights, dst._runs_here = src._blob, src._weights, src._runs_here
    dst._token = object()
    return dst


def _equal(a: Tensor, b: Tensor) -> bool:
    return (isinstance(a, PackedWeightsTensor) and isinstance(b, PackedWeightsTensor)
            and tuple(a.shape) == tuple(b.shape) and torch.equal(a._blob, b._blob))


_ATEN: dict = {_aten.detach.default: _detach, _aten.alias.default: _detach,
               _aten.clone.default: _clone, _aten._to_copy.default: _to_copy,
               _aten.copy_.default: _copy_, _aten.equal.default: _equal}


# --- cpukern ops -----------------------------------------------------------------------

# op overload -> its Python implementation, which takes PackedWeightsTensor arguments and runs
# on their cached prepared objects (filled by cpukern.torch.ops and .vllm).
EAGER: dict = {}


def eager_impl(op: Any) -> Callable:
    """Registers the decorated function as the eager implementation of `op` for
    PackedWeightsTensor arguments."""
    def register(fn: Callable) -> Callable:
        EAGER[op] = fn
        return fn
    return register


def _run_cpukern_op(func: Any, args: tuple, kwargs: dict) -> Any:
    packed = [a for a in list(args) + list(kwargs.values()) if isinstance(a, PackedWeightsTensor)]
    impl = EAGER.get(func)
    if impl is not None and all(_is_eager(p._blob) for p in packed):
        return impl(*args, **kwargs)
    # Traced (fake or functional blobs): the op on the blobs goes into the graph.
    unwrap = (lambda a: a._blob if isinstance(a, PackedWeightsTensor) else a)
    return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})


def weights_of(t: Tensor, name: str, ops: tuple = ()) -> Any:
    """The prepared object of `t`: its cached one for a PackedWeightsTensor, else made from
    the plain uint8 blob now, for this call only (a view of it, no copy; header checked, O(1);
    refused unless the header names one of `ops`, () = any op)."""
    if isinstance(t, PackedWeightsTensor):
        if not t.runs_here:
            raise ValueError(f"{name}: holds no prepared weights this CPU runs "
                             f"({'empty' if t.is_empty else 'made for another CPU'})")
        return t.weights
    if not isinstance(t, Tensor) or t.dtype != torch.uint8 or t.dim() != 1:
        raise TypeError(f"{name}: expected a PackedWeightsTensor or a 1-D uint8 tensor of prepared "
                        f"weights, got {t.dtype if isinstance(t, Tensor) else type(t).__name__}")
    return _packed.import_buffer(t, ops, False, None, None, name, keep=False)
