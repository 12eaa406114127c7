"""cpukern as a transformers quantizer: ``CpukernConfig`` and its ``HfQuantizer``, registered
under the name "cpukern" when this module is imported (``from cpukern.torch import
CpukernConfig`` imports it), so that

    AutoModelForCausalLM.from_pretrained(path, quantization_config=CpukernConfig())

loads a BitNet, gpt-oss or Qwen3-MoE checkpoint with transformers' own loader (skeleton, weight
tying, shape and dtype checks) and then puts cpukern's modules in place of the ones cpukern runs
(cpukern.torch.families says which, per family). Before transformers reads a tensor, the
quantizer checks the config's sizes and every stored tensor's shape and kind against the model
(ValueError naming the config field, or the file and the tensor).

A checkpoint stored with another quantizer's config (BitNet's packed ternary, gpt-oss's MXFP4)
keeps that config in config.json, and transformers refuses a second one passed to
``from_pretrained``: load those with ``cpukern.torch.from_pretrained(path)``, which passes the
stored config on as ``CpukernConfig(checkpoint_quantization=...)`` (the packed ternary rows and
the MXFP4 blocks are loaded as stored, never expanded to float).

``save_pretrained`` of such a model writes the packed weights and a ``quantization_config``
that records each replaced module; loading that directory builds those modules on the meta
device with the stored shapes (cpukern.torch.families.saved), lets transformers fill them and
wraps the packed weights (checked; ternary packed again for this CPU, others refused)."""

from __future__ import annotations

import copy
import glob
import os
import re
from typing import Any, Optional

import torch
from transformers.core_model_loading import ConversionOps, WeightConverter
from transformers.quantizers.auto import register_quantization_config, register_quantizer
from transformers.quantizers.base import HfQuantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from cpukern.torch._pages import drop_mapped_pages
from cpukern.torch.attention import use_decode_attention
from cpukern.torch.families import family_for
from cpukern.torch.families.common import PatchReport, check_checkpoint, options, safetensors_header
from cpukern.torch.families.saved import adopt_loaded, build_skeletons, describe
from cpukern.torch.packed import PackedWeightsTensor

__all__ = ["CpukernConfig", "CpukernHfQuantizer"]

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


@register_quantization_config("cpukern")
class CpukernConfig(QuantizationConfigMixin):
    """The options of cpukern's quantizer, as ``cpukern.torch.patch`` takes them: variant (a forced
    variant, a name from cpukern.kernels(op); stored as "variant" in a saved
    quantization_config), act (ternary activations: "int8_bitnet", "int8", "fp32"), format (experts:
    gpt-oss "mxfp4", "mxfp4_a8", "bf16"; Qwen3-MoE "bf16", "int8"; None: the checkpoint's own),
    dense ("bf16", "int8", None: left in torch), lm_head (the LM head: "bf16", "int8" = W8A8,
    None: as dense), threads.
    checkpoint_quantization: the quantization config the checkpoint was stored with (BitNet's
    or MXFP4's, as a dict), None for float checkpoints. Checked against the model's family when
    it loads. prepared_modules: written by save_pretrained (the modules whose prepared
    layouts the checkpoint holds); not an option to set."""

    def __init__(self, format: Optional[str] = None, act: Optional[str] = None,
                 dense: Optional[str] = "bf16", variant: Optional[str] = None,
                 threads: Optional[int] = None,
                 checkpoint_quantization: Optional[dict] = None,
                 prepared_modules: Optional[dict] = None, lm_head: Optional[str] = None,
                 **kwargs: Any) -> None:
        self.quant_method = "cpukern"
        if "isa" in kwargs:  # the option's old name: refused, never silently dropped into kwargs
            raise TypeError("CpukernConfig got an unexpected keyword argument 'isa' (the option "
                            "is named 'variant')")
        for name, v in (("format", format), ("act", act), ("dense", dense), ("variant", variant),
                        ("lm_head", lm_head)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name}: expected None or a str, got {type(v).__name__} {v!r}")
        if checkpoint_quantization is not None and not isinstance(checkpoint_quantization, dict):
            raise TypeError(f"checkpoint_quantization: expected None or a dict, got "
                            f"{type(checkpoint_quantization).__name__}")
        self.format, self.act, self.dense, self.threads = format, act, dense, threads
        self.variant = variant
        self.lm_head = lm_head
        self.checkpoint_quantization = checkpoint_quantization
        if prepared_modules is not None and not isinstance(prepared_modules, dict):
            raise TypeError(f"prepared_modules: expected None or a dict, got "
                            f"{type(prepared_modules).__name__}")
        self.prepared_modules = prepared_modules


def _checkpoint_layers(path: str) -> Optional[int]:
    """How many decoder layers a local checkpoint directory stores (None: not known)."""
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    layers = -1
    for f in files:
        for key in safetensors_header(f):
            m = _LAYER.match(key)
            if m:
                layers = max(layers, int(m.group(1)))
    return layers + 1 if files else None


def _flat(tensors: Any) -> list:
    return [t for v in tensors for t in (v if isinstance(v, (list, tuple)) else [v])]


class _Unchanged(ConversionOps):
    """Passes the tensors on (what the two ops below are when a model is saved)."""

    def convert(self, input_dict: dict, *args: Any, **kwargs: Any) -> dict:
        return input_dict

    @property
    def reverse_op(self) -> ConversionOps:
        return _Unchanged()


