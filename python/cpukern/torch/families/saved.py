"""Saving and loading packed models: what each packed module is (its class, its plain
attributes, which tensors are parameters), recorded in the saved ``quantization_config``; on
loading, the same modules are built on the meta device with the stored tensors' shapes, so that
transformers' loader fills them, and their packed weights are then checked (header, checksum,
fit) and used as stored, packed again for this CPU from their own layout (ternary), or
refused. A dense nn.Linear whose weight was packed in place (pack_linear_) is saved as an
nn.Linear whose ``weight`` is the blob."""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from cpukern.torch.families.common import MoEExperts, safetensors_header
from cpukern.torch.experts import FusedMoE, MoERouter
from cpukern.torch.dense import Linear, adopt_dense_weight, set_packed_weight
from cpukern.torch.modules import TernaryLinear, _PackedModule, _wrap_blobs
from cpukern.torch.packed import PackedWeightsTensor

# The classes a saved description may name (nothing else is ever imported from it).
_CLASSES = {f"{c.__module__}.{c.__qualname__}": c
            for c in (TernaryLinear, FusedMoE, MoERouter, Linear, MoEExperts, nn.Sequential,
                      nn.Linear)}
_CLASSES["transformers.models.llama.modeling_llama.LlamaRMSNorm"] = None  # imported on use
_PLAIN = (bool, int, float, str, type(None))


def _class_name(mod: nn.Module) -> str:
    return f"{type(mod).__module__}.{type(mod).__qualname__}"


def describe(mod: nn.Module) -> dict:
    """A JSON description of a replaced module: class, plain attributes, parameter names,
    children."""
    name = _class_name(mod)
    if name not in _CLASSES or (type(mod) is nn.Linear
                                and not isinstance(mod.weight, PackedWeightsTensor)):
        raise ValueError(f"cannot describe a {name} for saving")
    return {"class": name,
            "attrs": {k: v for k, v in vars(mod).items()
                      if isinstance(v, _PLAIN)},
            "params": sorted(mod._parameters),
            "absent": sorted(k for k, v in [*mod._buffers.items(), *mod._parameters.items()]
                             if v is None),
            "children": {k: describe(c) for k, c in mod._modules.items()}}


def _resolve(name: str) -> type:
    if name not in _CLASSES:
        raise ValueError(f"quantization_config.prepared_modules: class {name!r} is not one "
                         f"cpukern saves")
    cls = _CLASSES[name]
    if cls is None:
        module, _, attr = name.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)
    return cls


def _skeleton(desc: dict, prefix: str, stored: dict, where: str) -> nn.Module:
    """The described module on the meta device, its tensors shaped as stored."""
    keys = {"class", "attrs", "params", "absent", "children"}
    if not isinstance(desc, dict) or not keys <= set(desc):
        raise ValueError(f"quantization_config.prepared_modules: {where}: malformed description")
    cls = _resolve(desc["class"])
    mod = cls.__new__(cls)
    nn.Module.__init__(mod)
    mod.__dict__.update({k: v for k, v in desc["attrs"].items() if isinstance(v, _PLAIN)})
    for key, (shape, _, dtype) in stored.items():
        if not key.startswith(prefix) or "." in key[len(prefix):]:
            continue
        t = torch.empty(shape, dtype=_DTYPES[dtype], device="meta")
        name = key[len(prefix):]
        if name in desc["params"]:
            mod.register_parameter(name, nn.Parameter(t, requires_grad=False))
        else:
            mod.register_buffer(name, t)
    for name in desc["absent"]:
        if name in desc["params"]:
            mod.register_parameter(str(name), None)
        else:
            mod.register_buffer(str(name), None)
    for k, child in desc["children"].items():
        mod.add_module(k, _skeleton(child, f"{prefix}{k}.", stored, where))
    packed = (mod._PACKED if isinstance(mod, _PackedModule)
              else ("weight",) if type(mod) is nn.Linear else ())
    for name in packed:
        if getattr(mod, name, None) is None:
            raise ValueError(f"{where}: the checkpoint has no {prefix}{name}")
    return mod


_DTYPES = {"U8": torch.uint8, "I8": torch.int8, "I32": torch.int32, "I64": torch.int64,
           "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "F64": torch.float64, "BOOL": torch.bool}


def build_skeletons(model: nn.Module, described: Any, files: list) -> None:
    """Puts the described modules, on the meta device, where they were saved."""
    if not isinstance(described, dict):
        raise ValueError("quantization_config.prepared_modules: expected a dict of module names")
    stored: dict = {}
    for f in files or ():
        stored.update(safetensors_header(f))
    for name, desc in described.items():
        with torch.device("meta"):
            model.set_submodule(name, _skeleton(desc, name + ".", stored, name))


def adopt_loaded(model: nn.Module, described: dict) -> None:
    """The loaded packed weights of every described module checked and wrapped: used as
    stored when made for this CPU, packed again for it from their own layout (ternary), else
    ValueError naming the tensor (never run wrong)."""
    with torch.no_grad():
        for name in described:
            for sub, mod in model.get_submodule(name).named_modules(prefix=name):
                if type(mod) is nn.Linear:
                    set_packed_weight(mod, adopt_dense_weight(mod, f"{sub}.weight",
                                                              mod.weight.detach()))
                elif isinstance(mod, _PackedModule):
                    state = {f"{sub}.{n}": mod._buffers[n] for n in mod._PACKED}
                    _wrap_blobs(mod, state, f"{sub}.")
                    for n in mod._PACKED:
                        mod._buffers[n] = state[f"{sub}.{n}"]
