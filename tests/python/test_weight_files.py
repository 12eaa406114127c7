"""Weight files from outside (safetensors, GGUF, BitNet checkpoints): every loader reads them
through one reader that refuses non-regular files without blocking and malformed headers with
a ValueError naming the file (and the tensor); what a loader returns outlives the file. The
fuzz tests mutate valid files: the reader and the converter only ever raise ValueError."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest

from cpukern import convert, io, moe, ternary
from variants import UNDER_QEMU

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(27)
needs_subprocess = pytest.mark.skipif(
    UNDER_QEMU, reason="under QEMU: qemu-user cannot start guest subprocesses")


def _run(code: str, timeout: float = 240, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def gpt_oss_file(path, e=2, h=32, inter=32, layer=0):
    """A small gpt-oss shard written with the safetensors package; returns its arrays."""
    from safetensors.numpy import save_file

    pre = f"model.layers.{layer}.mlp.experts."
    w13 = RNG.standard_normal((e, 2 * inter, h)).astype(BF16)
    w2 = RNG.standard_normal((e, h, inter)).astype(BF16)
    b13, s13 = moe.quantize(w13)
    b2, s2 = moe.quantize(w2)
    t = {pre + "gate_up_proj_blocks": b13, pre + "gate_up_proj_scales": s13,
         pre + "gate_up_proj_bias": RNG.standard_normal((e, 2 * inter)).astype(BF16),
         pre + "down_proj_blocks": b2, pre + "down_proj_scales": s2,
         pre + "down_proj_bias": RNG.standard_normal((e, h)).astype(BF16)}
    save_file(t, str(path))
    return t


def header_file(path, header, body=b""):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(h)) + h + body)
    return path


def _checkpoint_header(path):
    """The header read of cpukern.torch's checkpoint checks (the same reader, header only)."""
    pytest.importorskip("torch", reason="torch is not installed here")
    from cpukern.torch.families.common import safetensors_header
    return safetensors_header(path)


LOADERS = {
    "torch.checkpoint_header": _checkpoint_header,
    "ternary.load": lambda p: ternary.load(p),
    "io.read_safetensors": lambda p: io.read_safetensors(p),
    "moe.load_gpt_oss": lambda p: moe.load_gpt_oss(p, 0),
    "convert": lambda p: convert.convert(p, pathlib.Path(str(p) + ".out")),
}


GOOD = {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


MALFORMED = {
    "not an object": (b"[1, 2]", "expected a JSON object"),
    "entry not an object": ({"t": 3}, "tensor 't': expected exactly the keys"),
    "no data_offsets": ({"t": {"dtype": "F32", "shape": [2]}}, "tensor 't': expected exactly the keys"),
    "shape not a list": ({"t": {"dtype": "F32", "shape": "ab", "data_offsets": [0, 8]}},
                         "tensor 't': shape must be a list"),
    "shape of floats": ({"t": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}},
                        "tensor 't' shape: expected an integer"),
    "huge dimension": ({"t": {"dtype": "F32", "shape": [10 ** 30], "data_offsets": [0, 8]}},
                       "tensor 't': shape .* dimension >= 2\\*\\*48"),
    "dtype a list": ({"t": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}},
                     "tensor 't': unsupported dtype"),
    "offsets reversed": ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}},
                         "tensor 't': data_offsets"),
    "deep nesting": (b'{"t": ' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deeply|not valid"),
    "duplicate name": (b'{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
                       b'"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', "'t' appears twice"),
    "metadata not strings": ({**GOOD, "__metadata__": {"a": 1}}, "__metadata__"),
    "many digits": (b'{"t": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 8]}}',
                    "not valid|integer"),
}


def gguf_tq2(path, a, name="blk.0.w", nan_scale_at=None):
    gguf = pytest.importorskip("gguf", reason="the gguf package is not installed here")
    qt = gguf.GGMLQuantizationType.TQ2_0
    q = gguf.quants.quantize(a, qt)
    if nan_scale_at is not None:
        r, b = nan_scale_at
        q[r, b * 66 + 64:b * 66 + 66] = np.array([np.float16("nan")]).view(np.uint8)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def alarm():
    """A blocking open() ends in TimeoutError instead of hanging the test run."""
    def handler(signum, frame):
        raise TimeoutError("blocked")
    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_loader_refuses_a_fifo_without_blocking(tmp_path, loader, alarm):
    pytest.importorskip("safetensors")
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"regular file, got a FIFO .*pipe\.safetensors"):
        LOADERS[loader](fifo)


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_loader_refuses_a_socket_with_value_error(tmp_path, loader):
    pytest.importorskip("safetensors")
    path = tmp_path / "s.safetensors"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        with pytest.raises(ValueError, match=r"regular file, got a socket"):
            LOADERS[loader](path)
    finally:
        s.close()


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_loader_refuses_a_directory(tmp_path, loader):
    pytest.importorskip("safetensors")
    with pytest.raises(ValueError, match="regular file, got a directory"):
        LOADERS[loader](tmp_path)


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("loader", ["io.read_safetensors", "moe.load_gpt_oss", "convert",
                                    "torch.checkpoint_header"])
