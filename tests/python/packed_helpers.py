"""Helpers the torch tests of packed weights share (test_torch_packed, test_torch_prepared,
test_torch_weight_updates)."""

from __future__ import annotations

import torch

from cpukern import _ext


def packed_buffers(mod: torch.nn.Module) -> dict:
    """A cpukern module's PackedWeightsTensor buffers by name."""
    return {n: getattr(mod, n) for n in mod._PACKED}


def random_linear(i: int, o: int, g: torch.Generator) -> torch.nn.Linear:
    """An nn.Linear (i -> o) with Gaussian weights and bias from `g`."""
    lin = torch.nn.Linear(i, o)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(o, i, generator=g))
        lin.bias.copy_(torch.randn(o, generator=g))
    return lin


class PackCounter:
    """Counts packing in the extension (prepare calls, and imports that packed again rather
    than viewing the blob) while active."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list = []
        for name in ("ternary_prepare", "widely_linear_prepare", "moe_prepare",
                     "packed_from_buffer"):
            orig = getattr(_ext, name)

            def counted(*a, _orig=orig, _name=name, **k):
                result = _orig(*a, **k)
                if _name != "packed_from_buffer" or not result.is_view:
                    self.calls.append(_name)
                return result
            monkeypatch.setattr(_ext, name, counted)
