"""Packing straight into the serialised buffer (issue 46): the `out=` of ternary.prepare,
moe.prepare, linear.prepare and widely_linear.prepare. On every variant this CPU runs: `out` is
called once with the size of the serialised form, its buffer then holds exactly the bytes of
to_bytes(prepare(same arguments)) (checksum included; ternary's int8 layout when int8=True), and
the weights view it and compute what the usual path's weights compute. A bad `out` is refused
naming it; peak memory of the new path stays near one copy of the blob."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import weakref

import ml_dtypes
import numpy as np
import pytest

import cpukern
from contract import needs_subprocess, needs_torch, torch
from cpukern import _packed, linear, moe, ternary, widely_linear
from variants import variant_params

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(46)


class Alloc:
    """An `out=` that records its calls and keeps what it returned."""

    def __init__(self, make=_packed.aligned_empty):
        self.make, self.calls, self.bufs = make, [], []

    def __call__(self, nbytes):
        self.calls.append(nbytes)
        self.bufs.append(self.make(nbytes))
        return self.bufs[-1]


def _check_direct(make_weights):
    """make_weights(out) twice: out=None, then out=Alloc(); the direct weights view the one
    buffer alloc returned, which holds to_bytes of the usual weights. Returns both weights."""
    ref = make_weights(None)
    expected = _packed.to_bytes(ref)
    alloc = Alloc()
    direct = make_weights(alloc)
    assert alloc.calls == [expected.size], "out must be called once, with the blob's size"
    buf = alloc.bufs[0]
    assert direct.is_view
    np.testing.assert_array_equal(buf, expected)
    # The weights view that very buffer (a change of its payload shows in their to_bytes).
    np.testing.assert_array_equal(_packed.to_bytes(direct), buf)
    for attr in ("op", "format", "act", "variant", "ukernel", "layout", "shape", "has_scale"):
        assert getattr(direct, attr) == getattr(ref, attr), attr
    return ref, direct


TERNARY_SHAPES = [(0, 5, None), (3, 0, None), (1, 1, None), (17, 33, None), (130, 700, None),
                  (19, 257, 64), (1, 17, 16), (0, 40, 32)]


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_ternary_bytes_and_results(variant, int8):
    for m, k, g in TERNARY_SHAPES:
        w = RNG.integers(-1, 2, (m, k)).astype(np.int8)
        packed = ternary.pack(w)
        scale = RNG.random((m, -(-k // g)) if g else m).astype(np.float32)
        ref, direct = _check_direct(lambda out: ternary.prepare(
            packed, k, scale, group_size=g, variant=variant, int8=int8, out=out))
        if int8:
            assert direct.int8_ready
        if m and k:
            x = RNG.standard_normal((3, k)).astype(np.float32)
            for act in ("fp32", "int8"):
                np.testing.assert_array_equal(ternary.gemv(direct, x, act=act),
                                              ternary.gemv(ref, x, act=act))


def test_ternary_int8_layout_is_in_the_buffer():
    """int8=True packs the int8 layout into the buffer: to_bytes(w, int8=True)'s bytes."""
    k = 300
    packed = ternary.pack(RNG.integers(-1, 2, (70, k)).astype(np.int8))
    for variant in [v["name"] for v in cpukern.kernels("ternary_gemv") if v["supported"]]:
        expected = ternary.to_bytes(ternary.prepare(packed, k, variant=variant), int8=True)
        alloc = Alloc()
        ternary.prepare(packed, k, variant=variant, int8=True, out=alloc)
        np.testing.assert_array_equal(alloc.bufs[0], expected)


def _moe_arrays(fmt, e, o, i):
    w = (RNG.standard_normal((e, o, i)) * 0.1).astype(BF16)
    if fmt == "bf16":
        return w, None, "fp32"
    if fmt == "int8":
        q, s = moe.quantize(w, format="int8")
        return q, s, "fp32"
    blocks, s = moe.quantize(w, format="mxfp4")
    return blocks, s, "int8" if fmt == "mxfp4_a8" else "fp32"


