"""PyTorch conventions of cpukern.torch: module dtypes (the packed weights keep their format
whatever .half() / .to(dtype) do), the thread rule, packing once at construction, and
vLLM-style parameter replacement."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")

import cpukern  # noqa: E402
import cpukern.torch as ct  # noqa: E402
from cpukern import _ext  # noqa: E402

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _linear(i, o, seed=0):
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(i, o)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(o, i, generator=g))
        lin.bias.copy_(torch.randn(o, generator=g))
    return lin


def _module(kind):
    g = torch.Generator().manual_seed(1)
    return {
        "ternary": lambda: ct.TernaryLinear.from_linear(_linear(64, 24)),
        "widely": lambda: ct.WidelyLinear.from_linear(_linear(32, 16)),
        "dense": lambda: ct.Linear.from_linear(_linear(32, 16)),
        "moe": lambda: ct.FusedMoE.from_experts(torch.randn(4, 48, 32, generator=g) / 8,
                                                torch.randn(4, 32, 24, generator=g) / 8),
    }[kind]()


KINDS = ["ternary", "widely", "dense", "moe"]


def _modules():
    return {kind: _module(kind) for kind in KINDS}


def _args(kind, mod, dtype=torch.float32):
    g = torch.Generator().manual_seed(2)
    if kind == "moe":
        return torch.randn(5, 32, generator=g).to(dtype), torch.randn(5, 4, generator=g)
    return (torch.randn(5, mod.in_features, generator=g).to(dtype),)


def _state(mod):
    return {k: v.clone() for k, v in mod.state_dict().items()}


# --- dtypes ---------------------------------------------------------------------------------

CONVERSIONS = {
    "half": (lambda m: m.half(), torch.float16),
    "bfloat16": (lambda m: m.bfloat16(), torch.bfloat16),
    "float": (lambda m: m.half().float(), torch.float32),
    "to": (lambda m: m.to(torch.float16), torch.float16),
    "to_device": (lambda m: m.bfloat16().to("cpu"), torch.bfloat16),
    "double": (lambda m: m.double(), torch.float64),
    "to_dtype_kwarg": (lambda m: m.to(dtype=torch.float16), torch.float16),
}


@pytest.mark.parametrize("conv", list(CONVERSIONS))
@pytest.mark.parametrize("kind", KINDS)
def test_dtype_conversions_keep_the_weights_packed_and_set_the_activation_dtype(kind, conv):
    mod = _module(kind)
    packed = {n: getattr(mod, n) for n in mod._PACKED}
    before = _state(mod)
    want = mod(*_args(kind, mod))
    fn, dtype = CONVERSIONS[conv]
    assert fn(mod) is mod
    assert mod.dtype == dtype
    for name, t in packed.items():  # the same packed tensors, still packed
        assert getattr(mod, name) is t and isinstance(t, ct.PackedWeightsTensor), name
    after = mod.state_dict()
    for name, t in before.items():  # same dtype, same bits: the packed format (and biases) untouched
        assert after[name].dtype == t.dtype and torch.equal(after[name], t), name
    args = _args(kind, mod, dtype)
    y = mod(*args)
    assert y.dtype == dtype
    assert torch.equal(mod(*_args(kind, mod)), want)  # float32 in: what it computed before


@pytest.mark.parametrize("kind", ["ternary", "widely"])
def test_ternary_layers_return_the_input_dtype_computed_in_fp32(kind):
    mod = _module(kind)
    for dtype in FLOATS:
        x = _args(kind, mod, dtype)[0]
        y = mod(x)
        assert y.dtype == dtype
        assert torch.equal(y, mod(x.float()).to(dtype))  # fp32 kernel, one rounding at the end


def test_dense_linear_computes_in_bf16_and_returns_the_input_dtype():
    mod = _module("dense")
    x = _args("dense", mod)[0]
    xb = x.bfloat16()
    yb = mod(xb)
    assert yb.dtype == torch.bfloat16
    for dtype in (torch.float32, torch.float16, torch.float64):
        y = mod(xb.to(dtype))  # bf16-representable input: the bf16 result, converted
        assert y.dtype == dtype and torch.equal(y, yb.to(dtype))


def test_fused_moe_accepts_fp32_and_fp16_activations():
    mod = _module("moe")
    x, logits = _args("moe", mod)
    xb = x.bfloat16()
    yb = mod(xb, logits)
    assert yb.dtype == torch.bfloat16
    for dtype in (torch.float32, torch.float16):
        y = mod(xb.to(dtype), logits)  # bf16-representable input: the bf16 result, converted
        assert y.dtype == dtype and torch.equal(y, yb.to(dtype))
    tw, ids = mod.route(logits)
    assert torch.equal(mod.experts(xb, tw.half(), ids), mod.experts(xb, tw.half().float(), ids))


@pytest.mark.parametrize("kind", KINDS)
def test_non_float_activations_are_a_type_error_naming_x(kind):
    mod = _module(kind)
    args = list(_args(kind, mod))
    args[0] = args[0].to(torch.int32)
    with pytest.raises(TypeError, match="^x: expected a float32, float16, bfloat16"):
        mod(*args)


@pytest.mark.parametrize("kind", ["ternary", "dense", "moe"])
def test_half_module_compiles_fullgraph(kind):
    torch._dynamo.reset()  # the modules share forward code objects: keep clear of the recompile limit
    mod = _module(kind).half()
    args = _args(kind, mod, torch.float16)
    got = torch.compile(mod, backend="aot_eager", fullgraph=True)(*args)
    assert got.dtype == torch.float16 and torch.equal(got, mod(*args))


# --- threads --------------------------------------------------------------------------------

@pytest.fixture
def recorded_threads(monkeypatch):
    """The `threads` argument each extension entry receives."""
    seen = []
    for name in ("ternary_gemv", "widely_linear_run", "moe_linear", "moe_fused_moe"):
        real = getattr(_ext, name)

        def spy(*args, _real=real):
            seen.append(args[-2])  # (..., threads, out)
            return _real(*args)
        monkeypatch.setattr(_ext, name, spy)
    torch_threads = torch.get_num_threads()
    yield seen
    torch.set_num_threads(torch_threads)
    cpukern.set_num_threads(0)


def test_ops_follow_torch_threads_until_set_num_threads(recorded_threads):
    mods = _modules()
    cpukern.set_num_threads(0)
    assert not cpukern.num_threads_is_set()
    for n in (1, 2):
        torch.set_num_threads(n)
        recorded_threads.clear()
        for kind, mod in mods.items():
            mod(*_args(kind, mod))
        assert recorded_threads == [n] * len(mods)
    cpukern.set_num_threads(3)
    assert cpukern.num_threads_is_set()
    recorded_threads.clear()
    for kind, mod in mods.items():
        mod(*_args(kind, mod))
    assert recorded_threads == [0] * len(mods)  # 0: cpukern's own default, i.e. the 3 set above
    assert cpukern.get_num_threads() == 3
    cpukern.set_num_threads(0)
    assert not cpukern.num_threads_is_set()


def test_numpy_api_ignores_torch_threads(recorded_threads):
    import numpy as np
    from cpukern import ternary

    torch.set_num_threads(1)
    w = ternary.prepare(ternary.pack(np.ones((4, 32), np.int8)), 32)
    ternary.gemv(w, np.ones(32, np.float32))
    assert recorded_threads == [0]


# --- packing once, at construction; vLLM parameter replacement -------------------------------

@pytest.fixture
def prepares(monkeypatch):
    """How many times each prepare entry of the extension runs (the dense layer packs with the
    MoE packer)."""
    counts = {"ternary": 0, "widely": 0, "moe": 0}
    for kind, name in (("ternary", "ternary_prepare"), ("widely", "widely_linear_prepare"),
                       ("moe", "moe_prepare")):
        real = getattr(_ext, name)

        def spy(*args, _real=real, _kind=kind):
            counts[_kind] += 1
            return _real(*args)
        monkeypatch.setattr(_ext, name, spy)
    return counts


PACKER = {"ternary": "ternary", "widely": "widely", "dense": "moe", "moe": "moe"}
EMPTY = {"ternary": lambda: ct.TernaryLinear(64, 24), "widely": lambda: ct.WidelyLinear(32, 16),
         "dense": lambda: ct.Linear(32, 16), "moe": lambda: ct.FusedMoE(4, 32, 24)}


def _replace_parameter(mod, name):
    """What vLLM's replace_parameter does: a new Parameter object over the same data."""
    old = getattr(mod, name)
    delattr(mod, name)
    mod.register_parameter(name, torch.nn.Parameter(old.detach(), requires_grad=False))
    return old


