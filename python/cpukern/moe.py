"""Fused Mixture-of-Experts on bf16 or MXFP4 expert weights (vLLM cpu_fused_moe semantics).

bf16 arrays are numpy arrays of ml_dtypes.bfloat16 or torch.bfloat16 tensors, taken
without a copy.

MXFP4 (OCP Microscaling, gpt-oss's on-disk expert format): ``blocks`` uint8 (E, N, K/32, 16)
(two e2m1 codes per byte, the low nibble first) and ``scales`` uint8 (E, N, K/32) (e8m0:
2**(s - 127)); K any multiple of 32. A scale of 255 (NaN in OCP MX) is refused (ValueError
naming ``scales``). Packed MXFP4 experts stay at 4.25 bits per weight; the kernels decode them
in registers, and ``fused_moe`` on them equals ``fused_moe`` on ``dequantize(blocks, scales)``
prepared as bf16 for the same variant, bit for bit.

int8 (W8A8): ``w`` int8 (E, N, K) in [-127, 127] with ``scales`` float32 (E, N), one per output
channel (W = q * s); K <= 133144 (the int32 sums stay exact). Activations are quantised per
token at run time (symmetric: amax / 127), the products summed exactly in int32, and each
output is float(double(sum) * sa * sw), rounded once to fp32: every variant gives the same bits
for a GEMM, and no intermediate overflows (an output is inf only where the exact value is past
fp32's range; tokens up to bf16's max give finite results wherever bf16 experts do).

W4A8 (opt-in): ``prepare(blocks, format="mxfp4", scales=s, act="int8")`` packs the MXFP4
experts for int8 activations (``PackedWeights.format`` "mxfp4_a8", the one-string name of that
pair, docs/formats/datatypes.md): each token row is quantised
as the int8 path does (qa in [-127, 127], scale sa = amax / 127), each 32-weight block's
products summed exactly in int32 against the integers 2 * e2m1 in [-12, 12], scaled by the
block's e8m0 scale relative to its column's largest (one fp32 FMA per block, in block order)
and, at the end, by sa and the column's largest scale in double, rounded once to fp32. Every
variant gives the same bits; results are batch- and thread-count-invariant. Not exact; per GEMM
output (K in-features, nb = K / 32 blocks, a_k = sa * qa_k the quantised activations,
T_b = sum over block b of w_k a_k, F the blocks whose scale lies more than 126 below their
column's largest, flushed to zero):
    |C - sum_k w_k x_k| <= (sa / 2 * (1 + 2**-14) + 2**-143) * sum_k |w_k|
                           + (nb + 2) * 2**-24 * sum_b |T_b| + sum_{b in F} |T_b| + 2**-149
(docs/formats/mxfp4.md, "W4A8"). A row holding inf or NaN gives NaN outputs.
"""

from __future__ import annotations

from typing import Any, Optional

import ml_dtypes

from cpukern import _experts, _ext, _log
from cpukern._arrays import (bool_arg, c_int, ext_array, ext_out, int_arg, result, str_arg,
                             str_value, threads_arg, variant_arg)

from cpukern import _packed as packed_weights
from cpukern._packed import PackedWeights, check_op

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai")

FORMATS = ("bf16", "mxfp4", "int8")

# Activation types prepare accepts: "fp32" (the exact kernels), "int8" (W4A8, MXFP4 only).
ACTS = ("fp32", "int8")
ROUTE_RULES = ("softmax_topk", "topk_softmax")  # route()'s rule=

__all__ = ["route", "prepare", "fused_moe", "quantize", "dequantize", "load_gpt_oss",
           "ACTIVATIONS", "FORMATS", "ACTS", "ROUTE_RULES", "to_bytes", "from_buffer", "serialized_size"]


