"""Argument conversion shared by every op: one wording everywhere, no silent copies.

Every rule on an array (dtype, layout, dimensions, shapes, out= shapes) and on a size or range
belongs to C++: the extension (python/ext) and the kernels check them, before any output is
written, with the limits of kernels/common/limits.h (exported as _ext.limits). This layer only
converts what Python hands over and checks what C++ cannot see: that an array argument is a
numpy array or a CPU torch tensor (not on another device, not requiring grad, not a lazily
negated view), that out= is writeable, scalars (int, not bool; representable in the C type);
it turns the extension's new result arrays into what the op returns (torch for torch input).
Messages are one line: "<arg>: expected ..., got ...".
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

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
        if getattr(a, "is_nested", False):  # no single shape: torch raises RuntimeError on .shape
            raise ValueError(f"{name}: expected a tensor of one shape, got a nested (jagged) "
                             f"tensor of {a.dim()} dimensions{_COPY_HINT}")
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
                        f"{describe(a)} (call .resolve_neg() / .resolve_conj() first){_COPY_HINT}")
    try:
        return torch._C._to_dlpack(a)
    except (RuntimeError, BufferError, TypeError) as e:  # a dtype DLPack has no code for
        raise TypeError(f"{name}: expected a tensor of a numeric dtype, got {describe(a)} ({e})") from None


# numpy dtypes the extension can read (nanobind imports no others: object, strings, datetimes,
# long double, structured): bool, integers, float16/32/64, complex64/128.
_EXT_KINDS = frozenset("biufc")
# The extension reads bf16 as 16-bit patterns, so it cannot tell a 16-bit integer array from
# a bfloat16 one: no op takes 16-bit integers, and they are refused here, where the type is known.
_NO_INT16 = ("{name}: expected a C-contiguous CPU array of the op's dtype (bfloat16 as "
             "ml_dtypes.bfloat16 or torch.bfloat16), got {got}: no op takes 16-bit integers"
             + _COPY_HINT)


def _plain_torch_capsule(a: Any) -> Any:
    """The DLPack capsule of `a` when it is a plain CPU torch tensor that passes every check of
    ext_array (no grad, not nested, not a lazily negated or conjugated view, not 16-bit
    integers), else None. A few attribute reads: an op's call takes several tensors, and a
    decode step makes hundreds of calls."""
    torch = sys.modules.get("torch")
    if (torch is None or type(a) is not torch.Tensor or a.requires_grad
            or a.device.type != "cpu" or a.is_nested or a.is_neg() or a.is_conj()
            or a.dtype in (torch.int16, torch.uint16)):
        return None
    return torch._C._to_dlpack(a)


def ext_array(a: Any, name: str) -> Any:
    """What the extension is handed for the array argument `name`. The extension checks its
    dtype, layout, dimensions and shape (one place, C++); this only converts: a numpy array as
    it is (bfloat16 as its zero-copy uint16 view, which the extension reads as bf16), a CPU
    torch tensor as a DLPack capsule (native). TypeError naming `name` for anything else and
    for a numpy array the extension cannot take at all (object, non-native byte order, ...)."""
    capsule = _plain_torch_capsule(a)
    if capsule is not None:
        return capsule
    if isinstance(a, np.ndarray):
        dt = a.dtype
        if dt == BF16:
            return a.view(np.uint16)
        if dt.kind not in _EXT_KINDS or not dt.isnative or dt.char in "gG":
            raise TypeError(f"{name}: expected a numeric array in native byte order, got "
                            f"{describe(a)}{_COPY_HINT}")
        if dt.kind in "iu" and dt.itemsize == 2:
            raise TypeError(_NO_INT16.format(name=name, got=describe(a)))
        return a
    a = require_array(a, name)
    if str(a.dtype) in ("torch.int16", "torch.uint16"):
        raise TypeError(_NO_INT16.format(name=name, got=describe(a)))
    return native(a, name)


def ext_out(out: Any, name: str = "out") -> Any:
    """ext_array for an out= argument (None stays None), which must also be writeable (the
    extension checks its dtype, layout and exact shape before writing it)."""
    if out is None:
        return None
    capsule = _plain_torch_capsule(out)
    if capsule is not None and out.untyped_storage().resizable():
        return capsule  # memory torch allocated (_torch_writeable): writeable
    out = require_array(out, name)
    ok, why = _torch_writeable(out) if is_torch(out) else (bool(out.flags.writeable), "")
    if not ok:
        raise TypeError(f"{name}: expected a writeable array, got "
                        + (f"a {describe(out)} that may be read-only ({why})" if why else
                           f"a read-only {describe(out)}"))
    return ext_array(out, name)


def result(y: Any, like: Any, bf16: bool = False) -> Any:
    """A new result the extension made (a numpy array; bf16 as uint16 bits) as the op returns
    it: a torch tensor when `like` is one (zero-copy), bfloat16 for bf16 results."""
    if is_torch(like):
        import torch

        return torch.from_numpy(y.view(np.int16)).view(torch.bfloat16) if bf16 else torch.from_numpy(y)
    return y.view(BF16) if bf16 else y


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


def str_value(v: Any, name: str) -> str:
    """A str (TypeError naming `name`) whose value the extension checks (str_arg checks it here)."""
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected a str, got {type(v).__name__} {v!r}")
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


def variant_arg(variant: Any) -> str:
    if variant is None:
        return ""
    if not isinstance(variant, str):
        raise TypeError("variant: expected a variant name (str) or None, got "
                        f"{type(variant).__name__}")
    if not variant:
        raise ValueError("variant: expected a variant name or None, got ''")
    if "\x00" in variant:  # C strings would end at the NUL: "avx2\x00junk" is not "avx2"
        raise ValueError("variant: expected a variant name without NUL characters, got "
                         f"{variant!r}")
    return variant


def float32_scale(scale: Any, name: str = "scale") -> Any:
    """None, a Python/numpy real scalar (-> a 1-element float32 array) or an array (the
    extension checks it: float32, its shape)."""
    if scale is None:
        return None
    if isinstance(scale, (int, float, np.integer, np.floating)) and not isinstance(scale, (bool, np.bool_)):
        try:
            return np.array([scale], dtype=np.float32)
        except OverflowError:  # an int past float64's range: no float32 rounds to it
            raise ValueError(f"{name}: expected a real number within float's range, got an "
                             f"integer of {int(scale).bit_length()} bits") from None
    return ext_array(scale, name)
