"""Ternary GEMV: public format, quantiser and every variant against a float64 model."""

import numpy as np
import pytest

import cpukern
from cpukern import ternary
from variants import UNDER_QEMU, supported, variant_params

RNG = np.random.default_rng(1234)
K_EDGES = [1, 15, 16, 17, 33, 4095] if not UNDER_QEMU else [1, 15, 16, 17, 33, 257]


def random_ternary(m, k, rng=RNG):
    return rng.integers(-1, 2, size=(m, k), dtype=np.int8)


def model(w, x, scale):
    """The float64 oracle: y = scale * (w @ x)."""
    y = x.astype(np.float64) @ w.astype(np.float64).T
    return y * np.asarray(scale, np.float64), (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T) * np.abs(scale)


# --- the public packed format --------------------------------------------------------------

def test_pack_layout_matches_the_spec():
    w = np.zeros((1, 17), np.int8)
    w[0, 0], w[0, 1], w[0, 15], w[0, 16] = 1, -1, 1, -1
    p = ternary.pack(w)
    assert p.dtype == np.uint32 and p.shape == (1, 2)
    assert p[0, 0] == (2 << 0) | (1 << 2) | (2 << 30)
    assert p[0, 1] == 1


@pytest.mark.parametrize("k", [1, 15, 16, 17, 100])
def test_pack_unpack_round_trip(k):
    w = random_ternary(5, k)
    np.testing.assert_array_equal(ternary.unpack(ternary.pack(w), k), w)
    np.testing.assert_array_equal(ternary.unpack(ternary.pack(w.astype(np.int64)), k), w)


def test_pack_rejects_values_outside_ternary_naming_the_index():
    w = np.zeros((3, 20), np.int32)
    w[2, 7] = 2
    with pytest.raises(ValueError, match=r"w: values must be in \{-1, 0, \+1\}, got 2 at index \[2, 7\]"):
        ternary.pack(w)
    with pytest.raises(TypeError, match="w: expected an integer array"):
        ternary.pack(np.zeros((2, 2), np.float32))


def test_unpack_rejects_code_11():
    p = np.zeros((2, 1), np.uint32)
    p[1, 0] = 3 << 4
    with pytest.raises(ValueError, match="packed: invalid code 0b11"):
        ternary.unpack(p, 16)
    with pytest.raises(ValueError, match="packed: expected ceil"):
        ternary.unpack(np.zeros((2, 2), np.uint32), 16)


@pytest.mark.parametrize("granularity", ["row", "tensor"])
def test_quantize_is_absmean(granularity):
    w = RNG.standard_normal((6, 37)).astype(np.float32)
    packed, scale = ternary.quantize(w, granularity)
    s = np.abs(w.astype(np.float64)).mean(axis=1 if granularity == "row" else None)
    s = np.broadcast_to(s, (6,))
    np.testing.assert_allclose(scale, s, rtol=1e-6)
    q = np.clip(np.round(w / s[:, None]), -1, 1)
    np.testing.assert_array_equal(ternary.unpack(packed, 37), q.astype(np.int8))
    with pytest.raises(ValueError, match="granularity"):
        ternary.quantize(w, "column")


# --- gemv, every variant ---------------------------------------------------------------------

