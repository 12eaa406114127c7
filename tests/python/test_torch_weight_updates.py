"""cpukern.torch never serves stale weights: every module, its weights replaced (load_state_dict,
copy_ of another PackedWeightsTensor, assigning the buffer, vLLM's replace_parameter) under
plain mode, torch.no_grad and torch.inference_mode, returns what a freshly loaded module with
the new weights returns. The packed weights cannot be edited in place (NotImplementedError,
nothing changed), and modules keep no cache that inference tensors could leave stale (the
untracked-weights warning is the raw-weight ops' alone)."""

from __future__ import annotations

import contextlib
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed here")

from cpukern.torch import FusedMoE, Linear, PackedWeightsTensor, TernaryLinear, WidelyLinear  # noqa: E402
from packed_helpers import random_linear  # noqa: E402

MODES = {"plain": contextlib.nullcontext, "no_grad": torch.no_grad,
         "inference_mode": torch.inference_mode}
KINDS = ["ternary", "ternary_int8", "widely", "dense", "moe"]


def _make(kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    if kind == "ternary":
        return TernaryLinear.from_linear(random_linear(64, 24, g))
    if kind == "ternary_int8":
        return TernaryLinear.from_linear(random_linear(64, 24, g), act="int8")
    if kind == "widely":
        return WidelyLinear.from_linear(random_linear(32, 16, g))
    if kind == "dense":
        return Linear.from_linear(random_linear(32, 16, g))
    if kind == "moe":
        return FusedMoE.from_experts(torch.randn(4, 64, 32, generator=g) / 8,
                                     torch.randn(4, 32, 32, generator=g) / 8)
    raise AssertionError(kind)


def _empty(kind):
    return {"ternary": lambda: TernaryLinear(64, 24),
            "ternary_int8": lambda: TernaryLinear(64, 24, act="int8"),
            "widely": lambda: WidelyLinear(32, 16), "dense": lambda: Linear(32, 16),
            "moe": lambda: FusedMoE(4, 32, 32)}[kind]()


def _inputs(kind, mod):
    g = torch.Generator().manual_seed(99)
    if kind == "moe":
        return (torch.randn(5, 32, generator=g).to(torch.bfloat16), torch.randn(5, 4, generator=g))
    return (torch.randn(5, mod.in_features, generator=g),)


def _fresh(kind, state):
    """An empty module loaded with `state`: what the weights compute."""
    mod = _empty(kind)
    mod.load_state_dict(state)
    return mod


def _assign(mod, src):
    for name in mod._PACKED:
        setattr(mod, name, getattr(src, name))  # a buffer assigned anew
    for name in ("bias", "w13_bias", "w2_bias"):
        if hasattr(mod, name):
            setattr(mod, name, getattr(src, name))


def _copy(mod, src):
    for name in mod._PACKED:
        getattr(mod, name).copy_(getattr(src, name))
    for name in ("bias", "w13_bias", "w2_bias"):
        if getattr(mod, name, None) is not None:
            getattr(mod, name).copy_(getattr(src, name))


def _replace_parameter(mod, src):
    """vLLM's replace_parameter: a new Parameter object (over the new data) under the old name."""
    for name in list(mod._PACKED) + ["bias", "w13_bias", "w2_bias"]:
        if getattr(mod, name, None) is not None:
            delattr(mod, name)
            mod.register_parameter(name, torch.nn.Parameter(getattr(src, name), requires_grad=False))


UPDATES = {
    "load_state_dict": lambda mod, src: mod.load_state_dict(src.state_dict()),
    "copy_": _copy,
    "assign": _assign,
    "replace_parameter": _replace_parameter,
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind", KINDS)
def test_weight_replacements_are_always_seen(kind, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # nothing here is an untracked weight
        with MODES[mode]():
            mod = _make(kind, 0)
            args = _inputs(kind, mod)
            for seed, (name, update) in enumerate(UPDATES.items(), start=1):
                before = mod(*args).clone()
                mod(*args)  # anything a forward could keep is made by now
                src = _make(kind, seed)
                update(mod, src)
                got = mod(*args)
                with torch.inference_mode(False), torch.no_grad():
                    want = _fresh(kind, {k: v.clone() for k, v in src.state_dict().items()})(
                        *[a.clone() for a in args])
                assert torch.equal(got, want), (kind, mode, name)
                assert not torch.equal(got, before), (kind, mode, name)  # the update mattered
                assert all(type(getattr(mod, n)) is PackedWeightsTensor for n in mod._PACKED)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind", KINDS)
def test_in_place_edits_of_the_packed_weights_are_refused(kind, mode):
    """What used to edit the plain weights in place (copy_ of values, mul_) is refused on the
    packed ones, which then compute what they did."""
    with MODES[mode]():
        mod = _make(kind, 0)
        args = _inputs(kind, mod)
        want = mod(*args).clone()
        t = getattr(mod, next(iter(mod._PACKED)))
        with pytest.raises(NotImplementedError, match="is not supported"):
            t.mul_(2)
        with pytest.raises(TypeError, match="^src: expected a PackedWeightsTensor"):
            t.copy_(torch.zeros(tuple(t.shape), dtype=torch.uint8))
        assert torch.equal(mod(*args), want)


@pytest.mark.parametrize("what", ["state_dict", "parameter"])
def test_state_dict_and_parameters_of_a_module_work_in_inference_mode(what):
    mod = _make("ternary", 0)  # made outside inference mode, as a loaded model is
    x = _inputs("ternary", mod)[0]
    with torch.inference_mode():
        if what == "state_dict":
            fresh = _fresh("ternary", mod.state_dict())
        else:
            fresh = _empty("ternary")
            fresh.bias = mod.bias
            fresh.weight = torch.nn.Parameter(mod.weight, requires_grad=False)
        assert torch.equal(fresh(x), mod(x))


def test_the_untracked_weights_warning_is_for_the_raw_weight_ops_only():
    """The modules keep no cache keyed by tensor versions (the packed weights are the weights),
    so inference tensors cost them nothing; the raw-weight ops, which do, warn once."""
    import cpukern.torch._weight_cache as wc
    from cpukern import ternary

    wc._WARNED = False
    with torch.inference_mode():
        mods = {kind: _make(kind, 0) for kind in KINDS}
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for kind, mod in mods.items():
                mod(*_inputs(kind, mod))
        packed = ternary.pack(torch.randint(-1, 2, (24, 64), dtype=torch.int8))
        x = torch.randn(2, 64)
        with pytest.warns(RuntimeWarning, match="inference_mode"):
            torch.ops.cpukern.ternary_gemv(packed, x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.ops.cpukern.ternary_gemv(packed, x)
