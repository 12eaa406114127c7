"""The prepared-weight cache of cpukern.torch: prepared forms (cpukern.ternary.prepare,
cpukern.moe.prepare) kept on the weight tensor's *storage* (torch keeps a storage's Python
object, and so its attributes, alive exactly as long as the storage), under the view
(offset, shape, strides, dtype) and the op's own key, tagged with the tensor's version counter
(``tensor._version``, shared by every alias of the tensor: views, ``detach()``,
``nn.Parameter(t)``).

So a prepared form follows the weights, not one tensor object: vLLM's ``replace_parameter``
(a new Parameter over the same storage), ``register_buffer`` of the same tensor, detach() or a
view all find it; an in-place change through torch (copy_, mul_, load_state_dict) bumps the
version and the next call prepares again; the form is freed with the storage.

Tensors without a version counter (inference tensors, made under ``torch.inference_mode``)
cannot be tracked: an in-place change would go unseen, so what is prepared from them is never
cached; it is prepared again on every call (a warning says so once). Create or load modules
outside inference_mode (torch.no_grad is fine) to keep the cache."""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any, Callable, Optional

from torch import Tensor

__all__ = ["clear_cache", "cache_info"]

_ATTR = "_cpukern_prepared"  # on the storage object: {view and op key: (fingerprint, prepared)}


class _Untracked:
    """The fingerprint of a tensor whose changes cannot be seen: equal to nothing."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)


class _OneOf:
    """A version that matches any of a few (a write the custom-op machinery adds)."""

    __slots__ = ("versions",)

    def __init__(self, versions: tuple) -> None:
        self.versions = tuple(versions)

    def __eq__(self, other: object) -> bool:
        return other in self.versions or (isinstance(other, _OneOf) and other.versions == self.versions)

    def __hash__(self) -> int:
        return hash(self.versions)


def _version(t: Tensor) -> Optional[int]:
    try:
        v = int(t._version)
    except RuntimeError:  # inference tensors track no version
        return None
    return v if v >= 0 else None


def _fingerprint(t: Optional[Tensor]) -> tuple:
    if t is None:
        return (None,)
    v = _version(t)
    if v is None:
        return (_Untracked(),)
    return (t.data_ptr(), v, tuple(t.shape), t.dtype)


def _untracked(key: Any) -> bool:
    if isinstance(key, _Untracked):
        return True
    return isinstance(key, tuple) and any(_untracked(k) for k in key)


def _view(t: Tensor) -> tuple:
    return (t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


_WARNED = False


def _warn_untracked() -> None:
    global _WARNED
    if not _WARNED:
        _WARNED = True
        warnings.warn("cpukern.torch: weights made under torch.inference_mode() have no version "
                      "counter, so in-place changes to them cannot be seen; their prepared form "
                      "is not cached and is rebuilt on every call (slow). Create or load the "
                      "module outside inference_mode (torch.no_grad() is fine).",
                      RuntimeWarning, stacklevel=4)


class _Cache:
    """Prepared forms on the storages of their weight tensors (see the module docstring)."""

    def __init__(self) -> None:
        self._storages: dict[int, weakref.ref] = {}  # storages holding entries (for clear())
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _slot(self, anchor: Tensor) -> dict:
        storage = anchor.untyped_storage()
        slot = getattr(storage, _ATTR, None)
        if slot is None:
            slot = {}
            setattr(storage, _ATTR, slot)
            ident = id(storage)
            self._storages[ident] = weakref.ref(storage, lambda _r, i=ident: self._forget(i))
        return slot

    def _forget(self, ident: int) -> None:
        with self._lock:
            self._storages.pop(ident, None)

    def get(self, anchor: Tensor, key: tuple, build: Callable[[], Any]) -> Any:
        fp = (_fingerprint(anchor),) + key
        if _untracked(fp):  # never served from (or kept in) the cache
            _warn_untracked()
            value = build()
            with self._lock:
                self.misses += 1
                getattr(anchor.untyped_storage(), _ATTR, {}).pop(self._key(anchor, key), None)
            return value
        where = self._key(anchor, key)
        with self._lock:
            entry = self._slot(anchor).get(where)
            if entry is not None and entry[0] == fp:
                self.hits += 1
                return entry[1]
        value = build()
        self.put(anchor, key, value)
        return value

    def put(self, anchor: Tensor, key: tuple, value: Any, versions: tuple = ()) -> None:
        """Stores `value` as the prepared form of `anchor` at its current version (or at any
        of `versions`)."""
        fp = (_fingerprint(anchor),) + key
        if versions:
            fp = ((fp[0][0], _OneOf(versions)) + fp[0][2:],) + key
        with self._lock:
            self.misses += 1
            self._slot(anchor)[self._key(anchor, key)] = (fp, value)

    @staticmethod
    def _key(anchor: Tensor, key: tuple) -> tuple:
        return _view(anchor) + tuple(k for k in _strip_versions(key))

    def clear(self) -> None:
        with self._lock:
            for ref in list(self._storages.values()):
                storage = ref()
                if storage is not None:
                    getattr(storage, _ATTR, {}).clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return sum(len(getattr(r(), _ATTR, {})) for r in self._storages.values()
                       if r() is not None)


def _strip_versions(key: tuple):
    """The op key without the fingerprints' versions and pointers (one entry per view and
    op key; a new version replaces the entry instead of adding one)."""
    for k in key:
        if isinstance(k, tuple) and len(k) == 4 and isinstance(k[1], int):  # a fingerprint
            yield ("fp", k[2], k[3])
        else:
            yield k


_CACHE = _Cache()


def clear_cache() -> None:
    """Forgets every prepared weight (the next call of each op converts again)."""
    _CACHE.clear()


def cache_info() -> dict[str, int]:
    """{'entries', 'hits', 'misses'} of the prepared-weight cache."""
    return {"entries": len(_CACHE), "hits": _CACHE.hits, "misses": _CACHE.misses}
