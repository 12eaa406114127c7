"""The packing of expert weights that cpukern.moe.prepare and cpukern.linear.prepare share:
one extension call for a resolved `isa`, no logging (each op logs its own selection)."""

from __future__ import annotations

from typing import Any

from cpukern import _ext
from cpukern._arrays import ext_array, str_value
from cpukern._dtypes import act_arg
from cpukern._packed import PackedWeights


def pack(w: Any, format: str, scales: Any, act: str, isa: str) -> PackedWeights:
    """Experts `w` packed for `isa` ("" or a variant name of fused_moe's rows)."""
    # format, act and scales given or not (moe::prepare_format), then the arrays of that
    # format (shapes, values): checked by the extension and moe::prepare*.
    format = str_value(format, "format")
    sc = None if scales is None else ext_array(scales, "scales")
    return _ext.moe_prepare(ext_array(w, "w"), sc, format, act_arg(act), isa)
