"""cpukern.torch never serves stale prepared weights: every module, built and updated in place
(copy_, mul_, load_state_dict) under plain mode, torch.no_grad and torch.inference_mode, returns
what a freshly built module with the new weights returns."""

from __future__ import annotations

import contextlib
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed here")

from cpukern.torch import FusedMoE, TernaryLinear, WidelyLinear  # noqa: E402

MODES = {"plain": contextlib.nullcontext, "no_grad": torch.no_grad,
         "inference_mode": torch.inference_mode}


def _make(kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    if kind == "ternary":
        return TernaryLinear.from_linear(_linear(64, 24, g))
    if kind == "ternary_int8":
        return TernaryLinear.from_linear(_linear(64, 24, g), act="int8")
    if kind == "widely":
        return WidelyLinear.from_linear(_linear(32, 16, g))
    if kind == "moe":
        return FusedMoE.from_experts(torch.randn(4, 64, 32, generator=g) / 8,
                                     torch.randn(4, 32, 32, generator=g) / 8)
    raise AssertionError(kind)


def _linear(i, o, g):
    lin = torch.nn.Linear(i, o)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(o, i, generator=g))
        lin.bias.copy_(torch.randn(o, generator=g))
    return lin


def _inputs(kind, mod):
    g = torch.Generator().manual_seed(99)
    if kind == "moe":
        return (torch.randn(5, 32, generator=g).to(torch.bfloat16), torch.randn(5, 4, generator=g))
    return (torch.randn(5, mod.in_features, generator=g),)


def _fresh(kind, state):
    mod = _make(kind, 0)
    mod.load_state_dict({k: v.clone() for k, v in state.items()})
    return mod


def _updates(kind):
    """(name, fn(mod)) in-place updates of the module's weights."""
    first = {"ternary": "packed", "ternary_int8": "packed", "widely": "planes", "moe": "w13"}[kind]
    scaled = {"ternary": "scale", "ternary_int8": "scale", "widely": "scales", "moe": "w2"}[kind]
    other = _make(kind, 1)
    return [
        ("copy_", lambda m: getattr(m, first).copy_(getattr(other, first))),
        ("mul_", lambda m: getattr(m, scaled).mul_(2)),
        ("load_state_dict", lambda m: m.load_state_dict(_make(kind, 2).state_dict())),
    ]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind", ["ternary", "ternary_int8", "widely", "moe"])
def test_in_place_weight_updates_are_always_seen(kind, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the untracked-weights warning
        with MODES[mode]():
            mod = _make(kind, 0)
            args = _inputs(kind, mod)
            for name, update in _updates(kind):
                before = mod(*args).clone()
                mod(*args)  # cached now (where it can be)
                update(mod)
                got = mod(*args)
                with torch.inference_mode(False), torch.no_grad():
                    want = _fresh(kind, {k: v.clone() for k, v in mod.state_dict().items()})(
                        *[a.clone() for a in args])
                assert torch.equal(got, want), (kind, mode, name)
                assert not torch.equal(got, before), (kind, mode, name)  # the update mattered


def test_untracked_weights_warn_once():
    import cpukern.torch._weight_cache as wc

    wc._WARNED = False
    with torch.inference_mode():
        mod = _make("ternary", 0)
        x = torch.randn(2, 64)
        with pytest.warns(RuntimeWarning, match="inference_mode"):
            mod(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            mod(x)