@pytest.mark.parametrize("variant", variant_params("fused_moe"))
@pytest.mark.parametrize("fmt", ["bf16", "mxfp4", "int8", "mxfp4_a8"])
def test_moe_bytes_and_results(variant, fmt):
    for e, o, i in [(1, 1, 32), (2, 17, 64), (3, 40, 96)]:
        w, s, act = _moe_arrays(fmt, e, o, i)
        fmt_arg = "mxfp4" if fmt == "mxfp4_a8" else fmt
        _check_direct(lambda out: moe.prepare(w, format=fmt_arg, scales=s, act=act, variant=variant, out=out))
    # fused_moe on the direct experts: bitwise the usual result.
    E, H, inter, T = 4, 64, 32, 5
    w13, s13, act = _moe_arrays(fmt, E, 2 * inter, H)
    w2, s2, _ = _moe_arrays(fmt, E, H, inter)
    fmt_arg = "mxfp4" if fmt == "mxfp4_a8" else fmt
    prep = lambda w_, s_, out: moe.prepare(w_, format=fmt_arg, scales=s_, act=act, variant=variant, out=out)
    r13, d13 = _check_direct(lambda out: prep(w13, s13, out))
    r2, d2 = _check_direct(lambda out: prep(w2, s2, out))
    x = RNG.standard_normal((T, H)).astype(BF16)
    tw, ids = moe.route(RNG.standard_normal((T, E)).astype(np.float32), 2)
    np.testing.assert_array_equal(moe.fused_moe(x, d13, d2, tw, ids).view(np.uint16),
                                  moe.fused_moe(x, r13, r2, tw, ids).view(np.uint16))


@pytest.mark.parametrize("variant", variant_params("linear"))
def test_linear_bytes_and_results(variant):
    for o, i in [(1, 1), (33, 70)]:
        w = (RNG.standard_normal((o, i)) * 0.1).astype(BF16)
        ref, direct = _check_direct(lambda out: linear.prepare(w, variant=variant, out=out))
        x = RNG.standard_normal((3, i)).astype(BF16)
        np.testing.assert_array_equal(linear.linear(x, direct).view(np.uint16),
                                      linear.linear(x, ref).view(np.uint16))
    q, s = moe.quantize(RNG.standard_normal((16, 64)).astype(BF16), format="int8")
    _check_direct(lambda out: linear.prepare(q, format="int8", scales=s, variant=variant, out=out))


@pytest.mark.parametrize("variant", variant_params("widely_linear"))
def test_widely_linear_bytes_and_results(variant):
    for rows, cols, stages in [(2, 2, 1), (8, 32, 2), (74, 100, 2)]:
        planes, scales = widely_linear.quantize(RNG.standard_normal((rows, cols)).astype(np.float32),
                                                stages)
        ref, direct = _check_direct(lambda out: widely_linear.prepare(planes, scales, cols // 2,
                                                                      variant=variant, out=out))
        x = RNG.standard_normal((3, cols)).astype(np.float32)
        np.testing.assert_array_equal(widely_linear.apply(direct, x), widely_linear.apply(ref, x))


def test_the_weights_keep_the_buffer_alive():
    packed = ternary.pack(RNG.integers(-1, 2, (40, 64)).astype(np.int8))
    x = RNG.standard_normal(64).astype(np.float32)
    expected = ternary.gemv(ternary.prepare(packed, 64), x)
    alloc = Alloc()
    w = ternary.prepare(packed, 64, out=alloc)
    ref = weakref.ref(alloc.bufs[0].base if alloc.bufs[0].base is not None else alloc.bufs[0])
    del alloc
    gc.collect()
    assert ref() is not None, "the weights must hold the buffer"
    np.testing.assert_array_equal(ternary.gemv(w, x), expected)
    del w
    gc.collect()
    assert ref() is None, "the buffer outlived the weights"


