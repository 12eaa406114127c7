"""The widely_linear contract (cpukern.widely_linear: quantize, dense, prepare, apply, and the
WidelyLinear module): the shapes it accepts, its bad input (each case names the argument), and its
guarantees (the dense model's bound, NaN / Inf, batch, thread and fused-or-not invariance, out=
overlap refusal). Numerics per variant: test_widely_linear.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cpukern
from bad_input_table import case_ids, check_bad_input, non_contiguous
from contract import (SEEDS, THREADS, array_kinds, bitwise, budget, masked, needs_torch,
                      same_nonfinite, torch, unpack_f64)
from cpukern import ternary, widely_linear
from variants import supported


# --- shapes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,T", array_kinds())
def test_every_function_accepts_empty_batches(kind, T):
    rng = np.random.default_rng(5)
    planes, scales = widely_linear.quantize(rng.standard_normal((8, 16)).astype(np.float32))
    for variant in supported("widely_linear"):
        layer = widely_linear.prepare(T(planes), T(scales), 8, variant=variant)
        assert tuple(widely_linear.apply(layer, T(np.zeros((0, 16), np.float32))).shape) == (0, 8)
    assert tuple(widely_linear.apply(T(planes), T(np.zeros((0, 16), np.float32)), T(scales)).shape) == (0, 8)


@needs_torch
def test_module_accepts_empty_batches():
    from cpukern.torch import WidelyLinear

    wl = WidelyLinear.from_linear(torch.nn.Linear(16, 8))
    assert tuple(wl(torch.zeros(0, 16)).shape) == (0, 8)


# --- bad input: (id, exception, argument named, case); see bad_input_table.py ---------------------

BAD_INPUT = [
    # widely_linear.quantize
    ("phase_quantize/dtype", TypeError, "a", lambda c: widely_linear.quantize(c.A.astype(np.float64))),
    ("phase_quantize/ndim", ValueError, "a", lambda c: widely_linear.quantize(c.A[None])),
    ("phase_quantize/odd_rows", ValueError, "a", lambda c: widely_linear.quantize(c.A[:7].copy())),
    ("phase_quantize/odd_cols", ValueError, "a", lambda c: widely_linear.quantize(c.A[:, :63].copy())),
    ("phase_quantize/empty", ValueError, "a", lambda c: widely_linear.quantize(np.ones((0, 4), np.float32))),
    ("phase_quantize/stages_0", ValueError, "stages", lambda c: widely_linear.quantize(c.A, 0)),
    ("phase_quantize/stages_type", TypeError, "stages", lambda c: widely_linear.quantize(c.A, 2.0)),
    ("phase_quantize/stages_huge", ValueError, "stages", lambda c: widely_linear.quantize(c.A[:2, :2].copy(), 2**45)),
    ("phase_quantize/stages_past_int64", ValueError, "stages", lambda c: widely_linear.quantize(c.A, 2**70)),
    ("phase_quantize/inf", ValueError, "a", lambda c: widely_linear.quantize(np.full((2, 2), np.inf, np.float32))),
    ("phase_quantize/non_contiguous", TypeError, "a", lambda c: widely_linear.quantize(c.A[:, ::2])),

    # widely_linear.dense / prepare
    ("widely_linear_dense/planes_dtype", TypeError, "planes", lambda c: widely_linear.dense(c.PL.astype(np.int32), c.SC, 32)),
    ("widely_linear_dense/planes_ndim", ValueError, "planes", lambda c: widely_linear.dense(c.PL[0, 0], c.SC, 32)),
    ("widely_linear_dense/planes_not_4", ValueError, "planes", lambda c: widely_linear.dense(c.PL[:, :3].copy(), c.SC[:, :3].copy(), 32)),
    ("widely_linear_dense/words_vs_m", ValueError, "planes", lambda c: widely_linear.dense(c.PL, c.SC, 100)),
    ("widely_linear_dense/m_huge", ValueError, "m", lambda c: widely_linear.dense(c.PL, c.SC, 2**63 - 1)),
    ("widely_linear_dense/m_type", TypeError, "m", lambda c: widely_linear.dense(c.PL, c.SC, "32")),
    ("widely_linear_dense/scales_shape", ValueError, "scales", lambda c: widely_linear.dense(c.PL, c.SC[:1].copy(), 32)),
    ("widely_linear_dense/scales_dtype", TypeError, "scales", lambda c: widely_linear.dense(c.PL, c.SC.astype(np.float64), 32)),
    ("widely_linear_dense/scales_nan", ValueError, "scales", lambda c: widely_linear.dense(c.PL, np.full_like(c.SC, np.nan), 32)),
    ("widely_linear_dense/code_11", ValueError, "planes", lambda c: widely_linear.dense(c.PL | np.uint32(3), c.SC, 32)),
    ("prepare_widely_linear/m_huge", ValueError, "m", lambda c: widely_linear.prepare(c.PL, c.SC, 2**63 - 1)),
    ("prepare_widely_linear/m_zero", ValueError, "m", lambda c: widely_linear.prepare(c.PL, c.SC, 0)),
    ("prepare_widely_linear/words_vs_m", ValueError, "planes", lambda c: widely_linear.prepare(c.PL, c.SC, 8)),
    ("prepare_widely_linear/code_11", ValueError, "planes", lambda c: widely_linear.prepare(c.PL | np.uint32(3 << 4), c.SC, 32)),
    ("prepare_widely_linear/code_past_m", ValueError, "planes", lambda c: widely_linear.prepare(c.PL, c.SC, 31)),
    ("prepare_widely_linear/scales_per_row_shape", ValueError, "scales",
     lambda c: widely_linear.prepare(c.PL, np.ones((2, 4, 3), np.float32), 32)),
    ("prepare_widely_linear/scales_inf", ValueError, "scales", lambda c: widely_linear.prepare(c.PL, np.full_like(c.SC, np.inf), 32)),
    ("prepare_widely_linear/variant_unknown", ValueError, "variant", lambda c: widely_linear.prepare(c.PL, c.SC, 32, variant="sve2")),
    ("prepare_widely_linear/non_contiguous", TypeError, "planes", lambda c: widely_linear.prepare(non_contiguous(c.PL), c.SC, 32)),

    # widely_linear.apply
    ("widely_linear/x_dtype", TypeError, "x", lambda c: widely_linear.apply(c.L, c.XW.astype(np.float64))),
    ("widely_linear/x_ndim", ValueError, "x", lambda c: widely_linear.apply(c.L, np.array(1, np.float32))),
    ("widely_linear/x_cols", ValueError, "x", lambda c: widely_linear.apply(c.L, c.XW[:62].copy())),
    ("widely_linear/x_odd_cols", ValueError, "x", lambda c: widely_linear.apply(c.PL, c.XW[:63].copy(), c.SC)),
    ("widely_linear/scales_missing", ValueError, "scales", lambda c: widely_linear.apply(c.PL, c.XW)),
    ("widely_linear/scales_with_layer", ValueError, "scales", lambda c: widely_linear.apply(c.L, c.XW, c.SC)),
    ("widely_linear/planes_type", TypeError, "planes", lambda c: widely_linear.apply("layer", c.XW)),
    ("widely_linear/fused_type", TypeError, "fused", lambda c: widely_linear.apply(c.L, c.XW, fused=np.ones(2))),
    ("widely_linear/threads_past_max", ValueError, "threads", lambda c: widely_linear.apply(c.L, c.XW, threads=cpukern.MAX_THREADS + 1)),
    ("widely_linear/threads_huge", ValueError, "threads", lambda c: widely_linear.apply(c.L, c.XW, threads=2**40)),
    ("widely_linear/variant_mismatch", ValueError, "variant", lambda c: widely_linear.apply(c.L, c.XW, variant="avx9000")),
    ("widely_linear/out_shape", ValueError, "out", lambda c: widely_linear.apply(c.L, c.XW, out=c.watch(np.empty(9, np.float32)))),
    ("widely_linear/out_dtype", TypeError, "out", lambda c: widely_linear.apply(c.L, c.XW, out=c.watch(np.empty(8, np.int32)))),
    ("widely_linear/out_overlaps_x", ValueError, "out", lambda c: widely_linear.apply(c.L, c.XW, out=c.XW[:8])),
    ("widely_linear/out_in_prepared_buffer", ValueError, "out",
     lambda c: c.in_view(c.L, ternary.from_buffer,
                         lambda w, buf: widely_linear.apply(w, c.XW, out=c.tail(buf, np.float32, (8,))))),
    ("widely_linear/to_bytes_out_is_the_viewed_buffer", ValueError, "out",
     lambda c: c.in_view(c.L, ternary.from_buffer, lambda w, buf: ternary.to_bytes(w, out=buf))),
]


@pytest.mark.parametrize("case_id", case_ids(BAD_INPUT))
def test_bad_input(case_id):
    check_bad_input(__name__, case_id)


@needs_torch
def test_module_constructor_checks_its_arguments():
    from cpukern.torch import WidelyLinear

    with pytest.raises(ValueError, match="stages"):
        WidelyLinear(16, 4, stages=0)


# --- guarantees: the dense model, NaN / Inf, batch, thread and fused-or-not invariance ------------

@st.composite
def wl_case(draw):
    n = draw(st.integers(1, 40))
    m = draw(st.integers(1, 90))
    stages = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(SEEDS))
    a = rng.standard_normal((2 * n, 2 * m)).astype(np.float32)
    batch = draw(st.sampled_from([None, 1, 2, 5]))
    x = rng.standard_normal((2 * m,) if batch is None else (batch, 2 * m)).astype(np.float32)
    per_row = draw(st.booleans())
    return a, stages, x, per_row, draw(THREADS), rng


def wl_model(planes, scales, m, x):
    """float64 y = U x + W conj(x) from the 8 masked sub-GEMVs per stage (so that NaN / Inf follow
    the kernels' add/subtract semantics: a zero code never touches its activation)."""
    s_count, _, n, _ = planes.shape
    x2 = np.asarray(x, np.float64).reshape(-1, 2 * m)
    xr, xi = x2[:, :m], x2[:, m:]
    sc = np.asarray(scales, np.float64)
    sc = np.broadcast_to(sc[..., None], (s_count, 4, n)) if sc.ndim == 2 else sc
    y = np.zeros((x2.shape[0], 2 * n))
    with np.errstate(invalid="ignore", over="ignore"):
        for s in range(s_count):
            c = [unpack_f64(planes[s, p], m) for p in range(4)]  # U_re, U_im, W_re, W_im
            d = lambda p, v: masked(c[p], v) * sc[s, p]  # noqa: E731
            y[:, :n] += d(0, xr) - d(1, xi) + d(2, xr) + d(3, xi)
            y[:, n:] += d(0, xi) + d(1, xr) - d(2, xi) + d(3, xr)
    return y


@budget(100)
@given(wl_case())
def test_widely_linear_matches_dense_and_is_deterministic(case):
    a, stages, x, per_row, threads, rng = case
    n, m = a.shape[0] // 2, a.shape[1] // 2
    planes, scales = widely_linear.quantize(a, stages)
    if per_row:
        scales = (scales[:, :, None] * rng.uniform(0.5, 1.5, (stages, 4, n))).astype(np.float32)
    dense = widely_linear.dense(planes, scales, m).astype(np.float64)
    x2 = x.reshape(-1, 2 * m).astype(np.float64)
    want = x2 @ dense.T
    bound = 1e-5 * (np.abs(x2) @ np.abs(dense.T)) * (4 * stages) + 1e-30
    ref = None
    for variant in supported("widely_linear"):
        layer = widely_linear.prepare(planes, scales, m, variant=variant)
        y = widely_linear.apply(layer, x, threads=threads)
        assert (np.abs(y.reshape(-1, 2 * n) - want) <= bound).all(), variant
        bitwise(y, widely_linear.apply(layer, x, threads=1))
        bitwise(y, widely_linear.apply(layer, x, fused=False, threads=threads))
        if x.ndim == 2:
            bitwise(y[0], widely_linear.apply(layer, x[0].copy()))
        if variant == "reference":
            ref = y
    assert ref is not None


@budget(60)
@given(wl_case(), st.data())
def test_widely_linear_nan_inf_propagate(case, data):
    a, stages, x, _, threads, _ = case
    m = a.shape[1] // 2
    x = x.copy()
    flat = x.reshape(-1)
    for v in data.draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf]), min_size=1, max_size=2)):
        flat[data.draw(st.integers(0, flat.size - 1))] = v
    planes, scales = widely_linear.quantize(a, stages)
    want = wl_model(planes, scales, m, x)
    for variant in supported("widely_linear"):
        layer = widely_linear.prepare(planes, scales, m, variant=variant)
        for fused in (True, False):
            y = widely_linear.apply(layer, x, fused=fused, threads=threads)
            same_nonfinite(y.reshape(want.shape), want)
