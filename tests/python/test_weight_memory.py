"""The memory packed weights live in (cpukern.ternary.aligned_empty, the torch blobs): from
64 KiB, 4 KiB-aligned pieces of shared chunks advised as transparent huge pages on Linux
(kernels/common/weight_memory.h), freed with the last array viewing them; smaller arrays, and
every array with CPUKERN_HUGEPAGES=0, 64-byte aligned."""

from __future__ import annotations

import gc
import os
import platform
import sys

import numpy as np
import pytest

from cpukern import _ext, ternary

ARENA_FROM = 64 << 10
HUGE = os.environ.get("CPUKERN_HUGEPAGES", "").strip().lower() not in ("0", "off", "no", "false")


def _advised_huge(addr: int) -> bool:
    """The "hg" VmFlag of the mapping holding addr (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("VmFlags:"):
                return " hg" in line
    return False


@pytest.mark.parametrize("n", [0, 1, 100, ARENA_FROM - 64, ARENA_FROM, 300_000, 5 << 20, 20 << 20])
def test_aligned_empty_is_weight_memory_and_frees_it(n):
    gc.collect()
    chunks0, bytes0, live0 = _ext.weight_memory_stats()
    a = ternary.aligned_empty(n)
    assert a.shape == (n,) and a.dtype == np.uint8 and a.flags.writeable and a.flags.c_contiguous
    arena = HUGE and n >= ARENA_FROM
    assert a.ctypes.data % (4096 if arena else 64) == 0
    a[:] = 7  # every byte is the array's own
    assert int(a.sum()) == 7 * n
    chunks, _, live = _ext.weight_memory_stats()
    assert live - live0 == (1 if arena else 0)
    assert chunks >= chunks0 + (1 if arena and chunks0 == 0 else 0)
    if arena and sys.platform.startswith("linux") and platform.machine() == "x86_64":
        assert _advised_huge(a.ctypes.data)
    view = a[10:]  # a view keeps the memory
    del a
    gc.collect()
    assert _ext.weight_memory_stats()[2] - live0 == (1 if arena else 0)
    if n > 10:
        assert int(view[-1]) == 7
    del view
    gc.collect()
    assert _ext.weight_memory_stats() == (chunks0, bytes0, live0)


def test_a_torch_blob_lives_in_weight_memory():
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    from cpukern.torch import ops

    if not HUGE:
        pytest.skip("CPUKERN_HUGEPAGES turns weight memory's chunks off")
    gc.collect()
    live0 = _ext.weight_memory_stats()[2]
    w = np.random.default_rng(3).integers(-1, 2, (512, 1024)).astype(np.int8)
    packed = torch.from_numpy(ternary.pack(w).view(np.int32))
    blob = ops.prepare_ternary_tensor(packed, 1024, torch.ones(512), int8=True)
    assert blob.numel() >= ARENA_FROM
    assert _ext.weight_memory_stats()[2] == live0 + 1
    assert blob.data_ptr() % 4096 == 0
    del blob
    gc.collect()
    assert _ext.weight_memory_stats()[2] == live0


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (1.5, TypeError), ("8", TypeError),
                                      (1 << 62, ValueError)])
def test_aligned_empty_refuses_bad_sizes_naming_nbytes(bad, exc):
    with pytest.raises(exc, match="nbytes"):
        ternary.aligned_empty(bad)
