"""The op "linear", a dense layer on the fused-MoE micro-kernels: cpukern.linear (prepare,
linear), the torch ops cpukern::linear / linear_prepared
and the cpukern.torch.Linear module, on every linear variant this CPU runs, against a float64
model and against torch's bf16 nn.Linear; its listing (fused_moe's rows under its own name),
selection and forcing; bad input names the argument. (Every variant and format, the SIMDe rows
included, is also checked bitwise in tests/cc/moe/linear_test.cc.)"""

from __future__ import annotations

import logging
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import linear as dense
from cpukern import moe
from variants import UNDER_QEMU, variant_params

LINEAR = variant_params("linear")
# Ragged O and K against every tile, one row, one output, empty batches, K of one, a batch past
# the AMX tiles' threshold and a large K (several K blocks).
SHAPES = [(1, 1, 32), (1, 37, 64), (4, 100, 96), (17, 129, 160), (0, 8, 32), (2, 33, 1),
          (3, 300, 2880), (70, 65, 544), (1, 1, 1)]


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


@pytest.mark.parametrize("variant", LINEAR)
@pytest.mark.parametrize("t,o,k", SHAPES)
def test_linear_matches_float64_model(variant, t, o, k):
    rng = np.random.default_rng(t * 1000 + o + k)
    x, w = _bf16(rng.uniform(-2, 2, (t, k))), _bf16(rng.uniform(-1, 1, (o, k)))
    b = _bf16(rng.uniform(-1, 1, o)) if o % 2 else None
    packed = dense.prepare(w, variant=variant)
    assert packed.variant == variant and packed.op == "moe" and tuple(packed.shape) == (1, o, k)
    y = dense.linear(x, packed, b)
    assert y.dtype == ml_dtypes.bfloat16 and y.shape == (t, o)
    ref, bound = _bound(x, w, b)
    assert np.all(np.abs(y.astype(np.float64) - ref) <= bound)
    # Batch- and thread-invariant: each row alone, any thread count, the same bits. A variant
    # with AMX tiles runs them for more than tiles_min_rows rows: such a batch is compared
    # with chunks of min + 1 rows instead.
    min_rows = next(v for v in cpukern.kernels("linear") if v["name"] == variant).get("tiles_min_rows")
    n = min_rows + 1 if min_rows and t > min_rows else 1
    for r in range(0, t, n):
        r0 = min(r, t - n)
        for threads in (1, 2, 3):
            assert np.array_equal(
                dense.linear(x[r0:r0 + n], packed, b, threads=threads).view(np.uint16),
                y[r0:r0 + n].view(np.uint16))
    # out= is written and returned
    out = np.full((t, o), 7, ml_dtypes.bfloat16)
    assert dense.linear(x, packed, b, out=out, variant=variant) is out
    assert np.array_equal(out.view(np.uint16), y.view(np.uint16))


@pytest.mark.parametrize("variant", LINEAR)
def test_linear_near_underflow_within_the_bound(variant):
    """Exact answers that are normal floats (40 * 2**-127, about 2.4e-37) made of products
    below 2**-126, or of bf16 subnormal activations: a flushing kernel (avx512_bf16) returns 0,
    inside the bound's underflow term."""
    k = 40
    x = _bf16(np.stack([np.full(k, 2.0**-60), np.full(k, 2.0**-130),
                        np.where(np.arange(k) % 2, -2.0**-61, 1.5 * 2.0**-61)]))
    w = _bf16(np.stack([np.full(k, 2.0**-67), np.full(k, 2.0**10)]))
    y = dense.linear(x, dense.prepare(w, variant=variant))
    ref, bound = _bound(x, w, None)
    assert ref[0, 0] == k * 2.0**-127
    assert np.all(np.abs(y.astype(np.float64) - ref) <= bound)


