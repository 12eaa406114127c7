"""The ternary_gemv contract (cpukern.ternary: pack, unpack, quantize, prepare, gemv, and the
TernaryLinear module): the shapes it accepts, its bad input (each case names the argument), and
its guarantees (the float64 model's bound, bitwise int8, NaN / Inf, batch and thread invariance,
out= overlap refusal, memory the caller owns). Numerics per variant: test_ternary.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cpukern
from bad_input_table import case_ids, check_bad_input, non_contiguous, read_only
from contract import (RNG, SEEDS, THREADS, array_kinds, bitwise, budget, masked, needs_subprocess,
                      needs_torch, run_python, same_nonfinite, torch)
from cpukern import ternary
from variants import supported


# --- shapes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,T", array_kinds())
def test_every_function_accepts_empty_batches(kind, T):
    rng = np.random.default_rng(5)
    w = rng.integers(-1, 2, (8, 32)).astype(np.int8)
    packed = ternary.pack(w)
    for variant in supported("ternary_gemv"):
        tw = ternary.prepare(T(packed), 32, variant=variant)
        for act in ("fp32", "int8"):
            y = ternary.gemv(tw, T(np.zeros((0, 32), np.float32)), act=act)
            assert tuple(y.shape) == (0, 8)
            y = ternary.gemv(tw, T(np.zeros((0, 32), np.float32)), act=act,
                             out=T(np.zeros((0, 8), np.float32)))
            assert tuple(y.shape) == (0, 8)
        # M = 0 and K = 0 weights
        y = ternary.gemv(ternary.prepare(T(np.zeros((0, 2), np.uint32)), 32, variant=variant),
                         T(np.ones((3, 32), np.float32)))
        assert tuple(y.shape) == (3, 0)
        y = ternary.gemv(ternary.prepare(T(np.zeros((4, 0), np.uint32)), 0, variant=variant),
                         T(np.ones((3, 0), np.float32)), act="int8")
        np.testing.assert_array_equal(np.asarray(y), np.zeros((3, 4), np.float32))
    assert tuple(ternary.pack(T(np.zeros((0, 32), np.int8))).shape) == (0, 2)
    assert tuple(ternary.pack(T(np.zeros((4, 0), np.int8))).shape) == (4, 0)
    assert tuple(ternary.unpack(T(np.zeros((0, 2), np.uint32)), 32).shape) == (0, 32)
    assert tuple(ternary.unpack(T(np.zeros((4, 0), np.uint32)), 0).shape) == (4, 0)
    p, s = ternary.quantize(T(np.zeros((0, 32), np.float32)))
    assert tuple(p.shape) == (0, 2) and tuple(s.shape) == (0,)


@needs_torch
def test_module_accepts_empty_batches():
    from cpukern.torch import TernaryLinear

    lin = TernaryLinear.from_linear(torch.nn.Linear(32, 8))
    assert tuple(lin(torch.zeros(0, 32)).shape) == (0, 8)


# --- bad input: (id, exception, argument named, case); see bad_input_table.py ---------------------

BAD_INPUT = [
    # ternary.pack
    ("pack/dtype_float", TypeError, "w", lambda c: ternary.pack(c.W.astype(np.float32))),
    ("pack/dtype_bool", TypeError, "w", lambda c: ternary.pack(c.W != 0)),
    ("pack/non_contiguous", TypeError, "w", lambda c: ternary.pack(non_contiguous(c.W))),
    ("pack/non_contiguous_int32", TypeError, "w", lambda c: ternary.pack(non_contiguous(c.W.astype(np.int32)))),
    ("pack/ndim", ValueError, "w", lambda c: ternary.pack(c.W[None])),
    ("pack/value_2", ValueError, "w", lambda c: ternary.pack(np.full((2, 3), 2, np.int8))),
    ("pack/value_int32", ValueError, "w", lambda c: ternary.pack(np.full((2, 3), -7, np.int32))),
    ("pack/list", TypeError, "w", lambda c: ternary.pack([[1, 0, -1]])),

    # ternary.unpack
    ("unpack/dtype", TypeError, "packed", lambda c: ternary.unpack(c.P.astype(np.int32), 40)),
    ("unpack/ndim", ValueError, "packed", lambda c: ternary.unpack(c.P[0], 40)),
    ("unpack/words_vs_k", ValueError, "packed", lambda c: ternary.unpack(c.P, 60)),
    ("unpack/code_11", ValueError, "packed", lambda c: ternary.unpack(c.P | np.uint32(3), 40)),
    ("unpack/k_negative", ValueError, "k", lambda c: ternary.unpack(c.P, -1)),
    ("unpack/k_float", TypeError, "k", lambda c: ternary.unpack(c.P, 40.0)),
    ("unpack/k_str", TypeError, "k", lambda c: ternary.unpack(c.P, "40")),
    ("unpack/k_huge", ValueError, "k", lambda c: ternary.unpack(np.zeros((0, 1), np.uint32), 2**63 - 1)),
    ("unpack/k_past_int64", ValueError, "k", lambda c: ternary.unpack(c.P, 2**64)),
    ("unpack/non_contiguous", TypeError, "packed", lambda c: ternary.unpack(non_contiguous(c.P), 40)),

    # ternary.quantize
    ("quantize/dtype", TypeError, "w", lambda c: ternary.quantize(c.A.astype(np.float64))),
    ("quantize/ndim", ValueError, "w", lambda c: ternary.quantize(c.A[0])),
    ("quantize/no_columns", ValueError, "w", lambda c: ternary.quantize(np.ones((3, 0), np.float32))),
    ("quantize/granularity", ValueError, "granularity", lambda c: ternary.quantize(c.A, "col")),
    ("quantize/granularity_type", TypeError, "granularity", lambda c: ternary.quantize(c.A, np.array([1, 2]))),
    ("quantize/nan_weights", ValueError, "w", lambda c: ternary.quantize(np.full((2, 3), np.nan, np.float32))),
    ("quantize/non_contiguous", TypeError, "w", lambda c: ternary.quantize(c.A[:, ::2])),

    # ternary.prepare
    ("prepare/dtype", TypeError, "packed", lambda c: ternary.prepare(c.P.astype(np.int64), 40)),
    ("prepare/ndim", ValueError, "packed", lambda c: ternary.prepare(c.P.reshape(-1), 40)),
    ("prepare/words_vs_k", ValueError, "packed", lambda c: ternary.prepare(c.P, 16)),
    ("prepare/code_11", ValueError, "packed", lambda c: ternary.prepare(c.P | np.uint32(0xC), 40)),
    ("prepare/code_past_k", ValueError, "packed", lambda c: ternary.prepare(c.P | np.uint32(1 << 30), 40)),
    ("prepare/k_negative", ValueError, "k", lambda c: ternary.prepare(c.P, -5)),
    ("prepare/k_huge", ValueError, "k", lambda c: ternary.prepare(np.zeros((0, 1), np.uint32), 2**63 - 1)),
    ("prepare/k_huge_m0", ValueError, "k", lambda c: ternary.prepare(np.zeros((0, 2**58), np.uint32), 2**62)),
    ("prepare/k_type", TypeError, "k", lambda c: ternary.prepare(c.P, None)),
    ("prepare/scale_shape", ValueError, "scale", lambda c: ternary.prepare(c.P, 40, np.ones(3, np.float32))),
    ("prepare/scale_dtype", TypeError, "scale", lambda c: ternary.prepare(c.P, 40, np.ones(4, np.float64))),
    ("prepare/scale_type", TypeError, "scale", lambda c: ternary.prepare(c.P, 40, "1.0")),
    ("prepare/variant_unknown", ValueError, "variant", lambda c: ternary.prepare(c.P, 40, variant="avx9000")),
    ("prepare/variant_type", TypeError, "variant", lambda c: ternary.prepare(c.P, 40, variant=2)),
    ("prepare/variant_empty", ValueError, "variant", lambda c: ternary.prepare(c.P, 40, variant="")),
    ("prepare/zero_stride_huge", TypeError, "packed",
     lambda c: ternary.prepare(np.lib.stride_tricks.as_strided(c.P, (1 << 40, 3), (0, 4)), 40)),

    # ternary.gemv
    ("gemv/x_dtype", TypeError, "x", lambda c: ternary.gemv(c.TW, c.X.astype(np.float64))),
    ("gemv/x_float16", TypeError, "x", lambda c: ternary.gemv(c.TW, c.X.astype(np.float16))),
    ("gemv/x_object", TypeError, "x", lambda c: ternary.gemv(c.TW, c.X.astype(object))),
    ("gemv/x_big_endian", TypeError, "x", lambda c: ternary.gemv(c.TW, c.X.astype(">f4"))),
    ("gemv/x_non_contiguous", TypeError, "x", lambda c: ternary.gemv(c.TW, non_contiguous(c.X))),
    ("gemv/x_ndim0", ValueError, "x", lambda c: ternary.gemv(c.TW, np.array(1, np.float32))),
    ("gemv/x_ndim3", ValueError, "x", lambda c: ternary.gemv(c.TW, c.XB[None])),
    ("gemv/x_list", TypeError, "x", lambda c: ternary.gemv(c.TW, list(c.X))),
    ("gemv/x_k", ValueError, "x", lambda c: ternary.gemv(c.TW, c.X[:39].copy())),
    ("gemv/x_k_packed", ValueError, "weights", lambda c: ternary.gemv(c.P, c.X[:30].copy())),
    ("gemv/x_huge_zero_size", ValueError, "x",
     lambda c: ternary.gemv(ternary.prepare(np.zeros((3, 0), np.uint32), 0), np.empty((2**50, 0), np.float32))),
    ("gemv/weights_type", TypeError, "weights", lambda c: ternary.gemv([[1]], c.X)),
    ("gemv/weights_code_11", ValueError, "weights", lambda c: ternary.gemv(c.P | np.uint32(3), c.X)),
    ("gemv/scale_shape", ValueError, "scale", lambda c: ternary.gemv(c.TW, c.X, np.ones(3, np.float32))),
    ("gemv/scale_ndim", ValueError, "scale", lambda c: ternary.gemv(c.TW, c.X, np.ones((4, 1), np.float32))),
    ("gemv/scale_dtype", TypeError, "scale", lambda c: ternary.gemv(c.TW, c.X, np.ones(4, np.float16))),
    # A Python int past float64's range: no float32 scale rounds to it (was OverflowError).
    ("gemv/scale_int_past_float", ValueError, "scale", lambda c: ternary.gemv(c.TW, c.X, scale=10**400)),
    ("gemv/scale_negative_int_past_float", ValueError, "scale", lambda c: ternary.gemv(c.TW, c.X, scale=-10**400)),
    ("prepare/scale_int_past_float", ValueError, "scale", lambda c: ternary.prepare(c.P, 40, 10**400)),
    ("gemv/act", ValueError, "act", lambda c: ternary.gemv(c.TW, c.X, act="int4")),
    ("gemv/act_type", TypeError, "act", lambda c: ternary.gemv(c.TW, c.X, act=8)),
    ("gemv/int8_nan", ValueError, "x", lambda c: ternary.gemv(c.TW, np.full(40, np.nan, np.float32), act="int8",
                                                                out=c.watch(np.empty(4, np.float32)))),
    ("gemv/int8_inf", ValueError, "x", lambda c: ternary.gemv(c.TW, np.full(40, np.inf, np.float32), act="int8")),
    ("gemv/threads_past_max", ValueError, "threads", lambda c: ternary.gemv(c.TW, c.X, threads=cpukern.MAX_THREADS + 1)),
    ("gemv/threads_negative", ValueError, "threads", lambda c: ternary.gemv(c.TW, c.X, threads=-3)),
    ("gemv/threads_huge", ValueError, "threads", lambda c: ternary.gemv(c.TW, c.X, threads=2**40)),
    ("gemv/threads_float", TypeError, "threads", lambda c: ternary.gemv(c.TW, c.X, threads=2.0)),
    ("gemv/variant_mismatch", ValueError, "variant", lambda c: ternary.gemv(c.TW, c.X, variant="reference" if c.TW.variant != "reference" else "avx9000")),
    ("gemv/variant_unknown_packed", ValueError, "variant", lambda c: ternary.gemv(c.P, c.X, variant="avx9000")),
    ("gemv/out_shape", ValueError, "out", lambda c: ternary.gemv(c.TW, c.X, out=c.watch(np.empty(5, np.float32)))),
    ("gemv/out_batch_shape", ValueError, "out", lambda c: ternary.gemv(c.TW, c.XB, out=c.watch(np.empty(4, np.float32)))),
    ("gemv/out_dtype", TypeError, "out", lambda c: ternary.gemv(c.TW, c.X, out=c.watch(np.empty(4, np.float64)))),
    ("gemv/out_read_only", TypeError, "out", lambda c: ternary.gemv(c.TW, c.X, out=read_only(np.empty(4, np.float32)))),
    ("gemv/out_non_contiguous", TypeError, "out", lambda c: ternary.gemv(c.TW, c.XB, out=np.empty((4, 2), np.float32).T)),
    ("gemv/out_overlaps_x", ValueError, "out", lambda c: ternary.gemv(ternary.prepare(c.P[:, :1].copy(), 16), c.X[:16], out=c.X[:4])),
    ("gemv/out_overlaps_scale", ValueError, "out",
     lambda c: (lambda s: ternary.gemv(c.TW, c.X, s, out=s))(np.ones(4, np.float32))),
    # out= inside the buffer that prepared weights view: refused, or it overwrites the weights
    # for every later call too.
    ("gemv/out_in_prepared_buffer", ValueError, "out",
     lambda c: c.in_view(c.TW, ternary.from_buffer,
                         lambda w, buf: ternary.gemv(w, c.X, out=c.tail(buf, np.float32, (4,))))),
    ("gemv/out_on_prepared_header", ValueError, "out",
     lambda c: c.in_view(c.TW, ternary.from_buffer,
                         lambda w, buf: ternary.gemv(w, c.X, out=buf[:16].view(np.float32)))),
    ("to_bytes/out_is_the_viewed_buffer", ValueError, "out",
     lambda c: c.in_view(c.TW, ternary.from_buffer, lambda w, buf: ternary.to_bytes(w, out=buf))),
]


@pytest.mark.parametrize("case_id", case_ids(BAD_INPUT))
def test_bad_input(case_id):
    check_bad_input(__name__, case_id)


@needs_torch
def test_module_constructor_checks_its_arguments():
    from cpukern.torch import TernaryLinear

    with pytest.raises(ValueError, match="in_features: expected an integer in"):
        TernaryLinear(-5, 4)
    with pytest.raises(ValueError, match="out_features"):
        TernaryLinear(16, 0)
    with pytest.raises(TypeError, match="in_features: expected an integer"):
        TernaryLinear(16.5, 4)
    with pytest.raises(ValueError, match="act"):
        TernaryLinear(16, 4, act="int4")
    with pytest.raises(ValueError, match="group_size"):
        TernaryLinear(16, 4, group_size=8)
    assert TernaryLinear(np.int64(16), 4).in_features == 16


NOT_FLOAT = ["int8", "int16", "int32", "bool", "complex64"]


@needs_torch
@pytest.mark.parametrize("dtype", NOT_FLOAT)
@pytest.mark.parametrize("key", ["w.scale", "w.bias"])
def test_from_checkpoint_refuses_non_float_scales_and_biases(key, dtype):
    from cpukern.io import Checkpoint
    from cpukern.torch import TernaryLinear

    w = np.random.default_rng(0).integers(-1, 2, (8, 32)).astype(np.int8)
    tensors = {"w.weight": ternary.pack(w), "w.scale": np.ones(8, np.float32),
               "w.bias": np.zeros(8, np.float32)}
    ckpt = Checkpoint(tensors, {"k.w.weight": "32"})
    TernaryLinear.from_checkpoint(ckpt, "w.weight", bias="w.bias")
    ckpt[key] = np.ones(8, getattr(np, dtype if dtype != "bool" else "bool_"))
    with pytest.raises(TypeError, match=rf"^ckpt\['{key}'\]: expected a floating-point tensor, "
                                        rf"got {dtype} tensor of shape \(8,\)"):
        TernaryLinear.from_checkpoint(ckpt, "w.weight", bias="w.bias")


def test_unpack_refuses_nonzero_codes_past_k_as_prepare_does():
    packed = ternary.pack(RNG.integers(-1, 2, (3, 20)).astype(np.int8))
    packed[1, 1] |= np.uint32(1 << 10)  # code 5 of word 1: column 21 > k = 20
    with pytest.raises(ValueError) as prep:
        ternary.prepare(packed, 20)
    with pytest.raises(ValueError) as unp:
        ternary.unpack(packed, 20)
    assert str(unp.value) == str(prep.value) == \
        "packed: nonzero code past k = 20 for column 21 of row 1 (word [1, 1])"


# --- guarantees: the float64 model, bitwise int8, NaN / Inf, batch and thread invariance ----------

@st.composite
def gemv_case(draw, int_x=False):
    m = draw(st.integers(1, 70))
    k = draw(st.integers(1, 300))
    batch = draw(st.sampled_from([None, 1, 2, 3, 5]))
    rng = np.random.default_rng(draw(SEEDS))
    w = rng.integers(-1, 2, size=(m, k)).astype(np.int8)
    zero_rate = draw(st.sampled_from([0.0, 0.5, 0.95]))
    w[rng.random((m, k)) < zero_rate] = 0
    shape = (k,) if batch is None else (batch, k)
    if int_x:
        x = rng.integers(-8, 9, size=shape).astype(np.float32)
    else:
        x = (rng.standard_normal(shape) * draw(st.sampled_from([1e-3, 1.0, 1e3]))).astype(np.float32)
    scale = draw(st.sampled_from(["none", "scalar", "row"]))
    s = None if scale == "none" else np.float32(0.37) if scale == "scalar" else \
        rng.uniform(-2, 2, m).astype(np.float32)
    return w, x, s, draw(THREADS)


def scale_f64(s, m):
    return np.ones(m) if s is None else np.broadcast_to(np.asarray(s, np.float64), (m,))


@budget(160)
@given(gemv_case())
def test_gemv_fp32_matches_float64_model_and_reference(case):
    w, x, s, threads = case
    m, k = w.shape
    packed = ternary.pack(w)
    x2 = x.reshape(-1, k)
    want = masked(w.astype(np.float64), x2) * scale_f64(s, m)
    bound = 1e-5 * (np.abs(x2).astype(np.float64) @ np.abs(w.T).astype(np.float64)) * np.abs(scale_f64(s, m)) + 1e-30
    ref = ternary.gemv(ternary.prepare(packed, k, variant="reference"), x, s, threads=threads)
    for variant in supported("ternary_gemv"):
        weights = ternary.prepare(packed, k, variant=variant)
        y = ternary.gemv(weights, x, s, threads=threads)
        assert y.shape == ((m,) if x.ndim == 1 else (x.shape[0], m))
        assert (np.abs(y.reshape(-1, m) - want) <= bound).all(), variant
        bitwise(y, ternary.gemv(weights, x, s, threads=1))              # any thread count
        if x.ndim == 2:                                                # any batch split
            bitwise(y[-1], ternary.gemv(weights, x[-1].copy(), s, threads=threads))
    assert ref.dtype == np.float32


@budget(100)
@given(gemv_case(int_x=True))
def test_gemv_fp32_small_integers_bitwise_across_variants(case):
    w, x, _, threads = case
    m, k = w.shape
    packed = ternary.pack(w)
    want = masked(w.astype(np.float64), x.reshape(-1, k)).astype(np.float32).reshape(
        x.shape[:-1] + (m,))
    for variant in supported("ternary_gemv"):
        y = ternary.gemv(ternary.prepare(packed, k, variant=variant), x, threads=threads)
        bitwise(y, want)


def int8_model(w, x, s):
    """The documented int8 path, bit for bit: per row of x, qs = 127 / max|x| (float32),
    q = clamp(rint(x * qs), -127, 127), exact integer dot, dq = float32(max|x| / 127),
    y = float32(double(acc) * dq * s * post) (one rounding: no intermediate overflows); a row
    with max|x| < 2**-100 is quantised as x * 2**64 and post = 2**-64 (else 1)."""
    x2 = x.reshape(-1, x.shape[-1])
    m = w.shape[0]
    out = np.empty((x2.shape[0], m), np.float32)
    for b, xb in enumerate(x2):
        amax = np.float32(np.abs(xb).max()) if xb.size else np.float32(0)
        tiny = 0 < amax < 2.0**-100
        pre = np.float32(2.0**64 if tiny else 1)
        amax = amax * pre
        qs = np.float32(127) / amax if amax > 0 else np.float32(0)
        q = np.clip(np.rint((xb * pre) * qs), -127, 127).astype(np.int64)
        acc = w.astype(np.int64) @ q
        dq = np.float32(amax / np.float32(127))
        ss = np.ones(m, np.float32) if s is None else np.broadcast_to(np.float32(s), (m,)).astype(np.float32)
        post = 2.0**-64 if tiny else 1.0
        out[b] = ((acc.astype(np.float64) * np.float64(dq)) * ss.astype(np.float64)) * post
    return out.reshape(x.shape[:-1] + (m,))


@budget(120)
@given(gemv_case())
def test_gemv_int8_matches_the_documented_quantisation_bitwise(case):
    w, x, s, threads = case
    m, k = w.shape
    packed = ternary.pack(w)
    want = int8_model(w, x, s)
    for variant in supported("ternary_gemv"):
        weights = ternary.prepare(packed, k, variant=variant)
        y = ternary.gemv(weights, x, s, act="int8", threads=threads)
        bitwise(y, want)


@budget(80)
@given(gemv_case(), st.data())
def test_gemv_nan_inf_propagate_through_nonzero_weights(case, data):
    w, x, s, threads = case
    m, k = w.shape
    x = x.copy()
    flat = x.reshape(-1)
    for v in data.draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf]), min_size=1, max_size=3)):
        flat[data.draw(st.integers(0, flat.size - 1))] = v
    s_bad = None
    if s is not None and np.ndim(s) == 1 and data.draw(st.booleans()):
        s_bad = s.copy()
        s_bad[data.draw(st.integers(0, m - 1))] = data.draw(st.sampled_from([np.nan, np.inf]))
    scale = s if s_bad is None else s_bad
    with np.errstate(invalid="ignore", over="ignore"):
        want = masked(w.astype(np.float64), x.reshape(-1, k)) * scale_f64(scale, m)
    packed = ternary.pack(w)
    for variant in supported("ternary_gemv"):
        y = ternary.gemv(ternary.prepare(packed, k, variant=variant), x, scale, threads=threads)
        same_nonfinite(y.reshape(-1, m), want)
        # int8 activations must be finite: refused before anything runs (never garbage).
        with pytest.raises(ValueError, match="x: must be finite"):
            ternary.gemv(ternary.prepare(packed, k, variant=variant), x, scale, act="int8")


# --- guarantees: memory the caller owns ---------------------------------------------------------

@needs_subprocess
def test_ternary_prepare_codes_changed_during_the_call_never_crash():
    """prepare validates the packed codes and packs the validated copy: a thread writing the
    invalid code 0b11 into the caller's array during prepare cannot reach the kernels."""
    out = run_python("""
        import threading, numpy as np
        from cpukern import ternary
        rng = np.random.default_rng(1)
        m, k = 512, 4096
        w = rng.integers(-1, 2, (m, k)).astype(np.int8)
        packed = ternary.pack(w)
        good = packed.copy()
        bad = np.full_like(packed, 0xFFFFFFFF)
        x = rng.standard_normal(k).astype(np.float32)
        stop = False
        def flip():
            while not stop:
                packed[:] = bad
                packed[:] = good
        th = threading.Thread(target=flip)
        th.start()
        try:
            for _ in range(40):
                try:
                    tw = ternary.prepare(packed, k)
                except ValueError as err:
                    assert "invalid code" in str(err), err
                    continue
                y = ternary.gemv(tw, x)
                assert np.isfinite(y).all()
        finally:
            stop = True
            th.join()
        print("OK")
    """)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_torch
def test_ternary_linear_weights_replaced_under_inference_mode_are_used():
    """The packed weights are the weights: copy_ or load_state_dict of other packed weights,
    also under inference_mode, is what the next call runs (no cache beside them to go stale)."""
    from cpukern.torch import TernaryLinear

    with torch.inference_mode():
        mod = TernaryLinear.from_linear(torch.nn.Linear(32, 8, bias=False))
        x = torch.randn(2, 32)
        before = mod(x)
        other = TernaryLinear.from_linear(torch.nn.Linear(32, 8, bias=False))
        mod.weight.copy_(other.weight)
        after = mod(x)
        assert torch.equal(after, other(x)) and not torch.equal(after, before)
        third = TernaryLinear.from_linear(torch.nn.Linear(32, 8, bias=False))
        mod.load_state_dict(third.state_dict())
        assert torch.equal(mod(x), third(x))
