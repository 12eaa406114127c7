"""Fairy2i widely-linear layer: quantiser on hand-made cases, every variant vs the dense oracle."""

import numpy as np
import pytest

import cpukern
from cpukern import ternary, widely_linear
from variants import UNDER_QEMU, variant_params

RNG = np.random.default_rng(99)


def test_phase_quantize_2x2_by_hand():
    # n = m = 1: a = [[A11, A12], [A21, A22]].
    a = np.array([[3.0, 1.0], [1.0, 1.0]], np.float32)
    # U = ((3+1)/2, (1-1)/2) = 2 + 0i -> +1, s_Ure = 2; W = ((3-1)/2, (1+1)/2) = 1 + 1i.
    planes, scales = widely_linear.quantize(a, stages=1)
    assert planes.shape == (1, 4, 1, 1) and scales.shape == (1, 4)
    u_re, u_im, w_re, w_im = (ternary.unpack(planes[0, i], 1)[0, 0] for i in range(4))
    assert (u_re, u_im) == (1, 0)
    assert scales[0, 0] == pytest.approx(2.0)
    assert scales[0, 1] == 0.0
    # W = 1 + 1i is a tie between the axes; whichever is chosen gets scale 1.
    assert abs(w_re) + abs(w_im) == 1
    assert (scales[0, 2] if w_re else scales[0, 3]) == pytest.approx(1.0)


def test_phase_quantize_4x4_exact_representable():
    # A layer built from {+-1, +-i} codes with per-axis scales is reproduced exactly in 1 stage.
    n = m = 2
    u = np.array([[1, 1j], [-1j, -1]])
    w = np.array([[-1, 1j], [1, -1j]])
    su_re, su_im, sw_re, sw_im = 0.5, 0.25, 2.0, 1.0
    U = np.where(np.isreal(u), su_re * u.real, 0) + 1j * np.where(np.iscomplex(u), su_im * u.imag, 0)
    W = np.where(np.isreal(w), sw_re * w.real, 0) + 1j * np.where(np.iscomplex(w), sw_im * w.imag, 0)
    a11, a22 = U.real + W.real, U.real - W.real
    a21, a12 = U.imag + W.imag, W.imag - U.imag
    a = np.block([[a11, a12], [a21, a22]]).astype(np.float32)
    planes, scales = widely_linear.quantize(a, stages=1)
    np.testing.assert_allclose(scales[0], [su_re, su_im, sw_re, sw_im], rtol=1e-6)
    np.testing.assert_array_equal(ternary.unpack(planes[0, 0], m), u.real.astype(np.int8) * np.isreal(u))
    np.testing.assert_array_equal(ternary.unpack(planes[0, 1], m), (u.imag * np.iscomplex(u)).astype(np.int8))
    np.testing.assert_allclose(widely_linear.dense(planes, scales, m), a, rtol=1e-6)
    # A second stage has nothing left to quantise.
    planes2, scales2 = widely_linear.quantize(a, stages=2)
    np.testing.assert_allclose(widely_linear.dense(planes2, scales2, m), a, rtol=1e-6, atol=1e-7)


def test_more_stages_reduce_the_error():
    a = RNG.standard_normal((64, 96)).astype(np.float32)
    errs = []
    for s in (1, 2, 3):
        p, sc = widely_linear.quantize(a, s)
        errs.append(np.linalg.norm(widely_linear.dense(p, sc, 48) - a))
    assert errs[0] > errs[1] > errs[2]


def term_magnitude(planes, scales, x, m):
    """sum over every term of |s * plane * x|: the scale of fp32 rounding error."""
    xr, xi = np.abs(x[:, :m]).astype(np.float64), np.abs(x[:, m:]).astype(np.float64)
    n = planes.shape[2]
    mag_re = np.zeros((x.shape[0], n))
    mag_im = np.zeros((x.shape[0], n))
    for st in range(planes.shape[0]):
        p = [np.abs(ternary.unpack(planes[st, i], m)).astype(np.float64) for i in range(4)]
        s = [np.abs(np.broadcast_to(scales[st, i], (n,)))[:, None] for i in range(4)]
        real_axis = s[0] * p[0] + s[2] * p[2]  # U_re, W_re
        imag_axis = s[1] * p[1] + s[3] * p[3]  # U_im, W_im
        mag_re += xr @ real_axis.T + xi @ imag_axis.T
        mag_im += xr @ imag_axis.T + xi @ real_axis.T
    return np.concatenate([mag_re, mag_im], axis=1)


SHAPES = [(1, 1, 1, 1), (3, 17, 2, 5), (8, 33, 3, 16), (5, 1, 1, 2)]
if not UNDER_QEMU:
    SHAPES.append((64, 200, 2, 4))


@pytest.mark.parametrize("variant", variant_params("widely_linear"))
@pytest.mark.parametrize("n,m,stages,b", SHAPES)
@pytest.mark.parametrize("per_row", [False, True])
def test_widely_linear_matches_dense(variant, n, m, stages, b, per_row):
    a = RNG.standard_normal((2 * n, 2 * m)).astype(np.float32)
    planes, scales = widely_linear.quantize(a, stages)
    if per_row:
        scales = (scales[:, :, None] * RNG.uniform(0.5, 1.5, (stages, 4, n))).astype(np.float32)
    dense = widely_linear.dense(planes, scales, m).astype(np.float64)
    x = RNG.standard_normal((b, 2 * m)).astype(np.float32)
    want = x.astype(np.float64) @ dense.T
    mag = term_magnitude(planes, scales, x, m)
    layer = widely_linear.prepare(planes, scales, m, variant=variant)
    assert layer.variant == variant and layer.shape == (2 * n, 2 * m)
    y = widely_linear.apply(layer, x)
    y_unfused = widely_linear.apply(layer, x, fused=False)
    assert y.shape == (b, 2 * n)
    assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30)
    assert np.all(np.abs(y_unfused - want) <= 1e-5 * mag + 1e-30)
    np.testing.assert_array_equal(widely_linear.apply(planes, x[0], scales, variant=variant), y[0])
    for t in (2, 3):
        np.testing.assert_array_equal(widely_linear.apply(layer, x, threads=t), y)


