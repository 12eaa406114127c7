from typing import Annotated

import numpy
from numpy.typing import NDArray


def cpu_info() -> dict:
    """Architecture and detected CPU features."""

limits: dict = ...

def set_num_threads(n: int) -> None:
    """
    Default thread count for ops called with threads=None: 0 (all cores) or 1..4096; the pool runs at most 256 threads.
    """

def get_num_threads() -> int: ...

def set_polling(on: bool) -> bool:
    """
    Pool threads poll for the next call before sleeping (on, the default) or sleep at once;
    returns the previous setting.
    """

def empty_cache() -> None:
    """
    Gives back the scratch memory kernels keep between calls (every thread's that no call
    is using now; a call in flight gives its own back when it returns).
    """

def read_bandwidth(nbytes: int = 1073741824, threads: int = 0, min_seconds: float = 0.5) -> float:
    """
    Bytes/s of a streaming read of nbytes (far above the L3: DRAM) with `threads` threads of
    the kernels' pool (0 = the default): the floor that decode kernels are bound by.
    """

class TernaryWeights:
    """
    Ternary weights converted once into one kernel's layout (cpukern.ternary.prepare).
    """

    @property
    def isa(self) -> str:
        """The variant whose layout this is."""

    @property
    def shape(self) -> tuple[int, int]:
        """(M, K) of the logical weight matrix."""

    @property
    def nbytes(self) -> int:
        """Bytes of the prepared layout."""

    @property
    def has_scale(self) -> bool: ...

    @property
    def group_size(self) -> int:
        """G when the scale is per row and group of G columns, else 0."""

    @property
    def is_view(self) -> bool:
        """
        True when the layout views a serialised buffer (from_buffer, zero-copy).
        """

    @property
    def int8_ready(self) -> bool:
        """True when act='int8' needs no packing (the int8 layout exists)."""

    def __repr__(self) -> str: ...

    def __reduce__(self) -> object: ...

    def to_bytes(self, int8: bool = False) -> object:
        """cpukern.ternary.to_bytes(self, int8=int8)."""

def ternary_serialized_size(weights: TernaryWeights, int8: bool) -> int: ...

