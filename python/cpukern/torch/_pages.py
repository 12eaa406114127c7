"""Dropping the mapped pages of checkpoint tensors from this process once cpukern has copied
them into its own layouts (Linux). transformers loads safetensors checkpoints as views of the
files' mappings (safetensors maps each file privately, MAP_PRIVATE); the pages a copy reads stay
in the process's RSS until the mapping closes, which the tensors that stay in the model (the
embedding, norms) hold open until the model is freed. Dropping them (madvise MADV_DONTNEED)
keeps one copy of the weights in memory while a checkpoint loads, not the copy plus the file.

Lossless: only pages the file gives back unchanged are dropped, i.e. pages of a file-backed
mapping that /proc/self/pagemap shows as the file's own (not a private copy a write made); a
later touch reads them again from the file. Without a readable pagemap only mappings without
write permission are dropped. Elsewhere than Linux nothing is done."""

from __future__ import annotations

import ctypes
import mmap
import sys
from typing import Iterable, Optional

import numpy as np
from torch import Tensor

__all__ = ["drop_mapped_pages"]

_PAGE = mmap.PAGESIZE
_PRESENT, _SWAPPED, _FILE = np.uint64(1 << 63), np.uint64(1 << 62), np.uint64(1 << 61)
_madvise = None


def _ranges(tensors: Iterable[Tensor]) -> list:
    """The (start, end) byte ranges of the CPU storages under `tensors`, merged."""
    out = []
    for t in tensors:
        if not isinstance(t, Tensor) or t.device.type != "cpu" or t.is_sparse:
            continue
        try:
            s = t.untyped_storage()
            start, n = s.data_ptr(), s.nbytes()
        except (RuntimeError, NotImplementedError):  # no plain storage (a tensor subclass ...)
            continue
        if start and n:
            out.append((start, start + n))
    out.sort()
    merged: list = []
    for lo, hi in out:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _subtract(ranges: list, keep: list) -> list:
    """Whole pages of `ranges` that no page of `keep` overlaps (both sorted, merged)."""
    out, k = [], 0
    for lo, hi in ranges:
        lo, hi = -(-lo // _PAGE) * _PAGE, hi // _PAGE * _PAGE  # whole pages inside
        while k < len(keep) and keep[k][1] <= lo:
            k += 1
        j = k
        while lo < hi:
            if j < len(keep) and keep[j][0] < hi:
                klo, khi = keep[j][0] // _PAGE * _PAGE, -(-keep[j][1] // _PAGE) * _PAGE
                if klo > lo:
                    out.append((lo, klo))
                lo = max(lo, khi)
                j += 1
            else:
                out.append((lo, hi))
                break
    return out


def _file_mappings() -> list:
    """(start, end, writable) of this process's mappings of regular files."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[4] == "0" or not parts[5].startswith("/"):
                continue  # anonymous, [heap], [stack] ...
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, "w" in parts[1]))
    return out


def _own_file_runs(pagemap, lo: int, hi: int) -> list:
    """The runs of pages in [lo, hi) that are resident and the file's own (pagemap)."""
    pagemap.seek(lo // _PAGE * 8)
    flags = np.frombuffer(pagemap.read((hi - lo) // _PAGE * 8), dtype=np.uint64)
    own = ((flags & _PRESENT) != 0) & ((flags & _FILE) != 0)
    if not own.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], own.astype(np.int8), [0]))))
    return [(lo + int(a) * _PAGE, lo + int(b) * _PAGE) for a, b in zip(edges[::2], edges[1::2])]


def _advise(lo: int, hi: int) -> None:
    global _madvise
    if _madvise is None:
        libc = ctypes.CDLL(None, use_errno=True)
        _madvise = libc.madvise
        _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        _madvise.restype = ctypes.c_int
    _madvise(lo, hi - lo, mmap.MADV_DONTNEED)  # a failure leaves the pages: nothing lost


def drop_mapped_pages(tensors: Iterable[Tensor], keep: Iterable[Tensor]) -> int:
    """Drops from this process the resident pages of the file-mapped storages under `tensors`
    (copied already, no longer needed) that no storage under `keep` (what the model still
    holds) shares a page with; returns the bytes dropped (0 off Linux). Lossless (see the
    module docstring): pages a write made private stay, so does everything not file-mapped."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    todo = _subtract(_ranges(tensors), _ranges(keep))
    if not todo:
        return 0
    maps = _file_mappings()
    pagemap: Optional[object]
    try:
        pagemap = open("/proc/self/pagemap", "rb", buffering=0)
    except OSError:
        pagemap = None
    dropped = 0
    try:
        for lo, hi in todo:
            m = next((m for m in maps if m[0] <= lo and hi <= m[1]), None)
            if m is None:
                continue  # not (wholly) in one file mapping: anonymous memory, never dropped
            if pagemap is not None:
                try:
                    runs = _own_file_runs(pagemap, lo, hi)
                except OSError:
                    runs = [] if m[2] else [(lo, hi)]
            else:
                runs = [] if m[2] else [(lo, hi)]
            for a, b in runs:
                _advise(a, b)
                dropped += b - a
    finally:
        if pagemap is not None:
            pagemap.close()
    return dropped
