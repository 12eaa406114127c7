"""The argument conventions every op shares: threads= (0 or None the default, 1..MAX_THREADS, else
a ValueError or TypeError naming threads), variant= (forcing a variant by name: unknown, unsupported
on this CPU, or malformed names are a ValueError, never a crash), torch tensors in place of numpy
arrays, and out= over memory that cannot be written. Each op's own cases: test_<op>_contract.py."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

import cpukern
from contract import BF16, RNG, needs_torch, small_ternary, torch
from cpukern import moe, ternary
from variants import UNDER_QEMU

OPS = ("ternary_gemv", "widely_linear", "fused_moe", "linear", "decode_attention")


# --- threads= ----------------------------------------------------------------------------------

def _every_op_call():
    """One small call per op with a threads= argument: name -> f(threads)."""
    from cpukern import attention, linear, moe, ternary, widely_linear

    rng = np.random.default_rng(1)
    w = ternary.pack(rng.integers(-1, 2, size=(8, 40)).astype(np.int8))
    x = rng.standard_normal(40).astype(np.float32)
    planes, scales = widely_linear.quantize(rng.standard_normal((8, 64)).astype(np.float32), 2)
    layer = widely_linear.prepare(planes, scales, 32)
    xw = rng.standard_normal(64).astype(np.float32)
    bf = ml_dtypes.bfloat16
    p13 = moe.prepare(rng.standard_normal((4, 16, 16)).astype(bf))
    p2 = moe.prepare(rng.standard_normal((4, 16, 8)).astype(bf))
    xb = rng.standard_normal((3, 16)).astype(bf)
    tw, ids = moe.route(rng.standard_normal((3, 4)).astype(np.float32), 2)
    lw = linear.prepare(rng.standard_normal((8, 16)).astype(bf))
    q = rng.standard_normal((2, 4, 16)).astype(bf)
    kv = rng.standard_normal((2, 2, 600, 16)).astype(bf)
    return {
        "ternary_gemv": lambda t: ternary.gemv(w, x, threads=t),
        "widely_linear": lambda t: widely_linear.apply(layer, xw, threads=t),
        "fused_moe": lambda t: moe.fused_moe(xb, p13, p2, tw, ids, threads=t),
        "linear": lambda t: linear.linear(xb, lw, threads=t),
        "decode_attention": lambda t: attention.decode(q, kv, kv, threads=t),
    }


@pytest.mark.parametrize("op", OPS)
def test_one_thread_semantics_for_every_op(op):
    """0 or None = the default, 1..MAX_THREADS explicit, anything else a ValueError from C++
    (limits::resolve_threads) naming threads; a non-integer is a TypeError."""
    call = _every_op_call()[op]
    want = np.asarray(call(None)).view(np.uint8)
    for ok in (0, 1, 3, cpukern.MAX_THREADS, np.int32(2)):
        assert np.array_equal(np.asarray(call(ok)).view(np.uint8), want), ok
    limit = cpukern.MAX_THREADS
    for bad in (-1, limit + 1, 1 << 16, 2**31 - 1):
        with pytest.raises(ValueError, match=rf"^threads: expected 0 \(the default\) or 1\.\.{limit}, got {bad}$"):
            call(bad)
    with pytest.raises(ValueError, match="^threads: "):
        call(2**40)
    for bad in (1.5, True, "2"):
        with pytest.raises(TypeError, match="^threads: "):
            call(bad)


# --- variant= --------------------------------------------------------------------------------------

def test_forcing_an_unknown_variant_names_the_argument():
    w = cpukern.ternary.pack(np.ones((2, 16), np.int8))
    with pytest.raises(ValueError, match=r"variant: unknown variant 'avx9000'"):
        cpukern.ternary.prepare(w, 16, variant="avx9000")


@pytest.mark.parametrize("op", OPS)
def test_forcing_an_unsupported_variant_is_an_error_not_a_crash(op):
    unsupported = [v["name"] for v in cpukern.kernels(op) if not v["supported"]]
    if not unsupported:
        pytest.skip(f"this CPU runs every {op} variant")
    name = unsupported[0]
    with pytest.raises(ValueError, match=f"variant: variant '{name}'.*lacks"):
        if op == "ternary_gemv":
            cpukern.ternary.prepare(cpukern.ternary.pack(np.ones((1, 16), np.int8)), 16, variant=name)
        elif op == "widely_linear":
            planes, scales = cpukern.widely_linear.quantize(np.ones((2, 2), np.float32), 1)
            cpukern.widely_linear.prepare(planes, scales, 1, variant=name)
        elif op == "linear":
            import ml_dtypes
            cpukern.linear.prepare(np.ones((2, 2), ml_dtypes.bfloat16), variant=name)
        elif op == "decode_attention":
            ones = np.ones((1, 1, 1, 4), np.float32)
            cpukern.attention.decode(ones[0], ones, ones, variant=name)
        else:
            import ml_dtypes
            cpukern.moe.prepare(np.ones((1, 2, 2), ml_dtypes.bfloat16), variant=name)


_FORCE_CODE = r"""
import sys, numpy as np, ml_dtypes, cpukern
from cpukern import ternary, widely_linear, moe, linear
op = sys.argv[1]
names = [v["name"] for v in cpukern.kernels(op) if not v["supported"]]
if not names:
    print("SKIP no unsupported variant"); sys.exit(0)
