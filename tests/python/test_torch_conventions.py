"""PyTorch conventions of cpukern.torch: module dtypes, the thread rule, load-time
preparation and vLLM-style parameter replacement."""

from __future__ import annotations

import io
import pickle

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


def _modules():
    g = torch.Generator().manual_seed(1)
    return {
        "ternary": ct.TernaryLinear.from_linear(_linear(64, 24)),
        "widely": ct.WidelyLinear.from_linear(_linear(32, 16)),
        "moe": ct.FusedMoE.from_experts(torch.randn(4, 48, 32, generator=g) / 8,
                                        torch.randn(4, 32, 24, generator=g) / 8),
    }


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
}


@pytest.mark.parametrize("conv", list(CONVERSIONS))
@pytest.mark.parametrize("kind", ["ternary", "widely", "moe"])
def test_dtype_conversions_keep_the_weights_and_set_the_activation_dtype(kind, conv):
    mod = _modules()[kind]
    before = _state(mod)
    fn, dtype = CONVERSIONS[conv]
    assert fn(mod) is mod
    assert mod.dtype == dtype
    after = mod.state_dict()
    for name, t in before.items():  # same dtype, same bits: the prepared format is untouched
        assert after[name].dtype == t.dtype and torch.equal(after[name], t), name
    args = _args(kind, mod, dtype)
    y = mod(*args)
    assert y.dtype == dtype


@pytest.mark.parametrize("kind", ["ternary", "widely"])
def test_linear_layers_return_the_input_dtype_computed_in_fp32(kind):
    mod = _modules()[kind]
    for dtype in FLOATS:
        x = _args(kind, mod, dtype)[0]
        y = mod(x)
        assert y.dtype == dtype
        assert torch.equal(y, mod(x.float()).to(dtype))  # fp32 kernel, one rounding at the end


def test_fused_moe_accepts_fp32_and_fp16_activations():
    mod = _modules()["moe"]
    x, logits = _args("moe", mod)
    xb = x.bfloat16()
    yb = mod(xb, logits)
    assert yb.dtype == torch.bfloat16
    for dtype in (torch.float32, torch.float16):
        y = mod(xb.to(dtype), logits)  # bf16-representable input: the bf16 result, converted
        assert y.dtype == dtype and torch.equal(y, yb.to(dtype))
    tw, ids = mod.route(logits)
    assert torch.equal(mod.experts(xb, tw.half(), ids), mod.experts(xb, tw.half().float(), ids))


@pytest.mark.parametrize("kind", ["ternary", "moe"])
def test_non_float_activations_are_a_type_error_naming_x(kind):
    mod = _modules()[kind]
    args = list(_args(kind, mod))
    args[0] = args[0].to(torch.int32)
    with pytest.raises(TypeError, match="^x: expected a float32, float16, bfloat16"):
        mod(*args)


def test_half_module_compiles_fullgraph():
    mod = _modules()["ternary"].half()
    x = _args("ternary", mod, torch.float16)[0]
    got = torch.compile(mod, backend="aot_eager", fullgraph=True)(x)
    assert got.dtype == torch.float16 and torch.equal(got, mod(x))


# --- threads --------------------------------------------------------------------------------

@pytest.fixture
def recorded_threads(monkeypatch):
    """The `threads` argument each extension entry receives."""
    seen = []
    for name in ("ternary_gemv", "widely_linear_run", "moe_fused_moe"):
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
        assert recorded_threads == [n, n, n]
    cpukern.set_num_threads(3)
    assert cpukern.num_threads_is_set()
    recorded_threads.clear()
    for kind, mod in mods.items():
        mod(*_args(kind, mod))
    assert recorded_threads == [0, 0, 0]  # 0: cpukern's own default, i.e. the 3 set above
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


# --- load-time preparation, vLLM parameter replacement ----------------------------------------

@pytest.fixture
def prepares(monkeypatch):
    """How many times each prepare entry of the extension runs."""
    counts = {"ternary": 0, "widely": 0, "moe": 0}
    for kind, name in (("ternary", "ternary_prepare"), ("widely", "widely_linear_prepare"),
                       ("moe", "moe_prepare")):
        real = getattr(_ext, name)

        def spy(*args, _real=real, _kind=kind):
            counts[_kind] += 1
            return _real(*args)
        monkeypatch.setattr(_ext, name, spy)
    return counts


WEIGHTS = {"ternary": "packed", "widely": "planes", "moe": "w13"}


def _replace_parameter(mod, name):
    """What vLLM's replace_parameter does: a new Parameter object over the same data."""
    old = getattr(mod, name)
    delattr(mod, name)
    mod.register_parameter(name, torch.nn.Parameter(old.detach(), requires_grad=False))
    return old


@pytest.mark.parametrize("kind", ["ternary", "widely", "moe"])
def test_prepare_at_load_time_and_survive_replace_parameter(kind, prepares):
    mod = _modules()[kind]
    args = _args(kind, mod)
    ct.clear_cache()
    assert mod.process_weights_after_loading() is mod  # vLLM's name for prepare()
    made = dict(prepares)
    assert made[kind] >= 1
    want = mod(*args)
    assert prepares == made  # the forward found the layout prepare() made
    old = _replace_parameter(mod, WEIGHTS[kind])
    assert getattr(mod, WEIGHTS[kind]) is not old
    del old
    assert torch.equal(mod(*args), want)
    assert prepares == made  # no repack after the replacement
    with torch.no_grad():  # an in-place update through the new Parameter is seen
        getattr(mod, WEIGHTS[kind]).copy_(getattr(_modules()[kind], WEIGHTS[kind]).flip(0))
    assert not torch.equal(mod(*args), want)
    assert prepares[kind] == made[kind] + 1


def test_vllm_prepack_survives_replace_parameter(prepares):
    from test_torch import moe_layer  # noqa: PLC0415

    m = moe_layer(bias=True, act="swigluoai")
    x = torch.randn(5, 32).to(torch.bfloat16)
    tw, ids = m.route(torch.randn(5, 4))
    p13, p2 = torch.empty_like(m.w13), torch.empty_like(m.w2)
    torch.ops.cpukern.prepack_moe_weight(m.w13, p13, "vec")
    torch.ops.cpukern.prepack_moe_weight(m.w2, p2, "vec")
    assert prepares["moe"] == 2
    layer = torch.nn.Module()  # vLLM: layer.w13_weight = Parameter(packed), old tensor dropped
    layer.w13 = torch.nn.Parameter(p13, requires_grad=False)
    layer.w2 = torch.nn.Parameter(p2, requires_grad=False)
    del p13, p2
    out = torch.empty_like(x)
    torch.ops.cpukern.cpu_fused_moe(out, x, layer.w13, layer.w2, m.w13_bias, m.w2_bias, tw, ids,
                                    False, "swigluoai", "")
    assert prepares["moe"] == 2  # cpu_fused_moe used the load-time packing
    torch.testing.assert_close(out, m.experts(x, tw, ids), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["ternary", "widely", "moe"])
def test_modules_survive_state_dict_torch_save_and_pickle(kind):
    mod = _modules()[kind].prepare()
    args = _args(kind, mod)
    want = mod(*args)
    buf = io.BytesIO()
    torch.save(mod, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded(*args), want)
    assert torch.equal(pickle.loads(pickle.dumps(mod))(*args), want)
    fresh = _modules()[kind]
    fresh.load_state_dict(torch.load(io.BytesIO(_saved(mod.state_dict())), weights_only=True))
    assert torch.equal(fresh(*args), want)


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


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
