"""Importers for ternary checkpoints written by other tools, into cpukern's safetensors files.

Sources:
  * Hugging Face BitNet b1.58 (transformers' BitLinear layout, also Falcon-Edge): a uint8
    ``<name>.weight`` of shape (out/4, in) holding 4 weights per byte, (w + 1) in bits 2i..2i+1
    for output row i * out/4 + r, and ``<name>.weight_scale`` (1,) with W = w / weight_scale.
  * GGUF tensors of type TQ1_0 (base-3, 1.69 bits) and TQ2_0 (2 bits), read with the ``gguf``
    package: blocks of 256 weights of one row, each with its own fp16 scale d (W = d * w).

Output (cpukern.io format, mapped by ``ternary.load``): for every ternary ``<p>.weight`` the
packed rows ``<p>.weight`` (uint32 (M, ceil(K/16)), K in the header) and ``<p>.scale``
float32: (M,) for BitNet (1 / weight_scale, rounded once to float32) or (M, K/256) for GGUF
(the fp16 scales, exactly) with ``group_size`` 256 in the header. Every other float tensor
(embeddings, norms, biases) is copied unchanged; a tensor of another quantised type is an
error naming it, unless skip_unsupported=True (then it is left out and reported).

    python -m cpukern.convert SRC DST [--skip-unsupported]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

import ml_dtypes
import numpy as np

from cpukern import _safetensors as _st
from cpukern import io as _io
from cpukern import ternary as _ternary

__all__ = ["convert", "convert_bitnet", "convert_gguf", "bitnet_unpack", "tq_unpack", "scale_name"]

QK = 256  # weights per TQ1_0 / TQ2_0 block
_TQ_BLOCK_BYTES = {"TQ1_0": 54, "TQ2_0": 66}  # codes + fp16 d
_GGUF_MAGIC = b"GGUF"


def scale_name(weight_name: str) -> str:
    """``<p>.weight`` -> ``<p>.scale`` (the name the converted scale is stored under)."""
    return (weight_name[: -len(".weight")] if weight_name.endswith(".weight") else weight_name) + ".scale"


def bitnet_unpack(packed: np.ndarray) -> np.ndarray:
    """transformers' BitLinear weight, uint8 (out/4, in) -> int8 (out, in) in {-1, 0, +1}."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim != 2:
        raise ValueError(f"packed: expected a uint8 (out/4, in) BitNet weight, got {packed.dtype} "
                         f"{packed.shape}")
    codes = np.stack([(packed >> (2 * i)) & 3 for i in range(4)])  # (4, out/4, in)
    if (codes == 3).any():
        i, r, c = (int(v) for v in np.argwhere(codes == 3)[0])
        raise ValueError(f"packed: invalid 2-bit code 3 for weight [{i * packed.shape[0] + r}, {c}]")
    return (codes.reshape(4 * packed.shape[0], packed.shape[1]).astype(np.int8) - 1)


def _tq2_codes(blocks: np.ndarray) -> np.ndarray:
    """(..., 64) code bytes -> (..., 256) codes: byte 32j + i holds weight 128j + 32l + i in bits 2l."""
    q = blocks.reshape(*blocks.shape[:-1], 2, 1, 32)
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    return ((q >> shifts) & 3).reshape(*blocks.shape[:-1], QK)


def _trits(b: np.ndarray, count: int) -> np.ndarray:
    """Base-3 digits of TQ1_0 bytes, most significant first: digit n = ((b * 3**n mod 256) * 3) >> 8.
    (..., L) -> (..., count, L)."""
    pows = np.array([3 ** n for n in range(count)], np.uint16).reshape(count, 1)
    scaled = (b[..., None, :].astype(np.uint16) * pows) & 0xFF
    return ((scaled * 3) >> 8).astype(np.uint8)