try:
    if op == "ternary_gemv":
        ternary.gemv(ternary.pack(np.ones((2, 16), np.int8)), np.ones(16, np.float32), variant=names[0])
    elif op == "widely_linear":
        pl, sc = widely_linear.quantize(np.ones((2, 2), np.float32), 1)
        widely_linear.prepare(pl, sc, 1, variant=names[0])
    elif op == "linear":
        linear.prepare(np.ones((2, 2), ml_dtypes.bfloat16), variant=names[0])
    elif op == "decode_attention":
        ones = np.ones((1, 1, 1, 4), np.float32)
        cpukern.attention.decode(ones[0], ones, ones, variant=names[0])
    else:
        moe.prepare(np.ones((1, 2, 2), ml_dtypes.bfloat16), variant=names[0])
except ValueError as e:
    print("OK", e); sys.exit(0)
print("NO ERROR for", names[0]); sys.exit(1)
"""


@pytest.mark.parametrize("op", OPS)
def test_forcing_an_unsupported_variant_is_a_value_error(op):
    if UNDER_QEMU:
        pytest.skip("qemu-user cannot start a guest subprocess without binfmt_misc; "
                    "test_forcing_an_unsupported_variant_is_an_error_not_a_crash covers the variants this "
                    "emulated CPU lacks in-process")
    hide = "avx512f,avx512bw,avx512bf16,avx2,bmi2,bf16,i8mm"
    env = dict(os.environ, CPUKERN_DISABLE_FEATURES=hide)
    out = subprocess.run([sys.executable, "-c", _FORCE_CODE, op], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stdout}{out.stderr}"
    if out.stdout.startswith("SKIP"):
        pytest.skip(f"{op}: every variant still runs with {hide} hidden")
    assert out.stdout.startswith("OK variant: variant"), out.stdout


def test_variant_names_with_nul_are_refused():
    packed = ternary.pack(np.ones((2, 16), np.int8))
    for call in (lambda variant: ternary.prepare(packed, 16, variant=variant),
                 lambda variant: moe.prepare(np.zeros((1, 2, 32), BF16), variant=variant)):
        with pytest.raises(ValueError, match=r"variant: .*'avx2\\x00junk'"):
            call("avx2\x00junk")


@needs_torch
def test_torch_ops_refuse_unknown_variant_names():
    import cpukern.torch  # noqa: F401

    packed = torch.from_numpy(ternary.pack(RNG.integers(-1, 2, (8, 32)).astype(np.int8)).view(np.int32))
    x = torch.randn(32)
    for name in ("amx", "vec", "neon", "avx2x"):
        with pytest.raises(ValueError, match=r"variant: .*'" + name + r"'.*known: .*reference"):
            torch.ops.cpukern.ternary_gemv(packed, x, None, "fp32", name)
    torch.ops.cpukern.ternary_gemv(packed, x, None, "fp32", "auto")
    w13 = torch.randn(2, 64, 32).to(torch.bfloat16)
    w2 = torch.randn(2, 32, 32).to(torch.bfloat16)
    xb = torch.randn(1, 32).to(torch.bfloat16)
    args = (xb, w13, w2, torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.int32), "silu", None,
            None, False)
    from cpukern.torch.ops import VLLM_MOE_ISA_ALIASES
    aliases = VLLM_MOE_ISA_ALIASES[cpukern.cpu_info()["arch"]]
    variants = [v["name"] for v in cpukern.kernels("fused_moe")]
    for name in ("amx", "vec", "neon"):
        if name in aliases or name in variants:
            torch.ops.cpukern.fused_moe(*args, name)
        else:
            with pytest.raises(ValueError, match=r"variant: .*'" + name + "'"):
                torch.ops.cpukern.fused_moe(*args, name)


# --- the old name isa= (issue 46: one name per concept) ------------------------------------------

def _old_keyword_calls():
    """One call per function that names a registry row, each given the old keyword isa=."""
    from cpukern import linear, widely_linear

    tw, _ = small_ternary()
    blob = cpukern.to_bytes(tw)
    x = np.ones(32, np.float32)
    planes, scales = widely_linear.quantize(RNG.standard_normal((8, 64)).astype(np.float32), 2)
    layer = widely_linear.prepare(planes, scales, 32)
    p13 = moe.prepare(np.ones((2, 8, 16), BF16))
    p2 = moe.prepare(np.ones((2, 16, 4), BF16))
    tw13, ids = moe.route(np.ones((1, 2), np.float32), 1)
    lw = linear.prepare(np.ones((4, 16), BF16))
    return {
        "ternary.prepare": lambda: ternary.prepare(ternary.pack(np.ones((1, 16), np.int8)), 16,
                                                   isa="reference"),
        "ternary.gemv": lambda: ternary.gemv(tw, x, isa=""),
        "ternary.from_buffer": lambda: ternary.from_buffer(blob, isa="reference"),
        "widely_linear.prepare": lambda: widely_linear.prepare(planes, scales, 32, isa="reference"),
        "widely_linear.apply": lambda: widely_linear.apply(layer, np.ones(64, np.float32), isa=""),
        "moe.prepare": lambda: moe.prepare(np.ones((1, 2, 2), BF16), isa="reference"),
        "moe.fused_moe": lambda: moe.fused_moe(np.ones((1, 16), BF16), p13, p2, tw13, ids,
                                               isa=""),
        "moe.from_buffer": lambda: moe.from_buffer(cpukern.to_bytes(p13), isa="reference"),
        "moe.load_gpt_oss": lambda: moe.load_gpt_oss("no_such_dir", 0, isa="reference"),
        "linear.prepare": lambda: linear.prepare(np.ones((2, 2), BF16), isa="reference"),
        "linear.linear": lambda: linear.linear(np.ones((1, 16), BF16), lw, isa=""),
        "cpukern.from_buffer": lambda: cpukern.from_buffer(blob, isa="reference"),
        "PackedWeights.from_buffer": lambda: cpukern.PackedWeights.from_buffer(blob, isa="reference"),
    }


def test_the_old_keyword_isa_is_refused():
    """variant= is the one name of a registry row: isa= (its old name) is no alias, a TypeError
    naming it, and the same call with variant= runs."""
    for name, call in _old_keyword_calls().items():
        with pytest.raises(TypeError, match="isa"):
            call()
            pytest.fail(f"{name} accepted isa=")
    tw, _ = small_ternary()
    assert ternary.prepare(ternary.pack(np.ones((1, 16), np.int8)), 16,
                           variant="reference").variant == "reference"
    assert ternary.from_buffer(cpukern.to_bytes(tw), variant=tw.variant).variant == tw.variant


def test_packed_weights_have_variant_and_no_isa():
    tw, _ = small_ternary()
    p13 = moe.prepare(np.ones((1, 2, 2), BF16), variant="reference")
    for w in (tw, p13):
        assert not hasattr(w, "isa"), w
        assert w.variant in [v["name"] for v in cpukern.kernels(
            "ternary_gemv" if w.op == "ternary" else "fused_moe")] + ["reference"]
    assert p13.variant == "reference" and "variant='reference'" in repr(p13)
    assert "isa" not in dir(cpukern.PackedWeights)


@needs_torch
def test_torch_layer_takes_variant_and_refuses_isa():
    """The modules' constructors and cpukern's torch ops name the row variant; the vLLM-order ops
    keep vLLM's own argument name, isa (vLLM calls them)."""
    import cpukern.torch as ct

    lin = torch.nn.Linear(32, 8)
    with pytest.raises(TypeError, match="isa"):
        ct.TernaryLinear.from_linear(lin, isa="reference")
    with pytest.raises(TypeError, match="isa"):
        ct.Linear.from_linear(torch.nn.Linear(16, 4), isa="reference")
    with pytest.raises(TypeError, match="isa"):
        ct.WidelyLinear.from_linear(lin, isa="reference")
    with pytest.raises(TypeError, match="isa"):
        ct.patch(lin, isa="reference")
    mod = ct.TernaryLinear.from_linear(lin, variant="reference")
    assert mod.weight.weights.variant == "reference"
    for op in ("ternary_gemv", "widely_linear", "fused_moe", "linear"):
        args = [a.name for a in getattr(torch.ops.cpukern, op).default._schema.arguments]
        assert "variant" in args and "isa" not in args, (op, args)
    for op in ("prepack_moe_weight", "cpu_fused_moe"):
        args = [a.name for a in getattr(torch.ops.cpukern, op).default._schema.arguments]
        assert args[-1] == "isa" and "variant" not in args, (op, args)
    w = torch.randn(2, 8, 16).to(torch.bfloat16)
    with pytest.raises(ValueError, match="^isa: unknown variant 'avx9000'"):
        torch.ops.cpukern.prepack_moe_weight(w, torch.empty_like(w), "avx9000")
    with pytest.raises(ValueError, match="^variant: unknown variant 'avx9000'"):
        torch.ops.cpukern.fused_moe(torch.ones(1, 16).to(torch.bfloat16), w,
                                    torch.randn(2, 16, 4).to(torch.bfloat16), torch.ones(1, 1),
                                    torch.zeros(1, 1, dtype=torch.int32), variant="avx9000")