@pytest.mark.parametrize("kind", KINDS)
def test_packed_at_construction_and_survive_replace_parameter(kind, prepares):
    """The constructor packs (the load-time cost is there); forwards, replace_parameter and
    loading the packed state_dict elsewhere pack nothing."""
    mod = _module(kind)
    made = dict(prepares)
    assert made[PACKER[kind]] == len(mod._PACKED)  # once per packed weight
    args = _args(kind, mod)
    want = mod(*args)
    mod(*args)
    assert prepares == made
    for name in mod._PACKED:
        old = _replace_parameter(mod, name)
        new = getattr(mod, name)
        assert new is not old and isinstance(new, torch.nn.Parameter)
        assert isinstance(new, ct.PackedWeightsTensor) and new.blob is old.blob
        del old
    assert torch.equal(mod(*args), want)
    fresh = EMPTY[kind]()
    fresh.load_state_dict(mod.state_dict())
    assert torch.equal(fresh(*args), want)
    assert prepares == made  # no repack after the replacement, nor on loading


def test_vllm_prepack_survives_replace_parameter(prepares):
    g = torch.Generator().manual_seed(3)
    w13 = (torch.randn(4, 48, 32, generator=g) / 6).to(torch.bfloat16)
    w2 = (torch.randn(4, 32, 24, generator=g) / 5).to(torch.bfloat16)
    b13 = (torch.randn(4, 48, generator=g) / 10).to(torch.bfloat16)
    b2 = (torch.randn(4, 32, generator=g) / 10).to(torch.bfloat16)
    m = ct.FusedMoE.from_experts(w13, w2, b13, b2, activation="swigluoai")
    x = torch.randn(5, 32).to(torch.bfloat16)
    tw, ids = m.route(torch.randn(5, 4))
    p13, p2 = torch.empty_like(w13), torch.empty_like(w2)
    before = prepares["moe"]
    torch.ops.cpukern.prepack_moe_weight(w13, p13, "vec")
    torch.ops.cpukern.prepack_moe_weight(w2, p2, "vec")
    assert prepares["moe"] == before + 2
    layer = torch.nn.Module()  # vLLM: layer.w13_weight = Parameter(packed), old tensor dropped
    layer.w13 = torch.nn.Parameter(p13, requires_grad=False)
    layer.w2 = torch.nn.Parameter(p2, requires_grad=False)
    del p13, p2
    out = torch.empty_like(x)
    torch.ops.cpukern.cpu_fused_moe(out, x, layer.w13, layer.w2, b13, b2, tw, ids,
                                    False, "swigluoai", "")
    assert prepares["moe"] == before + 2  # cpu_fused_moe used the load-time packing
    torch.testing.assert_close(out, m.experts(x, tw, ids), rtol=0, atol=0)


