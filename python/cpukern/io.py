"""Ternary weights on disk in the safetensors format, loaded by mapping the file.

File layout (safetensors): an 8-byte little-endian header length N, N bytes of JSON, then the
data. cpukern files carry, in the JSON's "__metadata__" (all values strings):

    "cpukern.format": "ternary"         "cpukern.format_version": "1"
    "k.<name>": K         for every packed uint32 tensor <name>: (M, ceil(K/16)) packed rows,
                          or widely-linear planes (stages, 4, n, ceil(K/16)) with K = m
    "stages.<name>": S    for planes (S = shape[0])
    "group_size.<name>": G  for packed rows whose scale has one value per row and group of G
                          columns (a multiple of 16), e.g. 256 for GGUF TQ1_0/TQ2_0

plus any caller metadata. Other tensors (scales float32, biases, bf16 experts, ...) are
stored as they are.

``load`` validates the whole header against the file size before any tensor is built: the
header length, JSON, every entry's keys, dtype, shape and data offsets (in bounds, sizes
consistent, no overlap, the data region covered exactly), the format version and every K /
stages entry against its tensor's shape. Any violation raises ValueError naming the field;
nothing is read outside the file. ``validate_bytes`` runs the same checks on an in-memory
buffer and is meant for fuzzing (atheris): for any input it returns or raises ValueError.
"""

from __future__ import annotations

import json
import math
import mmap as _mmap
import os
import stat
import struct
from typing import Any, Mapping, Optional

import ml_dtypes
import numpy as np

from cpukern._arrays import is_torch

FORMAT = "ternary"
FORMAT_VERSION = "1"
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64), "U64": np.dtype(np.uint64), "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32), "I16": np.dtype(np.int16), "U16": np.dtype(np.uint16),
    "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}

__all__ = ["save", "load", "read_safetensors", "validate_bytes", "validate_header", "Checkpoint",
           "FORMAT_VERSION"]
_RESERVED = ("cpukern.", "k.", "stages.", "group_size.")


class Checkpoint(dict):
    """name -> numpy array (read-only views of the mapped file when loaded with mmap=True),
    plus ``metadata`` (str -> str) and ``k(name)`` / ``stages(name)`` for packed tensors."""

    def __init__(self, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]):
        super().__init__(tensors)
        self.metadata = dict(metadata)

    def k(self, name: str) -> int:
        return int(self.metadata[f"k.{name}"])

    def stages(self, name: str) -> int:
        return int(self.metadata[f"stages.{name}"])

    def group_size(self, name: str) -> Optional[int]:
        """G when the scale of packed tensor `name` is per group of G columns, else None."""
        g = self.metadata.get(f"group_size.{name}")
        return None if g is None else int(g)


def _to_numpy(a: Any, name: str) -> np.ndarray:
    if is_torch(a):
        import torch

        t = a.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        if t.dtype == torch.uint32:
            return t.view(torch.int32).numpy().view(np.uint32)
        return t.numpy()
    if isinstance(a, np.ndarray):
        return np.ascontiguousarray(a)
    raise TypeError(f"tensors[{name!r}]: expected a numpy array or a torch tensor, got {type(a).__name__}")


