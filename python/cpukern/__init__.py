"""cpukern: CPU kernels for LLM inference behind one API.

The library picks the best variant of each op for the CPU it runs on; any variant can be
forced with the `variant=` keyword or the CPUKERN_VARIANT environment variable
("avx2" forces that variant for every op that has it; "ternary_gemv=reference,fused_moe=avx2"
forces per op; "linear=avx2" the dense layer of cpukern.linear alone). A variant is a registry
row (a name from cpukern.kernels(op)); what the CPU supports is cpukern.cpu_info()["features"].
CPUKERN_ISA, the old name of CPUKERN_VARIANT, is no longer read: set, it is a RuntimeWarning at
import.

logging.getLogger("cpukern") reports, at INFO, which variant each op selected and why (once
per op and selection); CPUKERN_VERBOSE=1 prints those records to stderr.

CPUKERN_HUGEPAGES (read once, at the first large allocation of weights or scratch): "0", "off", "no" or
"false" keep 4 KiB pages; "1", "on", "yes", "true" or unset allow transparent huge pages (the
default); case and surrounding blanks do not matter. Any other value is a RuntimeWarning at
import and leaves the default.

CPUKERN_SPIN_US (read once, at the first multi-threaded call): how long, in microseconds, the
pool's threads poll for the next call before they sleep (default 200; 0: sleep at once; at most
100000). cpukern.torch's ops turn polling off while torch itself runs on more than one
thread (its OpenMP threads poll too).
Anything but a non-negative integer is a RuntimeWarning at import and leaves the default.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any

from cpukern import _ext, _log
from cpukern import attention, linear, moe, ternary, widely_linear
from cpukern._arrays import MAX_ELEMS, MAX_POOL_THREADS, MAX_THREADS, c_int
from cpukern._packed import PackedWeights, from_buffer, to_bytes
from cpukern._ext import get_num_threads

__version__ = "0.1.0"

_OPS = {
    "ternary_gemv": _ext.ternary_variants,
    "widely_linear": _ext.widely_linear_variants,
    "fused_moe": _ext.moe_variants,
    "linear": _ext.linear_variants,
    "decode_attention": _ext.attention_variants,
}


def cpu_info() -> dict[str, Any]:
    """The architecture and the CPU features detected at import (e.g. avx2, bmi2, bf16)."""
    return _ext.cpu_info()


def kernels(op: str) -> list[dict[str, Any]]:
    """Every variant of `op` compiled in: name, micro-kernel, required features, the ones of
    them this CPU lacks ("missing") and why ("why": not reported by the CPU, hidden by
    CPUKERN_DISABLE_FEATURES, or refused by the OS, e.g. AMX tile data), whether this CPU can
    run it and whether it is the one selected by default. A fused_moe variant with AMX tiles
    also has "tiles_min_rows": calls with more (token, expert) rows per expert than that
    (T * topk > tiles_min_rows * E) run the tiles, the others its AVX-512 tiles; a linear
    variant has it too (T > tiles_min_rows rows run the tiles).

    op: "ternary_gemv", "widely_linear", "fused_moe", "linear" (the dense layer: fused_moe's
    variants, selected and forced for it alone) or "decode_attention".
    """
    if not isinstance(op, str) or op not in _OPS:
        raise (ValueError if isinstance(op, str) else TypeError)(
            f"op: expected one of {sorted(_OPS)}, got {op!r}")
    return _OPS[op]()


_threads_set = False


def set_num_threads(n: int) -> None:
    """Default thread count for ops called with threads=None: 1 <= n <= MAX_THREADS (4096), or
    0 to restore the default (all cores); anything else is a ValueError naming n. The pool
    itself runs at most MAX_POOL_THREADS (256) threads. Both limits come from the one table in
    C++ (kernels/common/limits.h, cpukern._ext.limits).

    Until this is called with n >= 1 (or after n = 0), cpukern.torch's ops follow
    torch.get_num_threads(); num_threads_is_set() tells which applies."""
    global _threads_set
    n = c_int(n, "n", 32)
    _ext.set_num_threads(n)
    _threads_set = n != 0


def num_threads_is_set() -> bool:
    """True while a thread count from set_num_threads (n >= 1) is in force; False while the
    default applies (then cpukern.torch's ops use torch.get_num_threads())."""
    return _threads_set


def empty_cache() -> None:
    """Gives back the scratch memory the kernels keep between calls. Each thread keeps at most
    16 MiB between calls anyway (more is released when the call returns); this releases the
    rest, for every thread that is not inside a call now (a call in flight releases its own
    when it returns), and returns malloc's free memory to the OS."""
    _ext.empty_cache()


def _check_variant_env() -> None:
    """CPUKERN_ISA, the old name, set: a warning that it is no longer read (a user who sets it
    is not silently ignored). CPUKERN_VARIANT entries that name no variant (a typo forces
    nothing, or for "op=name" makes the op's calls fail): a warning naming the known ones. The op's calls raise ValueError
    for an "op=name" it cannot use (unknown, or needing features this CPU lacks)."""
    if os.environ.get("CPUKERN_ISA"):
        warnings.warn("CPUKERN_ISA is no longer read (it forces nothing); set CPUKERN_VARIANT "
                      "instead", RuntimeWarning, stacklevel=3)
    env = os.environ.get("CPUKERN_VARIANT", "")
    if not env:
        return
    variants = {op: f() for op, f in _OPS.items()}
    known = {op: [v["name"] for v in vs] for op, vs in variants.items()}
    names = sorted({n for ns in known.values() for n in ns})
    for entry in env.split(","):
        op, eq, name = entry.partition("=")
        if eq and op in known:
            if not any(v["selected"] for v in variants[op]):
                warnings.warn(f"CPUKERN_VARIANT: {entry!r} forces a variant {op} cannot use here "
                              f"(its calls will raise ValueError); known: "
                              f"{', '.join(known[op])}", RuntimeWarning, stacklevel=3)
            continue
        if eq:
            warnings.warn(f"CPUKERN_VARIANT: unknown op {op!r} in {entry!r} (ignored); known ops: "
                          f"{', '.join(known)}", RuntimeWarning, stacklevel=3)
        elif entry not in names:
            warnings.warn(f"CPUKERN_VARIANT: unknown variant name {entry!r} (ignored); known: "
                          f"{', '.join(names)}", RuntimeWarning, stacklevel=3)


_HUGEPAGES_VALUES = {"0": "0", "off": "0", "no": "0", "false": "0",
                     "1": "1", "on": "1", "yes": "1", "true": "1"}


def _check_hugepages_env() -> None:
    """CPUKERN_HUGEPAGES: the documented spellings mapped to the "0" / "1" the kernels read
    (rewritten in the environment before any kernel runs); anything else is a warning."""
    v = os.environ.get("CPUKERN_HUGEPAGES")
    if v is None:
        return
    canonical = _HUGEPAGES_VALUES.get(v.strip().lower())
    if canonical is None:
        warnings.warn(f"CPUKERN_HUGEPAGES={v!r}: expected 0/off/no/false or 1/on/yes/true; huge "
                      f"pages stay allowed (the default)", RuntimeWarning, stacklevel=3)
        canonical = "1"
    if canonical != v:
        os.environ["CPUKERN_HUGEPAGES"] = canonical


def _check_spin_env() -> None:
    """CPUKERN_SPIN_US: a non-negative integer (the kernels read the same rule); anything else
    is a warning (the kernels then use the default)."""
    v = os.environ.get("CPUKERN_SPIN_US")
    if v is not None and not re.fullmatch(r"[0-9]+", v.strip(" \t\n")):
        warnings.warn(f"CPUKERN_SPIN_US={v!r}: expected a non-negative integer (microseconds); "
                      f"the default, 200, applies", RuntimeWarning, stacklevel=3)


_check_hugepages_env()
_check_spin_env()
_check_variant_env()
_log.configure_from_env()

__all__ = ["cpu_info", "empty_cache", "kernels", "set_num_threads", "get_num_threads",
           "num_threads_is_set", "ternary", "widely_linear", "moe", "linear", "__version__",
           "PackedWeights", "to_bytes", "from_buffer",
           "MAX_ELEMS", "MAX_THREADS", "MAX_POOL_THREADS"]