def _bad_outs():
    return [
        ("not callable", 5, TypeError, "callable"),
        ("not an array", lambda n: bytearray(n), TypeError, "numpy array or a torch tensor"),
        ("dtype", lambda n: _packed.aligned_empty(4 * n).view(np.float32), TypeError, "uint8"),
        ("too large", lambda n: _packed.aligned_empty(n + 64), ValueError, "shape"),
        ("too small", lambda n: _packed.aligned_empty(n - 1), ValueError, "shape"),
        ("2-D", lambda n: _packed.aligned_empty(n).reshape(1, n), ValueError, "shape"),
        ("misaligned", lambda n: _packed.aligned_empty(n + 64)[8:n + 8], ValueError, "64-byte"),
        ("strided", lambda n: _packed.aligned_empty(2 * n)[::2], TypeError, "contiguous"),
        ("read-only", lambda n: np.frombuffer(bytes(n + 64), np.uint8)[:n], TypeError, "writeable"),
    ]


@pytest.mark.parametrize("case", _bad_outs(), ids=[c[0] for c in _bad_outs()])
def test_bad_out_is_refused_naming_out(case):
    _, out, exc, words = case
    packed = ternary.pack(RNG.integers(-1, 2, (40, 64)).astype(np.int8))
    w = (RNG.standard_normal((2, 8, 64)) * 0.1).astype(BF16)
    planes, scales = widely_linear.quantize(RNG.standard_normal((8, 32)).astype(np.float32), 1)
    for prepare in (lambda: ternary.prepare(packed, 64, out=out),
                    lambda: ternary.prepare(packed, 64, int8=True, out=out),
                    lambda: moe.prepare(w, out=out),
                    lambda: linear.prepare(w[0], out=out),
                    lambda: widely_linear.prepare(planes, scales, 16, out=out)):
        with pytest.raises(exc, match="^out: ") as info:
            prepare()
        assert words in str(info.value), info.value


def test_bad_arguments_are_refused_before_out_is_called():
    """The arguments are checked when the size is taken: out is not called for them."""
    alloc = Alloc()
    packed = ternary.pack(RNG.integers(-1, 2, (4, 64)).astype(np.int8))
    with pytest.raises(ValueError, match="^packed: .*words per row"):
        ternary.prepare(packed, 65, out=alloc)
    with pytest.raises(ValueError, match="^variant: "):
        ternary.prepare(packed, 64, variant="no_such_variant", out=alloc)
    with pytest.raises(ValueError, match="^scale: "):
        ternary.prepare(packed, 64, np.ones(3, np.float32), out=alloc)
    with pytest.raises(TypeError, match="^int8: "):
        ternary.prepare(packed, 64, int8=1, out=alloc)
    with pytest.raises(ValueError, match="^w: .*>= 1"):
        moe.prepare(np.zeros((0, 2, 32), BF16), out=alloc)
    with pytest.raises(ValueError, match="^scales: "):
        moe.prepare(np.zeros((1, 2, 1, 16), np.uint8), format="mxfp4",
                    scales=np.zeros((1, 2, 2), np.uint8), out=alloc)
    assert alloc.calls == []
    # Invalid values are found while packing (after out was called): prepare's own error.
    bad = packed.copy()
    bad[0, 0] = 0xFFFFFFFF
    with pytest.raises(ValueError, match="^packed: "):
        ternary.prepare(bad, 64, out=alloc)
    assert len(alloc.calls) == 1


def test_an_error_of_out_itself_propagates():
    def boom(n):
        raise MemoryError("no memory for %d bytes" % n)
    with pytest.raises(MemoryError, match="no memory"):
        ternary.prepare(ternary.pack(np.ones((4, 32), np.int8)), 32, out=boom)


@needs_torch
def test_torch_memory():
    """cpukern's own torch memory (owned_tensor) is packed into and viewed; the tensor the
    caller keeps holds the blob. Memory torch can free or move (torch.empty) is refused."""
    w = torch.randn(24, 64).to(torch.bfloat16)
    alloc = Alloc(_packed.owned_tensor)
    direct = linear.prepare(w, out=alloc)
    blob = alloc.bufs[0]
    assert torch.is_tensor(blob) and direct.is_view
    np.testing.assert_array_equal(blob.numpy(), _packed.to_bytes(linear.prepare(w)))
    from cpukern.torch import PackedWeightsTensor
    t = PackedWeightsTensor(blob, verify=True)
    assert t.weights.is_view
    x = torch.randn(3, 64).to(torch.bfloat16)
    assert torch.equal(linear.linear(x, direct), linear.linear(x, linear.prepare(w)))
    with pytest.raises(ValueError, match="^out: .*owned_tensor"):
        linear.prepare(w, out=lambda n: torch.empty(n, dtype=torch.uint8))
    # torch inputs (DLPack capsules: converted for each of the two extension calls)
    packed = torch.from_numpy(ternary.pack(RNG.integers(-1, 2, (16, 64)).astype(np.int8)))
    scale = torch.rand(16)
    _check_direct(lambda out: ternary.prepare(packed, 64, scale, out=out))
    _check_direct(lambda out: moe.prepare(w[None], out=out))


