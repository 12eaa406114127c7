"""The one safetensors reader of cpukern: ``ternary.load`` / ``io.read_safetensors``,
``moe.load_gpt_oss`` and ``convert`` all read files through it, with the same guarantees:

* Regular files only. The path is checked with ``os.stat`` before it is opened (a FIFO, socket,
  directory or device is a ValueError naming the file, never a block or an ENXIO), opened with
  O_NONBLOCK, and checked again on the open descriptor (a file swapped in between is refused
  the same way). Nothing past the size the file had when opened is read.
* The header is validated before any tensor is built: the 8-byte length (2 <= N <= 100 MiB,
  within the file), UTF-8 JSON holding one object without duplicate names, ``__metadata__``
  an object of strings, every entry exactly {dtype, shape, data_offsets} with a known dtype,
  at most 8 integer dimensions (each < 2**48), two integer offsets in bounds whose span is
  prod(shape) * itemsize, and the entries covering the data region exactly, without overlap.
* Every error is a ValueError naming the file (``safetensors file '<path>'``) and, where one is
  concerned, the tensor (``tensor '<name>'``).

Mapping (mmap=True): the arrays are read-only views of a read-only mapping of the file; pages
are read when touched, and the mapping lives as long as any array. A mapped file must not be
truncated or rewritten in place while an array is alive: touching a page past the new end
raises SIGBUS and kills the process, as with numpy.memmap or safetensors' own mappings. Names
given in ``copy`` come back as private copies instead (small tensors such as biases, so that
nothing a loader returns depends on the file); mmap=False reads the file into memory.
"""

from __future__ import annotations

import errno
import json
import math
import mmap as _mmap
import os
import stat
import struct
from typing import Any, Collection, Mapping, Optional

import ml_dtypes
import numpy as np

MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
MAX_DIMS = 8
MAX_DIM = 1 << 48

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64), "U64": np.dtype(np.uint64), "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32), "I16": np.dtype(np.int16), "U16": np.dtype(np.uint16),
    "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}


def where(path: Any) -> str:
    """'safetensors file' or "safetensors file '<path>'" (the prefix of every message)."""
    if path is None:
        return "safetensors file"
    return f"safetensors file {os.fspath(path)!r}"


def fail(path: Any, msg: str) -> None:
    raise ValueError(f"{where(path)}: {msg}")


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "non-regular file"


def _not_regular(path: Any, mode: int, what: str = "safetensors file") -> ValueError:
    return ValueError(f"path: expected a regular file, got a {file_kind(mode)} "
                      f"({os.fspath(path)!r}, {what})")


def open_regular(path: Any, what: str = "safetensors file") -> tuple[int, int]:
    """(fd, size) of a regular file opened read-only without blocking (the caller closes fd).

    os.stat first (a socket or FIFO is refused before any open), then O_NONBLOCK open and
    fstat of the descriptor (a file swapped in between is refused too). ValueError naming the
    file for anything but a regular file; FileNotFoundError / PermissionError as open gives
    them."""
    try:
        st = os.stat(path)
    except TypeError:
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, what)
    try:
        # O_NONBLOCK: opening a FIFO swapped in after the stat must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket swapped in after the stat
            raise ValueError(f"path: expected a regular file, got a socket or device "
                             f"({os.fspath(path)!r}, {what})") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode, what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_exact(fd: int, size: int, offset: int = 0) -> bytes:
    """Exactly `size` bytes from fd at `offset` (fewer if the file shrank); never more."""
    parts, left = [], size
    while left > 0:
        chunk = os.pread(fd, min(left, 1 << 24), offset)
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def read_head(path: Any, n: int, what: str = "file") -> bytes:
    """The first n bytes of a regular file (open_regular's checks), e.g. a magic number."""
    fd, size = open_regular(path, what)
    try:
        return read_exact(fd, min(n, size))
    finally:
        os.close(fd)


def split(buf: Any, size: int, path: Any = None) -> tuple[int, int]:
    """(header length N, data size) of a buffer of `size` bytes, validated."""
    if size < 8:
        fail(path, f"{size} bytes is shorter than the 8-byte header length (truncated file?)")
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n < 2 or n > MAX_HEADER_BYTES:
        fail(path, f"header length {n} outside [2, {MAX_HEADER_BYTES}]")
    if 8 + n > size:
        fail(path, f"header length {n} exceeds the {size - 8} bytes after it (truncated file?)")
    return n, size - 8 - n


