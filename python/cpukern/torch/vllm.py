"""vLLM-order ops (vllm._custom_ops): ``cpukern::prepack_moe_weight(weight, packed_weight,
isa)`` and ``cpukern::cpu_fused_moe(output, input, w13, w2, w13_bias, w2_bias, topk_weights,
topk_id, skip_weighted, activation, isa)``; see the cpukern.torch docstring. ``activation``
is vLLM's ``act`` (the activation function: silu, swigluoai, ...), named apart from cpukern's
``act`` (the activation datatype). ``isa`` is vLLM's own name for what cpukern calls
``variant`` everywhere else (a registry row): these two ops keep it, and vLLM's alias table
(ops.VLLM_MOE_ISA_ALIASES), because vLLM calls them with its own names.

vLLM's own convention (no cache): in ``process_weights_after_loading`` replace the weights
with their packed form, ``replace_parameter(layer, "w13_weight", prepack_moe_tensor(w13))``
(a 1-D uint8 tensor: header + packing, cpukern.moe.to_bytes's format), and call
``cpu_fused_moe_prepared(output, input, layer.w13_weight, layer.w2_weight, ...)``: the packing
is a plain tensor that survives replace_parameter, state_dict and torch.save; each call checks
its header (O(1)) and packs nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Optional

import torch
from torch import Tensor

from cpukern import moe as _moe
from cpukern.torch._weight_cache import _CACHE, _version
from cpukern.torch.ops import (_fused_moe_into, _fused_moe_prepared, _variant, experts_cache_key,
                               prepare_experts_tensor)

__all__ = ["prepack_moe_weight", "cpu_fused_moe", "prepack_moe_tensor", "cpu_fused_moe_prepared"]


@contextlib.contextmanager
def _named_isa() -> Iterator[None]:
    """Errors about the variant name, which these ops take as vLLM's ``isa``, name ``isa``."""
    try:
        yield
    except (ValueError, TypeError) as e:
        if str(e).startswith("variant: "):
            raise type(e)("isa: " + str(e)[len("variant: "):]) from None
        raise


@torch.library.custom_op("cpukern::prepack_moe_weight", mutates_args=("packed_weight",))
def prepack_moe_weight(weight: Tensor, packed_weight: Tensor, isa: str) -> None:
    """vLLM order: packs bf16 weight (E, O, I) for cpu_fused_moe; packed_weight: a tensor of
    the same shape and dtype (torch.empty_like(weight)) that receives the weights and keys the
    packing."""
    if weight.dtype != torch.bfloat16 or packed_weight.dtype != torch.bfloat16:
        raise TypeError(f"weight, packed_weight: expected bfloat16 tensors, got {weight.dtype} and "
                        f"{packed_weight.dtype}")
    if weight.dim() != 3 or tuple(packed_weight.shape) != tuple(weight.shape):
        raise ValueError(f"packed_weight: expected shape {tuple(weight.shape)} (E, O, I) like "
                         f"weight, got {tuple(packed_weight.shape)}")
    if not packed_weight.is_contiguous():
        raise TypeError("packed_weight: expected a contiguous tensor")
    if packed_weight.data_ptr() != weight.data_ptr():
        packed_weight.copy_(weight)
    # Pack now (the load-time cost belongs here), into the cache on packed_weight's storage,
    # where cpu_fused_moe finds it whatever tensor object wraps that storage then (vLLM's
    # replace_parameter makes a new Parameter). The custom-op machinery bumps the version of
    # packed_weight once more after this returns: the version seen here and the next match.
    v = _version(packed_weight)
    forced = _variant(isa, "fused_moe", "isa")
    with _named_isa():
        packed = _moe.prepare(packed_weight, variant=forced)
    if v is not None:  # inference tensors cannot be tracked: cpu_fused_moe packs per call
        _CACHE.put(packed_weight, experts_cache_key("bf16", None, forced), packed,
                   versions=(v, v + 1))


@prepack_moe_weight.register_fake
def _(weight, packed_weight, isa):
    return None


@torch.library.custom_op("cpukern::cpu_fused_moe", mutates_args=("output",))
def cpu_fused_moe(output: Tensor, input: Tensor, w13: Tensor, w2: Tensor,
                  w13_bias: Optional[Tensor], w2_bias: Optional[Tensor], topk_weights: Tensor,
                  topk_id: Tensor, skip_weighted: bool, activation: str, isa: str) -> None:
    """vLLM order: output (T, H) bf16 <- fused MoE of input with the packed w13, w2."""
    forced = _variant(isa, "fused_moe", "isa")  # vLLM's argument: messages name "isa"
    with _named_isa():
        _fused_moe_into(output, input, w13, w2, topk_weights, topk_id, activation, w13_bias,
                        w2_bias, skip_weighted, forced or "")


@cpu_fused_moe.register_fake
def _(output, input, w13, w2, w13_bias, w2_bias, topk_weights, topk_id, skip_weighted, activation,
      isa):
    return None


def prepack_moe_tensor(weight: Tensor, variant: str = "",
                       scales: Optional[Tensor] = None) -> Tensor:
    """bf16 weight (E, O, I) (or MXFP4 blocks uint8 with their scales) packed for this CPU (or
    the forced variant) as a 1-D uint8 tensor for cpu_fused_moe_prepared (replace_parameter it
    in place of the weight). cpukern's own helper, so its argument is ``variant``."""
    return prepare_experts_tensor(weight, "weight", variant, scales)


def _cpu_fused_moe_prepared(output: Tensor, input: Tensor, w13: Tensor, w2: Tensor,
                           w13_bias: Optional[Tensor], w2_bias: Optional[Tensor],
                           topk_weights: Tensor, topk_id: Tensor, skip_weighted: bool,
                           activation: str) -> None:
    """vLLM order: output (T, H) bf16 <- fused MoE of input with w13, w2 from
    prepack_moe_tensor (uint8)."""
    output.copy_(_fused_moe_prepared(input, w13, w2, topk_weights, topk_id, activation, w13_bias,
                                     w2_bias, skip_weighted))


cpu_fused_moe_prepared = torch.library.custom_op("cpukern::cpu_fused_moe_prepared",
                                                 mutates_args=("output",))(_cpu_fused_moe_prepared)


@cpu_fused_moe_prepared.register_fake
def _(output, input, w13, w2, w13_bias, w2_bias, topk_weights, topk_id, skip_weighted,
      activation):
    return None