def ternary_serialize(weights: TernaryWeights, int8: bool, threads: int, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

def ternary_from_buffer(buffer: Annotated[NDArray, dict(device='cpu', writable=False)], verify: bool, isa: str, threads: int, arg: str) -> tuple[TernaryWeights, bool]: ...

def ternary_variants() -> list: ...

def ternary_pack(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: Annotated[NDArray, dict(device='cpu')], /) -> None: ...

def ternary_unpack(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: int, arg2: Annotated[NDArray, dict(device='cpu')], /) -> None: ...

def ternary_quantize(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: bool, arg2: Annotated[NDArray, dict(device='cpu')], arg3: Annotated[NDArray, dict(device='cpu')], /) -> None: ...

def ternary_prepare(packed: Annotated[NDArray, dict(device='cpu', writable=False)], k: int, scale: Annotated[NDArray, dict(device='cpu', writable=False)] | None, isa: str, group_size: int = 0, threads: int = 0) -> TernaryWeights: ...

def ternary_gemv(weights: TernaryWeights, x: Annotated[NDArray, dict(device='cpu', writable=False)], scale: Annotated[NDArray, dict(device='cpu', writable=False)] | None, act: str, threads: int, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

def ternary_gemv_buffer(prepared: Annotated[NDArray, dict(device='cpu', writable=False)], m: int, x: Annotated[NDArray, dict(device='cpu', writable=False)], act: str, threads: int, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

class WidelyLinearWeights:
    """
    A widely-linear ternary layer converted once into one kernel's layout (cpukern.widely_linear.prepare).
    """

    @property
    def isa(self) -> str: ...

    @property
    def shape(self) -> tuple[int, int]:
        """(2n, 2m): the shape of the real matrix the layer stands for."""

    @property
    def stages(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def is_view(self) -> bool:
        """
        True when the layout views a serialised buffer (from_buffer, zero-copy).
        """

    def __repr__(self) -> str: ...

    def __reduce__(self) -> object: ...

    def to_bytes(self) -> object:
        """cpukern.ternary.to_bytes(self)."""

def widely_linear_serialized_size(layer: WidelyLinearWeights) -> int: ...

def widely_linear_serialize(layer: WidelyLinearWeights, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

def widely_linear_from_buffer(buffer: Annotated[NDArray, dict(device='cpu', writable=False)], verify: bool, isa: str, arg: str) -> WidelyLinearWeights: ...

def widely_linear_run_buffer(prepared: Annotated[NDArray, dict(device='cpu', writable=False)], rows: int, x: Annotated[NDArray, dict(device='cpu', writable=False)], threads: int, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

def widely_linear_variants() -> list: ...

def widely_linear_phase_quantize(a: Annotated[NDArray, dict(device='cpu', writable=False)], stages: int) -> tuple[Annotated[NDArray[numpy.uint32], dict(shape=(None, None, None, None))], Annotated[NDArray[numpy.float32], dict(shape=(None, None))]]: ...

def widely_linear_dense(planes: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)], m: int) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]: ...

def widely_linear_prepare(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: Annotated[NDArray, dict(device='cpu', writable=False)], arg2: int, arg3: str, /) -> WidelyLinearWeights: ...

def widely_linear_run(arg0: WidelyLinearWeights, arg1: Annotated[NDArray, dict(device='cpu', writable=False)], arg2: bool, arg3: int, arg4: Annotated[NDArray, dict(device='cpu')], /) -> None: ...

class PackedExperts:
    """
    Expert weights (bf16, MXFP4 or int8) packed once for one kernel family (cpukern.moe.prepare).
    """

    @property
    def isa(self) -> str: ...

    @property
    def format(self) -> str:
        """
        'bf16', 'mxfp4', 'int8' or 'mxfp4_a8' (MXFP4 weights, int8 activations).
        """

    @property
    def shape(self) -> tuple[int, int, int]:
        """(E, O, I) of the unpacked weights."""

    @property
    def nbytes(self) -> int: ...

    def __repr__(self) -> str: ...

    def __reduce__(self) -> object: ...

def moe_variants() -> list: ...

def moe_serialized_size(experts: PackedExperts) -> int: ...

def moe_serialize(experts: PackedExperts, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

def moe_from_buffer(buffer: Annotated[NDArray, dict(device='cpu', writable=False)], verify: bool, isa: str, arg: str) -> PackedExperts: ...

def moe_route(router_logits: Annotated[NDArray, dict(device='cpu', writable=False)], topk: int, renormalize: bool) -> tuple[Annotated[NDArray[numpy.float32], dict(shape=(None, None))], Annotated[NDArray[numpy.int32], dict(shape=(None, None))]]: ...

def moe_prepack(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: str, /) -> PackedExperts: ...

def moe_prepack_mxfp4(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: Annotated[NDArray, dict(device='cpu', writable=False)], arg2: str, arg3: str, /) -> PackedExperts: ...

def moe_prepack_int8(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: Annotated[NDArray, dict(device='cpu', writable=False)], arg2: str, /) -> PackedExperts: ...

def moe_int8_quantize(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: Annotated[NDArray, dict(device='cpu')], arg2: Annotated[NDArray, dict(device='cpu')], /) -> None: ...

def moe_mxfp4_dequantize(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: Annotated[NDArray, dict(device='cpu', writable=False)], arg2: Annotated[NDArray, dict(device='cpu')], /) -> None: ...

def moe_mxfp4_quantize(arg0: Annotated[NDArray, dict(device='cpu', writable=False)], arg1: Annotated[NDArray, dict(device='cpu')], arg2: Annotated[NDArray, dict(device='cpu')], /) -> None: ...

def moe_linear(x: Annotated[NDArray, dict(device='cpu', writable=False)], w: PackedExperts, bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, threads: int, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

def moe_fused_moe(x: Annotated[NDArray, dict(device='cpu', writable=False)], w13: PackedExperts, w2: PackedExperts, topk_weights: Annotated[NDArray, dict(device='cpu', writable=False)], topk_ids: Annotated[NDArray, dict(device='cpu', writable=False)], activation: str, w13_bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, w2_bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, skip_weighted: bool, threads: int, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...