def test_malformed_headers_are_value_errors_naming_the_file(tmp_path, loader, case):
    pytest.importorskip("safetensors")
    header, match = MALFORMED[case]
    path = header_file(tmp_path / "bad.safetensors", header, b"\0" * 8)
    with pytest.raises(ValueError, match=match) as e:
        LOADERS[loader](path)
    assert "bad.safetensors" in str(e.value)


def test_header_reads_shapes_and_codes_without_the_data_and_keeps_fp8_codes(tmp_path):
    """The header-only read (cpukern.torch's checkpoint checks) validates what read() validates
    but keeps dtype codes numpy has no type for: a checkpoint with FP8 tensors is described,
    not refused, while the tensor reader refuses to make arrays of them."""
    from cpukern import _safetensors
    header = {"a": {"dtype": "F8_E4M3", "shape": [2, 3], "data_offsets": [0, 6]},
              "b": {"dtype": "BF16", "shape": [1], "data_offsets": [6, 8]}}
    path = header_file(tmp_path / "fp8.safetensors", header, b"\0" * 8)
    assert _safetensors.header(path) == {"a": ((2, 3), "F8_E4M3"), "b": ((1,), "BF16")}
    with pytest.raises(ValueError, match="tensor 'a': unsupported dtype 'F8_E4M3'"):
        io.read_safetensors(path)
    # the data part still has to be where the offsets say
    short = header_file(tmp_path / "short.safetensors", header, b"\0" * 7)
    with pytest.raises(ValueError, match="short.safetensors.*outside the 7 data bytes"):
        _safetensors.header(short)


def test_load_gpt_oss_takes_integer_layers_only(tmp_path):
    pytest.importorskip("safetensors")
    gpt_oss_file(tmp_path / "m.safetensors")
    for bad in (0.9, 0.0, "0", True):
        with pytest.raises(TypeError, match="layer: expected an integer"):
            moe.load_gpt_oss(tmp_path / "m.safetensors", bad)
    with pytest.raises(ValueError, match="layer: expected an integer in"):
        moe.load_gpt_oss(tmp_path / "m.safetensors", -1)
    assert moe.load_gpt_oss(tmp_path / "m.safetensors", np.int64(0))["w13"].format == "mxfp4"


def test_load_gpt_oss_bad_tensor_names_file_and_tensor(tmp_path):
    from safetensors.numpy import save_file

    t = gpt_oss_file(tmp_path / "m.safetensors")
    name = "model.layers.0.mlp.experts.gate_up_proj_bias"
    t[name] = t[name].astype(np.float32)
    save_file(t, str(tmp_path / "m.safetensors"))
    with pytest.raises(ValueError, match=rf"m\.safetensors.*tensor '{name}': expected bf16"):
        moe.load_gpt_oss(tmp_path / "m.safetensors", 0)
    with pytest.raises(KeyError, match=r"m\.safetensors.*layers\.3"):
        moe.load_gpt_oss(tmp_path / "m.safetensors", 3)