@pytest.mark.parametrize("variant", LINEAR)
def test_linear_int8_weights_quantise_activations_per_row(variant):
    rng = np.random.default_rng(3)
    x, w = _bf16(rng.uniform(-2, 2, (5, 96))), _bf16(rng.uniform(-1, 1, (40, 96)))
    q, s = moe.quantize(w, format="int8")
    packed = dense.prepare(q, format="int8", scales=s, variant=variant)
    assert packed.format == "int8"
    y = dense.linear(x, packed)
    # int8 results are the same bits on every variant (the exact int32 sums, one rounding)
    ref = dense.linear(x, dense.prepare(q, format="int8", scales=s, variant="reference"))
    assert np.array_equal(y.view(np.uint16), ref.view(np.uint16))
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.max(np.abs(y.astype(np.float64) - exact)) <= 0.02 * np.max(np.abs(exact))
    # the same as the one-expert packing of cpukern.moe
    via_moe = dense.linear(x, moe.prepare(q[None], format="int8", scales=s[None], variant=variant))
    assert np.array_equal(via_moe.view(np.uint16), y.view(np.uint16))


@pytest.mark.parametrize("variant", LINEAR)
def test_linear_mxfp4_weights_equal_their_dequantized_bf16(variant):
    """MXFP4 (O, I/32, 16) blocks give the bits of bf16 weights dequantized from them; with
    act="int8" (W4A8) the same bits on every variant."""
    rng = np.random.default_rng(5)
    x, w = _bf16(rng.uniform(-2, 2, (9, 160))), _bf16(rng.uniform(-1, 1, (37, 160)))
    blocks, scales = moe.quantize(w)
    packed = dense.prepare(blocks, format="mxfp4", scales=scales, variant=variant)
    assert packed.format == "mxfp4" and tuple(packed.shape) == (1, 37, 160)
    y = dense.linear(x, packed)
    want = dense.linear(x, dense.prepare(moe.dequantize(blocks, scales), variant=variant))
    assert np.array_equal(y.view(np.uint16), want.view(np.uint16))
    a8 = dense.linear(x, dense.prepare(blocks, format="mxfp4", scales=scales, act="int8", variant=variant))
    a8_ref = dense.linear(x, dense.prepare(blocks, format="mxfp4", scales=scales, act="int8",
                                           variant="reference"))
    assert np.array_equal(a8.view(np.uint16), a8_ref.view(np.uint16))


def test_linear_takes_torch_tensors_without_copies():
    torch = pytest.importorskip("torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs)")
    rng = np.random.default_rng(6)
    x, w, b = _bf16(rng.uniform(-2, 2, (3, 64))), _bf16(rng.uniform(-1, 1, (20, 64))), _bf16(rng.uniform(-1, 1, 20))
    tb = lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)  # noqa: E731
    y = dense.linear(tb(x), dense.prepare(tb(w)), tb(b))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and tuple(y.shape) == (3, 20)
    want = dense.linear(x, dense.prepare(w), b)
    assert np.array_equal(y.view(torch.int16).numpy().view(np.uint16), want.view(np.uint16))


# --- the op: listing, selection, forcing, saved packings ------------- --------------------

def test_kernels_lists_linear_as_fused_moe_rows_under_its_own_name():
    dense_rows, moe_rows = cpukern.kernels("linear"), cpukern.kernels("fused_moe")
    keys = ("name", "ukernel", "requires", "priority", "supported", "tiles_min_rows")
    assert [{k: v.get(k) for k in keys} for v in dense_rows] == \
        [{k: v.get(k) for k in keys} for v in moe_rows]
    selected = [v for v in dense_rows if v["selected"]]
    assert len(selected) == 1 and selected[0]["supported"]
    best = max((v for v in dense_rows if v["supported"]), key=lambda v: v["priority"])
    assert selected[0]["name"] == best["name"]
    assert dense.prepare(_bf16(np.ones((4, 8)))).variant == best["name"]
    assert "linear" in cpukern.__all__ and cpukern.linear is dense


def test_readme_variant_table_has_the_linear_row():
    """README's table: a linear row naming every linear variant compiled in here, in the
    order of fused_moe's row."""
    readme = (pathlib.Path(__file__).parent.parent.parent / "README.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \|[^|]*\|([^|]*)\|", readme, re.M)}
    assert "linear" in rows, sorted(rows)
    names = [v["name"] for v in cpukern.kernels("linear")]
    order = lambda row: list(dict.fromkeys(n for n in re.findall(r"`(\w+)`", row) if n in names))  # noqa: E731
    assert sorted(order(rows["linear"])) == sorted(names), rows["linear"]
    assert order(rows["linear"]) == order(rows["fused_moe"])