@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
@pytest.mark.parametrize("k", K_EDGES)
@pytest.mark.parametrize("m,b", [(1, 1), (9, 3), (33, 16)])
def test_gemv_fp32_matches_float64_model(variant, k, m, b):
    w = random_ternary(m, k)
    w[0] = 0  # a zero row
    if m > 2:
        w[1], w[2] = 1, -1  # all +1, all -1
    x = RNG.standard_normal((b, k)).astype(np.float32)
    scale = RNG.uniform(0.5, 2.0, m).astype(np.float32)
    tw = ternary.prepare(ternary.pack(w), k, scale, variant=variant)
    assert tw.variant == variant and tw.shape == (m, k) and tw.nbytes > 0
    y = ternary.gemv(tw, x)
    want, mag = model(w, x, scale)
    assert y.shape == (b, m) and y.dtype == np.float32
    assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30), np.max(np.abs(y - want) / (mag + 1e-30))
    y1 = ternary.gemv(tw, x[0])
    assert y1.shape == (m,)
    np.testing.assert_array_equal(y1, y[0])


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
def test_gemv_small_integers_are_bitwise_exact(variant):
    m, k = 21, 1000
    w = random_ternary(m, k)
    x = RNG.integers(-8, 9, size=(4, k)).astype(np.float32)
    y = ternary.gemv(ternary.prepare(ternary.pack(w), k, variant=variant), x)
    np.testing.assert_array_equal(y, (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
def test_gemv_int8_within_stated_bound(variant):
    m, k, b = 17, 333, 3
    w = random_ternary(m, k)
    x = RNG.standard_normal((b, k)).astype(np.float32)
    y = ternary.gemv(ternary.prepare(ternary.pack(w), k, variant=variant), x, 1.5, act="int8")
    want, mag = model(w, x, 1.5)
    bound = 1.5 * np.abs(x).max(axis=1, keepdims=True) / 254 * np.abs(w).sum(axis=1)[None, :] + 1e-5 * mag
    assert np.all(np.abs(y - want) <= bound * 1.01 + 1e-6)


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
def test_gemv_is_identical_for_any_thread_count(variant):
    m, k = 300, 517
    tw = ternary.prepare(ternary.pack(random_ternary(m, k)), k, variant=variant)
    x = RNG.standard_normal((2, k)).astype(np.float32)
    ys = [ternary.gemv(tw, x, threads=t) for t in (1, 2, 3, 7)]
    for y in ys[1:]:
        np.testing.assert_array_equal(y, ys[0])


def test_gemv_scale_forms_and_packed_input():
    m, k = 5, 40
    w = random_ternary(m, k)
    packed = ternary.pack(w)
    x = RNG.standard_normal(k).astype(np.float32)
    base = ternary.gemv(packed, x)
    np.testing.assert_allclose(ternary.gemv(packed, x, 2.0), 2 * base, rtol=1e-6)
    s = np.arange(1, m + 1, dtype=np.float32)
    np.testing.assert_allclose(ternary.gemv(packed, x, s), s * base, rtol=1e-6)
    tw = ternary.prepare(packed, k, s)
    np.testing.assert_allclose(ternary.gemv(tw, x), s * base, rtol=1e-6)
    np.testing.assert_allclose(ternary.gemv(tw, x, 1.0), base, rtol=1e-6)  # explicit scale wins
    out = np.empty(m, np.float32)
    assert ternary.gemv(tw, x, out=out) is out


def test_gemv_bad_input_names_the_argument():
    packed = ternary.pack(random_ternary(4, 32))
    x = np.ones(32, np.float32)
    with pytest.raises(TypeError, match="x: expected a C-contiguous float32"):
        ternary.gemv(packed, x.astype(np.float64))
    with pytest.raises(TypeError, match="x: expected a C-contiguous float32"):
        ternary.gemv(packed, np.ones((2, 64), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="packed|k"):
        ternary.gemv(packed, np.ones(50, np.float32))
    with pytest.raises(ValueError, match="act: expected one of 'fp32', 'int8', 'int8_bitnet'"):
        ternary.gemv(packed, x, act="int4")
    with pytest.raises(ValueError, match="scale"):
        ternary.gemv(packed, x, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="out"):
        ternary.gemv(packed, x, out=np.empty(5, np.float32))
    bad = packed.copy()
    bad[0, 0] = 3
    with pytest.raises(ValueError, match="packed"):
        ternary.prepare(bad, 32)
    tw = ternary.prepare(packed, 32)
    with pytest.raises(ValueError, match="x: expected K = 32"):
        ternary.gemv(tw, np.ones(31, np.float32))
    with pytest.raises(TypeError, match="x: expected a numpy array"):
        ternary.gemv(tw, [1.0] * 32)


# --- the scale epilogues (shared by every variant, so only a float64 model catches a change) ---

def int8_model(w, x, scale):
    """float64 model of act="int8" (the gemv docstring): each row of x is quantised in fp32,
    q = clip(rint(x * fp32(127 / max|x|)), -127, 127), a row with max|x| < 2**-100 scaled by
    2**64 first (exact) and its result by 2**-64; then y = (w @ q) * max|x| / 127 * scale in
    float64. The kernel's three fp32 roundings after the exact integer dot product stay within
    4 * 2**-24 of |y| (plus 2**-148 where y is subnormal)."""
    x = np.atleast_2d(x).astype(np.float32)
    amax = np.abs(x).max(axis=1) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    pre = np.where((amax > 0) & (amax < np.float32(2.0**-100)), np.float32(2.0**64), np.float32(1))
    amax = amax * pre
    with np.errstate(divide="ignore"):
        qs = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((x * pre[:, None]) * qs[:, None]), -127, 127)
    acc = q.astype(np.float64) @ w.astype(np.float64).T
    dq = amax.astype(np.float64) / 127 / pre.astype(np.float64)
    return acc * dq[:, None] * np.asarray(scale, np.float64)


def assert_int8_matches_model(y, want):
    err = np.abs(y.astype(np.float64) - want)
    bound = 4 * 2.0**-24 * np.abs(want) + 2.0**-148
    assert np.all(err <= bound), (np.max(err / (np.abs(want) + 2.0**-148)), np.argwhere(err > bound)[:5])


def epilogue_rows(k, rng):
    """Activation rows reaching every branch of the int8 quantiser and epilogue: ordinary rows
    of very different max|x| (each row has its own dequantisation factor), an all-zero row
    (max|x| = 0), tiny rows (max|x| < 2**-100: the 2**64 pre-scale; without it 127 / max|x|
    overflows for the subnormal row 3 and max|x| / 127 is subnormal for row 7), a row at
    exactly 2**-100 (not tiny), one with a single nonzero entry, and one far above 1."""
    x = rng.standard_normal((8, k)).astype(np.float32)
    x[1] *= np.float32(1e-3)
    x[2] = 0
    x[3] = (x[3].astype(np.float64) * 1e-39).astype(np.float32)  # subnormal activations
    x[4] = x[4] / np.abs(x[4]).max() * np.float32(2.0**-100)
    x[5] = 0
    x[5, k // 2] = -3.25
    x[6] *= np.float32(1e30)
    x[7] = (x[7].astype(np.float64) * 1e-37).astype(np.float32)
    return x


# (scale given at prepare, scale given at the call): every form the epilogue takes.
SCALE_CASES = {
    "none": (None, None),
    "scalar": (None, -1.75),
    "per_row": (None, "rows"),
    "prepared_per_row": ("rows", None),
    "call_scalar_overrides_prepared": ("rows", 0.5),
    "call_per_row_overrides_prepared": ("rows", "rows2"),
}


def _scale(form, m, rng):
    if form is None or isinstance(form, float):
        return form
    s = rng.uniform(0.25, 4.0, m).astype(np.float32)
    s[::3] *= -1
    return s


def _epilogue_case(variant, case, seed, zero_row=False):
    """(w, prepared weights, the scale given to gemv, the scale in effect, x) of one scale case
    on 37 x 301 weights (row 0 zero if zero_row)."""
    rng = np.random.default_rng(seed)
    m, k = 37, 301
    w = random_ternary(m, k, rng)
    if zero_row:
        w[0] = 0
    prepared, called = (_scale(f, m, rng) for f in SCALE_CASES[case])
    tw = ternary.prepare(ternary.pack(w), k, prepared, variant=variant)
    effective = called if called is not None else prepared if prepared is not None else 1.0
    return w, tw, called, effective, epilogue_rows(k, rng)


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
@pytest.mark.parametrize("case", list(SCALE_CASES))
def test_int8_epilogue_matches_float64_model(variant, case):
    w, tw, called, effective, x = _epilogue_case(variant, case, 77, zero_row=True)
    y = ternary.gemv(tw, x, called, act="int8")
    want = int8_model(w, x, effective)
    assert_int8_matches_model(y, want)
    assert np.all(y[2] == 0) and np.all(y[:, 0] == 0)  # zero row of x, zero row of w
    assert np.count_nonzero(want[3]) > w.shape[0] // 2 and np.count_nonzero(want[7]) > w.shape[0] // 2
    for b in (0, 3, 6):  # batch 1 (1-D x) gives the same bits as its row of the batch
        np.testing.assert_array_equal(ternary.gemv(tw, x[b], called, act="int8"), y[b])


@pytest.mark.parametrize("case", list(SCALE_CASES))
def test_int8_epilogue_empty_shapes(case):
    rng = np.random.default_rng(78)
    m = 6
    prepared, called = (_scale(f, m, rng) for f in SCALE_CASES[case])
    tw = ternary.prepare(ternary.pack(np.zeros((m, 0), np.int8)), 0, prepared)
    y = ternary.gemv(tw, np.zeros((3, 0), np.float32), called, act="int8")  # k = 0: y = 0
    assert y.shape == (3, m) and np.all(y == 0)
    assert ternary.gemv(tw, np.zeros((0, 0), np.float32), called, act="int8").shape == (0, m)


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
@pytest.mark.parametrize("case", list(SCALE_CASES))
def test_fp32_scale_epilogue_matches_float64_model(variant, case):
    w, tw, called, effective, x = _epilogue_case(variant, case, 79)
    y = ternary.gemv(tw, x, called)
    want, mag = model(w, x, effective)
    assert np.all(np.abs(y - want) <= 1e-5 * mag + 2.0**-148), np.max(np.abs(y - want) / (mag + 1e-30))
    assert np.all(y[2] == 0)
    np.testing.assert_array_equal(ternary.gemv(tw, x[6], called), y[6])


# --- serialised prepared weights (to_bytes / from_buffer) -----------------------------------

def _prepared_cases():
    rng = np.random.default_rng(77)
    for m, k, g in [(1, 1, None), (37, 300, None), (130, 700, None), (19, 257, 64), (0, 5, None)]:
        w = random_ternary(m, k, rng)
        scale = (rng.random((m, -(-k // g))) if g else rng.random(m)).astype(np.float32)
        yield m, k, g, ternary.pack(w), scale


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
def test_prepared_buffer_round_trip_is_a_view_with_identical_results(variant):
    rng = np.random.default_rng(5)
    for m, k, g, packed, scale in _prepared_cases():
        w = ternary.prepare(packed, k, scale, group_size=g, variant=variant)
        for int8 in (False, True):
            buf = ternary.to_bytes(w, int8=int8)
            assert buf.dtype == np.uint8 and buf.ndim == 1 and buf.ctypes.data % 64 == 0
            assert buf.size == ternary.serialized_size(w, int8=int8)
            v = ternary.from_buffer(buf, verify=True)
            assert v.is_view and v.variant == w.variant and v.shape == w.shape and v.group_size == w.group_size
            x = rng.standard_normal((3, k)).astype(np.float32)
            for act in ("fp32", "int8"):
                np.testing.assert_array_equal(ternary.gemv(v, x, act=act), ternary.gemv(w, x, act=act))


def test_prepared_buffer_keeps_its_buffer_alive_and_sees_its_bytes():
    import gc
    _, k, _, packed, scale = list(_prepared_cases())[1]
    w = ternary.prepare(packed, k, scale)
    buf = ternary.to_bytes(w)
    v = ternary.from_buffer(buf)
    x = np.ones(k, np.float32)
    want = ternary.gemv(w, x)
    del buf
    gc.collect()
    np.testing.assert_array_equal(ternary.gemv(v, x), want)  # the view holds the buffer


def test_prepared_buffer_from_another_variant_is_prepared_again():
    """A layout this CPU cannot run is detected by the variant in the header; forcing another
    variant stands for it here (the C++ test imports real AVX-512 layouts through SIMDe)."""
    rng = np.random.default_rng(6)
    names = [v["name"] for v in cpukern.kernels("ternary_gemv") if v["supported"]]
    for m, k, g, packed, scale in _prepared_cases():
        x = rng.standard_normal((2, k)).astype(np.float32)
        for src in names:
            buf = ternary.to_bytes(ternary.prepare(packed, k, scale, group_size=g, variant=src))
            for dst in names:
                v = ternary.from_buffer(buf, variant=dst)
                assert v.variant == dst and v.is_view == (src == dst)
                direct = ternary.prepare(packed, k, scale, group_size=g, variant=dst)
                np.testing.assert_array_equal(ternary.gemv(v, x), ternary.gemv(direct, x))


def test_prepared_buffer_bad_input_names_the_argument():
    _, k, _, packed, scale = list(_prepared_cases())[1]
    buf = ternary.to_bytes(ternary.prepare(packed, k, scale))
    with pytest.raises(ValueError, match=r"^buffer: expected a prepared-weight buffer"):
        ternary.from_buffer(ternary.aligned_empty(0))
    short = ternary.aligned_empty(buf.size - 64)
    short[:] = buf[:-64]
    with pytest.raises(ValueError, match=r"^buffer: header says"):
        ternary.from_buffer(short)
    with pytest.raises(ValueError, match=r"^buffer: must start on a 64-byte boundary"):
        ternary.from_buffer(buf[1:])
    with pytest.raises(TypeError, match=r"^buffer: "):
        ternary.from_buffer(buf.view(np.int8))
    bad = ternary.aligned_empty(buf.size)
    bad[:] = buf
    bad[600] ^= 0x10
    ternary.from_buffer(bad)  # the checksum is checked only when asked
    with pytest.raises(ValueError, match=r"^buffer: checksum mismatch"):
        ternary.from_buffer(bad, verify=True)
    bad[:] = buf
    bad[0] ^= 1
    with pytest.raises(ValueError, match=r"^buffer: not a cpukern prepared-weight buffer"):
        ternary.from_buffer(bad)


def test_prepared_buffer_fuzz_raises_or_returns():
    """Random flips in header and payload, and payloads of one byte value: import and gemv
    (fp32, int8, batch 1 and 4) raise ValueError or return (the C++ test runs the same under
    ASan)."""
    rng = np.random.default_rng(8)
    for variant in [v["name"] for v in cpukern.kernels("ternary_gemv") if v["supported"]]:
        for m, k, g, packed, scale in list(_prepared_cases())[1:4]:
            clean = ternary.to_bytes(ternary.prepare(packed, k, scale, group_size=g, variant=variant), int8=True)
            outcomes = set()
            for trial in range(60):
                b = ternary.aligned_empty(clean.size)
                b[:] = clean
                if trial < 6:
                    b[448:] = (0, 0xFF, 0x55, 0xAA, 0x0F, 0xF0)[trial]
                else:
                    at = rng.integers(0, 448 if trial % 2 else b.size, size=rng.integers(1, 5))
                    b[at] ^= (1 << rng.integers(0, 8, size=at.size)).astype(np.uint8)
                try:
                    v = ternary.from_buffer(b)
                    if v.shape[0] * v.shape[1] == 0 and max(v.shape) > 10**6:
                        outcomes.add("ran")
                        continue
                    x = rng.standard_normal((4, v.shape[1])).astype(np.float32)
                    for act in ("fp32", "int8"):
                        ternary.gemv(v, x, act=act)
                        ternary.gemv(v, x[0], act=act)
                    outcomes.add("ran")
                except ValueError:
                    outcomes.add("raised")
            assert outcomes == {"ran", "raised"}, outcomes


def test_prepared_weights_pickle_and_copy():
    import copy
    import pickle
    _, k, g, packed, scale = list(_prepared_cases())[3]
    w = ternary.prepare(packed, k, scale, group_size=g)
    x = np.ones((2, k), np.float32)
    for clone in (pickle.loads(pickle.dumps(w)), copy.deepcopy(w)):
        assert clone.is_view and clone.shape == w.shape
        np.testing.assert_array_equal(ternary.gemv(clone, x), ternary.gemv(w, x))


# --- int8 activations at the edges: the longest exact rows, tiny activations --------------

def test_int8_refuses_k_above_the_exact_int32_bound():
    """|acc| = |sum_k w q| <= 127 * K must fit int32: K <= (2**31 - 1) // 127 = 16909320. At the
    bound every variant is exact (all +1 or all -1 weights, x all +-1); one past it is refused."""
    kmax = (2**31 - 1) // 127
    x = np.ones(kmax, np.float32)
    for variant in supported("ternary_gemv"):
        for k in (kmax + 1, 17_000_000):
            tw = ternary.prepare(np.zeros((1, (k + 15) // 16), np.uint32), k, variant=variant)
            with pytest.raises(ValueError, match=f"act: int8 mode needs K <= {kmax}.*got K = {k}"):
                ternary.gemv(tw, np.ones(k, np.float32), act="int8")
        if UNDER_QEMU and variant != supported("ternary_gemv")[0]:
            continue  # one variant is enough under emulation (each takes seconds there)
        w = np.ones((2, kmax), np.int8)
        w[1] = -1
        tw = ternary.prepare(ternary.pack(w), kmax, variant=variant)
        dq = np.float32(1) / np.float32(127)
        for sign in (1, -1):
            y = ternary.gemv(tw, sign * x, act="int8")
            want = np.float32(sign * 127 * kmax) * dq * np.array([1, -1], np.float32)
            np.testing.assert_array_equal(y, want, err_msg=variant)



@pytest.mark.parametrize("amax", [0.0, 1e-45, 3e-42, 1e-38, 3.0e-37, 3.8e-37, 1e-36, 2.0**-100])
def test_int8_tiny_activations_hold_the_documented_bound(amax):
    rng = np.random.default_rng(4)
    m, k = 24, 300
    w = rng.integers(-1, 2, (m, k)).astype(np.int8)
    packed = ternary.pack(w)
    s = rng.uniform(0.5, 2, m).astype(np.float32)
    x = np.zeros((3, k), np.float32)
    x[1] = np.float32(amax) * rng.uniform(-1, 1, k).astype(np.float32)
    x[1, 7] = np.float32(amax)
    x[2, 3] = -np.float32(amax)
    exact = (w.astype(np.float64) @ x.astype(np.float64).T).T * s
    xmax = np.abs(x.astype(np.float64)).max(axis=1, keepdims=True)
    bound = np.abs(s) * xmax / 254 * np.abs(w).sum(axis=1) + 1e-5 * (np.abs(w) @ np.abs(x.T).astype(np.float64)).T * s
    bound += 2.0**-149  # a subnormal result is rounded to the subnormal spacing
    for variant in supported("ternary_gemv"):
        y = ternary.gemv(ternary.prepare(packed, k, s, variant=variant), x, act="int8")
        assert (y[0] == 0).all() and not np.signbit(y[0]).any(), (variant, y[0])
        assert (np.abs(y.astype(np.float64) - exact) <= bound).all(), (variant, amax)


@pytest.mark.parametrize("act", ["int8_bitnet", "int8", "fp32"])
def test_gemv_multi_is_each_gemv_bitwise(act):
    """One call for the matrices of a layer that share x (q, k, v): each result bitwise its own
    gemv's, for a vector and a batch, with new outputs and with out=."""
    rng = np.random.default_rng(3)
    k = 200
    ws = [ternary.prepare(ternary.pack(rng.integers(-1, 2, size=(m, k)).astype(np.int8)), k,
                          scale=rng.random(m).astype(np.float32) + 0.5)
          for m in (40, 8, 8)]
    for x in (rng.standard_normal(k).astype(np.float32),
              rng.standard_normal((3, k)).astype(np.float32)):
        want = [ternary.gemv(w, x, act=act) for w in ws]
        got = ternary.gemv_multi(ws, x, act=act)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
        outs = [np.full_like(w, np.nan) for w in want]
        assert ternary.gemv_multi(ws, x, act=act, threads=2, out=outs) == outs
        assert all(np.array_equal(o, w) for o, w in zip(outs, want))


def test_gemv_multi_refuses_bad_arguments_by_name():
    rng = np.random.default_rng(4)
    w = ternary.prepare(ternary.pack(rng.integers(-1, 2, size=(8, 32)).astype(np.int8)), 32)
    other = ternary.prepare(ternary.pack(rng.integers(-1, 2, size=(8, 48)).astype(np.int8)), 48)
    x = np.ones(32, np.float32)
    with pytest.raises(TypeError, match="weights"):
        ternary.gemv_multi([], x)
    with pytest.raises(TypeError, match="weights"):
        ternary.gemv_multi([w, "q"], x)
    with pytest.raises(ValueError, match="x"):
        ternary.gemv_multi([w, other], x)
    with pytest.raises(ValueError, match="out"):
        ternary.gemv_multi([w, w], x, out=[np.empty(8, np.float32)])
    y = np.full(8, np.nan, np.float32)
    with pytest.raises(ValueError, match="out"):
        ternary.gemv_multi([w, w], x, out=[y, y])
    assert np.isnan(y).all()
    with pytest.raises(ValueError, match="act"):
        ternary.gemv_multi([w], x, act="int4")
