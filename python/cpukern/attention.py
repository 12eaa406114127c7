"""Attention of one new token over a KV cache (decode), in C++ on cpukern's thread pool.

``decode(query, key, value)``: query (B, Hq, D), key and value (B, Hkv, L, D) with Hq a
multiple of Hkv (query head h reads KV head h // (Hq / Hkv): GQA, with MQA and MHA at its
ends), all float32 or all bfloat16 (ml_dtypes.bfloat16 or torch.bfloat16). key and value may
be views of a longer cache (any non-negative strides, D contiguous). Float32 inside:

    s_j = scale * <q, k_j> + mask_j
    out = sum_j exp(s_j - M) v_j / (sum_j exp(s_j - M) + exp(sink - M))

M the largest of the s_j and the sink. mask: None, or bool (True attends) or float32
(added) of shape (B or 1, Hq or 1, L), any strides; a key masked out takes no part. sinks: None
or float32 (Hq,), one more logit per head that takes part in the softmax and adds nothing
(gpt-oss). A row with no key left and no sink gives 0 (fully_masked="zero", torch's SDPA) or
NaN ("nan", a plain softmax); with a sink it gives 0. NaN in gives NaN out. Keys are summed in
chunks of 256 merged in order: results depend on L, never on the thread count. Returns (B, Hq,
D) in query's dtype (bf16 rounded to nearest even), a torch tensor for torch inputs.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from cpukern import _ext, _log
from cpukern._arrays import (ext_array, ext_out, result, str_arg, threads_arg, variant_arg)

__all__ = ["decode", "FULLY_MASKED"]

FULLY_MASKED = ("zero", "nan")


def decode(query: Any, key: Any, value: Any, *, mask: Any = None, sinks: Any = None,
           scale: Optional[float] = None, fully_masked: str = "zero",
           variant: Optional[str] = None, threads: Optional[int] = None,
           out: Any = None) -> Any:
    """One token's attention (module docstring). scale: None for 1 / sqrt(D)."""
    fully_masked = str_arg(fully_masked, "fully_masked", FULLY_MASKED)
    shape = getattr(query, "shape", None)
    if scale is None:
        scale = float(shape[-1]) ** -0.5 if shape is not None and len(shape) and shape[-1] else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale: expected a float or None, got {type(scale).__name__}")
    variant = variant_arg(variant)
    y = _ext.attention_decode(ext_array(query, "query"), ext_array(key, "key"),
                              ext_array(value, "value"),
                              None if mask is None else ext_array(mask, "mask"),
                              None if sinks is None else ext_array(sinks, "sinks"),
                              float(scale), fully_masked == "nan", variant,
                              threads_arg(threads), ext_out(out))
    if _log.logger.isEnabledFor(logging.INFO):
        _log.selection("decode_attention", variant or _default(), variant or None,
                       _ext.attention_variants)
    if out is not None:
        return out
    return result(y, query, bf16=y.dtype.itemsize == 2)


def _default() -> str:
    return next((v["name"] for v in _ext.attention_variants() if v["selected"]), "?")
