"""Argument normalisation shared by every op: one wording everywhere, no silent copies.

Shape and range rules belong to C++ (the extension and the kernels check them, with the limits
of kernels/common/limits.h, exported as _ext.limits). This layer only normalises what Python
hands over before any kernel runs or any output is written: numpy arrays / torch tensors
(dtype, layout, the number of dimensions needed to call the extension, writeable out=),
scalars (int, not bool; representable in the C type) and new result arrays. Messages are one
line: "<arg>: expected ..., got ...". Arrays are taken as they are: a wrong dtype, a
non-contiguous layout or a byte-swapped array is a TypeError (never a silent copy); a wrong
shape is a ValueError.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional

import ml_dtypes
import numpy as np

from cpukern import _ext

BF16 = np.dtype(ml_dtypes.bfloat16)

# From the one limits table (kernels/common/limits.h), never restated here.
# The largest element count (of any buffer, or any single dimension) the library accepts.
MAX_ELEMS: int = _ext.limits["max_elements"]
# The largest explicit threads= (the pool itself runs at most MAX_POOL_THREADS threads).
MAX_THREADS: int = _ext.limits["max_threads"]
MAX_POOL_THREADS: int = _ext.limits["max_pool_threads"]

_NUMPY_DTYPES = {
    "float32": np.dtype(np.float32),
    "int8": np.dtype(np.int8),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint32": np.dtype(np.uint32),
    "uint8": np.dtype(np.uint8),
    "bfloat16": BF16,
}
_COPY_HINT = " (no silent copies: convert it first, e.g. numpy.ascontiguousarray)"


def is_torch(a: Any) -> bool:
    return type(a).__module__.split(".")[0] == "torch"


def require_array(a: Any, name: str) -> Any:
    """Returns `a` if it is a numpy array or a CPU torch tensor, else raises TypeError."""
    if isinstance(a, np.ndarray):
        return a
    if is_torch(a) and hasattr(a, "device") and hasattr(a, "dtype"):
        if a.device.type != "cpu":
            raise TypeError(f"{name}: expected a CPU tensor, got one on {a.device}")
        if a.requires_grad:
            raise TypeError(f"{name}: expected a tensor that does not require grad (call .detach()), "
                            f"got {describe(a)}")
        return a
    raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(a).__name__}")


def shape_of(a: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in a.shape)


def _shape_str(shape: Iterable[int]) -> str:
    shape = tuple(shape)
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _dtype_name(a: Any) -> str:
    if is_torch(a):
        return "torch " + str(a.dtype).replace("torch.", "")
    return str(a.dtype)


def describe(a: Any) -> str:
    """'float32 array of shape (2, 3)' (the extension's wording)."""
    kind = "tensor" if is_torch(a) else "array"
    return f"{_dtype_name(a)} {kind} of shape {_shape_str(shape_of(a))}"


def _dtype_ok(a: Any, dtype: str) -> bool:
    if is_torch(a):
        import torch

        return a.dtype == getattr(torch, dtype, None)
    return a.dtype == _NUMPY_DTYPES[dtype]


def _contiguous(a: Any) -> bool:
    if is_torch(a):
        return bool(a.is_contiguous())
    return bool(a.flags.c_contiguous)


def _mapping_writeable(start: int, end: int) -> bool:
    """Whether every byte of [start, end) lies in a writeable mapping of this process
    (/proc/self/maps; True where that cannot be read)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().split(b"\n")
    except OSError:
        return True
    pos = start
    for line in lines:  # sorted by address
        if not line:
            continue
        span, perms = line.split(b" ", 2)[:2]
        lo, hi = (int(v, 16) for v in span.split(b"-"))
        if hi <= pos:
            continue
        if lo > pos or b"w" not in perms:
            return False
        pos = hi
        if pos >= end:
            return True
    return False


def _torch_writeable(t: Any) -> tuple[bool, str]:
    """(writeable, why not). torch has no read-only flag: memory torch allocated (a resizable
    storage, shared memory included) is writeable; memory it only wraps (torch.from_numpy,
    torch.frombuffer, DLPack) may belong to an immutable object (a read-only numpy array, a
    bytes object) and is refused; a file torch mapped (torch.from_file) is looked up in the
    process's mappings, so that out= over a read-only mapping is a TypeError, not a SIGSEGV."""
    if t.numel() == 0:
        return True, ""
    storage = t.untyped_storage()
    if storage.resizable():
        return True, ""
    start = t.data_ptr()
    if not _mapping_writeable(start, start + t.numel() * t.element_size()):
        return False, "its memory is mapped read-only"
    try:
        mapped = storage.filename is not None
    except (AttributeError, RuntimeError):
        mapped = False
    if mapped:
        return True, ""
    return False, ("it wraps memory torch did not allocate (torch.from_numpy, torch.frombuffer, "
                   "DLPack), whose read-only state torch does not record: pass the numpy array "
                   "itself, or a tensor from torch.empty")


def _lazy_bits(a: Any) -> str:
    """'a lazily negated' / 'a lazily conjugated' for a torch view whose values are not its
    memory's (x._neg_view(), x.conj()), else ''."""
    if getattr(a, "is_neg", None) is not None and a.is_neg():
        return "a lazily negated"
    if getattr(a, "is_conj", None) is not None and a.is_conj():
        return "a lazily conjugated"
    return ""


def native(a: Any, name: str = "array") -> Any:
    """What the extension is handed for an array argument: a numpy array as it is; a torch
    tensor as a DLPack capsule of it (torch._C._to_dlpack: no copy, no side effect on the
    tensor; the capsule keeps the tensor alive). Both conversions are C code, so the
    extension's own argument conversion runs no Python bytecode (Tensor.__dlpack__ is Python),
    in which a thread that CPython is finalising could be stopped with C++ frames on its stack
    (the process would abort). None stays None. A lazily negated or conjugated tensor is a
    TypeError (DLPack would export its memory, not its values)."""
    if a is None or isinstance(a, np.ndarray) or not is_torch(a):
        return a
    import torch

    lazy = _lazy_bits(a)
    if lazy:
        raise TypeError(f"{name}: expected a tensor whose memory holds its values, got {lazy} "
                        f"{describe(a)} (call .resolve_neg() / .resolve_conj() first)")
    return torch._C._to_dlpack(a)


def check_array(a: Any, name: str, dtype: str, ndims: Optional[tuple[int, ...]] = None,
                writeable: bool = False) -> Any:
    """A numpy array or CPU torch tensor of exactly `dtype`, C-contiguous, with one of `ndims`.

    Returns it unchanged, except that a numpy bfloat16 array comes back as a zero-copy uint16
    view (what the extension reads). TypeError for the wrong dtype or layout, ValueError for
    the wrong number of dimensions.
    """
    a = require_array(a, name)
    lazy = _lazy_bits(a) if is_torch(a) else ""
    if lazy:  # the kernels would read the memory (DLPack exports it), not the values
        raise TypeError(f"{name}: expected a tensor whose memory holds its values, got {lazy} "
                        f"{describe(a)} (call .resolve_neg() / .resolve_conj() first){_COPY_HINT}")
    contiguous = _contiguous(a)
    if not _dtype_ok(a, dtype) or not contiguous:
        raise TypeError(f"{name}: expected a C-contiguous {dtype} CPU array, got "
                        f"{'' if contiguous else 'a non-contiguous '}{describe(a)}{_COPY_HINT}")
    if ndims is not None and a.ndim not in ndims:
        allowed = " or ".join(str(n) for n in ndims)
        raise ValueError(f"{name}: expected {allowed} dimensions, got {describe(a)}")
    if any(s > MAX_ELEMS for s in shape_of(a)):  # only a zero-size array can be this large
        raise ValueError(f"{name}: expected dimensions of at most {MAX_ELEMS}, got {describe(a)}")
    if writeable:
        ok, why = _torch_writeable(a) if is_torch(a) else (bool(a.flags.writeable), "")
        if not ok:
            raise TypeError(f"{name}: expected a writeable array, got "
                            + (f"a {describe(a)} that may be read-only ({why})" if why else
                               f"a read-only {describe(a)}"))
    if dtype == "bfloat16" and not is_torch(a):
        return a.view(np.uint16)
    return a


def bf16_bits(a: Any, name: str, ndims: Optional[tuple[int, ...]] = None) -> Any:
    """A zero-copy view of a bfloat16 array that the extension reads as 16-bit patterns."""
    return check_array(a, name, "bfloat16", ndims)


def check_shape(a: Any, name: str, shape: tuple[int, ...]) -> None:
    if shape_of(a) != tuple(shape):
        raise ValueError(f"{name}: expected shape {_shape_str(shape)}, got {describe(a)}")


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(int(s) for s in shape)


def empty(like: Any, shape: tuple[int, ...], dtype: str, name: str = "out") -> Any:
    """A new array for results (a torch tensor when `like` is one). A shape past MAX_ELEMS is a
    ValueError and a failed allocation a MemoryError, both naming `name`."""
    n = _elements(shape)
    if n > MAX_ELEMS or any(int(s) > MAX_ELEMS for s in shape):
        raise ValueError(f"{name}: expected a result of at most {MAX_ELEMS} elements, got shape "
                         f"{_shape_str(shape)}")
    try:
        if is_torch(like):
            import torch

            return torch.empty(shape, dtype=getattr(torch, dtype))
        return np.empty(shape, dtype=_NUMPY_DTYPES[dtype])
    except (MemoryError, RuntimeError) as e:
        raise MemoryError(f"{name}: cannot allocate a {dtype} result of shape {_shape_str(shape)} "
                          f"({n * (2 if dtype == 'bfloat16' else np.dtype(dtype).itemsize)} bytes)") from e


def out_or_new(out: Any, like: Any, shape: tuple[int, ...], dtype: str,
               ndims: Optional[tuple[int, ...]] = None) -> Any:
    """`out` checked (dtype, layout, shape, writeable) or a new array. Returns the array the
    caller gives back to the user (for bfloat16, not the uint16 view)."""
    if out is None:
        return empty(like, shape, dtype)
    check_array(out, "out", dtype, ndims, writeable=True)
    check_shape(out, "out", shape)
    return out


def int_arg(v: Any, name: str, lo: int, hi: int = MAX_ELEMS) -> int:
    """A Python or numpy integer in [lo, hi] (bool refused): TypeError / ValueError."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(v).__name__} {v!r}")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}], got {v}")
    return v


def bool_arg(v: Any, name: str) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"{name}: expected a bool, got {type(v).__name__} {v!r}")


def str_arg(v: Any, name: str, choices: tuple[str, ...]) -> str:
    """One of `choices`: TypeError for a non-string, ValueError for an unknown name."""
    names = list(map(repr, choices))
    want = " or ".join(names) if len(names) <= 2 else "one of " + ", ".join(names)
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected {want}, got {type(v).__name__} {v!r}")
    if v not in choices:
        raise ValueError(f"{name}: expected {want}, got {v!r}")
    return v


def c_int(v: Any, name: str, bits: int = 64) -> int:
    """A Python or numpy integer (bool refused: TypeError) that fits the extension's C integer
    type of `bits` bits (ValueError otherwise). The range rules are C++'s."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(v).__name__} {v!r}")
    v = int(v)
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise ValueError(f"{name}: expected an integer of at most {bits} bits, got {v}")
    return v


def threads_arg(threads: Any) -> int:
    """threads=None -> 0 (the default); an integer goes to C++ unchanged, which accepts 0 or
    1..MAX_THREADS (limits::resolve_threads) and names `threads` otherwise."""
    if threads is None:
        return 0
    return c_int(threads, "threads", 32)


def method_of(cls: type, name: str, fn: Any) -> None:
    """Sets fn as method `name` of one of the extension's classes, named as the class's own
    (so that the stubs list it with the class). Methods that call Python are defined this way
    rather than in the extension: a binding that runs Python code could be ended there by
    interpreter exit, with C++ frames on its stack."""
    import functools
    import inspect

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    method.__module__ = cls.__module__
    method.__name__ = name
    method.__qualname__ = f"{cls.__name__}.{name}"
    sig = inspect.signature(fn)
    params = [p.replace(annotation=inspect.Parameter.empty) if i == 0 else p
              for i, p in enumerate(sig.parameters.values())]
    method.__signature__ = sig.replace(parameters=params, return_annotation="object")
    setattr(cls, name, method)


def name_arg(name: Any, arg: str = "name") -> str:
    """The name an error message gives a buffer: a str without NUL characters."""
    if not isinstance(name, str):
        raise TypeError(f"{arg}: expected a str, got {type(name).__name__}")
    if "\x00" in name:
        raise ValueError(f"{arg}: expected a name without NUL characters, got {name!r}")
    return name


def isa_arg(isa: Any) -> str:
    if isa is None:
        return ""
    if not isinstance(isa, str):
        raise TypeError(f"isa: expected a variant name (str) or None, got {type(isa).__name__}")
    if not isa:
        raise ValueError("isa: expected a variant name or None, got ''")
    if "\x00" in isa:  # C strings would end at the NUL: "avx2\x00junk" is not "avx2"
        raise ValueError(f"isa: expected a variant name without NUL characters, got {isa!r}")
    return isa


def float32_scale(scale: Any, name: str = "scale", ndims: tuple[int, ...] = (0, 1)) -> Any:
    """None, a Python/numpy real scalar (-> a 1-element float32 array) or a float32 array."""
    if scale is None:
        return None
    if isinstance(scale, (int, float, np.integer, np.floating)) and not isinstance(scale, (bool, np.bool_)):
        return np.array([scale], dtype=np.float32)
    return check_array(scale, name, "float32", ndims)