# --- torch tensors and out= over memory that cannot be written -----------------------------------

@needs_torch
def test_gemv_refuses_a_lazily_negated_tensor():
    tw, w = small_ternary()
    x = torch.randn(32)
    with pytest.raises(TypeError, match=r"x: .*lazily negated.*resolve_neg"):
        ternary.gemv(tw, x._neg_view())
    np.testing.assert_allclose(ternary.gemv(tw, x._neg_view().resolve_neg()).numpy(),
                               -ternary.gemv(tw, x).numpy())
    # the torch ops resolve it (as torch ops do)
    import cpukern.torch  # noqa: F401
    packed = torch.from_numpy(ternary.pack(w).view(np.int32))
    y = torch.ops.cpukern.ternary_gemv(packed, x._neg_view())
    torch.testing.assert_close(y, -torch.ops.cpukern.ternary_gemv(packed, x))


@needs_torch
def test_torch_out_over_read_only_memory_is_a_type_error(tmp_path):
    path = tmp_path / "w.safetensors"
    rng = np.random.default_rng(2)
    w = rng.integers(-1, 2, (8, 32)).astype(np.int8)
    ternary.save(path, {"w": ternary.pack(w), "y": np.zeros((8,), np.float32)}, k={"w": 32})
    ck = ternary.load(path)
    ro = ck["y"]
    assert not ro.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the array is not writable
        out = torch.from_numpy(ro)
    tw = ternary.prepare(ternary.pack(w), 32)
    x = rng.standard_normal(32).astype(np.float32)
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, torch.from_numpy(x), out=out)
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, x, out=out)
    # the numpy array itself: the same error
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, x, out=ro)
    # memory torch allocated works (shared memory included); memory it only wraps
    # (from_numpy, frombuffer, DLPack) carries no read-only flag in torch and is refused
    for ok in (torch.empty(8), torch.zeros(16)[::2].clone(), torch.empty(8).share_memory_()):
        np.testing.assert_array_equal(ternary.gemv(tw, x, out=ok).numpy(), ternary.gemv(tw, x))
    with pytest.raises(TypeError, match="out: expected a writeable array.*torch.empty"):
        ternary.gemv(tw, x, out=torch.from_numpy(np.empty(8, np.float32)))


