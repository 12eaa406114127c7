"""The datatype vocabulary of every op, one spelling each (docs/formats/datatypes.md).

Weight formats: "bf16", "mxfp4", "int8" (cpukern.moe) and the ternary ops' packed uint32
codes. Activation types (`act=`): "fp32" (activations as given, the exact kernels) and
"int8" (quantised per token at run time); ternary also has "int8_bitnet".
Where one string must name both (PackedWeights.format, the prepared-weights header,
cpukern.torch.patch's `format`), it is the weight format, plus "_a8" for int8 activations:
W4A8, format="mxfp4" with act="int8", is "mxfp4_a8" (C++: WeightFormat::kMxfp4A8).
"""

from __future__ import annotations

from typing import Any, Optional

from cpukern._arrays import str_arg

FP32 = "fp32"
INT8 = "int8"

# The one-string token of MXFP4 weights with int8 activations (W4A8).
W4A8 = "mxfp4_a8"


def act_arg(act: Any, choices: Optional[tuple[str, ...]] = None) -> str:
    """`act` checked: a string (TypeError naming `act`), one of `choices` if given (ValueError
    naming `act`; None: the extension checks the name)."""
    if not isinstance(act, str):
        raise TypeError(f"act: expected a string, got {type(act).__name__} {act!r}")
    return act if choices is None else str_arg(act, "act", choices)


def token(format: str, act: str) -> str:
    """The one-string name of weights in `format` run with activations `act`."""
    return format if act == FP32 else f"{format}_a8"


def split_token(name: str) -> tuple[str, str]:
    """(format, act) of a one-string name: "mxfp4_a8" -> ("mxfp4", "int8"), "bf16" -> ("bf16",
    "fp32")."""
    return (name[:-3], INT8) if name.endswith("_a8") else (name, FP32)
