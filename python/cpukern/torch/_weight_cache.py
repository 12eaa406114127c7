"""The prepared-weight cache of cpukern.torch: prepared forms (cpukern.ternary.prepare,
cpukern.moe.prepack) keyed by the weight tensor: its identity, data_ptr, shape and version
counter (``tensor._version``); an entry is dropped when its tensor is garbage collected.

Tensors without a version counter (inference tensors, made under ``torch.inference_mode``)
cannot be tracked: an in-place change (copy_, mul_, load_state_dict) would go unseen, so what
is prepared from them is never cached; it is prepared again on every call (a warning says so
once). Create or load modules outside inference_mode (torch.no_grad is fine) to keep the cache."""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any, Callable, Optional

from torch import Tensor

__all__ = ["clear_cache", "cache_info"]


class _Untracked:
    """The fingerprint of a tensor whose changes cannot be seen: equal to nothing."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)


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
    """anchor tensor object -> (key, prepared). One entry per live anchor."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[tuple, Any]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _drop(self, ident: int) -> None:
        with self._lock:
            self._entries.pop(ident, None)

    def get(self, anchor: Tensor, key: tuple, build: Callable[[], Any]) -> Any:
        ident = id(anchor)
        key = (_fingerprint(anchor),) + key
        if _untracked(key):  # never served from (or kept in) the cache
            _warn_untracked()
            value = build()
            with self._lock:
                self.misses += 1
                self._entries.pop(ident, None)
            return value
        with self._lock:
            entry = self._entries.get(ident)
            if entry is not None and entry[0] == key:
                self.hits += 1
                return entry[1]
        value = build()
        with self._lock:
            self.misses += 1
            fresh = ident not in self._entries
            self._entries[ident] = (key, value)
        if fresh:
            weakref.finalize(anchor, self._drop, ident)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


_CACHE = _Cache()


def clear_cache() -> None:
    """Forgets every prepared weight (the next call of each op converts again)."""
    _CACHE.clear()


def cache_info() -> dict[str, int]:
    """{'entries', 'hits', 'misses'} of the prepared-weight cache."""
    return {"entries": len(_CACHE), "hits": _CACHE.hits, "misses": _CACHE.misses}
