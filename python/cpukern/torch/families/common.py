"""What every family adapter shares: the options, the plan of which module becomes what, the
builders of cpukern modules from a model's tensors, and the checks of a checkpoint's tensors
and a config's sizes before transformers loads them."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import warnings
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch
from torch import Tensor, nn

import cpukern
from cpukern import _safetensors
from cpukern import moe as _moe
from cpukern import ternary as _ternary
from cpukern._arrays import MAX_THREADS, int_arg, str_arg
from cpukern.torch._pages import drop_mapped_pages
from cpukern.torch.experts import FusedMoE, MoERouter
from cpukern.torch.dense import pack_linear_
from cpukern.torch.modules import TernaryLinear

DENSE = ("bf16", "int8")


@dataclasses.dataclass
class PatchReport:
    """What ``patch`` / the cpukern quantizer did: ``replaced`` and ``left`` are lists of
    (module name, its class, what replaced it or how its weight was packed in place / why it
    stayed)."""

    replaced: list = dataclasses.field(default_factory=list)
    left: list = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"replaced {len(self.replaced)} modules:"]
        lines += [f"  {n} ({c}) -> {w}" for n, c, w in self.replaced]
        by_reason: dict = {}
        for n, c, why in self.left:
            by_reason.setdefault((c, why), []).append(n)
        lines.append(f"left alone {len(self.left)} modules:")
        for (c, why), names in by_reason.items():
            shown = ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
            lines.append(f"  {c}: {why}: {shown}")
        return "\n".join(lines)


class MoEExperts(nn.Module):
    """Stands in for a transformers experts module (``GptOssExperts``, ``Qwen3MoeExperts``):
    called as they are, ``(hidden_states (T, H), top_k_index (T, k), top_k_weights (T, k))``,
    and runs ``moe`` (a FusedMoE) with that routing; returns hidden_states' dtype. Expert ids
    go to the op as int64 or int32, which range-checks them (also in compiled graphs) before
    the kernel reads them as int32: 2**32 + 1 is refused, never expert 1."""

    def __init__(self, moe: FusedMoE) -> None:
        super().__init__()
        self.moe = moe

    def forward(self, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
        if not isinstance(top_k_index, Tensor) or top_k_index.is_floating_point() or \
                top_k_index.is_complex() or top_k_index.dtype == torch.bool:
            got = (top_k_index.dtype if isinstance(top_k_index, Tensor)
                   else type(top_k_index).__name__)
            raise TypeError(f"top_k_index: expected an integer tensor, got {got}")
        if top_k_index.dtype not in (torch.int32, torch.int64):
            top_k_index = top_k_index.to(torch.int64)  # widening: no id changes
        return self.moe.experts(hidden_states, top_k_weights, top_k_index)


@dataclasses.dataclass(frozen=True)
class Options:
    """patch's / CpukernConfig's options, checked (see ``options``)."""

    variant: str = ""
    act: str = "int8_bitnet"
    format: Optional[str] = None
    dense: Optional[str] = "bf16"
    threads: Optional[int] = None  # set (process-wide) once every module is checked
    lm_head: Optional[str] = None  # the LM head's format; None: dense's


def _variant_names(op: str) -> list:
    return [v["name"] for v in cpukern.kernels(op)]


def options(family: "Family", variant: Any = None, act: Any = None, format: Any = None,
            dense: Any = "bf16", threads: Any = None, lm_head: Any = None) -> Options:
    """Every option checked against the family before anything is changed: TypeError /
    ValueError naming the option. variant must name a variant of one of the ops the family's
    modules run (dense layers run fused_moe's)."""
    if variant is not None:
        if not isinstance(variant, str):
            raise TypeError(f"variant: expected None or a variant name (str), got "
                            f"{type(variant).__name__}")
        known = sorted({n for op in family.ops + ("fused_moe",) for n in _variant_names(op)})
        if variant not in ("", "auto") and variant not in known:
            raise ValueError(f"variant: {variant!r} is no variant of the ops a "
                             f"{family.model_type} model runs; expected None or one of {known}")
    if dense is not None:
        str_arg(dense, "dense", DENSE)
    if lm_head is not None:
        str_arg(lm_head, "lm_head", DENSE)
    if act is not None:
        str_arg(act, "act", _ternary.ACTS)
    if format is not None and format not in family.formats:
        raise ValueError(f"format: expected None or one of {family.formats} for a "
                         f"{family.model_type} model, got {format!r}")
    if threads is not None:
        int_arg(threads, "threads", 0, MAX_THREADS)
    return Options("" if variant in (None, "auto") else variant, act or "int8_bitnet", format,
                   dense, threads, lm_head)


# --- building cpukern modules ------------------------------------------------------------

def ternary_linear(codes: np.ndarray, scale: float, bias: Optional[Tensor], act: str,
                   variant: str, norm: Optional[nn.Module] = None) -> nn.Module:
    """TernaryLinear (packed) over int8 {-1, 0, +1} codes (out, in) times a per-tensor
    float32 scale; behind the layer's optional RMSNorm (kept in torch)."""
    out_f, in_f = codes.shape
    packed = torch.from_numpy(_ternary.pack(np.ascontiguousarray(codes)).view(np.int32))
    tl = TernaryLinear.from_packed(packed, in_f, torch.full((out_f,), float(scale)), bias,
                                   act=act, variant=variant)
    return tl if norm is None else nn.Sequential(norm, tl)


def quantize_experts(w: Tensor, fmt: str) -> tuple:
    return _moe.quantize(w.to(torch.bfloat16).contiguous(), format=fmt)


def is_exact_mxfp4(w: Tensor) -> bool:
    """Whether bf16 experts hold values MXFP4 represents exactly (packing them loses nothing)."""
    if w.shape[-1] % 32:
        return False
    w = w.to(torch.bfloat16).contiguous()
    blocks, scales = _moe.quantize(w, format="mxfp4")
    return bool(torch.equal(torch.as_tensor(_moe.dequantize(blocks, scales)).to(torch.bfloat16), w))


def fused_moe(w13: Tensor, w2: Tensor, b13: Optional[Tensor], b2: Optional[Tensor], *, fmt: str,
              topk: int, activation: str, variant: str) -> FusedMoE:
    """FusedMoE (packed) from float experts w13 (E, 2I, H), w2 (E, H, I) in format fmt
    ("bf16", "int8", "mxfp4", "mxfp4_a8")."""
    kw = dict(topk=topk, activation=activation, variant=variant)
    if fmt == "bf16":
        mod = FusedMoE.from_experts(w13, w2, b13, b2, **kw)
    else:
        qfmt = "int8" if fmt == "int8" else "mxfp4"
        q13, s13 = quantize_experts(w13, qfmt)
        q2, s2 = quantize_experts(w2, qfmt)
        if qfmt == "int8":
            mod = FusedMoE.from_int8(q13, s13, q2, s2, b13, b2, **kw)
        else:
            mod = FusedMoE.from_mxfp4(q13, s13, q2, s2, b13, b2, **kw,
                                      act="int8" if fmt == "mxfp4_a8" else "fp32")
    return mod


# --- the plan: which module becomes what ---------------------------------------------------

@dataclasses.dataclass
class Step:
    """One module to pack: `build()` returns the packed cpukern module, or the module itself
    with its weight packed in place (a dense nn.Linear keeps its class)."""

    name: str
    cls: str
    what: str
    build: Callable[[], nn.Module]
    lossy: Optional[str] = None  # the lossy choice asked for, if any (warned once per plan)


def _dense_variant(variant: str) -> str:
    """Dense layers run fused_moe's variants: a forced name of another op's (a ternary_gemv
    variant, for BitNet) leaves them on automatic selection."""
    return variant if variant in _variant_names("fused_moe") else ""


class Family:
    """The adapter of one model family; subclasses set the class attributes and override
    ``plan_module`` (and ``before_loading`` / ``expected_tensor`` where the checkpoint stores
    another layout than the model's)."""

    model_type = ""
    ops: tuple = ("fused_moe",)  # ops whose variants run the family's own modules
    formats: tuple = ()  # format= values of its experts
    # config fields that must be integers >= 1 (checked before transformers builds the model)
    config_sizes: tuple = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads", "num_key_value_heads")

    def plan_module(self, name: str, mod: nn.Module, model: nn.Module, opts: Options) -> Any:
        """A Step, a reason (str) it stays, or None when the module is not the family's own."""
        return None

    def float_linear_reason(self, model: nn.Module) -> Optional[str]:
        """Why a float32 nn.Linear stays (None: the common reason)."""
        return None

    def before_loading(self, model: nn.Module, source: Optional[dict]) -> None:
        """Puts modules holding the checkpoint's own layout (source: the checkpoint's own
        quantization config) in place of the model's, before transformers loads the tensors."""
        if source:
            raise ValueError(f"quantization_config: a {self.model_type} checkpoint quantised with "
                             f"{source.get('quant_method')!r} has no cpukern loader")

    def load_operations(self, source: Optional[dict]) -> tuple:
        """(transformers load ops by mode, serialized names) the checkpoint's layout needs."""
        return {}, {}

    def expected_tensor(self, key: str, model: nn.Module) -> Optional[list]:
        """The (shape, float or not) pairs the model takes for checkpoint tensor `key`, None
        when the name is not the model's own (transformers' renaming decides)."""
        try:
            t = model.get_parameter(key)
        except AttributeError:
            try:
                t = model.get_buffer(key)
            except AttributeError:
                return None
        return [(tuple(t.shape), t.dtype.is_floating_point)]

    def required_tensors(self, model: nn.Module) -> list:
        """Checkpoint tensors the model cannot do without: ones that load into a module of the
        family's own (a load-time placeholder) that transformers would not initialise when
        they are missing, leaving uninitialised memory in the weights."""
        return []

    # -- shared by every family --

    def check_config(self, config: Any) -> None:
        """The sizes of config.json are integers >= 1 (ValueError naming the field), before a
        model of that shape is built."""
        for field in self.config_sizes:
            if not hasattr(config, field):
                continue
            v = getattr(config, field)
            try:
                int_arg(v, f"config.{field}", 1)
            except TypeError as e:
                raise ValueError(str(e)) from None

    def plan_dense(self, name: str, mod: nn.Module, model: nn.Module, opts: Options,
                   head: bool = False) -> Any:
        """A bf16 nn.Linear, its weight packed in place in the format dense= asks for (the
        layer keeps its class: cpukern.torch.pack_linear_); the LM head (head) in lm_head's
        where that is given."""
        fmt, option = opts.dense, "dense"
        if head and opts.lm_head is not None:
            fmt, option = opts.lm_head, "lm_head"
        if fmt is None:
            return "dense=None: dense layers stay in torch"
        if mod.weight.dtype != torch.bfloat16:
            return self.float_linear_reason(model) or (
                f"{mod.weight.dtype} weights: cpukern's dense kernels compute in bf16, this layer "
                f"in {mod.weight.dtype}")
        lossy = None
        if fmt == "int8":
            lossy = ("lm_head='int8' (W8A8 LM head)" if option == "lm_head"
                     else "dense='int8' (W8A8 dense layers)")
        return Step(name, "Linear", f"weight packed {fmt}", lambda: pack_linear_(
            mod, format=fmt, variant=_dense_variant(opts.variant)), lossy=lossy)

    def plan_router(self, name: str, mod: nn.Module, opts: Options, rule: str,
                    renormalize: bool) -> Any:
        """A transformers top-k router (``weight`` (E, H), optional ``bias``, ``top_k``) ->
        MoERouter: its logits GEMV and routing rule in one cpukern call. It follows dense=
        (None leaves it in torch) but is always packed bf16: an int8 router would move
        experts."""
        if opts.dense is None:
            return "dense=None: the router stays in torch"
        if mod.weight.dtype != torch.bfloat16:
            return (f"{mod.weight.dtype} weights: cpukern's router computes its logits in bf16, "
                    f"this one in {mod.weight.dtype}")
        bias = getattr(mod, "bias", None)
        return Step(name, type(mod).__name__, f"MoERouter {rule}", lambda: MoERouter.from_weight(
            mod.weight, int(mod.top_k), bias=bias, rule=rule, renormalize=renormalize,
            variant=_dense_variant(opts.variant)))

    def plan(self, model: nn.Module, opts: Options) -> tuple[list, list]:
        """(steps, left): every module checked before any is replaced."""
        steps, left, taken = [], [], []
        get_head = getattr(model, "get_output_embeddings", None)
        head = get_head() if callable(get_head) else None
        with torch.no_grad():
            for name, mod in model.named_modules():
                if any(name.startswith(t + ".") for t in taken):
                    continue  # inside a module that is replaced
                got = self.plan_module(name, mod, model, opts)
                if got is None and type(mod) is nn.Linear:
                    got = self.plan_dense(name, mod, model, opts, head=mod is head)
                if isinstance(got, Step):
                    steps.append(got)
                    taken.append(name)
                elif isinstance(got, str):
                    left.append((name, type(mod).__name__, got))
        lossy: dict = {}
        for step in steps:
            if step.lossy:
                lossy.setdefault(step.lossy, []).append(step.name)
        if lossy:
            warnings.warn("cpukern: lossy choices asked for (results differ from the model's own "
                          "weights): " + "; ".join(
                              f"{what} on {len(names)} modules ({names[0]}, ...)"
                              for what, names in lossy.items()),
                          UserWarning, stacklevel=3)
        return steps, left

    def apply(self, model: nn.Module, steps: list, opts: Options, report: PatchReport) -> None:
        """Builds and places each step's module, one at a time (one layer's float weights at a
        time are alive beside the packed ones, and the checkpoint pages the replaced module's
        tensors were mapped from are dropped from the process once packed: cpukern.torch._pages)."""
        if opts.threads is not None:
            cpukern.set_num_threads(opts.threads)
        with torch.no_grad():
            for step in steps:
                old = list(_tensors(model.get_submodule(step.name)))
                new = step.build()
                if new is not model.get_submodule(step.name):
                    model.set_submodule(step.name, new)
                report.replaced.append((step.name, step.cls, step.what))
                # pages of tensors the model still holds stay
                drop_mapped_pages(old, _tensors(model))
                del new, old
                step.build = None  # frees the old module's tensors the closure holds
        self.after_apply(model)

    def after_apply(self, model: nn.Module) -> None:
        """What the family does once its modules are packed (also on a model loaded with
        packed modules): by default nothing."""


def _tensors(mod: nn.Module) -> Iterable[Tensor]:
    return itertools.chain(mod.parameters(), mod.buffers())


# --- checkpoint checks ---------------------------------------------------------------------

_FLOAT_CODES = ("F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2")


def safetensors_header(path: str) -> dict:
    """name -> (shape, is float, dtype code) of one safetensors file, from its header (no data
    read), by cpukern's one safetensors reader (ValueError naming the file). A load asks for a
    file's header several times (the layer count, the shape checks, saved modules): it is read
    once while the file stays the same."""
    st = os.stat(path)
    return dict(_header_of(os.fspath(path), st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _header_of(path: str, ino: int, size: int, mtime_ns: int) -> dict:
    return {key: (shape, code in _FLOAT_CODES, code)
            for key, (shape, code) in _safetensors.header(path).items()}


def check_checkpoint(family: Family, model: nn.Module, files: list) -> None:
    """Every stored tensor whose place the family knows has that place's shape and kind (float
    or not), and every tensor the family requires is stored: ValueError naming the file and
    the tensor, before anything is loaded."""
    stored: Optional[set] = set()
    for path in files or ():
        if not str(path).endswith(".safetensors"):
            stored = None  # another format: what it holds is not known here
            continue
        header = safetensors_header(path)
        if stored is not None:
            stored.update(header)
        for key, (shape, is_float, code) in header.items():
            try:
                want = family.expected_tensor(key, model)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
            if want is None:
                continue
            if (shape, is_float) in want:
                continue
            shapes = " or ".join(str(w[0]) for w in want)
            if all(shape != w[0] for w in want):
                raise ValueError(f"{path}: tensor {key!r} has shape {shape}, the model "
                                 f"expects {shapes}")
            kind = "a float" if want[0][1] else "an integer"
            raise ValueError(f"{path}: tensor {key!r} is {code}, the model expects {kind} tensor")
    if files and stored is not None:
        missing = [k for k in family.required_tensors(model) if k not in stored]
        if missing:
            where = os.path.dirname(str(files[0])) or "."
            raise ValueError(f"{where}: the checkpoint stores no tensor {missing[0]!r} (nor "
                             f"{len(missing) - 1} more the model needs): it would run on "
                             f"uninitialised memory")
