"""cpukern under Hugging Face transformers models. The way to load is transformers' own:
``AutoModelForCausalLM.from_pretrained(path, quantization_config=CpukernConfig())``
(cpukern.torch.hf_quantizer). ``patch(model)`` swaps, in place, every module cpukern runs in a
model already built; ``from_pretrained(path)`` is a thin wrapper over the quantizer that also
loads checkpoints stored with BitNet's or MXFP4's own quantization config. Needs
``transformers`` (the ``hf`` extra; tested with 5.22.2).

What each family hands to cpukern is its adapter's (cpukern.torch.families: bitnet, gpt_oss,
qwen3_moe); everything else stays in torch: attention, norms, RoPE, routing, embeddings. The
model's attention at one query token (decode) goes to cpukern.torch.attention ("sdpa" ->
"cpukern_sdpa", "eager" -> "cpukern_eager", registered with transformers' AttentionInterface):
grouped float32 attention in torch ops instead of torch's bf16 flash-attention CPU kernel, which
runs one token with scalar code on CPUs without AMX. ``model.set_attn_implementation("sdpa")``
goes back to transformers' own.
Every family: each other ``nn.Linear`` with bf16 weights (attention projections, the LM head)
keeps its class and has its weight packed in place (``cpukern.torch.pack_linear_``: a
PackedWeightsTensor that F.linear runs on cpukern.linear; ``dense="bf16"``, the default: bf16
in, fp32 accumulation, bf16 out, torch's own arithmetic up to the summation order), or W8A8
with ``dense="int8"`` (faster, not exact: warns), or left in torch with ``dense=None``. Linear
layers with float32 weights stay in torch (cpukern's dense kernels compute in bf16). A tied LM
head keeps the embedding's weights in torch and holds its own packed copy.

Numerics against stock transformers (tests/python/test_hf_models.py): float32 BitNet models
compute the same int8 codes and the same integer sums; the rescale differs in the last bits.
In bf16 models transformers computes s and x * s in bf16 and rounds the integer sums to bf16;
cpukern keeps float32 / int32 there. The MoE kernels take bf16 activations, add biases and
sum experts in float32 and round the activation output and the result to bf16 once (stock
transformers rounds after every bf16 op).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch
from torch import nn

from cpukern.torch.attention import use_decode_attention
from cpukern.torch.families import SUPPORTED, check_family, family_for  # noqa: F401 - SUPPORTED re-exported
from cpukern.torch.families.common import MoEExperts, PatchReport, options

__all__ = ["patch", "from_pretrained", "PatchReport", "MoEExperts"]


def patch(model: nn.Module, *, variant: Optional[str] = None, act: Optional[str] = None,
          format: Optional[str] = None, dense: Optional[str] = "bf16",
          threads: Optional[int] = None, lm_head: Optional[str] = None) -> PatchReport:
    """Replaces, in place, every module of a transformers model that cpukern runs (see the
    module docstring) and returns a PatchReport (also kept as ``model.cpukern_report``). All
    or nothing: every argument and every module is checked before the first is replaced.

    variant: force a variant (cpukern.kernels(op)) of the ops the model's modules run; None:
    automatic (dense layers run fused_moe's variants: a ternary_gemv name leaves them
    automatic). act: ternary layers' activation rule, "int8_bitnet" (default, the model's),
    "int8" or "fp32". format: expert weights, gpt-oss "mxfp4", "mxfp4_a8" (W4A8) or "bf16"
    (None: MXFP4 experts stay MXFP4, bf16 ones bf16 unless exactly MXFP4); Qwen3-MoE "bf16"
    (default) or "int8". Lossy choices warn. dense: the other bf16 nn.Linear layers, "bf16"
    (default), "int8" (W8A8) or None (left in torch). lm_head: the LM head's format, "bf16",
    "int8" (W8A8: a quarter of the bytes a decoded token reads there, within the bound of
    docs/guarantees.md; a tied head packs its own copy, the embedding lookups stay bf16) or
    None (default: as dense). threads: cpukern.set_num_threads(threads) (process-wide).
    Replaced modules hold their weights packed only (cpukern.torch.modules): the float
    weights they were made from are freed as each module is packed."""
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model: expected a transformers PreTrainedModel, got {type(model).__name__}")
    family = family_for(model.config, "model")
    opts = options(family, variant, act, format, dense, threads, lm_head)
    report = PatchReport()
    steps, report.left = family.plan(model, opts)
    family.apply(model, steps, opts, report)
    use_decode_attention(model)
    model.cpukern_report = report
    return report


def from_pretrained(path: str | os.PathLike, *, variant: Optional[str] = None,
                    act: Optional[str] = None, format: Optional[str] = None,
                    dense: Optional[str] = "bf16", threads: Optional[int] = None,
                    dtype: Optional[torch.dtype] = None,
                    lm_head: Optional[str] = None) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(path, quantization_config=CpukernConfig(...))``
    for a local checkpoint directory, also when config.json names BitNet's or MXFP4's
    quantization (passed on as ``checkpoint_quantization``, which transformers would refuse
    beside a second config). Options as in ``patch``; dtype: of the torch parts (None:
    transformers' choice, the checkpoint's). The report is ``model.cpukern_report``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from cpukern.torch.hf_quantizer import CpukernConfig

    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"path: expected a directory with config.json, got {path!r}")
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # an older huggingface_hub: transformers raises TypeError there
        StrictDataclassError = TypeError
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError, OSError,
            StrictDataclassError) as e:
        raise ValueError(f"path: {os.path.join(path, 'config.json')} is not a valid "
                         f"transformers config ({type(e).__name__}: {e})") from None
    check_family(config, "path")  # the adapter is resolved once, by the quantizer
    stored = getattr(config, "quantization_config", None)
    if stored is not None and not isinstance(stored, dict):
        stored = stored.to_dict()
    given = dict(format=format, act=act, dense=dense, variant=variant, threads=threads,
                 lm_head=lm_head)
    if stored is not None and stored.get("quant_method") == "cpukern":
        # saved by save_pretrained: its own options and prepared modules
        defaults = dict(format=None, act=None, dense="bf16", variant=None, threads=None,
                        lm_head=None)
        for name, v in given.items():
            if v != defaults[name] and v != stored.get(name):
                raise ValueError(f"{name}: {path!r} holds layouts prepared with {name}="
                                 f"{stored.get(name)!r}; got {v!r}")
        config.quantization_config = stored
    else:
        config.quantization_config = CpukernConfig(**given,
                                                   checkpoint_quantization=stored).to_dict()
    kw: dict[str, Any] = {} if dtype is None else {"dtype": dtype}
    return AutoModelForCausalLM.from_pretrained(path, config=config, local_files_only=True, **kw)
