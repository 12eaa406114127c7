from collections.abc import Sequence
from typing import Annotated

import numpy
from numpy.typing import NDArray


class LayoutNotRunnableError(ValueError):
    pass

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

class PackedWeights:
    """
    Weights packed once into one micro-kernel's layout, for any op (cpukern.ternary.prepare, cpukern.widely_linear.prepare, cpukern.moe.prepare). Pickles, copies and serialises (to_bytes, from_buffer).
    """

    @property
    def op(self) -> str:
        """The op: 'ternary', 'widely_linear' or 'moe'."""

    @property
    def format(self) -> str:
        """
        The stored weights' format: 'ternary', or for moe 'bf16', 'mxfp4', 'int8' or 'mxfp4_a8' (MXFP4 weights, int8 activations).
        """

    @property
    def act(self) -> str:
        """
        The activations the micro-kernel reads: 'fp32', 'bf16' or 'int8' (ternary weights also run act='int8' through their int8 layout).
        """

    @property
    def variant(self) -> str:
        """The variant (registry row) that packed them."""

    @property
    def ukernel(self) -> str:
        """The variant's micro-kernel."""

    @property
    def layout(self) -> str:
        """The layout word of the kernel layout."""

    @property
    def shape(self) -> tuple[int, ...]:
        """
        ternary (M, K); widely_linear (2n, 2m), the real matrix the layer stands for; moe (E, O, I) of the unpacked weights.
        """

    @property
    def nbytes(self) -> int:
        """Bytes of the kernel layouts held now (scales not counted)."""

    @property
    def is_view(self) -> bool:
        """
        True when the layouts view a serialised buffer (from_buffer, zero-copy).
        """

    @property
    def has_scale(self) -> bool:
        """True when the weights carry float32 scales of their own."""

    @property
    def group_size(self) -> int:
        """
        ternary weights: G when the scale is per row and group of G columns, else 0 (AttributeError for other ops).
        """

    @property
    def int8_ready(self) -> bool:
        """
        ternary weights: True when act='int8' needs no packing (the int8 layout exists).
        """

    @property
    def stages(self) -> int:
        """widely_linear weights: the number of phase-quantised stages."""

    def __repr__(self) -> str: ...

    def __reduce__(self) -> object: ...

    def to_bytes(self, int8: bool = False) -> object:
        """
        cpukern.to_bytes(self, int8=int8): the serialised form (see cpukern.ternary.to_bytes).
        """

    @staticmethod
    def from_buffer(buf, *, verify=False, variant=None, threads=None, name='buffer') -> PackedWeights:
        """
        Packed weights of any op from a buffer written by to_bytes (a 1-D uint8 numpy array or
            torch tensor, 64-byte aligned). A numpy array is viewed without copying (the result keeps
            it alive); torch memory is viewed only where torch cannot free or move it (a non-resizable,
            shared storage), else copied once (owned_buffer: torch can resize or re-home any other
            storage under a view). The header is validated against the buffer's size (O(1));
            verify=True also checks the checksum (one pass). A buffer for a variant this CPU cannot run
            (or not `variant`) is prepared again where the op can unpack its layout (ternary;
            widely_linear's public layout), else ValueError naming `buf` (MoE packings cannot be
            unpacked).
        """

def weight_memory(nbytes: int) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,))]: ...

def weight_memory_stats() -> tuple[int, int, int]: ...

def packed_serialized_size(weights: PackedWeights, int8: bool) -> int: ...

def packed_serialize(weights: PackedWeights, int8: bool, threads: int, out: Annotated[NDArray, dict(device='cpu')]) -> None: ...

def packed_from_buffer(buffer: Annotated[NDArray, dict(device='cpu', writable=False)], ops: Sequence[str], verify: bool, variant: str, threads: int, arg: str) -> PackedWeights: ...

def ternary_variants() -> list: ...

def ternary_pack(w: Annotated[NDArray, dict(device='cpu', writable=False)]) -> object: ...

def ternary_unpack(packed: Annotated[NDArray, dict(device='cpu', writable=False)], k: int) -> object: ...

def ternary_quantize(w: Annotated[NDArray, dict(device='cpu', writable=False)], per_tensor: bool) -> tuple: ...

def ternary_prepare(packed: Annotated[NDArray, dict(device='cpu', writable=False)], k: int, scale: Annotated[NDArray, dict(device='cpu', writable=False)] | None, variant: str, group_size: int = 0, threads: int = 0, int8: bool = False, out: Annotated[NDArray, dict(device='cpu')] | None = None) -> PackedWeights: ...

def ternary_prepared_size(packed: Annotated[NDArray, dict(device='cpu', writable=False)], k: int, scale: Annotated[NDArray, dict(device='cpu', writable=False)] | None, variant: str, group_size: int, int8: bool) -> int: ...

