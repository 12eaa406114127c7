"""Argument checks shared by every op: one wording everywhere, no silent copies."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


def is_torch(a: Any) -> bool:
    return type(a).__module__.split(".")[0] == "torch"


def require_array(a: Any, name: str) -> Any:
    """Returns `a` if it is a numpy array or a CPU torch tensor, else raises TypeError."""
    if isinstance(a, np.ndarray):
        return a
    if is_torch(a):
        if a.device.type != "cpu":
            raise TypeError(f"{name}: expected a CPU tensor, got one on {a.device}")
        return a
    raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(a).__name__}")


def shape_of(a: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in a.shape)


def bf16_bits(a: Any, name: str) -> Any:
    """A zero-copy view of a bfloat16 array that the extension reads as 16-bit patterns."""
    a = require_array(a, name)
    if is_torch(a):
        import torch

        if a.dtype != torch.bfloat16:
            raise TypeError(f"{name}: expected a C-contiguous bfloat16 CPU array, got torch {a.dtype} "
                            f"tensor of shape {tuple(a.shape)}")
        return a
    if a.dtype != BF16:
        raise TypeError(f"{name}: expected a C-contiguous bfloat16 CPU array (ml_dtypes.bfloat16), got "
                        f"{a.dtype} array of shape {a.shape}")
    return a.view(np.uint16)


def empty(like: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """A new array for results: a torch tensor when the reference input is one."""
    if is_torch(like):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype))
    if dtype == "bfloat16":
        return np.empty(shape, dtype=BF16)
    return np.empty(shape, dtype=np.dtype(dtype))


def out_or_new(out: Any, like: Any, shape: tuple[int, ...], dtype: str) -> Any:
    if out is None:
        return empty(like, shape, dtype)
    return require_array(out, "out")


def threads_arg(threads: Any) -> int:
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads: expected None or an integer >= 1, got {threads!r}")
    return int(threads)


def isa_arg(isa: Any) -> str:
    if isa is None:
        return ""
    if not isinstance(isa, str):
        raise TypeError(f"isa: expected a variant name (str) or None, got {type(isa).__name__}")
    return isa


def float32_scale(scale: Any, name: str = "scale") -> Any:
    """None, a Python/numpy scalar (-> a 1-element float32 array) or a float32 array."""
    if scale is None:
        return None
    if isinstance(scale, (int, float, np.integer, np.floating)) and not isinstance(scale, bool):
        return np.array([scale], dtype=np.float32)
    return require_array(scale, name)
