"""Dense layers on the fused-MoE micro-kernels: cpukern.moe.linear, the torch ops
cpukern::linear / linear_prepared and the cpukern.torch.Linear module, on every fused_moe
variant this CPU runs, against a float64 model and against torch's bf16 nn.Linear; bad input
names the argument. (Every variant and format, the SIMDe rows included, is also checked
bitwise in tests/cc/moe/linear_test.cc.)"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import moe
from variants import variant_params

MOE = variant_params("fused_moe")
SHAPES = [(1, 1, 32), (1, 37, 64), (4, 100, 96), (17, 129, 160), (0, 8, 32), (2, 33, 1), (3, 300, 2880)]


def _bf16(a):
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


def _bound(x, w, b):
    """|y - ref| bound of a bf16 linear: output rounding (2**-8 relative), fp32 sums, and the
    underflow term 2**-126 (2K + 2 + sum_k (|x_k| + |w_k|)) (vdpbf16ps flushes bf16 subnormal
    inputs, and products and sums below 2**-126, to zero)."""
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    k = x.shape[1]
    ref = xd @ wd.T + (0.0 if b is None else b.astype(np.float64))
    mag = np.abs(xd) @ np.abs(wd).T + (0.0 if b is None else np.abs(b.astype(np.float64)))
    under = (2 * k + 2 + np.abs(xd).sum(1)[:, None] + np.abs(wd).sum(1)[None, :]) * 2.0**-126
    return ref, np.abs(ref) * 2.0**-8 + (k + 1) * mag * 2.0**-23 + under


@pytest.mark.parametrize("isa", MOE)
@pytest.mark.parametrize("t,o,k", SHAPES)
def test_linear_matches_float64_model(isa, t, o, k):
    rng = np.random.default_rng(t * 1000 + o + k)
    x, w = _bf16(rng.uniform(-2, 2, (t, k))), _bf16(rng.uniform(-1, 1, (o, k)))
    b = _bf16(rng.uniform(-1, 1, o)) if o % 2 else None
    packed = moe.prepare(w[None], isa=isa)
    y = moe.linear(x, packed, b)
    assert y.dtype == ml_dtypes.bfloat16 and y.shape == (t, o)
    ref, bound = _bound(x, w, b)
    assert np.all(np.abs(y.astype(np.float64) - ref) <= bound)
    # Batch- and thread-invariant: each row alone, any thread count, the same bits. A variant
    # with AMX tiles runs them for more than tiles_min_rows rows: such a batch is compared
    # with chunks of min + 1 rows instead.
    min_rows = next(v for v in cpukern.kernels("fused_moe") if v["name"] == isa).get("tiles_min_rows")
    n = min_rows + 1 if min_rows and t > min_rows else 1
    for r in range(0, t, n):
        r0 = min(r, t - n)
        assert np.array_equal(moe.linear(x[r0:r0 + n], packed, b, threads=2).view(np.uint16),
                              y[r0:r0 + n].view(np.uint16))


@pytest.mark.parametrize("isa", MOE)
def test_linear_near_underflow_within_the_bound(isa):
    """Exact answers that are normal floats (40 * 2**-127, about 2.4e-37) made of products
    below 2**-126, or of bf16 subnormal activations: a flushing kernel (avx512_bf16) returns 0,
    inside the bound's underflow term."""
    k = 40
    x = _bf16(np.stack([np.full(k, 2.0**-60), np.full(k, 2.0**-130),
                        np.where(np.arange(k) % 2, -2.0**-61, 1.5 * 2.0**-61)]))
    w = _bf16(np.stack([np.full(k, 2.0**-67), np.full(k, 2.0**10)]))
    y = moe.linear(x, moe.prepare(w[None], isa=isa))
    ref, bound = _bound(x, w, None)
    assert ref[0, 0] == k * 2.0**-127
    assert np.all(np.abs(y.astype(np.float64) - ref) <= bound)


@pytest.mark.parametrize("isa", MOE)
def test_linear_int8_weights_quantise_activations_per_row(isa):
    rng = np.random.default_rng(3)
    x, w = _bf16(rng.uniform(-2, 2, (5, 96))), _bf16(rng.uniform(-1, 1, (40, 96)))
    q, s = moe.quantize(w, format="int8")
    y = moe.linear(x, moe.prepare(q[None], format="int8", scales=s[None], isa=isa))
    # int8 results are the same bits on every variant (the exact int32 sums, one rounding)
    ref = moe.linear(x, moe.prepare(q[None], format="int8", scales=s[None], isa="reference"))
    assert np.array_equal(y.view(np.uint16), ref.view(np.uint16))
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.max(np.abs(y.astype(np.float64) - exact)) <= 0.02 * np.max(np.abs(exact))