def route(router_logits: Any, topk: int, *, renormalize: Optional[bool] = None,
          rule: str = "softmax_topk") -> tuple[Any, Any]:
    """A router's logits -> each token's top-k experts and their weights, in float32.

    rule "softmax_topk": softmax over the E experts, then the k largest (Qwen3-MoE, Mixtral,
    vLLM); "topk_softmax": the k largest logits, then a softmax over those k (gpt-oss). Ties go
    to the lower expert id. renormalize (softmax_topk only): divide the k weights by their sum;
    None: True for softmax_topk, False for topk_softmax (whose weights already sum to 1, so True
    is a ValueError).

    router_logits: float32 (T, E). Returns (topk_weights float32 (T, k), topk_ids int32 (T, k)).
    """
    logits = ext_array(router_logits, "router_logits")
    topk = c_int(topk, "topk")  # E >= 1, 1 <= topk <= E: checked by the extension
    rule = str_arg(rule, "rule", ROUTE_RULES)
    renormalize = (rule == "softmax_topk" if renormalize is None
                   else bool_arg(renormalize, "renormalize"))
    weights, ids = _ext.moe_route(logits, topk, renormalize, rule)
    return result(weights, router_logits), result(ids, router_logits)


def prepare(w: Any, *, format: str = "bf16", scales: Any = None, act: str = "fp32",
            variant: Optional[str] = None, out: Any = None) -> PackedWeights:
    """Packs expert weights (nn.Linear [out, in] order) once for the selected (or forced)
    kernel family.

    format="bf16": w bf16 (E, O, I), any O, I >= 1 (padded internally).
    format="mxfp4": w = blocks uint8 (E, O, I/32, 16), scales uint8 (E, O, I/32), gpt-oss's
    layout (e.g. the arrays of a mapped safetensors file, read without a copy); never expanded
    to bf16 (4.25 bits per weight packed). Scales of 255 (NaN) are refused.
    format="int8": w = q int8 (E, O, I) in [-127, 127], scales float32 (E, O), finite and >= 0
    (quantize(w_bf16, format="int8") makes both); 1 <= I <= 133144.
    act="fp32" (default): activations as they come (bf16; MXFP4 exact). act="int8", only with
    format="mxfp4": W4A8, activations quantised per token to int8 at run time
    (PackedWeights.format "mxfp4_a8"; not exact: the error bound is in the module docstring).
    out: None, or a callable alloc(nbytes) returning a 1-D uint8 buffer of nbytes, 64-byte
    aligned: the experts are packed straight into it, as to_bytes would serialise them, and
    the result views it (cpukern.ternary.prepare's out=).
    """
    variant = variant_arg(variant)
    packed = _experts.pack(w, format, scales, act, variant, out)
    _log.selection("fused_moe", packed.variant, variant, _ext.moe_variants)
    return packed


def to_bytes(experts: PackedWeights, *, out: Any = None) -> Any:
    """Packed experts as one contiguous uint8 array (64-byte aligned), the format of
    cpukern.ternary.to_bytes (op "moe": header with the variant, micro-kernel, weight format
    and (E, O, I), then the packing). out: None (a new numpy array) or a 1-D uint8 array /
    tensor of serialized_size(experts) bytes, 64-byte aligned."""
    check_op(experts, ("moe",), "experts", "PackedWeights from cpukern.moe.prepare")
    return packed_weights.to_bytes(experts, out=out)


def serialized_size(experts: PackedWeights) -> int:
    """Bytes of to_bytes(experts)."""
    check_op(experts, ("moe",), "experts", "PackedWeights from cpukern.moe.prepare")
    return packed_weights.serialized_size(experts)


def from_buffer(buf: Any, *, verify: bool = False, variant: Optional[str] = None,
                name: str = "buffer") -> PackedWeights:
    """Packed experts viewing a buffer written by to_bytes (a numpy buffer zero-copy, kept
    alive; torch memory as cpukern.PackedWeights.from_buffer says: copied once unless torch
    cannot free or move it). The
    header is validated against the buffer's size (O(1)); verify=True also checks the payload
    checksum. A packing for a variant this CPU cannot run (or not `variant`) raises ValueError:
    MoE packings cannot be unpacked, prepare the experts again from their weights. Pickling,
    copy and deepcopy go through this serialised form (cpukern.PackedWeights)."""
    return packed_weights.import_buffer(buf, ("moe",), verify, variant, None, name)


