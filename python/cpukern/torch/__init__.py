"""PyTorch integration: custom ops (torch.library, namespace ``cpukern``) and nn.Modules.

Importing this package requires torch; ``import cpukern`` does not. Modules: ``ops`` (the
torch.library ops and their fake implementations), ``vllm`` (the vLLM-order ops),
``modules`` (TernaryLinear, WidelyLinear), ``dense`` (Linear, pack_linear_), ``experts`` (FusedMoE, MoERouter), ``hf_quantizer`` (``CpukernConfig``, the
transformers quantizer: ``AutoModelForCausalLM.from_pretrained(path,
quantization_config=CpukernConfig())``; imported on first use of ``cpukern.torch.CpukernConfig``,
as it imports transformers), ``families`` (one adapter per model family), ``hf`` (patch /
from_pretrained for Hugging Face transformers models), ``attention`` (one-token decode attention
registered with transformers' AttentionInterface, set by patch / the quantizer), ``packed``
(PackedWeightsTensor, the one torch holder of packed weights), ``_weight_cache`` (the
raw-weight ops' cache below, which the modules never use).

Ops (all with fake/meta implementations, so torch.compile(fullgraph=True) and torch.export
trace them without graph breaks; no autograd: inference only):

``torch.ops.cpukern.ternary_gemv(packed, x, scale=None, act="fp32", variant="") -> Tensor``
    packed: uint32 or int32 (M, ceil(K/16)) in cpukern.ternary's packed format (int32 is
    viewed as uint32, no copy); x: float32 (K,) or (B, K); scale: None or float32 (M,) or (1,).
    Returns float32 (M,) or (B, M).
``torch.ops.cpukern.widely_linear(planes, scales, x, variant="") -> Tensor``
    planes: uint32/int32 (S, 4, n, ceil(m/16)); scales float32 (S, 4) or (S, 4, n);
    x float32 (2m,) or (B, 2m). Returns float32 (2n,) or (B, 2n).
``torch.ops.cpukern.fused_moe(x, w13, w2, topk_weights, topk_ids, activation="silu",
w13_bias=None, w2_bias=None, skip_weighted=False, variant="") -> Tensor``
    cpukern.moe.fused_moe over bf16 expert weights w13 (E, 2I, H) and w2 (E, H, I).
``torch.ops.cpukern.ternary_gemv_prepared(prepared, x, out_features, act="fp32") -> Tensor``
``torch.ops.cpukern.widely_linear_prepared(prepared, x, out_features) -> Tensor``
    The same layers from PREPARED weights: a PackedWeightsTensor (a module's ``weight``;
    its packed object runs, nothing is parsed per call) or its blob, a plain 1-D
    uint8 tensor (the serialised form of cpukern.ternary.to_bytes: a versioned header + the
    kernel layout and scales; make one with ``ops.prepare_ternary_tensor`` /
    ``ops.prepare_widely_linear_tensor``), whose header is validated on every call (O(1)).
    out_features is the output size the weights must hold (the fake kernels need it).
    Nothing is prepared inside the op (weights prepared for a variant this CPU cannot run
    are an error naming ``prepared``: import them once with cpukern.ternary.from_buffer or
    load them into a module, which prepares them again). While torch.compile traces, the op
    on a PackedWeightsTensor goes into the graph as the op on its blob.
``torch.ops.cpukern.fused_moe_prepared(x, w13_prepared, w2_prepared, topk_weights, topk_ids,
activation="silu", w13_bias=None, w2_bias=None, skip_weighted=False) -> Tensor``
    fused_moe over packed experts held in PackedWeightsTensor or uint8 blobs
    (``ops.prepare_experts_tensor``, cpukern.moe.to_bytes; any weight format; blobs' headers
    checked per call), nothing packed.
``torch.ops.cpukern.linear(x, weight, bias=None, variant="", weight_scales=None) -> Tensor``
``torch.ops.cpukern.linear_prepared(x, prepared, out_features, bias=None) -> Tensor``
    A dense layer on the fused-MoE micro-kernels (the op linear, cpukern.linear): x bf16 (T, I), weight
    bf16 (O, I) (or int8 with float32 per-channel scales, or MXFP4 blocks), bias bf16 (O,);
    returns bf16 (T, O). The prepared form holds the weight packed as one expert.
``torch.ops.cpukern.ternary_gemv_multi_prepared(prepared, x, out_features, act="int8") -> list``
    ternary_gemv_prepared for several packed matrices sharing x (lists of the same length):
    one output each, bitwise the separate calls' results (cpukern.ternary.gemv_multi).
``torch.ops.cpukern.moe_router_prepared(x, prepared, num_experts, bias, topk, rule, renormalize)
-> (Tensor, Tensor, Tensor)``
    A MoE router in one call (MoERouter): x bf16 (T, H), the router matrix (E, H) packed as
    one expert, bias None or bf16 (E,); rule "softmax_topk" or "topk_softmax"
    (cpukern.moe.route). Returns (logits bf16 (T, E), weights bf16 (T, topk), ids int64 (T, topk)).
``torch.ops.cpukern.cpu_fused_moe_prepared(output, input, w13, w2, w13_bias, w2_bias,
topk_weights, topk_id, skip_weighted, act) -> ()``
    The same in vLLM's order (``vllm.prepack_moe_tensor`` makes w13 / w2).
``torch.ops.cpukern.prepack_moe_weight(weight, packed_weight, isa) -> ()``
``torch.ops.cpukern.cpu_fused_moe(output, input, w13, w2, w13_bias, w2_bias, topk_weights,
topk_id, skip_weighted, act, isa) -> ()``
    vLLM's argument order, names and meaning (vllm._custom_ops): ``isa`` is vLLM's name for the
    variant, kept because vLLM calls these two ops (everywhere else it is ``variant``); it may
    be one of cpukern's fused_moe variant names (forced), "" or "auto", or one of vLLM's names
    by the explicit alias table ``ops.VLLM_MOE_ISA_ALIASES`` ("amx" and "vec" on x86-64,
    "neon" and "vec" on AArch64): those select automatically, except a name that is a
    fused_moe variant this CPU runs ("neon" on AArch64, "amx" on a CPU with usable AMX), which
    forces it.

``variant`` (``isa`` in the two vLLM-order ops) in every op: "" or "auto" select
automatically, any other name must be a variant of that op (cpukern.kernels(op)); anything
else (a vLLM name in a ternary op, "neon" on x86-64) is a ValueError listing the known names.

Threads: the ops use torch.get_num_threads() unless cpukern.set_num_threads(n >= 1) chose a
count (cpukern.num_threads_is_set()); then they use cpukern's.

Modules (``modules``, ``experts``): packed weights are the weights. TernaryLinear, WidelyLinear
and Linear hold ``weight``, a PackedWeightsTensor that carries its kernel, and ``bias``;
FusedMoE holds ``w13`` and ``w2``. The constructors pack once (``from_linear``,
``from_checkpoint``, ``from_packed``, ``from_experts``, ``from_mxfp4``, ``from_int8``); no float
copy, no second cache. ``F.linear(x, packed, bias)`` runs the kernel, so an ``nn.Linear`` whose
weight is a PackedWeightsTensor runs cpukern too, eagerly and compiled; ``pack_linear_(linear)``
packs an nn.Linear's weight so in place (what patch / the quantizer do to dense layers). state_dict /
torch.save / pickle / deepcopy carry the packed bytes (checked on load: header, checksum,
fit; ternary layouts made for another CPU are packed again for this one, MoE and dense ones
are refused). Weights stay in their own formats under .to(dtype) / .half() / .bfloat16() /
.float(); any float activation dtype in, the same dtype out. See cpukern.torch.modules and
cpukern.torch.packed.

The raw-weight ops below prepare the weights themselves: prepared forms (the kernels' own
layouts: cpukern.ternary.prepare, moe.prepare) are kept out of the op schemas, and each op keeps the prepared form
on the weight tensor's storage (``_weight_cache``), tagged with the view (offset, shape,
strides, dtype), the op's own key and the version counter (``tensor._version``). The first
call with given weights converts them (O(weights)); later calls reuse the conversion, also
through another tensor object over the same storage (vLLM's ``replace_parameter``, detach(),
nn.Parameter(t)); an in-place change through torch (``copy_``, ``load_state_dict``) bumps the
version and the next call converts again. The prepared form is freed with the storage. Writes
that bypass torch's version counter (through a numpy view, ``.data`` tricks, or another
process) are not seen: call ``clear_cache()``. This cache is not saved: torch.save, pickle
and state_dict carry the portable weights (and a module's PackedWeightsTensor buffers, which
need no cache), and the raw-weight ops convert them again after loading.

vLLM's ``prepack_moe_weight(weight, packed_weight, isa)`` fills ``packed_weight`` (same shape
and dtype as ``weight``, as vLLM allocates it with ``empty_like``) with the weights and packs
them into the cache on ``packed_weight``'s storage; ``cpu_fused_moe`` finds the packing there,
whichever tensor object wraps that storage by then (and packs again if it is missing or stale,
e.g. after loading a state dict). The packed layout pads rows and columns to the
micro-kernel's tile, so in general it does not fit in a tensor of the weight's shape; keeping
the bf16 weights in ``packed_weight`` keeps that tensor self-describing (it can be saved,
loaded and re-packed for another CPU) at the cost of holding the weights twice (the tensor and
the packing).
"""

from __future__ import annotations

from cpukern.torch._weight_cache import cache_info, clear_cache
from cpukern.torch.packed import PackedWeightsTensor
from cpukern.torch.ops import fused_moe, ternary_gemv, widely_linear  # registers the ops
from cpukern.torch.vllm import cpu_fused_moe, prepack_moe_weight  # registers the ops
from cpukern.torch.dense import Linear, pack_linear_
from cpukern.torch.modules import TernaryLinear, WidelyLinear
from cpukern.torch.experts import FusedMoE, MoERouter
from cpukern.torch.hf import PatchReport, from_pretrained, patch

__all__ = ["TernaryLinear", "WidelyLinear", "Linear", "pack_linear_", "FusedMoE", "MoERouter",
           "PackedWeightsTensor",
           "clear_cache", "cache_info", "patch", "from_pretrained", "PatchReport"]  # and CpukernConfig, which needs transformers


def __getattr__(name: str):
    if name == "CpukernConfig":  # imports transformers, and registers the quantizer with it
        from cpukern.torch.hf_quantizer import CpukernConfig
        return CpukernConfig
    raise AttributeError(f"module 'cpukern.torch' has no attribute {name!r}")