def test_saved_one_expert_packings_run_as_they_are():
    """A one-expert packing made by cpukern.moe.prepare and saved (cpukern.moe.to_bytes, the
    format written before the op had its own name) loads and runs here bit for bit; several
    experts are refused naming w."""
    rng = np.random.default_rng(7)
    x, w = _bf16(rng.uniform(-2, 2, (5, 96))), _bf16(rng.uniform(-1, 1, (24, 96)))
    saved = moe.to_bytes(moe.prepare(w[None]))
    loaded = cpukern.from_buffer(saved)
    assert np.array_equal(dense.linear(x, loaded).view(np.uint16),
                          dense.linear(x, dense.prepare(w, variant=loaded.variant)).view(np.uint16))
    again = cpukern.from_buffer(cpukern.to_bytes(dense.prepare(w)))
    assert np.array_equal(dense.linear(x, again).view(np.uint16),
                          dense.linear(x, dense.prepare(w)).view(np.uint16))
    with pytest.raises(ValueError, match=r"^w: expected one matrix"):
        dense.linear(x, cpukern.from_buffer(moe.to_bytes(moe.prepare(np.stack([w, w])))))


def test_selection_is_logged_as_linear(caplog):
    """The op's own name in the selection record, whether chosen or forced (the record is
    written once per op and selection; this forced one is written by no other test)."""
    caplog.set_level(logging.INFO, logger="cpukern")
    w = _bf16(np.ones((3, 8)))
    dense.prepare(w, variant="reference")
    dense.prepare(w, variant="reference")
    msgs = [r.getMessage() for r in caplog.records if r.name == "cpukern"]
    assert len(msgs) == 1 and msgs[0].startswith("linear: variant 'reference'"), msgs
    assert "forced by variant='reference'" in msgs[0], msgs


@pytest.mark.skipif(UNDER_QEMU, reason="under QEMU: qemu-user cannot start guest subprocesses")
def test_cpukern_variant_forces_linear_alone():
    code = textwrap.dedent("""
        import numpy as np, ml_dtypes, cpukern
        from cpukern import linear, moe
        w = np.ones((4, 8), ml_dtypes.bfloat16)
        sel = lambda op: next(v["name"] for v in cpukern.kernels(op) if v["selected"])
        print(sel("linear"), linear.prepare(w).variant, sel("fused_moe"), moe.prepare(w[None]).variant)
    """)
    env = dict(os.environ, CPUKERN_VARIANT="linear=reference")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0 and "CPUKERN_VARIANT" not in out.stderr, out.stderr
    lin, lin_packed, moe_sel, moe_packed = out.stdout.split()
    best = next(v["name"] for v in cpukern.kernels("fused_moe") if v["selected"])
    assert (lin, lin_packed, moe_sel, moe_packed) == ("reference", "reference", best, best)
    # A name linear does not have: a warning at import, and linear's calls (only) raise.
    code = textwrap.dedent("""
        import numpy as np, ml_dtypes, cpukern
        from cpukern import linear, moe
        w = np.ones((4, 8), ml_dtypes.bfloat16)
        print(moe.prepare(w[None]).variant)
        linear.prepare(w)
    """)
    env = dict(os.environ, CPUKERN_VARIANT="linear=bogus")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=240)
    assert "CPUKERN_VARIANT: 'linear=bogus'" in out.stderr and out.stdout.split() == [best]
    assert out.returncode != 0 and "ValueError: variant: unknown variant 'bogus' for linear" in out.stderr, \
        out.stderr