def quantize(w: Any, format: str = "mxfp4") -> tuple[Any, Any]:
    """bf16 weights (..., K), K a multiple of 32 -> (blocks uint8 (..., K/32, 16), scales uint8
    (..., K/32)) in MXFP4, OCP MX style: per block of 32 the scale 2**(floor(log2(amax)) - 2),
    values rounded to the nearest e2m1 (ties to even), saturating at +-6 x scale; NaN -> 0.

    format="int8": bf16 weights (..., K), any K >= 1 -> (q int8 (..., K), scales float32 (...)),
    per row (output channel), in fp32: s = amax / 127 (amax = max |w| over the row), q =
    clamp(round_half_even(w / s), -127, 127); s == 0 (amax 0) -> q = 0. Non-finite weights
    are refused (ValueError naming w).
    numpy arrays (torch tensors in, torch tensors out)."""
    format = str_arg(format, "format", ("mxfp4", "int8"))
    # w (bf16, K): checked by the extension, which returns the new arrays.
    quantize = _ext.moe_int8_quantize if format == "int8" else _ext.moe_mxfp4_quantize
    q, scales = quantize(ext_array(w, "w"))
    return result(q, w), result(scales, w)


def dequantize(blocks: Any, scales: Any, format: str = "mxfp4") -> Any:
    """MXFP4 blocks uint8 (..., K/32, 16) and scales uint8 (..., K/32) -> bf16 (..., K), exact
    (every e2m1 value times its e8m0 scale is a bf16, or +-inf past bf16's range). Scales of 255
    (NaN) are refused.

    format="int8": blocks = q int8 (..., K), scales float32 (...) -> float32 (..., K) = q * s
    (one fp32 product each: the weights the int8 kernels multiply by)."""
    format = str_arg(format, "format", ("mxfp4", "int8"))
    # Shapes and values (prepare's rules): checked by the extension, which returns the result.
    if format == "int8":
        return result(_ext.moe_int8_dequantize(ext_array(blocks, "blocks"), ext_array(scales, "scales")),
                      blocks)
    out = _ext.moe_mxfp4_dequantize(ext_array(blocks, "blocks"), ext_array(scales, "scales"))
    return result(out, blocks, bf16=True)


def fused_moe(x: Any, w13: PackedWeights, w2: PackedWeights, topk_weights: Any, topk_ids: Any, *,
              activation: str = "silu", w13_bias: Any = None, w2_bias: Any = None,
              skip_weighted: bool = False, variant: Optional[str] = None,
              threads: Optional[int] = None, out: Any = None) -> Any:
    """out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]), bf16 (T, H).

    expert_e(x) = w2_e @ round_bf16(act(w13_e @ x + b13_e)) + b2_e, fp32 accumulation.
    x bf16 (T, H); w13 packed from (E, 2I, H); w2 packed from (E, H, I), both by prepare with
    the same variant, each in any format (bf16, mxfp4 or int8; they may differ). activation:
    "silu", "gelu", "gelu_tanh" (w13 rows = [gate ; up]) or
    "swigluoai" (rows interleaved: even gate, odd up; alpha 1.702, limit 7).
    skip_weighted=True (weight 1.0) only with topk == 1. variant, if given, must be the one the
    weights were packed for. threads: None or 0 = the default, or 1..cpukern.MAX_THREADS.
    int8 experts: finite results need 127 * K * max|a| <= 3e38 per GEMM (module docstring).
    bf16 / MXFP4 experts: each of the two GEMMs meets cpukern.linear's bound, its underflow term
    included (on avx512_bf16, products below 2**-126 are flushed to zero).
    """
    return _fused_moe(x, w13, w2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                      skip_weighted, variant, threads, out, "int32")