def _no_duplicates(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


class _Duplicate(Exception):
    pass


def _int_value(v: Any, path: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        fail(path, f"{what}: expected an integer, got {v!r:.80}")
    if v < 0:
        fail(path, f"{what}: expected >= 0, got {v}")
    return v


def parse_header(header_bytes: bytes, data_size: int, path: Any = None, *,
                 any_dtype: bool = False) -> tuple[dict[str, dict], dict[str, str]]:
    """The safetensors structure of a JSON header for `data_size` data bytes (see the module
    docstring). Returns (entries: name -> {"dtype": np.dtype, "code": str, "shape": tuple,
    "begin": int, "end": int}, metadata). ValueError naming `path` and the tensor on any
    inconsistency. any_dtype: a dtype code numpy has no type for (F8_E4M3, ...) is kept, with
    dtype None and its byte count unchecked (for reading the header alone)."""
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        fail(path, f"header: the name {e.args[0]!r:.80} appears twice")
    except RecursionError:
        fail(path, "header JSON is nested too deeply")
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError, int digit limits
        fail(path, f"header is not valid UTF-8 JSON ({str(e):.200})")
    if not isinstance(header, dict):
        fail(path, f"header: expected a JSON object, got {type(header).__name__}")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(b, str) for b in meta.values()):
        fail(path, "__metadata__: expected an object of string values")
    entries: dict[str, dict] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        at = f"tensor {name!r:.80}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            fail(path, f"{at}: expected exactly the keys dtype, shape, data_offsets")
        code = info["dtype"]
        dtype = DTYPES.get(code) if isinstance(code, str) else None
        if dtype is None and not (any_dtype and isinstance(code, str) and code):
            fail(path, f"{at}: unsupported dtype {code!r:.80}")
        shape = info["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            fail(path, f"{at}: shape must be a list of at most {MAX_DIMS} integers")
        shape = [_int_value(s, path, f"{at} shape") for s in shape]
        if any(s >= MAX_DIM for s in shape):
            fail(path, f"{at}: shape {shape} has a dimension >= 2**48")
        offs = info["data_offsets"]
        if not isinstance(offs, list) or len(offs) != 2:
            fail(path, f"{at}: data_offsets must be [begin, end]")
        begin, end = (_int_value(o, path, f"{at} data_offsets") for o in offs)
        if not begin <= end <= data_size:
            fail(path, f"{at}: data_offsets [{begin}, {end}] outside the {data_size} data bytes "
                       f"(truncated file?)")
        nbytes = dtype.itemsize * math.prod(shape) if dtype is not None else end - begin
        if end - begin != nbytes:
            fail(path, f"{at}: {code} shape {shape} needs {nbytes} bytes, data_offsets "
                       f"give {end - begin}")
        entries[name] = {"dtype": dtype, "code": code, "shape": tuple(shape), "begin": begin,
                         "end": end}
    pos = 0
    for begin, end, name in sorted((e["begin"], e["end"], n) for n, e in entries.items()):
        if begin != pos:
            fail(path, f"tensor {name!r:.80}: data_offsets begin at {begin}, expected {pos} "
                       f"({'overlap' if begin < pos else 'gap'})")
        pos = end
    if pos != data_size:
        fail(path, f"data: tensors cover {pos} bytes, the file holds {data_size} after the header")
    return entries, meta


def header(path: Any) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype code) of a safetensors file, from its header alone (no data
    read): a regular file, the header validated as read() validates it, except that dtype
    codes numpy has no type for (F8_E4M3, ...) are kept as they are."""
    fd, size = open_regular(path)
    try:
        n, data_size = split(read_exact(fd, 8), size, path)
        raw = read_exact(fd, n, 8)
    finally:
        os.close(fd)
    if len(raw) != n:
        fail(path, f"header: {len(raw)} of its {n} bytes (the file shrank while read)")
    entries, _ = parse_header(raw, data_size, path, any_dtype=True)
    return {name: (e["shape"], e["code"]) for name, e in entries.items()}


def views(buf: Any, base: int, entries: Mapping[str, dict],
          copy: Collection[str] = ()) -> dict[str, np.ndarray]:
    """name -> array over buf[base + begin: base + end] (read-only views of a mapping, or
    copies for the names in `copy` and for misaligned data)."""
    out = {}
    for name, e in entries.items():
        count = math.prod(e["shape"])
        offset = base + e["begin"]
        if count == 0:
            a = np.empty(0, e["dtype"])
        elif offset % e["dtype"].itemsize:  # never from save(): safetensors aligns the data
            a = np.frombuffer(bytes(buf[offset:offset + e["end"] - e["begin"]]), e["dtype"], count)
        else:
            a = np.frombuffer(buf, e["dtype"], count, offset)
        a = a.reshape(e["shape"])
        out[name] = a.copy() if name in copy else a
    return out


def read(path: Any, *, mmap: bool = True, copy: Collection[str] = (),
         check: Optional[Any] = None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Any safetensors file: (name -> numpy array, metadata), validated (module docstring).

    mmap=True maps the file (the arrays view the mapping, except the names in `copy`, which are
    private copies); mmap=False reads it into memory. check(entries, meta, path), if given,
    runs further checks on the parsed header before any array is built (cpukern.io's format
    rules)."""
    fd, size = open_regular(path)
    try:
        if mmap and size > 0:
            buf: Any = _mmap.mmap(fd, size, access=_mmap.ACCESS_READ)
        else:
            buf = read_exact(fd, size)
    finally:
        os.close(fd)
    if len(buf) != size:
        fail(path, f"read {len(buf)} bytes, the file has {size} (changed while reading?)")
    n, data_size = split(buf, size, path)
    entries, meta = parse_header(bytes(buf[8:8 + n]), data_size, path)
    if check is not None:
        check(entries, meta, path)
    return views(buf, 8 + n, entries, copy), meta
