"""out= is checked by the extension alone: every binding that writes into a caller's array
refuses a wrong dtype, a non-contiguous layout or a wrong shape (ndim included) before writing,
naming `out`, with no Python layer in front of it. The bindings that return new arrays
allocate them after their inputs are checked.

Audit of python/ext (each binding that writes into a caller's array, through output<T> or
out_bytes in arrays.h / prepared.h: dtype, C-contiguity, exact shape):
  ternary_gemv, ternary_gemv_buffer, widely_linear_run, widely_linear_run_buffer, moe_linear,
  moe_fused_moe (out=), packed_serialize (out=, also its 64-byte alignment).
The others write only arrays they allocate: ternary_pack / unpack / quantize, moe_route,
moe_int8_quantize / moe_mxfp4_quantize, moe_int8_dequantize / moe_mxfp4_dequantize,
widely_linear_phase_quantize / widely_linear_dense.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from cpukern import _ext, linear, moe, ternary, widely_linear

BF = ml_dtypes.bfloat16


def _watched(shape, dtype, aligned=False):
    """A C-contiguous array filled with a byte pattern that _untouched checks (64-byte aligned
    when asked: packed_serialize's out= must be)."""
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = ternary.aligned_empty(n) if aligned else np.empty(n, np.uint8)
    raw[...] = 0xA5
    return raw.view(dtype).reshape(shape)


def _untouched(a):
    return bool((np.ascontiguousarray(a).reshape(-1).view(np.uint8) == 0xA5).all())


@pytest.fixture(scope="module")
def ops():
    """name -> (call(out), the right out= shape, its dtype); each call goes to _ext directly."""
    rng = np.random.default_rng(11)
    tw = ternary.prepare(ternary.pack(rng.integers(-1, 2, (4, 40)).astype(np.int8)), 40)
    x = rng.standard_normal((2, 40)).astype(np.float32)
    tbuf = ternary.to_bytes(tw)
    planes, scales = widely_linear.quantize(rng.standard_normal((8, 64)).astype(np.float32), 2)
    layer = widely_linear.prepare(planes, scales, 32)
    xw = rng.standard_normal((2, 64)).astype(np.float32)
    lbuf = ternary.to_bytes(layer)
    e, h, i, t = 4, 16, 8, 3
    p13 = moe.prepare(rng.standard_normal((e, 2 * i, h)).astype(BF))
    p2 = moe.prepare(rng.standard_normal((e, h, i)).astype(BF))
    lin = moe.prepare(rng.standard_normal((1, 12, h)).astype(BF))
    xb = rng.standard_normal((t, h)).astype(BF).view(np.uint16)
    tw_, ti = moe.route(rng.standard_normal((t, e)).astype(np.float32), 2)
    return {
        "ternary_gemv": (lambda out: _ext.ternary_gemv(tw, x, None, "fp32", "", 1, out), (2, 4), np.float32),
        "ternary_gemv_buffer": (lambda out: _ext.ternary_gemv_buffer(tbuf, 4, x, "fp32", 1, out),
                                (2, 4), np.float32),
        "widely_linear_run": (lambda out: _ext.widely_linear_run(layer, xw, True, "", 1, out), (2, 8),
                              np.float32),
        "widely_linear_run_buffer": (lambda out: _ext.widely_linear_run_buffer(lbuf, 8, xw, 1, out),
                                     (2, 8), np.float32),
        "moe_linear": (lambda out: _ext.moe_linear(xb, lin, None, "", 1, out), (t, 12), np.uint16),
        "moe_fused_moe": (lambda out: _ext.moe_fused_moe(xb, p13, p2, tw_, ti, False, "silu", None,
                                                         None, False, "", 1, out), (t, h), np.uint16),
        "packed_serialize": (lambda out: _ext.packed_serialize(tw, False, 1, out),
                             (_ext.packed_serialized_size(tw, False),), np.uint8),
    }


OPS = ["ternary_gemv", "ternary_gemv_buffer", "widely_linear_run", "widely_linear_run_buffer",
       "moe_linear", "moe_fused_moe", "packed_serialize"]


def _wrong_shapes(shape):
    """Same element count in another shape, one element more, one fewer, another ndim."""
    n = int(np.prod(shape))
    yield shape[:-1] + (shape[-1] + 1,)
    yield shape[:-1] + (shape[-1] - 1,)
    yield shape + (1,)
    yield (n,) if len(shape) > 1 else (1, n)
    yield ()


@pytest.mark.parametrize("op", OPS)
def test_wrong_out_shape_is_refused_by_the_extension(ops, op):
    call, shape, dtype = ops[op]
    for bad in _wrong_shapes(shape):
        out = _watched(bad, dtype, aligned=True)
        with pytest.raises(ValueError, match=r"^out: expected shape"):
            call(out)
        assert _untouched(out), (op, bad)


@pytest.mark.parametrize("op", OPS)
def test_wrong_out_dtype_or_layout_is_refused_by_the_extension(ops, op):
    call, shape, dtype = ops[op]
    other = np.float64 if dtype != np.float64 else np.float32
    out = _watched(shape, other, aligned=True)
    with pytest.raises(TypeError, match=r"^out: expected a C-contiguous"):
        call(out)
    assert _untouched(out)
    if len(shape) == 2:
        t = _watched(shape[::-1], dtype).T  # the right shape, transposed strides
        with pytest.raises(TypeError, match=r"^out: expected a C-contiguous .*non-contiguous"):
            call(t)
        assert _untouched(t)


@pytest.mark.parametrize("op", OPS)
def test_right_out_is_written(ops, op):
    call, shape, dtype = ops[op]
    out = _watched(shape, dtype, aligned=True)
    assert call(out) is None  # written in place, nothing new returned
    assert not _untouched(out)


@pytest.mark.parametrize("op", [o for o in OPS if o != "packed_serialize"])
def test_without_out_the_extension_returns_a_new_array(ops, op):
    call, shape, dtype = ops[op]
    y = call(None)
    assert isinstance(y, np.ndarray) and y.shape == shape and y.dtype == dtype
    assert y.flags.c_contiguous and y.flags.writeable


def test_wrong_input_ndim_names_it_before_any_result_exists():
    """Python computes no result shape: a wrong-ndim input is the extension's ValueError naming
    it (never an IndexError), also where the result would be new."""
    tw = ternary.prepare(ternary.pack(np.ones((4, 16), np.int8)), 16)
    with pytest.raises(ValueError, match="^x: expected 1 or 2 dimensions"):
        ternary.gemv(tw, np.ones((1, 1, 16), np.float32))
    with pytest.raises(ValueError, match="^x: expected 1 or 2 dimensions"):
        ternary.gemv(tw, np.array(1.0, np.float32))
    with pytest.raises(ValueError, match="^packed: expected 2 dimensions"):
        ternary.unpack(np.ones(3, np.uint32), 16)
    with pytest.raises(ValueError, match="^w: expected 2 dimensions"):
        ternary.quantize(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="^w: expected 2 dimensions"):
        ternary.pack(np.ones(3, np.int8))
    with pytest.raises(ValueError, match="^x: expected 2 dimensions"):
        linear.linear(np.ones(16, BF), moe.prepare(np.ones((1, 4, 16), BF)))
    with pytest.raises(ValueError, match="^scales: expected"):
        moe.dequantize(np.zeros((2, 16), np.uint8), np.zeros((), np.uint8))
    with pytest.raises(ValueError, match="^w: expected"):
        moe.quantize(np.zeros((), BF))


def test_moe_prepare_rules_are_the_extensions():
    """format / act / scales: moe::prepare_format's rules, through the binding alone."""
    w = np.ones((1, 4, 32), BF).view(np.uint16)
    with pytest.raises(ValueError, match=r"^act: expected 'fp32' with format='bf16'"):
        _ext.moe_prepare(w, None, "bf16", "int8", "")
    with pytest.raises(ValueError, match=r"^scales: required with format='int8'"):
        _ext.moe_prepare(np.ones((1, 4, 32), np.int8), None, "int8", "fp32", "")
    with pytest.raises(ValueError, match=r"^scales: required with format='mxfp4'"):
        _ext.moe_prepare(np.ones((1, 4, 1, 16), np.uint8), None, "mxfp4", "fp32", "")
    with pytest.raises(ValueError, match=r"^scales: only with format='mxfp4' or format='int8'"):
        _ext.moe_prepare(w, np.ones((1, 4), np.float32), "bf16", "fp32", "")
    with pytest.raises(ValueError, match=r"^format: expected one of 'bf16', 'mxfp4', 'int8'"):
        _ext.moe_prepare(w, None, "fp8", "fp32", "")
    with pytest.raises(ValueError, match=r"^w: expected \(\.\.\., K\) with K a positive multiple of 32"):
        _ext.moe_mxfp4_quantize(np.ones((2, 48), BF).view(np.uint16))
    with pytest.raises(ValueError, match=r"^w: expected \(\.\.\., K\) with K >= 1"):
        _ext.moe_int8_quantize(np.ones((2, 0), BF).view(np.uint16))


def test_unreadable_numpy_arrays_are_type_errors_naming_the_argument():
    """Arrays nanobind cannot import at all (Python's one dtype check: it converts, the
    extension would otherwise raise a TypeError naming no argument)."""
    tw = ternary.prepare(ternary.pack(np.ones((4, 16), np.int8)), 16)
    for bad in (np.ones(16, ">f4"), np.ones(16, object), np.ones(16, "M8[s]"), np.ones(16, "U2")):
        with pytest.raises(TypeError, match="^x: "):
            ternary.gemv(tw, bad)
    out = np.empty(4, np.float32)
    out.setflags(write=False)
    with pytest.raises(TypeError, match="^out: expected a writeable array"):
        ternary.gemv(tw, np.ones(16, np.float32), out=out)