def test_linear_bad_input_names_the_argument():
    w = moe.prepare(_bf16(np.ones((2, 8, 16))))
    one = moe.prepare(_bf16(np.ones((1, 8, 16))))
    x = _bf16(np.ones((3, 16)))
    with pytest.raises(ValueError, match=r"^w: expected one matrix"):
        moe.linear(x, w)
    with pytest.raises(TypeError, match=r"^w: expected PackedExperts"):
        moe.linear(x, np.ones((8, 16)))
    with pytest.raises(ValueError, match=r"^x: "):
        moe.linear(_bf16(np.ones((3, 15))), one)
    with pytest.raises(TypeError, match=r"^x: "):
        moe.linear(np.ones((3, 16), np.float32), one)
    with pytest.raises(ValueError, match=r"^bias: "):
        moe.linear(x, one, _bf16(np.ones(7)))
    with pytest.raises(ValueError, match=r"^out: "):
        moe.linear(x, one, out=np.empty((3, 9), ml_dtypes.bfloat16))
    with pytest.raises(ValueError, match=r"^threads: "):
        moe.linear(x, one, threads=-1)


# --- torch ---------------------------------------------------------------------------------

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")
import cpukern.torch as ct  # noqa: E402


@pytest.mark.parametrize("isa", MOE)
def test_module_matches_torch_bf16_linear(isa):
    torch.manual_seed(0)
    lin = torch.nn.Linear(160, 129).to(torch.bfloat16)
    mod = ct.Linear.from_linear(lin, isa=isa)
    x = torch.randn(2, 3, 160, dtype=torch.bfloat16)
    raw = mod(x)  # the raw-weight op (packed through the cache)
    assert raw.dtype == torch.bfloat16 and raw.shape == (2, 3, 129)
    mod.prepare()
    assert torch.equal(mod(x), raw)
    want = lin(x).float()
    # torch's bf16 linear and cpukern's differ by the summation order and one bf16 rounding
    torch.testing.assert_close(raw.float(), want, rtol=2 ** -7, atol=2e-2)
    assert mod(x.float()).dtype == torch.float32  # any float dtype in, its dtype out


@pytest.mark.parametrize("isa", MOE)
def test_module_near_underflow_within_the_bound(isa):
    """cpukern.torch.Linear meets moe.linear's bound where products underflow."""
    k = 40
    x = _bf16(np.stack([np.full(k, 2.0**-60), np.full(k, 2.0**-130)]))
    w = _bf16(np.stack([np.full(k, 2.0**-67), np.full(k, 2.0**10)]))
    lin = torch.nn.Linear(k, 2, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w.astype(np.float32)))
    y = ct.Linear.from_linear(lin, isa=isa)(torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16))
    ref, bound = _bound(x, w, None)
    assert np.all(np.abs(y.double().numpy() - ref) <= bound)


def test_module_int8_format_and_compile():
    torch.manual_seed(1)
    lin = torch.nn.Linear(96, 40, bias=False).to(torch.bfloat16)
    mod = ct.Linear.from_linear(lin, format="int8").prepare()
    assert mod.weight.dtype == torch.int8 and mod.weight_scales.shape == (40,)
    x = torch.randn(4, 96, dtype=torch.bfloat16)
    torch.testing.assert_close(mod(x).float(), lin(x).float(), rtol=0.05, atol=0.05)
    got = torch.compile(mod, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(got, mod(x))
    torch.library.opcheck(torch.ops.cpukern.linear_prepared.default, (x, mod.prepared, 40, None))


def test_module_bad_input_names_the_argument():
    mod = ct.Linear(16, 8)
    with pytest.raises(ValueError, match=r"^x: expected 16 input features"):
        mod(torch.ones(2, 15))
    with pytest.raises(TypeError, match=r"^x: "):
        mod(torch.ones(2, 16, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"^linear: "):
        ct.Linear.from_linear(torch.nn.Conv1d(1, 1, 1))
    with pytest.raises(ValueError, match=r"^format: "):
        ct.Linear.from_linear(torch.nn.Linear(16, 8), format="fp8")
    with pytest.raises(ValueError, match=r"^in_features: "):
        ct.Linear(0, 8)
    other = ct.Linear(16, 4).prepare()
    with pytest.raises(ValueError, match=r"^prepared: packed weight of shape \(1, 4, 16\)"):
        mod.load_state_dict(other.state_dict() | {"weight": mod.weight, "bias": mod.bias})