def _tq1_codes(blocks: np.ndarray) -> np.ndarray:
    """(..., 52) bytes (48 of 5 trits, 4 of 4 trits) -> (..., 256) codes (w + 1)."""
    lead = blocks.shape[:-1]
    parts = [_trits(blocks[..., :32], 5), _trits(blocks[..., 32:48], 5), _trits(blocks[..., 48:52], 4)]
    return np.concatenate([p.reshape(*lead, -1) for p in parts], axis=-1)


def tq_unpack(data: np.ndarray, kind: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw TQ1_0 / TQ2_0 rows, uint8 (M, K/256 * block bytes) -> (int8 (M, K) weights,
    float32 (M, K/256) scales d), so that W[r, j] = d[r, j // 256] * w[r, j]."""
    if kind not in _TQ_BLOCK_BYTES:
        raise ValueError(f"kind: expected 'TQ1_0' or 'TQ2_0', got {kind!r}")
    if k % QK:
        raise ValueError(f"k: {kind} rows hold whole blocks of {QK} weights, got K = {k}")
    size = _TQ_BLOCK_BYTES[kind]
    data = np.asarray(data)
    nb = k // QK
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != nb * size:
        raise ValueError(f"data: expected uint8 (M, {nb * size}) {kind} rows for K = {k}, got "
                         f"{data.dtype} {data.shape}")
    blocks = data.reshape(data.shape[0], nb, size)
    d = np.ascontiguousarray(blocks[..., size - 2:]).view(np.float16)[..., 0].astype(np.float32)
    codes = _tq2_codes(blocks[..., :64]) if kind == "TQ2_0" else _tq1_codes(blocks[..., :52])
    if (codes > 2).any():
        r, b, j = (int(v) for v in np.argwhere(codes > 2)[0])
        raise ValueError(f"data: {kind} code {int(codes[r, b, j])} is not ternary at weight "
                         f"[{r}, {b * QK + j}]")
    return codes.reshape(data.shape[0], k).astype(np.int8) - 1, d


def _float_copy(name: str, a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
        return np.ascontiguousarray(a)
    raise TypeError(f"tensor {name!r}: cannot convert dtype {a.dtype}")


def _bitnet_scale(src: Any, sname: str, raw: np.ndarray) -> np.float32:
    """1 / weight_scale in float32 from a BitNet per-tensor ``weight_scale``: one value, finite,
    nonzero, with a finite reciprocal (1e-45 would give an infinite scale)."""
    ws = np.asarray(raw).astype(np.float32).reshape(-1)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        inv = np.float32(1.0) / ws[0] if ws.shape == (1,) else np.float32("nan")
    if ws.shape != (1,) or not np.isfinite(ws[0]) or ws[0] == 0 or not np.isfinite(inv):
        raise ValueError(f"{_st.where(src)}: tensor {sname!r}: expected one finite nonzero "
                         f"per-tensor scale with a finite reciprocal in float32, got shape "
                         f"{tuple(np.shape(raw))} values {ws[:4]}")
    return np.float32(inv)


def convert_bitnet(src: str | os.PathLike, dst: str | os.PathLike, *,
                   skip_unsupported: bool = False) -> dict[str, str]:
    """Hugging Face BitNet safetensors file -> cpukern file. Returns name -> what was done.

    The file is read by cpukern's one safetensors reader (regular files only, never blocking,
    the header validated); every error is a ValueError naming the file and the tensor. The
    file is mapped while this runs (it must not be truncated meanwhile); nothing written
    depends on it."""
    tensors, _ = _io.read_safetensors(src)
    out: dict[str, Any] = {}
    ks: dict[str, int] = {}
    report: dict[str, str] = {}
    scales = {n for n in tensors if n.endswith(".weight_scale")}
    for name, a in tensors.items():
        if name in scales:
            continue
        sname = name[: -len(".weight")] + ".weight_scale" if name.endswith(".weight") else None
        if a.dtype == np.uint8 and sname in tensors:
            inv = _bitnet_scale(src, sname, tensors[sname])
            try:
                w = bitnet_unpack(a)
            except ValueError as e:
                raise ValueError(f"{_st.where(src)}: tensor {name!r}: {e}") from None
            out[name] = _ternary.pack(w)
            out[scale_name(name)] = np.full(w.shape[0], inv, np.float32)
            ks[name] = w.shape[1]
            report[name] = f"ternary {w.shape} per-tensor scale"
        else:
            try:
                out[name] = _float_copy(name, a)
                report[name] = f"copied {a.dtype} {tuple(a.shape)}"
            except TypeError:
                if not skip_unsupported:
                    raise
                report[name] = f"skipped ({a.dtype})"
    _io.save(dst, out, k=ks, metadata={"converted_from": "bitnet"})
    return report


def _gguf_where(src: Any) -> str:
    return f"GGUF file {os.fspath(src)!r}"


def _gguf_tensor_of(exc: BaseException) -> Optional[str]:
    """The name of the tensor the gguf reader was building when it raised (its local
    ``tensor_name``), if any."""
    tb = exc.__traceback__
    name = None
    while tb is not None:
        v = tb.tb_frame.f_locals.get("tensor_name")
        if isinstance(v, str):
            name = v
        tb = tb.tb_next
    return name


def _gguf_error(src: Any, exc: BaseException, tensor: Optional[str] = None) -> ValueError:
    tensor = tensor if tensor is not None else _gguf_tensor_of(exc)
    at = f": tensor {tensor!r:.80}" if tensor is not None else ""
    return ValueError(f"{_gguf_where(src)}{at}: malformed ({type(exc).__name__}: {str(exc):.200})")


def _gguf_ternary(src: Any, name: str, kind: str, shape: tuple,
                  data: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(packed rows, float32 scales (M, K/256), K) of one TQ1_0 / TQ2_0 tensor, validated first:
    2-D, K a positive multiple of 256, exactly M * K/256 blocks of the type's size, finite
    fp16 scales."""
    at = f"{_gguf_where(src)}: tensor {name!r}"
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"{at}: expected a 2-D {kind} matrix with M, K >= 1, got {shape}")
    m, k = shape
    if k % QK:
        raise ValueError(f"{at}: {kind} rows hold whole blocks of {QK} weights, got K = {k}")
    row = k // QK * _TQ_BLOCK_BYTES[kind]
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.size != m * row:
        raise ValueError(f"{at}: {kind} {shape} needs {m} x {k // QK} blocks of "
                         f"{_TQ_BLOCK_BYTES[kind]} bytes = {m * row} bytes, the file gives "
                         f"{data.size} {data.dtype} values")
    try:
        w, d = tq_unpack(data.reshape(m, row), kind, k)
    except ValueError as e:
        raise ValueError(f"{at}: {e}") from None
    bad = ~np.isfinite(d)
    if bad.any():
        r, b = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"{at}: fp16 block scale {d[r, b]} (not finite) at row {r}, block {b}")
    return _ternary.pack(w), d, k


# the dtype the gguf package gives each float type's data (BF16: its bytes)
_GGUF_FLOATS = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
                "BF16": np.dtype(np.uint8)}


def _gguf_float(src: Any, name: str, kind: str, shape: tuple, data: Any) -> np.ndarray:
    """A float tensor, its element count checked against the shape."""
    at = f"{_gguf_where(src)}: tensor {name!r}"
    a = np.asarray(data)
    want = _GGUF_FLOATS[kind]
    n = int(np.prod(shape, dtype=object))
    if a.dtype != want or a.size != n * (2 if kind == "BF16" else 1):
        raise ValueError(f"{at}: {kind} {shape} needs {n} values, the file gives {a.size} "
                         f"{a.dtype} values")
    if kind == "BF16":
        a = np.ascontiguousarray(a).view(ml_dtypes.bfloat16)
    return np.ascontiguousarray(a.reshape(shape))


def convert_gguf(src: str | os.PathLike, dst: str | os.PathLike, *,
                 skip_unsupported: bool = False) -> dict[str, str]:
    """GGUF file -> cpukern file: TQ1_0 / TQ2_0 tensors become packed rows with their per-256
    fp16 scales kept exactly (group_size 256); F32/F16/BF16 tensors are copied.

    Only a regular file is read (never blocking). Every tensor is validated before use (shape,
    block count, finite fp16 scales), and every error, the gguf package's included, is a
    ValueError naming the file and, where known, the tensor. The file is mapped while this runs
    (it must not be truncated meanwhile); nothing written depends on it."""
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - the test environment has it
        raise ImportError("cpukern.convert: reading GGUF needs the 'gguf' package "
                          "(pip install cpukern[gguf])") from e
    fd, _size = _st.open_regular(src, "GGUF file")
    try:
        # The descriptor checked above, reopened by path (/proc/self/fd): the file read is the
        # one checked, even if `src` is replaced meanwhile.
        proc = f"/proc/self/fd/{fd}"
        try:
            reader = gguf.GGUFReader(proc if os.path.exists(proc) else os.fspath(src))
        except Exception as e:  # the gguf package raises ValueError, KeyError, IndexError, ...
            raise _gguf_error(src, e) from None
    finally:
        os.close(fd)
    t = gguf.GGMLQuantizationType
    out: dict[str, Any] = {}
    ks: dict[str, int] = {}
    groups: dict[str, int] = {}
    report: dict[str, str] = {}
    for tensor in reader.tensors:
        name = tensor.name
        try:
            kind = t(tensor.tensor_type)
            shape = tuple(int(s) for s in reversed(tensor.shape))  # ggml lists ne0 (columns) first
            if kind in (t.TQ1_0, t.TQ2_0):
                packed, d, k = _gguf_ternary(src, name, kind.name, shape, tensor.data)
                out[name], out[scale_name(name)] = packed, d
                ks[name] = k
                groups[name] = QK
                report[name] = f"ternary {shape} {kind.name}, scale per {QK}"
            elif kind in (t.F32, t.F16, t.BF16):
                out[name] = _gguf_float(src, name, kind.name, shape, tensor.data)
                report[name] = f"copied {kind.name} {shape}"
            elif skip_unsupported:
                report[name] = f"skipped ({kind.name})"
            else:
                raise ValueError(f"{_gguf_where(src)}: tensor {name!r}: GGUF type {kind.name} is "
                                 f"not ternary or float (convert with skip_unsupported=True to "
                                 f"leave it out)")
        except ValueError as e:
            if str(e).startswith(_gguf_where(src)):
                raise
            raise _gguf_error(src, e, name) from None
        except Exception as e:  # numpy / gguf errors on malformed data
            raise _gguf_error(src, e, name) from None
    _io.save(dst, out, k=ks, group_size=groups, metadata={"converted_from": "gguf"})
    return report


def convert(src: str | os.PathLike, dst: str | os.PathLike, *,
            skip_unsupported: bool = False) -> dict[str, str]:
    """Converts a GGUF file (by its magic bytes) or a BitNet safetensors file. Only regular
    files are read (a FIFO, socket, directory or device is a ValueError naming the file)."""
    if _st.read_head(src, 4, "converter input") == _GGUF_MAGIC:
        return convert_gguf(src, dst, skip_unsupported=skip_unsupported)
    return convert_bitnet(src, dst, skip_unsupported=skip_unsupported)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpukern.convert", description=__doc__.split("\n")[0])
    parser.add_argument("src", help="a GGUF file or a Hugging Face BitNet safetensors file")
    parser.add_argument("dst", help="the cpukern safetensors file to write")
    parser.add_argument("--skip-unsupported", action="store_true",
                        help="leave out tensors of other quantised types instead of failing")
    args = parser.parse_args(argv)
    report = convert(args.src, args.dst, skip_unsupported=args.skip_unsupported)
    for name, what in report.items():
        print(f"{name}: {what}")
    print(f"wrote {args.dst} ({len(report)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