# --- peak memory -------------------------------------------------------------------------------
# In a fresh interpreter: inputs made in chunks (no temporary as large as a weight), a small
# warm-up of the same path, then ru_maxrss (the high-water mark, KiB) before and after packing
# one large weight. The old path (prepare, then to_bytes) holds the packing and its copy at
# once (~2x the blob); the new one only the blob.
_RSS_CODE = """
import json, resource, sys
import ml_dtypes, numpy as np
from cpukern import _packed, moe, ternary

op, path = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024

def maxrss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

if op == "ternary":
    M, K = 16384, 8192
    W = K // 16
    packed = np.empty((M, W), np.uint32)
    for r in range(0, M, 256):
        x = rng.integers(0, 1 << 32, (256, W), dtype=np.uint32)
        hi = x & np.uint32(0xAAAAAAAA)
        packed[r:r + 256] = hi | (x & np.uint32(0x55555555) & ~(hi >> np.uint32(1)))
    make = lambda a, out=None: ternary.prepare(a, a.shape[1] * 16, out=out)
    small = np.ascontiguousarray(packed[:256, :64])
else:
    E, O, I = 8, 2048, 1024
    w = np.empty((E, O, I), np.uint16)
    for e in range(E):
        w[e] = rng.integers(0x3C00, 0x3F80, (O, I), dtype=np.uint16)
    w = w.view(ml_dtypes.bfloat16)
    make = lambda a, out=None: moe.prepare(a, out=out)
    small = np.ascontiguousarray(w[:1, :64, :64])

def run(a):
    if path == "new":
        return make(a, out=_packed.aligned_empty), None
    p = make(a)
    return p, _packed.to_bytes(p)

run(small)  # warm-up: the thread pool, per-thread scratch
before, current = maxrss_kib(), rss_kib()
weights, blob = run(packed if op == "ternary" else w)
after = maxrss_kib()
nbytes = _packed.serialized_size(weights)
print(json.dumps({"before": before, "current": current, "after": after, "blob": nbytes // 1024}))
"""


def _peak(op: str, path: str) -> dict:
    # Through a shell that forks the interpreter (not exec): a process started straight from
    # this one inherits its high-water mark (Linux carries the RSS peak of the memory it
    # replaces across exec), which would hide the rise.
    r = subprocess.run(["/bin/sh", "-c", '"$0" -c "$1" "$2" "$3"; exit $?', sys.executable,
                        _RSS_CODE, op, path], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_subprocess
@pytest.mark.parametrize("op", ["ternary", "moe"])
def test_peak_rss_of_packing_into_the_buffer(op):
    """Packing a large weight with out= raises the peak RSS by about one blob (asserted: less
    than 1.3x its size); prepare + to_bytes costs about two (printed, for comparison)."""
    new, old = _peak(op, "new"), _peak(op, "old")
    for r in (new, old):  # the high-water mark was the current RSS: the rise is the packing's
        assert r["before"] - r["current"] < 0.2 * r["blob"], r
    rise_new, rise_old = new["after"] - new["before"], old["after"] - old["before"]
    print(f"{op}: blob {new['blob'] / 1024:.1f} MiB; peak RSS rise: out= {rise_new / 1024:.1f} MiB "
          f"({rise_new / new['blob']:.2f}x), prepare + to_bytes {rise_old / 1024:.1f} MiB "
          f"({rise_old / old['blob']:.2f}x)")
    assert rise_new < 1.3 * new["blob"], (new, old)