def test_linear_bad_input_names_the_argument():
    call = dense.linear
    w = moe.prepare(_bf16(np.ones((2, 8, 16))))
    one = dense.prepare(_bf16(np.ones((8, 16))))
    x = _bf16(np.ones((3, 16)))
    with pytest.raises(ValueError, match=r"^w: expected one matrix"):
        call(x, w)
    with pytest.raises(TypeError, match=r"^w: expected PackedWeights"):
        call(x, np.ones((8, 16)))
    with pytest.raises(TypeError, match=r"^w: expected PackedWeights"):
        call(x, cpukern.ternary.prepare(cpukern.ternary.pack(np.ones((8, 16), np.int8)), 16))
    with pytest.raises(ValueError, match=r"^x: "):
        call(_bf16(np.ones((3, 15))), one)
    with pytest.raises(ValueError, match=r"^x: "):
        call(_bf16(np.ones(16)), one)
    with pytest.raises(TypeError, match=r"^x: "):
        call(np.ones((3, 16), np.float32), one)
    with pytest.raises(ValueError, match=r"^bias: "):
        call(x, one, _bf16(np.ones(7)))
    with pytest.raises(TypeError, match=r"^bias: "):
        call(x, one, np.ones(8, np.float32))
    with pytest.raises(ValueError, match=r"^out: "):
        call(x, one, out=np.empty((3, 9), ml_dtypes.bfloat16))
    with pytest.raises(ValueError, match=r"^threads: "):
        call(x, one, threads=-1)
    other = next((v["name"] for v in cpukern.kernels("linear")
                  if v["supported"] and v["name"] != one.variant), None)
    if other is not None:
        with pytest.raises(ValueError, match=r"^variant: "):
            call(x, one, variant=other)
    with pytest.raises(TypeError, match=r"^variant: "):
        call(x, one, variant=3)


def test_prepare_bad_input_names_the_argument():
    w = _bf16(np.ones((8, 32)))
    with pytest.raises(ValueError, match=r"^w: expected 2 dimensions"):
        dense.prepare(w[None])  # a stack of experts is cpukern.moe's
    with pytest.raises(ValueError, match=r"^w: expected one matrix \(O, I\) with O, I >= 1"):
        dense.prepare(_bf16(np.ones((0, 32))))
    with pytest.raises(ValueError, match=r"^w: expected one matrix"):
        dense.prepare(_bf16(np.ones((8, 0))))
    with pytest.raises(TypeError, match=r"^w: "):
        dense.prepare(np.ones((8, 32), np.float32))
    with pytest.raises(TypeError, match=r"^w: "):
        dense.prepare([[1.0] * 32] * 8)
    with pytest.raises(ValueError, match=r"^format: "):
        dense.prepare(w, format="fp8")
    with pytest.raises(ValueError, match=r"^act: "):
        dense.prepare(w, act="int8")  # int8 activations only with MXFP4 weights
    with pytest.raises(ValueError, match=r"^scales: "):
        dense.prepare(w, scales=np.ones(8, np.float32))
    with pytest.raises(ValueError, match=r"^variant: unknown variant 'nope' for linear"):
        dense.prepare(w, variant="nope")
    with pytest.raises(TypeError, match=r"^variant: "):
        dense.prepare(w, variant=1)
    q, s = moe.quantize(w, format="int8")
    with pytest.raises(ValueError, match=r"^scales: required with format='int8' \(float32 \(O,\)\)"):
        dense.prepare(q, format="int8")
    with pytest.raises(ValueError, match=r"^scales: expected 1 dimensions"):
        dense.prepare(q, format="int8", scales=s[None])
    with pytest.raises(ValueError, match=r"^scales: "):
        dense.prepare(q, format="int8", scales=s[:4])
    with pytest.raises(ValueError, match=r"^w: "):
        dense.prepare(np.full((8, 32), -128, np.int8), format="int8", scales=s)
    blocks, sc = moe.quantize(w)
    with pytest.raises(ValueError, match=r"^scales: required with format='mxfp4' \(uint8 \(O, I/32\)\)"):
        dense.prepare(blocks, format="mxfp4")
    with pytest.raises(ValueError, match=r"^w: expected 3 dimensions"):
        dense.prepare(blocks[None], format="mxfp4", scales=sc)
    with pytest.raises(ValueError, match=r"^scales: expected 2 dimensions"):
        dense.prepare(blocks, format="mxfp4", scales=sc[0])
    bad = sc.copy()
    bad[1, 0] = 255
    with pytest.raises(ValueError, match=r"^scales: .*255"):
        dense.prepare(blocks, format="mxfp4", scales=bad)


# --- torch ---------------------------------------------------------------------------------

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")
import cpukern.torch as ct  # noqa: E402


