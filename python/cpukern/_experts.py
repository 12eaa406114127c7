"""The packing of expert weights that cpukern.moe.prepare and cpukern.linear.prepare share:
one extension call for a resolved `variant`, no logging (each op logs its own selection)."""

from __future__ import annotations

from typing import Any

from cpukern import _ext
from cpukern._arrays import ext_array, str_value
from cpukern._dtypes import act_arg
from cpukern._packed import PackedWeights, prepare_into


def pack(w: Any, format: str, scales: Any, act: str, variant: str,
         out: Any = None) -> PackedWeights:
    """Experts `w` packed for `variant` ("" or a variant name of fused_moe's rows); out: None, or
    the alloc of cpukern._packed.prepare_into (packed straight into its buffer)."""
    # format, act and scales given or not (moe::prepare_format), then the arrays of that
    # format (shapes, values): checked by the extension and moe::prepare*.
    format = str_value(format, "format")
    act = act_arg(act)

    def arrays() -> tuple[Any, Any]:  # for each call: one call consumes a DLPack capsule
        return ext_array(w, "w"), None if scales is None else ext_array(scales, "scales")

    if out is None:
        return _ext.moe_prepare(*arrays(), format, act, variant)
    return prepare_into(out, lambda: _ext.moe_prepared_size(*arrays(), format, act, variant),
                        lambda buf: _ext.moe_prepare(*arrays(), format, act, variant, buf))
