"""Helpers of the widely-linear test BUILD."""

# --require-regex values naming every fp32 kernel (fused, gemv, batched) of the kernel
# list's rows of the given archs (a regex alternation such as "any|x86|simde").
_NAME = "widely_linear_f32_f32_[A-Za-z0-9_]+"

def kernels_of_rows(archs):
    """--require-regex arguments of check_no_multiply.py: every fp32 kernel of the rows."""
    row = "CPUKERN_(?:VARIANT|CATALOGUE_ONLY)[(](?:" + archs + "),[^(]*KERNELS(?:_BATCHED)?[(][^,]*,[^,]*,[^a-z]*"
    return [
        "--require-regex=" + row + "(" + _NAME + ")",
        "--require-regex=" + row + _NAME + ",[^a-z]*(" + _NAME + ")",
        "--require-regex=" + row + _NAME + ",[^a-z]*" + _NAME + ",[^a-z]*(" + _NAME + ")",
    ]