@pytest.mark.parametrize("module", ["TernaryLinear", "WidelyLinear", "Linear"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "bool", "complex64"])
@pytest.mark.parametrize("param", ["weight", "bias"])
def test_from_linear_refuses_non_float_weights(module, param, dtype):
    """from_linear quantises or rounds float weights: integer, bool and complex ones are a
    TypeError naming the tensor, never taken by value (issue 47, item 8)."""
    import re

    lin = torch.nn.Linear(32, 8)
    t = torch.ones_like(getattr(lin, param)).to(getattr(torch, dtype))
    setattr(lin, param, torch.nn.Parameter(t, requires_grad=False))
    with pytest.raises(TypeError, match="^" + re.escape(
            f"linear.{param}: expected a floating-point tensor, got {t.dtype} tensor of shape "
            f"{tuple(t.shape)}")):
        getattr(ct, module).from_linear(lin)


def test_vllm_cpu_fused_moe_refuses_an_output_it_may_not_write():
    """vLLM's cpu_fused_moe writes its `output` argument: memory torch only wraps (here
    read-only bytes) is refused naming it, and stays as it was."""
    g = torch.Generator().manual_seed(4)
    w13 = (torch.randn(4, 48, 32, generator=g) / 6).to(torch.bfloat16)
    w2 = (torch.randn(4, 32, 24, generator=g) / 5).to(torch.bfloat16)
    x = torch.randn(5, 32).to(torch.bfloat16)
    tw, ids = ct.FusedMoE.from_experts(w13, w2).route(torch.randn(5, 4))
    frozen = bytes(5 * 32 * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the memory is not writable
        out = torch.frombuffer(frozen, dtype=torch.bfloat16).reshape(5, 32)
    with pytest.raises(TypeError, match=r"^output: expected a writeable array"):
        torch.ops.cpukern.cpu_fused_moe(out, x, w13, w2, None, None, tw, ids, False, "silu", "")
    assert frozen == bytes(5 * 32 * 2)
