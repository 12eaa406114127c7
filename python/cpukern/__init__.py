"""cpukern: CPU kernels for LLM inference behind one API.

The library picks the best variant of each op for the CPU it runs on; any variant can be
forced with the `isa=` keyword or the CPUKERN_ISA environment variable
("avx2" forces that variant for every op that has it; "ternary_gemv=reference,fused_moe=avx2"
forces per op).
"""

from __future__ import annotations

from typing import Any

from cpukern import _ext
from cpukern import moe, ternary
from cpukern._arrays import MAX_THREADS
from cpukern._ext import get_num_threads

__version__ = "0.1.0"

_OPS = {
    "ternary_gemv": _ext.ternary_variants,
    "widely_linear": _ext.widely_linear_variants,
    "fused_moe": _ext.moe_variants,
}


def cpu_info() -> dict[str, Any]:
    """The architecture and the CPU features detected at import (e.g. avx2, bmi2, bf16)."""
    return _ext.cpu_info()


def kernels(op: str) -> list[dict[str, Any]]:
    """Every variant of `op` compiled in: name, micro-kernel, required features, whether
    this CPU can run it and whether it is the one selected by default.

    op: "ternary_gemv", "widely_linear" or "fused_moe".
    """
    if not isinstance(op, str) or op not in _OPS:
        raise (ValueError if isinstance(op, str) else TypeError)(
            f"op: expected one of {sorted(_OPS)}, got {op!r}")
    return _OPS[op]()


def set_num_threads(n: int) -> None:
    """Default thread count for ops called with threads=None: 1 <= n <= 4096, or 0 to restore
    the default (all cores). The pool itself runs at most 256 threads."""
    import numpy as np

    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n: expected an integer thread count, got {type(n).__name__} {n!r}")
    if not 0 <= n <= MAX_THREADS:
        raise ValueError(f"n: expected 1 <= n <= {MAX_THREADS} threads, or 0 for the default, got {n}")
    _ext.set_num_threads(int(n))


__all__ = ["cpu_info", "kernels", "set_num_threads", "get_num_threads", "ternary", "moe", "__version__"]