class _NoteSources(_Unchanged):
    """First op of each of the model's weight converters (Qwen3-MoE: per-expert weights merged
    into one tensor): notes the checkpoint tensors it reads, for _DropSourcePages."""

    def __init__(self, box: dict) -> None:
        self.box = box

    def convert(self, input_dict: dict, *args: Any, **kwargs: Any) -> dict:
        self.box["sources"] = _flat(input_dict.values())
        return input_dict


class _DropSourcePages(_NoteSources):
    """Last op of each of the model's weight converters: once its ops have copied the checkpoint
    tensors it read, drops their mapped pages from the process (cpukern.torch._pages; those
    the result still shares stay)."""

    def convert(self, input_dict: dict, *args: Any, **kwargs: Any) -> dict:
        drop_mapped_pages(self.box.pop("sources", ()), _flat(input_dict.values()))
        return input_dict


@register_quantizer("cpukern")
class CpukernHfQuantizer(HfQuantizer):
    """Loads with transformers' loader, then swaps in cpukern's modules (see the module
    docstring)."""

    requires_calibration = False
    quantization_config: CpukernConfig

    def __init__(self, quantization_config: CpukernConfig, **kwargs: Any) -> None:
        super().__init__(quantization_config, **kwargs)
        self._family = None
        self._load_ops, self.serialized_names = {}, {}

    def validate_environment(self, *args: Any, device_map: Any = None, **kwargs: Any) -> None:
        places = set(device_map.values()) if isinstance(device_map, dict) else {device_map}
        if not places <= {None, "cpu", torch.device("cpu")}:
            raise ValueError(f"device_map: cpukern runs on the CPU, got {device_map!r}")

    def update_attn_implementation(self, config: Any) -> Any:
        """The config checked before transformers builds a model of its shape: the family is
        known, its sizes are integers >= 1, and a local checkpoint holds as many layers."""
        self._family = family = family_for(config, "config")  # resolved once per load
        family.check_config(config)
        path = getattr(config, "_name_or_path", "") or ""
        if os.path.isdir(path):
            stored = _checkpoint_layers(path)
            if stored is not None and stored < config.num_hidden_layers:
                raise ValueError(f"config.num_hidden_layers: {config.num_hidden_layers}, but the "
                                 f"checkpoint in {path!r} stores {stored} layers")
        return config

    def _process_model_before_weight_loading(self, model: Any, checkpoint_files: Any = None,
                                             **kwargs: Any) -> None:
        qc = self.quantization_config
        if self._family is None:  # transformers skipped update_attn_implementation
            self._family = family_for(model.config, "model")
        family = self._family
        self._options = options(family, qc.variant, qc.act, qc.format, qc.dense, qc.threads,
                                getattr(qc, "lm_head", None))
        family.before_loading(model, qc.checkpoint_quantization)
        self._load_ops, self.serialized_names = family.load_operations(qc.checkpoint_quantization)
        if qc.prepared_modules:  # saved by save_pretrained: the modules, as they were saved
            build_skeletons(model, qc.prepared_modules, checkpoint_files)
        check_checkpoint(family, model, checkpoint_files)

    def get_load_operations(self) -> dict:
        return self._load_ops

    def update_weight_conversions(self, weight_conversions: list, model: Any) -> list:
        """transformers' converters, each between _NoteSources and _DropSourcePages: the
        checkpoint pages a converter copied (a merge of per-expert weights) leave the process
        as the tensors load, not when the model is freed."""
        updated = super().update_weight_conversions(weight_conversions, model)
        for c in updated:
            if isinstance(c, WeightConverter):
                box: dict = {}
                c.operations = [_NoteSources(box), *c.operations, _DropSourcePages(box)]
        return updated

    def _process_model_after_weight_loading(self, model: Any, **kwargs: Any) -> Any:
        qc = self.quantization_config
        report = PatchReport()
        prepared = dict(qc.prepared_modules or {})
        if prepared:
            adopt_loaded(model, prepared)
            report.replaced += [(n, d["class"].rpartition(".")[2], "loaded prepared")
                                for n, d in prepared.items()]
        steps, report.left = self._family.plan(model, self._options)
        self._family.apply(model, steps, self._options, report)
        use_decode_attention(model)
        prepared.update({s.name: describe(model.get_submodule(s.name)) for s in steps})
        # What save_pretrained writes: these options and the modules as they are now (the
        # caller's CpukernConfig object is left as it was).
        saved = copy.copy(qc)
        saved.prepared_modules = prepared
        model.config.quantization_config = saved
        self.quantization_config = saved
        model.cpukern_report = report
        # Inference only (cpukern's ops take no tensors that require grad): a forward outside
        # torch.no_grad() works, as with the modules' own weights.
        model.requires_grad_(False)
        return model

    def is_serializable(self) -> bool:
        return True

    def get_state_dict_and_metadata(self, model: Any) -> tuple:
        """The state_dict save_pretrained writes: packed weights as their blobs (safetensors
        holds plain tensors; loading wraps them again, checked)."""
        state = {k: v.blob if isinstance(v, PackedWeightsTensor) else v
                 for k, v in model.state_dict().items()}
        return state, {}

    @property
    def is_trainable(self) -> bool:
        return False
