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
stages entry against its tensor's shape. Any violation raises ValueError naming the file, the
tensor and the field; nothing is read outside the file. ``validate_bytes`` runs the same
checks on an in-memory buffer and is meant for fuzzing (atheris): for any input it returns or
raises ValueError. The reading itself (regular files only, never blocking, what stays mapped)
is cpukern._safetensors', the one safetensors reader of the package.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import ml_dtypes
import numpy as np

from cpukern import _safetensors as _st
from cpukern._arrays import is_torch

FORMAT = "ternary"
FORMAT_VERSION = "1"
MAX_HEADER_BYTES = _st.MAX_HEADER_BYTES
DTYPES = _st.DTYPES

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

        t = a.detach().cpu().resolve_neg().resolve_conj().contiguous()
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
    cpukern.ternary.pack/quantize, or planes (S, 4, n, ceil(m/16)) from widely_linear.quantize with
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
        if arrays[name].dtype != np.uint32:
            raise ValueError(f"k[{name!r}]: given for a {arrays[name].dtype} tensor; K belongs to "
                             f"packed uint32 tensors only")
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
# The safetensors structure is checked by cpukern._safetensors (the package's one reader); the
# rules of cpukern's own format (version, K / stages / group_size entries) are checked here.

def _fail(msg: str, path: Any = None) -> None:
    _st.fail(path, msg)


def _meta_int(meta: Mapping[str, str], key: str, path: Any = None) -> int:
    s = meta[key]
    if not (s.isascii() and s.isdigit()) or len(s) > 19:
        _fail(f"__metadata__[{key!r}]: expected a decimal integer, got {s!r:.80}", path)
    v = int(s)
    if v < 1:
        _fail(f"__metadata__[{key!r}]: expected >= 1, got {v}", path)
    return v


def _check_packed(name: str, shape: list[int], meta: Mapping[str, str], path: Any = None) -> None:
    k = _meta_int(meta, f"k.{name}", path)
    words = (k + 15) // 16
    skey = f"stages.{name}"
    if len(shape) == 2:
        if skey in meta:
            _fail(f"__metadata__[{skey!r}]: given for a 2-D packed tensor {name!r}", path)
        if shape[1] != words:
            _fail(f"tensor {name!r}: K = {k} needs {words} words per row, got shape {shape}", path)
    elif len(shape) == 4:
        if skey not in meta:
            _fail(f"__metadata__: missing {skey!r} for the planes tensor {name!r}", path)
        stages = _meta_int(meta, skey, path)
        if shape[0] != stages or shape[1] != 4 or shape[3] != words:
            _fail(f"tensor {name!r}: expected planes of shape ({stages}, 4, n, {words}) for "
                  f"stages = {stages}, K = {k}, got {shape}", path)
    else:
        _fail(f"tensor {name!r}: a packed uint32 tensor must have 2 or 4 dimensions, got shape "
              f"{shape}", path)


def _check_cpukern(entries: Mapping[str, dict], meta: Mapping[str, str], path: Any = None) -> None:
    """The rules of cpukern's format on a header whose safetensors structure is valid."""
    if meta.get("cpukern.format") != FORMAT:
        _fail(f"__metadata__['cpukern.format']: expected {FORMAT!r}, got "
              f"{meta.get('cpukern.format')!r:.80}", path)
    version = meta.get("cpukern.format_version")
    if version != FORMAT_VERSION:
        _fail(f"__metadata__['cpukern.format_version']: this cpukern reads version "
              f"{FORMAT_VERSION!r}, got {version!r:.80}", path)
    for key in meta:
        for prefix in ("k.", "stages.", "group_size."):
            if key.startswith(prefix):
                target = key[len(prefix):]
                if target not in entries or entries[target]["dtype"] != np.uint32:
                    _fail(f"__metadata__[{key!r:.80}]: no uint32 tensor named {target!r:.80}", path)
    for name, e in entries.items():
        if e["dtype"] == np.uint32:
            if f"k.{name}" not in meta:
                _fail(f"__metadata__: missing 'k.{name}' for the packed uint32 tensor {name!r}",
                      path)
            _check_packed(name, list(e["shape"]), meta, path)
            gkey = f"group_size.{name}"
            if gkey in meta and (len(e["shape"]) != 2 or _meta_int(meta, gkey, path) % 16):
                _fail(f"__metadata__[{gkey!r}]: expected a multiple of 16 for a 2-D packed tensor",
                      path)


def validate_header(header_bytes: bytes, data_size: int, *,
                    cpukern_format: bool = True) -> tuple[dict[str, dict], dict[str, str]]:
    """Parses and validates a safetensors JSON header for a data region of `data_size` bytes.

    Returns (entries: name -> {"dtype": np.dtype, "shape": tuple, "begin": int, "end": int},
    metadata). Raises ValueError on any inconsistency. cpukern_format=False checks only the
    safetensors structure (files other tools wrote, for cpukern.convert).
    """
    entries, meta = _st.parse_header(bytes(header_bytes), data_size)
    if cpukern_format:
        _check_cpukern(entries, meta)
    return entries, meta


def validate_bytes(b: bytes) -> tuple[dict[str, dict], dict[str, str]]:
    """Validates a whole cpukern safetensors file held in memory (for fuzzers: any input
    returns the parsed header or raises ValueError)."""
    b = bytes(b)
    n, data_size = _st.split(b, len(b))
    return validate_header(b[8:8 + n], data_size)


def load(path: str | os.PathLike, mmap: bool = True) -> Checkpoint:
    """Loads a file written by save. mmap=True maps it read-only: the arrays are views of the
    mapping (pages are read when touched; the mapping lives as long as any array). mmap=False
    reads the file into memory. The header is validated first (see the module docstring);
    every error is a ValueError naming the file (and the tensor).

    Only regular files are read (a device, FIFO, directory or socket is a ValueError, and a
    FIFO is refused without blocking), and never more than the size the file had when opened.
    What stays mapped: every array of the Checkpoint (mmap=True). A mapped file must not be
    truncated or rewritten in place while its arrays are alive: touching a page past the new
    end raises SIGBUS and kills the process, as with numpy.memmap or safetensors' mappings
    (replace files by writing a new one and renaming it, or load with mmap=False). What
    ternary.prepare, widely_linear.prepare and moe.prepare return are copies in their own
    layouts and do not depend on the file; so are the modules TernaryLinear.from_checkpoint
    builds."""
    tensors, meta = _st.read(path, mmap=mmap, check=_check_cpukern)
    return Checkpoint(tensors, meta)


def read_safetensors(path: str | os.PathLike, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Any safetensors file (e.g. a Hugging Face checkpoint), with load's checks on the
    structure and its mapping rules: (name -> numpy array, metadata). BF16 tensors come back
    as ml_dtypes.bfloat16 arrays. What stays mapped (mmap=True): every array returned."""
    return _st.read(path, mmap=mmap)