def ternary_gemv(weights: PackedWeights, x: Annotated[NDArray, dict(device='cpu', writable=False)], scale: Annotated[NDArray, dict(device='cpu', writable=False)] | None, act: str, variant: str, threads: int, out: Annotated[NDArray, dict(device='cpu')] | None) -> object: ...

def ternary_gemv_multi(weights: Sequence[PackedWeights], x: Annotated[NDArray, dict(device='cpu', writable=False)], act: str, threads: int, outs: Sequence[Annotated[NDArray, dict(device='cpu')] | None]) -> list: ...

def ternary_gemv_buffer(prepared: Annotated[NDArray, dict(device='cpu', writable=False)], m: int, x: Annotated[NDArray, dict(device='cpu', writable=False)], act: str, threads: int, out: Annotated[NDArray, dict(device='cpu')] | None) -> object: ...

def widely_linear_run_buffer(prepared: Annotated[NDArray, dict(device='cpu', writable=False)], rows: int, x: Annotated[NDArray, dict(device='cpu', writable=False)], threads: int, out: Annotated[NDArray, dict(device='cpu')] | None) -> object: ...

def widely_linear_variants() -> list: ...

def widely_linear_phase_quantize(a: Annotated[NDArray, dict(device='cpu', writable=False)], stages: int) -> tuple[Annotated[NDArray[numpy.uint32], dict(shape=(None, None, None, None))], Annotated[NDArray[numpy.float32], dict(shape=(None, None))]]: ...

def widely_linear_dense(planes: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)], m: int) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]: ...

def widely_linear_prepare(planes: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)], m: int, variant: str, out: Annotated[NDArray, dict(device='cpu')] | None = None) -> PackedWeights: ...

def widely_linear_prepared_size(planes: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)], m: int, variant: str) -> int: ...

def widely_linear_run(weights: PackedWeights, x: Annotated[NDArray, dict(device='cpu', writable=False)], fused: bool, variant: str, threads: int, out: Annotated[NDArray, dict(device='cpu')] | None) -> object: ...

def moe_variants() -> list: ...

def linear_variants() -> list: ...

def linear_variant(variant: str) -> str: ...

def moe_route(router_logits: Annotated[NDArray, dict(device='cpu', writable=False)], topk: int, renormalize: bool, rule: str) -> tuple[Annotated[NDArray[numpy.float32], dict(shape=(None, None))], Annotated[NDArray[numpy.int32], dict(shape=(None, None))]]: ...

def moe_router(x: Annotated[NDArray, dict(device='cpu', writable=False)], w: PackedWeights, bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, topk: int, rule: str, renormalize: bool, threads: int, logits: Annotated[NDArray, dict(device='cpu')] | None, weights: Annotated[NDArray, dict(device='cpu')] | None, ids: Annotated[NDArray, dict(device='cpu')] | None) -> tuple: ...

def moe_prepare(w: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)] | None, format: str, act: str, variant: str, out: Annotated[NDArray, dict(device='cpu')] | None = None) -> PackedWeights: ...

def moe_prepared_size(w: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)] | None, format: str, act: str, variant: str) -> int: ...

def moe_int8_quantize(w: Annotated[NDArray, dict(device='cpu', writable=False)]) -> tuple: ...

def moe_mxfp4_quantize(w: Annotated[NDArray, dict(device='cpu', writable=False)]) -> tuple: ...

def moe_mxfp4_dequantize(blocks: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)]) -> object: ...

def moe_int8_dequantize(blocks: Annotated[NDArray, dict(device='cpu', writable=False)], scales: Annotated[NDArray, dict(device='cpu', writable=False)]) -> object: ...

def moe_linear(x: Annotated[NDArray, dict(device='cpu', writable=False)], w: PackedWeights, bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, variant: str, threads: int, out: Annotated[NDArray, dict(device='cpu')] | None) -> object: ...

def moe_fused_moe(x: Annotated[NDArray, dict(device='cpu', writable=False)], w13: PackedWeights, w2: PackedWeights, topk_weights: Annotated[NDArray, dict(device='cpu', writable=False)], topk_ids: Annotated[NDArray, dict(device='cpu', writable=False)], int64_ids: bool, activation: str, w13_bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, w2_bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, skip_weighted: bool, variant: str, threads: int, out: Annotated[NDArray, dict(device='cpu')] | None) -> object: ...

def attention_variants() -> list: ...

def attention_decode(query: Annotated[NDArray, dict(device='cpu', writable=False)], key: Annotated[NDArray, dict(device='cpu', writable=False)], value: Annotated[NDArray, dict(device='cpu', writable=False)], mask: Annotated[NDArray, dict(device='cpu', writable=False)] | None, sinks: Annotated[NDArray, dict(device='cpu', writable=False)] | None, scale: float, nan_if_empty: bool, variant: str, threads: int, out: Annotated[NDArray, dict(device='cpu')] | None) -> object: ...
