"""cpukern.io: ternary weights in safetensors files, mapped on load, validated before use."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from cpukern import io, ternary, widely_linear

pytest.importorskip("safetensors", reason="the safetensors package is not installed here: cpukern.io tests skipped")

RNG = np.random.default_rng(11)


def layer_tensors():
    w = RNG.standard_normal((24, 50)).astype(np.float32)
    packed, scale = ternary.quantize(w)
    planes, scales = widely_linear.quantize(RNG.standard_normal((16, 40)).astype(np.float32), stages=2)
    bias = RNG.standard_normal(24).astype(ml_dtypes.bfloat16)
    tensors = {"fc.packed": packed, "fc.scale": scale, "wl.planes": planes, "wl.scales": scales,
               "fc.bias": bias}
    return tensors, {"fc.packed": 50, "wl.planes": 20}


@pytest.fixture
def saved(tmp_path):
    tensors, k = layer_tensors()
    path = tmp_path / "model.safetensors"
    io.save(path, tensors, k=k, metadata={"model": "tiny"})
    return path, tensors


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip_and_use(saved, mmap):
    path, tensors = saved
    ck = ternary.load(path, mmap=mmap)
    assert set(ck) == set(tensors)
    for name, a in tensors.items():
        assert ck[name].dtype == a.dtype and ck[name].shape == a.shape
        np.testing.assert_array_equal(ck[name].view(np.uint8), a.view(np.uint8))
    assert ck.k("fc.packed") == 50 and ck.k("wl.planes") == 20 and ck.stages("wl.planes") == 2
    assert ck.metadata["model"] == "tiny" and ck.metadata["cpukern.format_version"] == io.FORMAT_VERSION
    if mmap:
        assert not ck["fc.packed"].flags.writeable  # a read-only view of the mapping
    x = RNG.standard_normal(50).astype(np.float32)
    w = ternary.prepare(ck["fc.packed"], ck.k("fc.packed"), ck["fc.scale"])
    np.testing.assert_array_equal(ternary.gemv(w, x),
                                  ternary.gemv(ternary.prepare(tensors["fc.packed"], 50, tensors["fc.scale"]), x))
    layer = widely_linear.prepare(ck["wl.planes"], ck["wl.scales"], ck.k("wl.planes"))
    assert layer.shape == (16, 40)


def test_save_torch_tensors(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed here: torch save path skipped")
    packed, scale = ternary.quantize(torch.randn(8, 40))
    b = torch.randn(8).to(torch.bfloat16)
    io.save(tmp_path / "t.safetensors", {"p": packed, "s": scale, "b": b}, k={"p": 40})
    ck = io.load(tmp_path / "t.safetensors")
    np.testing.assert_array_equal(ck["p"], packed.view(torch.int32).numpy().view(np.uint32))
    np.testing.assert_array_equal(ck["b"].view(np.uint16), b.view(torch.int16).numpy().view(np.uint16))


def test_save_refuses_missing_or_wrong_k(tmp_path):
    tensors, k = layer_tensors()
    with pytest.raises(ValueError, match="missing K"):
        io.save(tmp_path / "a", tensors, k={"fc.packed": 50})
    with pytest.raises(ValueError, match="words per row"):
        io.save(tmp_path / "a", tensors, k={"fc.packed": 70, "wl.planes": 20})
    with pytest.raises(ValueError, match="reserved"):
        io.save(tmp_path / "a", tensors, k=k, metadata={"k.x": "1"})


def test_truncated_files_raise_value_error(saved, tmp_path):
    path, _ = saved
    data = path.read_bytes()
    cut = tmp_path / "cut.safetensors"
    for n in sorted({0, 1, 7, 8, 9, 20, len(data) // 2, len(data) - 1}):
        cut.write_bytes(data[:n])
        with pytest.raises(ValueError, match="safetensors file"):
            io.load(cut)
        with pytest.raises(ValueError):
            io.validate_bytes(data[:n])


def split(data):
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def join(header, body):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


def tampered(data, fn):
    header, body = split(data)
    fn(header)
    return join(header, body)


CASES = {
    "offsets past the end": (lambda h: h["fc.scale"].__setitem__("data_offsets", [0, 1 << 40]), "outside"),
    "size mismatch": (lambda h: h["fc.scale"].__setitem__("shape", [25]), "needs"),
    "negative dim": (lambda h: h["fc.scale"].__setitem__("shape", [-24]), ">= 0"),
    "float dim": (lambda h: h["fc.scale"].__setitem__("shape", [24.0]), "integer"),
    "bool offset": (lambda h: h["fc.scale"].__setitem__("data_offsets", [True, 96]), "integer"),
    "unknown dtype": (lambda h: h["fc.scale"].__setitem__("dtype", "F8_E9"), "dtype"),
    "extra key": (lambda h: h["fc.scale"].__setitem__("x", 1), "keys"),
    "wrong version": (lambda h: h["__metadata__"].__setitem__("cpukern.format_version", "2"), "version"),
    "not cpukern": (lambda h: h["__metadata__"].pop("cpukern.format"), "cpukern.format"),
    "K mismatch": (lambda h: h["__metadata__"].__setitem__("k.fc.packed", "500"), "words per row"),
    "K not a number": (lambda h: h["__metadata__"].__setitem__("k.fc.packed", "5e1"), "decimal"),
    "K missing": (lambda h: h["__metadata__"].pop("k.fc.packed"), "missing"),
    "stages mismatch": (lambda h: h["__metadata__"].__setitem__("stages.wl.planes", "3"), "stages"),
    "stray K": (lambda h: h["__metadata__"].__setitem__("k.fc.scale", "3"), "no uint32 tensor"),
    "metadata not strings": (lambda h: h["__metadata__"].__setitem__("model", 3), "string"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tampered_headers_raise_value_error(saved, tmp_path, case):
    path, _ = saved
    fn, match = CASES[case]
    bad = tampered(path.read_bytes(), fn)
    with pytest.raises(ValueError, match=match):
        io.validate_bytes(bad)
    p = tmp_path / "bad.safetensors"
    p.write_bytes(bad)
    with pytest.raises(ValueError, match=match):
        io.load(p)


def test_overlapping_and_gapped_offsets(saved):
    data = saved[0].read_bytes()
    header, body = split(data)
    names = sorted((e["data_offsets"][0], n) for n, e in header.items() if n != "__metadata__")
    first, second = names[0][1], names[1][1]
    h2 = json.loads(json.dumps(header))
    h2[second]["data_offsets"] = [o - 4 for o in h2[second]["data_offsets"]]
    with pytest.raises(ValueError, match="overlap"):
        io.validate_bytes(join(h2, body))
    with pytest.raises(ValueError, match="cover"):
        io.validate_bytes(join(header, body + b"\0" * 8))


@pytest.mark.parametrize("blob", [
    b"\xff" * 16,
    struct.pack("<Q", 4) + b"\xff\xfe{}",
    struct.pack("<Q", 2) + b"[]",
    struct.pack("<Q", 100000) + b"[" * 50000 + b"]" * 50000,
    struct.pack("<Q", 1 << 62),
])
def test_garbage_raises_only_value_error(blob):
    with pytest.raises(ValueError):
        io.validate_bytes(blob)


def test_random_mutations_raise_only_value_error(saved):
    data = bytearray(saved[0].read_bytes())
    rng = np.random.default_rng(5)
    for _ in range(300):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        try:
            io.validate_bytes(bytes(b))
        except ValueError:
            pass