@needs_torch
def test_out_over_immutable_memory_is_refused():
    tw, _ = small_ternary()
    x = RNG.standard_normal(32).astype(np.float32)
    frozen = bytes(32)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the memory is not writable
        outs = [torch.frombuffer(frozen, dtype=torch.float32), torch.from_numpy(ro)]
    for out in outs:
        with pytest.raises(TypeError, match="out: expected a writeable array"):
            ternary.gemv(tw, x, out=out)
    assert frozen == bytes(32) and not ro.any()


# --- 16-bit integer arrays ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int16", "uint16"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_16_bit_integers_are_not_taken_for_bfloat16(dtype, kind):
    """The extension reads bf16 as 16-bit patterns; a 16-bit integer array in a bf16 argument
    must be refused, not read as bf16 bits."""
    if kind == "torch" and torch is None:
        pytest.skip("torch is not installed")
    w = moe.prepare(RNG.standard_normal((1, 8, 32)).astype(BF16))
    x = np.ones((2, 32), dtype=dtype)
    if kind == "torch":
        if not hasattr(torch, dtype):
            pytest.skip(f"this torch has no torch.{dtype}")
        x = torch.from_numpy(x.astype(np.int16)).to(getattr(torch, dtype))
    with pytest.raises(TypeError, match=r"^x: .*16-bit integers"):
        cpukern.linear.linear(x, w)
    out = np.empty((2, 8), dtype=dtype)
    with pytest.raises(TypeError, match=r"^out: .*16-bit integers"):
        cpukern.linear.linear(np.ones((2, 32), BF16), w, out=out)
