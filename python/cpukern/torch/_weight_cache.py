"""The prepared-weight cache of cpukern.torch: prepared forms (cpukern.ternary.prepare,
cpukern.moe.prepack) keyed by the weight tensor: its identity, data_ptr, shape and version
counter (``tensor._version``); an entry is dropped when its tensor is garbage collected."""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Optional

from torch import Tensor

__all__ = ["clear_cache", "cache_info"]


def _version(t: Tensor) -> int:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors track no version
        return -1


def _fingerprint(t: Optional[Tensor]) -> tuple:
    if t is None:
        return (None,)
    return (t.data_ptr(), _version(t), tuple(t.shape), t.dtype)


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