def _fused_moe(x: Any, w13: PackedWeights, w2: PackedWeights, topk_weights: Any, topk_ids: Any,
               activation: str, w13_bias: Any, w2_bias: Any, skip_weighted: bool,
               variant: Optional[str], threads: Optional[int], out: Any, ids_dtype: str,
               out_name: str = "out") -> Any:
    """fused_moe with topk_ids of `ids_dtype`: "int32", or "int64" (cpukern.torch passes
    torch.topk's ids as they are; the kernel range-checks them before narrowing); out_name:
    out='s name in messages (vLLM's op calls it output)."""
    for name, w in (("w13", w13), ("w2", w2)):  # their op: checked by the extension
        check_op(w, None, name, "PackedWeights from cpukern.moe.prepare")
    skip_weighted = bool_arg(skip_weighted, "skip_weighted")
    nthreads = threads_arg(threads)
    # The arrays (dtypes; shapes: x / w13 / w2 / topk_ids / topk_weights / biases / out= agree,
    # 1 <= topk <= E, skip_weighted only with topk == 1) and the activation's name: checked by
    # the extension and moe::fused_moe.
    y = _ext.moe_fused_moe(ext_array(x, "x"), w13, w2, ext_array(topk_weights, "topk_weights"),
                           ext_array(topk_ids, "topk_ids"), ids_dtype == "int64",
                           str_value(activation, "activation"),
                           None if w13_bias is None else ext_array(w13_bias, "w13_bias"),
                           None if w2_bias is None else ext_array(w2_bias, "w2_bias"),
                           skip_weighted, variant_arg(variant), nthreads, ext_out(out, out_name))
    return out if out is not None else result(y, x, bf16=True)


def load_gpt_oss(path: Any, layer: int, *, variant: Optional[str] = None) -> dict[str, Any]:
    """One gpt-oss MoE layer from a safetensors file, prepared straight from the mapped file.

    Reads ``model.layers.{layer}.mlp.experts.gate_up_proj_blocks`` (E, 2I, H/32, 16) uint8,
    ``..._scales`` (E, 2I, H/32) uint8, ``..._bias`` (E, 2I) bf16 (gate and up rows
    interleaved, as activation="swigluoai" reads them) and ``down_proj_blocks`` /
    ``_scales`` / ``_bias`` (E, H, I/32, 16) / (E, H, I/32) / (E, H). The blocks and scales are
    packed from the mapping (no bf16 copy of the layer is ever made). Returns
    {"w13", "w2": PackedWeights (format "mxfp4"), "w13_bias", "w2_bias": bf16 arrays (private
    copies), "activation": "swigluoai"}: pass them to fused_moe.

    The file is read by cpukern's one safetensors reader (cpukern._safetensors: regular files
    only, never blocking, the whole header validated; every error a ValueError naming the file
    and the tensor). layer: an integer >= 0 (a float such as 0.9 is a TypeError). A tensor the
    file does not hold is a KeyError naming the file and the tensor. What stays mapped: nothing
    once this returns (the packings and the biases are copies), so the file may then be
    replaced or truncated; it must not be truncated while this runs (SIGBUS, as with any
    mapping).
    """
    from cpukern import _safetensors as _st

    layer = int_arg(layer, "layer", 0)
    pre = f"model.layers.{layer}.mlp.experts."
    parts = {key: [pre + proj + suffix for suffix in ("_blocks", "_scales", "_bias")]
             for key, proj in (("w13", "gate_up_proj"), ("w2", "down_proj"))}
    t, _ = _st.read(path, copy={names[2] for names in parts.values()})
    out: dict[str, Any] = {"activation": "swigluoai"}
    for key, names in parts.items():
        missing = [n for n in names if n not in t]
        if missing:
            raise KeyError(f"{_st.where(path)}: no tensor {missing[0]!r} (layer {layer})")
        blocks, scales, bias = (t[n] for n in names)
        try:
            out[key] = prepare(blocks, format="mxfp4", scales=scales, variant=variant)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{_st.where(path)}: tensor {names[0]!r} / {names[1]!r}: {e}") from None
        if bias.dtype != ml_dtypes.bfloat16 or bias.shape != blocks.shape[:2]:
            raise ValueError(f"{_st.where(path)}: tensor {names[2]!r}: expected bf16 "
                             f"{tuple(blocks.shape[:2])}, got {bias.dtype} {tuple(bias.shape)}")
        out[key + "_bias"] = bias
    return out