def save(path: str | os.PathLike, tensors: Mapping[str, Any], *, k: Optional[Mapping[str, int]] = None,
         group_size: Optional[Mapping[str, int]] = None,
         metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes `tensors` (name -> numpy array or torch tensor) with the safetensors package.

    k: name -> K for every uint32 tensor (required for each): packed rows (M, ceil(K/16)) from
    cpukern.ternary.pack/quantize, or planes (S, 4, n, ceil(m/16)) from phase_quantize with
    K = m. The header records the format version, K and, for planes, the number of stages.
    group_size: name -> G for packed rows whose scale is per group of G columns (G a multiple
    of 16; the scale tensor is saved by the caller like any other, shape (M, ceil(K/G))).
    """
    from safetensors.numpy import save_file

    k = dict(k or {})
    arrays = {str(name): _to_numpy(a, name) for name, a in tensors.items()}
    meta = {str(a): str(b) for a, b in (metadata or {}).items()}
    if any(key.startswith(_RESERVED) for key in meta):
        raise ValueError(f"metadata: keys starting with {', '.join(map(repr, _RESERVED))} are reserved")
    meta["cpukern.format"] = FORMAT
    meta["cpukern.format_version"] = FORMAT_VERSION
    for name in k:
        if name not in arrays:
            raise ValueError(f"k: names a tensor that is not saved: {name!r}")
    for name, a in arrays.items():
        if a.dtype != np.uint32:
            continue
        if name not in k:
            raise ValueError(f"k: missing K for the packed uint32 tensor {name!r}")
        kk = k[name]
        if isinstance(kk, bool) or not isinstance(kk, (int, np.integer)) or kk < 1:
            raise ValueError(f"k[{name!r}]: expected an integer >= 1, got {kk!r}")
        meta[f"k.{name}"] = str(int(kk))
        if a.ndim == 4:
            meta[f"stages.{name}"] = str(a.shape[0])
        _check_packed(name, list(a.shape), meta)
    for name, g in (group_size or {}).items():
        if name not in arrays or arrays[name].dtype != np.uint32 or arrays[name].ndim != 2:
            raise ValueError(f"group_size: names no packed (M, words) uint32 tensor: {name!r}")
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 16 or g % 16:
            raise ValueError(f"group_size[{name!r}]: expected a multiple of 16 >= 16, got {g!r}")
        meta[f"group_size.{name}"] = str(int(g))
    save_file(arrays, os.fspath(path), metadata=meta)


# --- validation ------------------------------------------------------------------------------

def _fail(msg: str) -> None:
    raise ValueError(f"safetensors file: {msg}")


def _int_value(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(f"{what}: expected an integer, got {v!r:.80}")
    if v < 0:
        _fail(f"{what}: expected >= 0, got {v}")
    return v


def _meta_int(meta: Mapping[str, str], key: str) -> int:
    s = meta[key]
    if not (s.isascii() and s.isdigit()) or len(s) > 19:
        _fail(f"__metadata__[{key!r}]: expected a decimal integer, got {s!r:.80}")
    v = int(s)
    if v < 1:
        _fail(f"__metadata__[{key!r}]: expected >= 1, got {v}")
    return v


def _check_packed(name: str, shape: list[int], meta: Mapping[str, str]) -> None:
    k = _meta_int(meta, f"k.{name}")
    words = (k + 15) // 16
    skey = f"stages.{name}"
    if len(shape) == 2:
        if skey in meta:
            _fail(f"__metadata__[{skey!r}]: given for a 2-D packed tensor {name!r}")
        if shape[1] != words:
            _fail(f"tensor {name!r}: K = {k} needs {words} words per row, got shape {shape}")
    elif len(shape) == 4:
        if skey not in meta:
            _fail(f"__metadata__: missing {skey!r} for the planes tensor {name!r}")
        stages = _meta_int(meta, skey)
        if shape[0] != stages or shape[1] != 4 or shape[3] != words:
            _fail(f"tensor {name!r}: expected planes of shape ({stages}, 4, n, {words}) for "
                  f"stages = {stages}, K = {k}, got {shape}")
    else:
        _fail(f"tensor {name!r}: a packed uint32 tensor must have 2 or 4 dimensions, got shape {shape}")


def validate_header(header_bytes: bytes, data_size: int, *,
                    cpukern_format: bool = True) -> tuple[dict[str, dict], dict[str, str]]:
    """Parses and validates a safetensors JSON header for a data region of `data_size` bytes.

    Returns (entries: name -> {"dtype": np.dtype, "shape": tuple, "begin": int, "end": int},
    metadata). Raises ValueError on any inconsistency. cpukern_format=False checks only the
    safetensors structure (files other tools wrote, for cpukern.convert).
    """
    try:
        text = header_bytes.decode("utf-8")
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"safetensors file: header is not valid UTF-8 JSON ({e})") from None
    except RecursionError:
        raise ValueError("safetensors file: header JSON is nested too deeply") from None
    if not isinstance(header, dict):
        _fail(f"header: expected a JSON object, got {type(header).__name__}")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(a, str) and isinstance(b, str) for a, b in meta.items()):
        _fail("__metadata__: expected an object of string values")
    if cpukern_format and meta.get("cpukern.format") != FORMAT:
        _fail(f"__metadata__['cpukern.format']: expected {FORMAT!r}, got {meta.get('cpukern.format')!r:.80}")
    version = meta.get("cpukern.format_version")
    if cpukern_format and version != FORMAT_VERSION:
        _fail(f"__metadata__['cpukern.format_version']: this cpukern reads version {FORMAT_VERSION!r}, "
              f"got {version!r:.80}")
    entries: dict[str, dict] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"tensor {name!r:.80}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            _fail(f"{where}: expected exactly the keys dtype, shape, data_offsets")
        dtype = DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        if dtype is None:
            _fail(f"{where}: unsupported dtype {info['dtype']!r:.80}")
        shape = info["shape"]
        if not isinstance(shape, list) or len(shape) > 8:
            _fail(f"{where}: shape must be a list of at most 8 integers")
        shape = [_int_value(s, f"{where} shape") for s in shape]
        if any(s >= 1 << 48 for s in shape):
            _fail(f"{where}: shape {shape} has a dimension >= 2**48")
        offs = info["data_offsets"]
        if not isinstance(offs, list) or len(offs) != 2:
            _fail(f"{where}: data_offsets must be [begin, end]")
        begin, end = (_int_value(o, f"{where} data_offsets") for o in offs)
        if not begin <= end <= data_size:
            _fail(f"{where}: data_offsets [{begin}, {end}] outside the {data_size} data bytes "
                  f"(truncated file?)")
        nbytes = dtype.itemsize * math.prod(shape)
        if end - begin != nbytes:
            _fail(f"{where}: {info['dtype']} shape {shape} needs {nbytes} bytes, data_offsets "
                  f"give {end - begin}")
        entries[name] = {"dtype": dtype, "shape": tuple(shape), "begin": begin, "end": end}
    spans = sorted((e["begin"], e["end"], n) for n, e in entries.items())
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            _fail(f"tensor {name!r:.80}: data_offsets begin at {begin}, expected {pos} "
                  f"({'overlap' if begin < pos else 'gap'})")
        pos = end
    if pos != data_size:
        _fail(f"data: tensors cover {pos} bytes, the file holds {data_size} after the header")
    if not cpukern_format:
        return entries, meta
    for key in meta:
        for prefix in ("k.", "stages.", "group_size."):
            if key.startswith(prefix):
                target = key[len(prefix):]
                if target not in entries or entries[target]["dtype"] != np.uint32:
                    _fail(f"__metadata__[{key!r:.80}]: no uint32 tensor named {target!r:.80}")
    for name, e in entries.items():
        if e["dtype"] == np.uint32:
            if f"k.{name}" not in meta:
                _fail(f"__metadata__: missing 'k.{name}' for the packed uint32 tensor {name!r}")
            _check_packed(name, list(e["shape"]), meta)
            gkey = f"group_size.{name}"
            if gkey in meta and (len(e["shape"]) != 2 or _meta_int(meta, gkey) % 16):
                _fail(f"__metadata__[{gkey!r}]: expected a multiple of 16 for a 2-D packed tensor")
    return entries, meta


def _split(buf: Any, size: int) -> tuple[int, int]:
    """(header length N, data size) of a buffer of `size` bytes, validated."""
    if size < 8:
        _fail(f"{size} bytes is shorter than the 8-byte header length (truncated file?)")
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n < 2 or n > MAX_HEADER_BYTES:
        _fail(f"header length {n} outside [2, {MAX_HEADER_BYTES}]")
    if 8 + n > size:
        _fail(f"header length {n} exceeds the {size - 8} bytes after it (truncated file?)")
    return n, size - 8 - n


def validate_bytes(b: bytes) -> tuple[dict[str, dict], dict[str, str]]:
    """Validates a whole cpukern safetensors file held in memory (for fuzzers: any input
    returns the parsed header or raises ValueError)."""
    b = bytes(b)
    n, data_size = _split(b, len(b))
    return validate_header(b[8:8 + n], data_size)


def _views(buf: Any, base: int, entries: Mapping[str, dict]) -> dict[str, np.ndarray]:
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
        out[name] = a.reshape(e["shape"])
    return out


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "non-regular file"


def _read_exact(fd: int, size: int) -> bytes:
    """Exactly `size` bytes from fd (fewer if the file shrank); never more."""
    parts, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def load(path: str | os.PathLike, mmap: bool = True) -> Checkpoint:
    """Loads a file written by save. mmap=True maps it read-only: the arrays are views of the
    mapping (pages are read when touched; the mapping lives as long as any array). mmap=False
    reads the file into memory. The header is validated first (see the module docstring).

    Only regular files are read (a device, FIFO, directory or socket is a ValueError, and a
    FIFO is refused without blocking), and never more than the size the file had when opened.
    A mapped file must not be truncated or rewritten in place while its arrays are alive:
    touching a page past the new end raises SIGBUS and kills the process, as with numpy.memmap
    or safetensors' mappings (replace files by writing a new one and renaming it, or load with
    mmap=False). What ternary.prepare, prepare_widely_linear and moe.prepack return are copies
    in their own layouts and do not depend on the file."""
    tensors, meta = _read(path, mmap, cpukern_format=True)
    return Checkpoint(tensors, meta)


def read_safetensors(path: str | os.PathLike, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Any safetensors file (e.g. a Hugging Face checkpoint), with load's checks on the
    structure and its mapping rules: (name -> numpy array, metadata). BF16 tensors come back
    as ml_dtypes.bfloat16 arrays."""
    return _read(path, mmap, cpukern_format=False)


def _read(path: str | os.PathLike, mmap: bool, *, cpukern_format: bool) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"path: expected a regular file, got a {_kind(st.st_mode)} "
                             f"({os.fspath(path)!r})")
        os.set_blocking(fd, True)
        size = st.st_size
        if mmap and size > 0:
            buf: Any = _mmap.mmap(fd, size, access=_mmap.ACCESS_READ)
        else:
            buf = _read_exact(fd, size)
    finally:
        os.close(fd)
    if len(buf) != size:
        _fail(f"read {len(buf)} bytes, the file has {size} (changed while reading?)")
    n, data_size = _split(buf, size)
    entries, meta = validate_header(bytes(buf[8:8 + n]), data_size, cpukern_format=cpukern_format)
    return _views(buf, 8 + n, entries), meta
