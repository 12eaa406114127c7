"""Roofline plots of the kernels measured in a run (importable helper; used by demo.py --plot).

What is measured here:

* read bandwidth: bytes/s of a streaming read, numpy ``a.sum()`` over a float64 array far
  larger than the caches (one thread, as numpy runs it): the slope of the roofline;
* peak vector throughput: FLOP/s of numpy's BLAS fp32 matrix product of two 512 x 512
  matrices (its FMA micro-kernel runs from cache, with the threads BLAS uses): a practical
  ceiling for the vector units, the flat part of the roofline.

Every kernel measurement is a point (arithmetic intensity = operations / bytes moved from
memory, achieved operations/s). For the ternary kernels the operations are the adds and
subtracts that replace the multiply-adds of a dense layer, counted like dense FLOPs
(2 per weight per activation row), and the bytes are the packed weights actually read.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping, Optional

import numpy as np


def _best(fn: Callable[[], Any], min_time: float, max_reps: int) -> float:
    fn()
    best = float("inf")
    start = time.perf_counter()
    reps = 0
    while reps < max_reps and (time.perf_counter() - start < min_time or reps < 3):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        reps += 1
    return best


def measure_read_bandwidth(nbytes: int = 512 << 20, min_time: float = 0.5) -> float:
    """Bytes/s of numpy ``sum`` over `nbytes` of float64 (best of several passes)."""
    a = np.ones(max(1, nbytes // 8), dtype=np.float64)
    return a.nbytes / _best(a.sum, min_time, 20)


def measure_peak_flops(n: int = 512, min_time: float = 0.3) -> float:
    """FLOP/s (2 n^3 per product) of numpy's fp32 BLAS matrix product of n x n matrices."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    return 2.0 * n ** 3 / _best(lambda: np.matmul(a, b, out=c), min_time, 200)


def point(label: str, ops: float, nbytes: float, seconds: float, group: str = "") -> dict[str, Any]:
    """One measured kernel: intensity (ops/byte) and achieved throughput (ops/s)."""
    return {"label": label, "group": group or label, "ops": float(ops), "bytes": float(nbytes),
            "seconds": float(seconds), "intensity": float(ops) / float(nbytes),
            "ops_per_s": float(ops) / float(seconds)}


def draw(points: Iterable[Mapping[str, Any]], bandwidth: float, peak: float, path: str, *,
         title: Optional[str] = None) -> str:
    """Writes a log-log roofline with every point to `path` (any matplotlib format, e.g. .png).

    bandwidth: bytes/s; peak: ops/s; points: dicts from `point`. Returns `path`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = list(points)
    xs = [p["intensity"] for p in pts] or [1.0]
    lo = min(min(xs) / 4, peak / bandwidth / 16)
    hi = max(max(xs) * 4, peak / bandwidth * 16)
    grid = np.logspace(np.log10(lo), np.log10(hi), 256)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.loglog(grid, np.minimum(peak, bandwidth * grid) / 1e9, color="black", lw=2,
              label=f"roofline: {bandwidth / 1e9:.1f} GB/s read, {peak / 1e9:.0f} GFLOP/s peak")
    ax.axvline(peak / bandwidth, color="gray", ls=":", lw=1)
    groups = sorted({p["group"] for p in pts})
    markers = "osD^v<>p*h"
    for gi, g in enumerate(groups):
        gp = [p for p in pts if p["group"] == g]
        ax.scatter([p["intensity"] for p in gp], [p["ops_per_s"] / 1e9 for p in gp],
                   marker=markers[gi % len(markers)], s=40, label=g, zorder=3)
        for p in gp:
            ax.annotate(p["label"], (p["intensity"], p["ops_per_s"] / 1e9), fontsize=7,
                        xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel("arithmetic intensity (ops / byte read from memory)")
    ax.set_ylabel("achieved throughput (G ops / s)")
    ax.set_title(title or "cpukern roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
