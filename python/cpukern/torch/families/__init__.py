"""One adapter per Hugging Face model family: which modules cpukern takes, how their tensors map
to cpukern layouts, and which activation, bias and scale rules apply. ``patch``, the
transformers quantizer (cpukern.torch.hf_quantizer) and ``from_pretrained`` all go through
these; a new family is one module here with a ``FAMILY`` (a ``Family``) listed in ``_MODULES``."""

from __future__ import annotations

import copy
import importlib
from typing import Any

from cpukern.torch.families.common import Family

__all__ = ["Family", "family_for", "check_family", "checkpoint_layout", "SUPPORTED"]

_MODULES = {"bitnet": "bitnet", "gpt_oss": "gpt_oss", "qwen3_moe": "qwen3_moe"}
SUPPORTED = tuple(_MODULES)


def check_family(config: Any, what: str = "model") -> str:
    """The ``model_type`` of a transformers config, checked to be a family cpukern has an
    adapter for (ValueError naming `what`), without resolving the adapter."""
    kind = getattr(config, "model_type", None)
    if not isinstance(kind, str) or kind not in _MODULES:
        raise ValueError(f"{what}: model_type {kind!r} is not one of {SUPPORTED}")
    return kind


def family_for(config: Any, what: str = "model") -> Family:
    """The adapter of a transformers config (its ``model_type``); ValueError naming `what` for
    a family cpukern has none for."""
    kind = check_family(config, what)
    return importlib.import_module(f"cpukern.torch.families.{_MODULES[kind]}").FAMILY


def checkpoint_layout(config: dict) -> dict:
    """Every tensor a checkpoint of this config.json (a dict, with its quantization_config)
    stores, as the family's adapter loads it: name -> (shape, torch dtype of the bf16 model).
    Made from transformers' own model on the meta device with the adapter's checkpoint-layout
    modules in place, and transformers' own checkpoint names (per-expert weights, tied weights
    left out), so a checkpoint writer spells no tensor name itself."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    fields = copy.deepcopy({k: v for k, v in config.items() if k != "quantization_config"})
    cfg = AutoConfig.for_model(**fields)
    family = family_for(cfg, "config")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        family.before_loading(model, config.get("quantization_config"))
    state = remove_tied_weights_from_state_dict(model.state_dict(), model)
    return {k: (tuple(v.shape), v.dtype) for k, v in revert_weight_conversion(model, state).items()}