@needs_subprocess
def test_load_gpt_oss_result_outlives_a_truncated_file(tmp_path):
    """Nothing load_gpt_oss returns views the file: truncating it afterwards is harmless (the
    bias views were a SIGBUS)."""
    pytest.importorskip("safetensors")
    gpt_oss_file(tmp_path / "m.safetensors")
    code = textwrap.dedent(f"""
        import os, numpy as np, ml_dtypes
        from cpukern import moe
        path = {str(tmp_path / "m.safetensors")!r}
        layer = moe.load_gpt_oss(path, 0)
        x = np.ones((2, 32), ml_dtypes.bfloat16)
        ids = np.array([[0, 1], [1, 0]], np.int32)
        tw = np.full((2, 2), 0.5, np.float32)
        args = dict(activation="swigluoai", w13_bias=layer["w13_bias"], w2_bias=layer["w2_bias"])
        before = moe.fused_moe(x, layer["w13"], layer["w2"], tw, ids, **args)
        os.truncate(path, 0)
        after = moe.fused_moe(x, layer["w13"], layer["w2"], tw, ids, **args)
        assert (before.view(np.uint16) == after.view(np.uint16)).all()
        assert layer["w13_bias"].flags.writeable and layer["w13_bias"].flags.owndata
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_gguf_non_finite_block_scales_are_refused(tmp_path):
    gguf_tq2(tmp_path / "m.gguf", RNG.standard_normal((4, 512)).astype(np.float32), nan_scale_at=(2, 1))
    with pytest.raises(ValueError, match=r"m\.gguf.*tensor 'blk\.0\.w': fp16 block scale nan .*row 2, block 1"):
        convert.convert(tmp_path / "m.gguf", tmp_path / "out.safetensors")


def test_gguf_library_errors_name_the_file_and_tensor(tmp_path):
    gguf_tq2(tmp_path / "m.gguf", RNG.standard_normal((8, 256)).astype(np.float32), name="blk.7.ffn")
    data = bytearray((tmp_path / "m.gguf").read_bytes())
    at = data.index(b"blk.7.ffn") + len(b"blk.7.ffn")
    n_dims = struct.unpack_from("<I", data, at)[0]
    assert n_dims == 2
    struct.pack_into("<Q", data, at + 4 + 8, 283467841536)  # rows: far past the data
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"GGUF file .*bad\.gguf.*tensor 'blk\.7\.ffn'"):
        convert.convert(tmp_path / "bad.gguf", tmp_path / "out.safetensors")
    (tmp_path / "cut.gguf").write_bytes(bytes(data[:40]))
    with pytest.raises(ValueError, match=r"GGUF file .*cut\.gguf"):
        convert.convert(tmp_path / "cut.gguf", tmp_path / "out.safetensors")


@pytest.mark.parametrize("scale", [1e-45, float("inf"), float("nan"), 0.0])
def test_bitnet_weight_scale_with_an_infinite_reciprocal_is_refused(tmp_path, scale):
    from safetensors.numpy import save_file

    w = np.zeros((8, 16), np.uint8) | 0x55  # all codes 1: weights 0
    save_file({"l.weight": w, "l.weight_scale": np.array([scale], np.float32)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(ValueError, match=r"b\.safetensors.*tensor 'l\.weight_scale'.*finite"):
        convert.convert(tmp_path / "b.safetensors", tmp_path / "out.safetensors")


def test_save_refuses_k_for_a_tensor_that_is_not_packed(tmp_path):
    with pytest.raises(ValueError, match=r"k\['s'\]: given for a float32 tensor"):
        io.save(tmp_path / "a.safetensors", {"s": np.ones(3, np.float32)}, k={"s": 3})


@pytest.mark.parametrize("mmap", [True, False])
def test_load_refuses_a_character_device(mmap):
    with pytest.raises(ValueError, match="regular file"):
        ternary.load("/dev/zero", mmap=mmap)


@needs_subprocess
@pytest.mark.parametrize("mmap", [True, False])
def test_load_refuses_a_fifo_without_blocking(tmp_path, mmap):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = _run(f"""
        from cpukern import ternary
        try:
            ternary.load({str(fifo)!r}, mmap={mmap})
        except ValueError as e:
            print("refused:", e)
    """, timeout=60)
    assert "refused:" in out.stdout and "regular file" in out.stdout, out.stdout + out.stderr


def test_load_refuses_a_directory(tmp_path):
    with pytest.raises(ValueError, match="regular file"):
        ternary.load(tmp_path)


@needs_subprocess
def test_prepared_weights_survive_truncating_the_mapped_file(tmp_path):
    """prepare copies into its own layout: truncating the file after prepare leaves the prepared
    weights usable (the mapped arrays themselves would SIGBUS, as numpy/safetensors mappings do)."""
    path = tmp_path / "w.safetensors"
    out = _run(f"""
        import os, numpy as np
        from cpukern import ternary
        rng = np.random.default_rng(3)
        w = rng.integers(-1, 2, (64, 4096)).astype(np.int8)
        ternary.save({str(path)!r}, {{"w": ternary.pack(w), "s": np.ones(64, np.float32)}}, k={{"w": 4096}})
        ck = ternary.load({str(path)!r})
        tw = ternary.prepare(ck["w"], ck.k("w"), ck["s"])
        x = rng.standard_normal(4096).astype(np.float32)
        want = ternary.gemv(tw, x)
        os.truncate({str(path)!r}, 0)
        np.testing.assert_array_equal(ternary.gemv(tw, x), want)
        np.testing.assert_array_equal(ternary.gemv(tw, x, act="int8"), ternary.gemv(tw, x, act="int8"))
        print("OK")
    """)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr


# --- fuzzing: the safetensors reader and the GGUF converter only raise ValueError ----------

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - the test environment has it
    given = None

FUZZ = dict(max_examples=int(os.environ.get("CPUKERN_FUZZ_EXAMPLES", "150")), deadline=None,
            database=None,  # no .hypothesis/ directory in the working tree
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]) \
    if given else {}
# .ci/run's fuzz stage bounds each fuzz test in time: CPUKERN_FUZZ_SECONDS after its first
# example, the remaining examples return at once (CPUKERN_FUZZ_EXAMPLES is then set high).
_FUZZ_SECONDS = float(os.environ.get("CPUKERN_FUZZ_SECONDS", "0"))
_FUZZ_START = {}


def _fuzz_time_is_up(name):
    start = _FUZZ_START.setdefault(name, time.monotonic())
    return _FUZZ_SECONDS > 0 and time.monotonic() - start > _FUZZ_SECONDS


def _valid_cpukern_file(path):
    packed = ternary.pack(RNG.integers(-1, 2, (4, 40)).astype(np.int8))
    io.save(path, {"w": packed, "s": np.ones(4, np.float32), "b": np.zeros(3, BF16)}, k={"w": 40})
    return path.read_bytes()


def _mutate(data, edits, cut):
    b = bytearray(data)
    for pos, val in edits:
        b[pos % len(b)] = val
    return bytes(b[:cut % (len(b) + 1)] if cut is not None else b)


if given is not None:
    @settings(**FUZZ)
    @given(edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=6),
           cut=st.none() | st.integers(0, 1 << 16))
    def test_fuzz_safetensors_reader_only_raises_value_error(tmp_path_factory, edits, cut):
        if _fuzz_time_is_up("safetensors"):
            return
        base = tmp_path_factory.getbasetemp() / "fuzz_st"
        base.mkdir(exist_ok=True)
        data = _valid_cpukern_file(base / "ok.safetensors")
        bad = _mutate(data, edits, cut)
        try:
            io.validate_bytes(bad)
        except ValueError:
            pass
        path = base / "bad.safetensors"
        path.write_bytes(bad)
        for read in (lambda p: io.load(p, mmap=False), lambda p: io.read_safetensors(p, mmap=False),
                     lambda p: moe.load_gpt_oss(p, 0)):
            try:
                read(path)
            except ValueError as e:
                assert "bad.safetensors" in str(e)
            except KeyError as e:  # load_gpt_oss: a layer the file does not hold
                assert "bad.safetensors" in str(e)

    @settings(**dict(FUZZ, max_examples=max(10, FUZZ["max_examples"] // 3)))
    @given(edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1,
                          max_size=4))
    def test_fuzz_gguf_tensor_data_and_dims_only_raise_value_error(tmp_path_factory, edits):
        if _fuzz_time_is_up("gguf"):
            return
        base = tmp_path_factory.getbasetemp() / "fuzz_gguf"
        base.mkdir(exist_ok=True)
        src = base / "ok.gguf"
        if not src.exists():
            gguf_tq2(src, RNG.standard_normal((4, 512)).astype(np.float32), name="blk.0.w")
        data = src.read_bytes()
        # the tensor's dims and type, and its data (the key/value metadata is the gguf
        # package's own: its array lengths are trusted there)
        info = data.index(b"blk.0.w") + len(b"blk.0.w")
        data_start = len(data) - 4 * 2 * 66
        bad = bytearray(data)
        for pos, val in edits:
            if pos % 3 == 0:
                bad[info + pos % 28] = val  # n_dims, dims, type
            else:
                bad[data_start + pos % (len(data) - data_start)] = val
        path = base / "bad.gguf"
        path.write_bytes(bytes(bad))
        try:
            convert.convert(path, base / "out.safetensors")
        except ValueError as e:
            assert "bad.gguf" in str(e)
