"""One adapter per Hugging Face model family: which modules cpukern takes, how their tensors map
to cpukern layouts, and which activation, bias and scale rules apply. ``patch``, the
transformers quantizer (cpukern.torch.hf_quantizer) and ``from_pretrained`` all go through
these; a new family is one module here with a ``FAMILY`` (a ``Family``) listed in ``_MODULES``."""

from __future__ import annotations

import importlib
from typing import Any

from cpukern.torch.families.common import Family

__all__ = ["Family", "family_for", "SUPPORTED"]

_MODULES = {"bitnet": "bitnet", "gpt_oss": "gpt_oss", "qwen3_moe": "qwen3_moe"}
SUPPORTED = tuple(_MODULES)


def family_for(config: Any, what: str = "model") -> Family:
    """The adapter of a transformers config (its ``model_type``); ValueError naming `what` for
    a family cpukern has none for."""
    kind = getattr(config, "model_type", None)
    if not isinstance(kind, str) or kind not in _MODULES:
        raise ValueError(f"{what}: model_type {kind!r} is not one of {SUPPORTED}")
    return importlib.import_module(f"cpukern.torch.families.{_MODULES[kind]}").FAMILY