@pytest.mark.parametrize("variant", LINEAR)
def test_module_matches_torch_bf16_linear(variant):
    torch.manual_seed(0)
    lin = torch.nn.Linear(160, 129).to(torch.bfloat16)
    mod = ct.Linear.from_linear(lin, variant=variant)
    # the packed weights are the weights: one PackedWeightsTensor, no bf16 copy
    assert isinstance(mod.weight, ct.PackedWeightsTensor) and mod.weight.kind == "linear"
    assert tuple(mod.weight.shape) == (129, 160) and mod.weight.weights.variant == variant
    assert mod.bias.dtype == torch.bfloat16
    assert not any(t.is_floating_point() and t.dim() == 2 for t in mod.state_dict().values())
    x = torch.randn(2, 3, 160, dtype=torch.bfloat16)
    y = mod(x)
    assert y.dtype == torch.bfloat16 and y.shape == (2, 3, 129)
    want = lin(x).float()
    # torch's bf16 linear and cpukern's differ by the summation order and one bf16 rounding
    torch.testing.assert_close(y.float(), want, rtol=2 ** -7, atol=2e-2)
    assert mod(x.float()).dtype == torch.float32  # any float dtype in, its dtype out
    # an nn.Linear whose weight is the packed tensor runs the same kernel
    with torch.no_grad():
        lin.weight = torch.nn.Parameter(mod.weight, requires_grad=False)
        lin.bias = torch.nn.Parameter(mod.bias, requires_grad=False)
    assert torch.equal(lin(x), y)


def test_nn_linear_with_packed_dense_weight_and_trainable_bias():
    """nn.Linear's own bias (a Parameter that requires grad) goes to the kernel as a value:
    the result is the cpukern module's, with or without no_grad."""
    lin = torch.nn.Linear(16, 8).to(torch.bfloat16)
    mod = ct.Linear.from_linear(lin)
    lin.weight = torch.nn.Parameter(mod.weight, requires_grad=False)
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    assert lin.bias.requires_grad
    assert torch.equal(lin(x).detach(), mod(x))
    with torch.no_grad():
        assert torch.equal(lin(x), mod(x))


@pytest.mark.parametrize("variant", LINEAR)
def test_module_near_underflow_within_the_bound(variant):
    """cpukern.torch.Linear meets cpukern.linear's bound where products underflow."""
    k = 40
    x = _bf16(np.stack([np.full(k, 2.0**-60), np.full(k, 2.0**-130)]))
    w = _bf16(np.stack([np.full(k, 2.0**-67), np.full(k, 2.0**10)]))
    lin = torch.nn.Linear(k, 2, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w.astype(np.float32)))
    y = ct.Linear.from_linear(lin, variant=variant)(torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16))
    ref, bound = _bound(x, w, None)
    assert np.all(np.abs(y.double().numpy() - ref) <= bound)


def test_module_int8_format_and_compile():
    torch.manual_seed(1)
    lin = torch.nn.Linear(96, 40, bias=False).to(torch.bfloat16)
    mod = ct.Linear.from_linear(lin, format="int8")
    assert mod.weight.kind == "linear" and mod.weight.weights.format == "int8"
    assert mod.bias is None and mod.format == "int8"
    x = torch.randn(4, 96, dtype=torch.bfloat16)
    torch.testing.assert_close(mod(x).float(), lin(x).float(), rtol=0.05, atol=0.05)
    got = torch.compile(mod, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(got, mod(x))
    torch.library.opcheck(torch.ops.cpukern.linear_prepared.default, (x, mod.weight.blob, 40, None))


def test_module_bad_input_names_the_argument():
    mod = ct.Linear.from_linear(torch.nn.Linear(16, 8))
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
    with pytest.raises(ValueError, match=r"holds no packed weights yet"):
        ct.Linear(16, 8)(torch.ones(2, 16))  # made empty: weights come from a state_dict
    other = ct.Linear.from_linear(torch.nn.Linear(16, 4))
    with pytest.raises(ValueError, match=r"^weight: packed weight of shape \(1, 4, 16\)"):
        mod.load_state_dict(other.state_dict() | {"bias": mod.bias})
    int8 = ct.Linear.from_linear(torch.nn.Linear(16, 8), format="int8")
    with pytest.raises(ValueError, match=r"^weight: packed as int8, this layer is bf16"):
        mod.load_state_dict(int8.state_dict())