def test_single_stage_planes_without_stage_axis():
    a = RNG.standard_normal((6, 10)).astype(np.float32)
    planes, scales = widely_linear.quantize(a, 1)
    x = RNG.standard_normal(10).astype(np.float32)
    np.testing.assert_array_equal(widely_linear.apply(planes[0], x, scales[0]),
                                  widely_linear.apply(planes, x, scales))


def test_widely_linear_bad_input():
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    planes, scales = widely_linear.quantize(a, 2)
    with pytest.raises(ValueError, match="a: expected a \\(2n, 2m\\)"):
        widely_linear.quantize(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="stages"):
        widely_linear.quantize(a, 0)
    with pytest.raises(ValueError, match="scales"):
        widely_linear.apply(planes, np.ones(6, np.float32), scales[:1])
    with pytest.raises(ValueError, match="x"):
        widely_linear.apply(widely_linear.prepare(planes, scales, 3), np.ones(8, np.float32))


# --- serialised prepared layers (to_bytes / from_buffer) ------------------------------------

@pytest.mark.parametrize("variant", variant_params("widely_linear"))
def test_prepared_layer_round_trip_is_a_view_with_identical_results(variant):
    import pickle
    rng = np.random.default_rng(11)
    for n, m in [(1, 1), (20, 33), (130, 300)]:
        planes, scales = widely_linear.quantize(rng.standard_normal((2 * n, 2 * m)).astype(np.float32))
        layer = widely_linear.prepare(planes, scales, m, variant=variant)
        buf = ternary.to_bytes(layer)
        assert buf.dtype == np.uint8 and buf.ctypes.data % 64 == 0
        v = ternary.from_buffer(buf, verify=True)
        assert v.is_view and v.variant == layer.variant and v.shape == layer.shape and v.stages == layer.stages
        for batch in (1, 3):
            x = rng.standard_normal((batch, 2 * m)).astype(np.float32)
            want = widely_linear.apply(layer, x)
            np.testing.assert_array_equal(widely_linear.apply(v, x), want)
            np.testing.assert_array_equal(widely_linear.apply(pickle.loads(pickle.dumps(layer)), x), want)


def test_prepared_layer_of_another_variant():
    """The public layout (reference) is prepared again for any variant; a lookup layout made
    for a variant other than the one asked for cannot be unpacked: ValueError naming buffer."""
    rng = np.random.default_rng(12)
    n, m = 24, 40
    planes, scales = widely_linear.quantize(rng.standard_normal((2 * n, 2 * m)).astype(np.float32))
    x = rng.standard_normal((2, 2 * m)).astype(np.float32)
    names = [v["name"] for v in cpukern.kernels("widely_linear") if v["supported"]]
    ref = ternary.to_bytes(widely_linear.prepare(planes, scales, m, variant="reference"))
    for dst in names:
        v = ternary.from_buffer(ref, variant=dst)
        direct = widely_linear.prepare(planes, scales, m, variant=dst)
        assert v.variant == dst
        np.testing.assert_array_equal(widely_linear.apply(v, x), widely_linear.apply(direct, x))
    for src in names:
        layer = widely_linear.prepare(planes, scales, m, variant=src)
        buf = ternary.to_bytes(layer)
        for dst in names:
            if dst == src:
                continue
            try:
                v = ternary.from_buffer(buf, variant=dst)
            except ValueError as e:
                assert str(e).startswith("buffer: ") and "cannot be unpacked" in str(e)
                assert src != "reference"  # the public layout always can
            else:
                np.testing.assert_array_equal(widely_linear.apply(v, x),
                                              widely_linear.apply(widely_linear.prepare(
                                                  planes, scales, m, variant=dst), x))


def test_prepared_layer_fuzz_raises_or_returns():
    rng = np.random.default_rng(13)
    planes, scales = widely_linear.quantize(rng.standard_normal((2 * 70, 2 * 100)).astype(np.float32))
    for variant in [v["name"] for v in cpukern.kernels("widely_linear") if v["supported"]]:
        clean = ternary.to_bytes(widely_linear.prepare(planes, scales, 100, variant=variant))
        outcomes = set()
        for trial in range(60):
            b = ternary.aligned_empty(clean.size)
            b[:] = clean
            if trial < 4:
                b[448:] = (0xFF, 0, 0x55, 0xAA)[trial]  # 0xFF: both pattern bits of every column
            else:
                at = rng.integers(0, 448 if trial % 2 else b.size, size=rng.integers(1, 5))
                b[at] ^= (1 << rng.integers(0, 8, size=at.size)).astype(np.uint8)
            try:
                v = ternary.from_buffer(b)
                if v.shape[0] * v.shape[1] > 1 << 22:
                    outcomes.add("ran")
                    continue
                for batch in (1, 4):
                    x = rng.standard_normal((batch, v.shape[1])).astype(np.float32)
                    widely_linear.apply(v, x)
                    widely_linear.apply(v, x, fused=False)
                outcomes.add("ran")
            except ValueError:
                outcomes.add("raised")
        assert outcomes == {"ran", "raised"}, outcomes

