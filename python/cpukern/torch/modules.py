"""nn.Modules on cpukern's kernels: TernaryLinear, WidelyLinear, Linear (stand-ins for
nn.Linear) and FusedMoE; they call the torch.library ops of cpukern.torch.ops.

dtypes: the weights stay in their own formats whatever ``.to(dtype)``, ``.half()``,
``.bfloat16()``, ``.float()`` or ``.double()`` is applied (those set only the module's
``dtype``, the activation dtype it reports). Every module accepts float32, float16, bfloat16
and float64 activations and returns the input's dtype (bf16 in, bf16 out); the kernels compute
in their own precision (fp32 for the ternary layers, bf16 in/out with fp32 accumulation for
FusedMoE).

Prepared weights: each module holds them as cpukern.torch.PackedWeightsTensor buffers
(``prepared``; FusedMoE: ``w13_prepared`` and ``w2_prepared``), a tensor subclass over the
serialised blob (cpukern.ternary.to_bytes's / cpukern.moe.to_bytes's format) that keeps the
prepared object it views, so a forward rebuilds nothing. ``prepare()`` (alias
``process_weights_after_loading()``, vLLM's name) builds them at load time; a forward builds
whatever is missing. They are ordinary buffers: state_dict, load_state_dict, torch.save,
pickle, copy.deepcopy and ``.to()`` go through the tensor subclass, and vLLM's
``replace_parameter`` (a new Parameter over the same blob) loses nothing. Loaded prepared
weights are checked (header, checksum, that they fit the layer: ValueError naming the key)
and prepared again for this CPU where they were made for another (from their own layout where
that can be unpacked, else from the plain weights). A state_dict may leave them out (older
state_dicts held them as plain uint8 blobs: wrapped on load, checked the same way). The plain
weights (``packed``/``scale``, ``planes``/``scales``, ``w13``/``w2``, ``weight``) stay too:
they are the portable form. In-place edits of the plain weights through torch (seen by their
version counters) make the next forward prepare the affected buffer again; edits that bypass
the version counter need ``prepare()`` again. Weights made under ``torch.inference_mode``
have no version counter: a module whose plain weights are such tensors prepares its buffers
again at every forward (with a RuntimeWarning once), so an in-place change is never missed;
create or load modules outside inference_mode (torch.no_grad() is fine) to avoid that. Under
torch.compile / torch.export the graph runs the ``*_prepared`` op on the blobs when the
module is prepared, else the raw-weight op.

Constructor arguments are checked when the module is made (sizes >= 1 and integers, topk in
[1, num_experts], act / activation names, group_size): ValueError or TypeError naming the
argument."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from cpukern import _ext
from cpukern import moe as _moe
from cpukern import ternary as _ternary
from cpukern import widely_linear as _widely_linear
from cpukern._arrays import bool_arg, int_arg, str_arg
from cpukern._dtypes import act_arg
from cpukern._packed import PackedWeights
from cpukern.torch import ops as _ops  # noqa: F401 - registers torch.ops.cpukern.*
from cpukern.torch._weight_cache import _warn_untracked
from cpukern.torch.packed import EAGER, PackedWeightsTensor

__all__ = ["TernaryLinear", "WidelyLinear", "Linear", "FusedMoE"]


def _isa_arg(isa: str) -> str:
    """isa= of a module: "" (automatic) or a name (checked by the op at the first use)."""
    if not isinstance(isa, str):
        raise TypeError(f"isa: expected a variant name (str; '' for automatic), got "
                        f"{type(isa).__name__} {isa!r}")
    return isa


def _moe_args(num_experts, topk, activation, renormalize, isa) -> tuple:
    """FusedMoE's routing arguments, checked: 1 <= topk <= num_experts."""
    num_experts = int_arg(num_experts, "num_experts", 1)
    topk = int_arg(topk, "topk", 1)
    if topk > num_experts:
        raise ValueError(f"topk: expected 1 <= topk <= num_experts = {num_experts}, got {topk}")
    activation = str_arg(activation, "activation", _moe.ACTIVATIONS)
    renormalize = bool_arg(renormalize, "renormalize")
    return num_experts, topk, activation, renormalize, _isa_arg(isa)


def _flatten(x: Tensor, features: int, name: str) -> tuple[Tensor, tuple]:
    if x.shape[-1] != features:
        raise ValueError(f"{name}: expected {features} input features, got shape {tuple(x.shape)}")
    lead = tuple(x.shape[:-1])
    return x.reshape(-1, features), lead


_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check_float(x: Tensor, name: str) -> None:
    if not isinstance(x, Tensor) or x.dtype not in _FLOATS:
        got = f"{x.dtype} tensor" if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"{name}: expected a float32, float16, bfloat16 or float64 tensor, got {got}")


def _float_weight(t: Any, name: str) -> Tensor:
    """A weight the caller converts to its own float format: integer, bool and complex tensors
    are refused (a conversion would take their values, or drop the imaginary part)."""
    if not isinstance(t, Tensor) or not t.is_floating_point():
        got = (f"{t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, Tensor)
               else type(t).__name__)
        raise TypeError(f"{name}: expected a floating-point tensor, got {got}")
    return t



def _profiled(name: str, impl: Callable, *args: Any, **kwargs: Any) -> Any:
    """impl under torch.profiler.record_function(name): the eager path skips the dispatcher,
    which is where a profiler would otherwise record the op."""
    with torch.profiler.record_function(name):
        return impl(*args, **kwargs)


class _WeightFormatsKept(nn.Module):
    """Module dtype conversions (.to(dtype), .half(), .bfloat16(), .float(), .double()) set the
    activation dtype (``dtype``) and leave every floating-point weight in its own format."""

    _act_dtype = torch.float32

    @property
    def dtype(self) -> torch.dtype:
        """The activation dtype (set by .to(dtype) / .half() / ...; inputs of any float dtype
        are accepted and the result has the input's dtype)."""
        return self._act_dtype

    def _apply(self, fn, recurse=True):
        # What fn does to a float32 and a float16 tensor tells whether it converts dtypes.
        to32, to16 = fn(torch.zeros(1)), fn(torch.zeros(1, dtype=torch.float16))
        if to32.dtype == torch.float32 and to16.dtype == torch.float16:
            return super()._apply(fn, recurse)
        if to32.dtype in _FLOATS:
            self._act_dtype = to32.dtype
        return super()._apply(lambda t: t if t.is_floating_point() else fn(t), recurse)


class _LinearLike(_WeightFormatsKept):
    """The forward shared by the layers that stand in for an nn.Linear: rows of x (as float32)
    through the subclass's `_kernel`, then the bias, returned in x's dtype."""

    def forward(self, x: Tensor) -> Tensor:
        _check_float(x, "x")
        x2, lead = _flatten(x, self.in_features, "x")
        y = self._kernel(x2.to(torch.float32).contiguous())
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(lead + (self.out_features,)).to(x.dtype)

    def process_weights_after_loading(self, layer: Optional[nn.Module] = None) -> "nn.Module":
        """vLLM's name for prepare()."""
        return self.prepare()


_UNTRACKED = "untracked"  # _prepared_from: made from weights without a version counter


def _wrap_plain_blobs(module: "_PreparedBuffer", state_dict: dict, prefix: str, *args) -> None:
    """load_state_dict pre-hook: prepared weights stored as plain 1-D uint8 blobs (state
    dicts saved before PackedWeightsTensor, safetensors files) are wrapped, their header and
    checksum checked; an empty blob stands for "not prepared". Prepared weights that do not
    fit the layer raise ValueError naming the key (before torch's own size check)."""
    for name in module._PREPARED:
        key = prefix + name
        v = state_dict.get(key)
        if not isinstance(v, Tensor):
            continue
        shape = module._packed_shape(name)
        if not isinstance(v, PackedWeightsTensor):
            if v.numel() == 0:
                state_dict[key] = PackedWeightsTensor.empty(shape)
                continue
            v = state_dict[key] = PackedWeightsTensor(v, name=key, _shape=shape)
        if v.runs_here:
            module._check_fits(key, v.weights)
        elif tuple(v.shape) != shape:
            raise ValueError(f"{key}: prepared weights of shape {tuple(v.shape)} do not fit this "
                             f"layer {shape}")


def _prepared_keys_optional(module: "_PreparedBuffer", incompatible: Any) -> None:
    """load_state_dict post-hook: a state_dict without the prepared weights loads (strict
    too): the plain weights it loads make the prepared ones stale, prepared again at the next
    forward. Loaded prepared weights are checked now: kept, prepared again for this CPU from
    their own layout, or from the plain weights (RuntimeError if those were dropped)."""
    for name in module._PREPARED:
        for key in [k for k in incompatible.missing_keys if k.rpartition(".")[2] == name]:
            incompatible.missing_keys.remove(key)
    module._refresh(prepare=True, new_only=True)  # loaded blobs adopted, or prepared again now


class _PreparedBuffer(nn.Module):
    """A module whose prepared weights are PackedWeightsTensor buffers (``prepared``; FusedMoE:
    ``w13_prepared``, ``w2_prepared``) next to the plain weights they are made from.

    Everything else is ordinary torch: state_dict, load_state_dict (copy_ into the buffer),
    .to(), deepcopy and pickling go through the tensor subclass. The module only notes, per
    prepared buffer, which PackedWeightsTensor blob it checked last and the version counters of
    the plain weights then: a new blob (loaded, copied in, unpickled, set by hand) is checked to
    fit this layer and this CPU at the next forward (prepared again when it was made for
    another CPU), and plain weights changed in place since make the next forward prepare
    again. Weights without a version counter (inference tensors) are prepared again at every
    forward."""

    # prepared buffer -> the plain weights it is made from (absent ones, e.g. scales of bf16
    # experts, are skipped)
    _SOURCES: dict = {"prepared": ()}

    @property
    def _PREPARED(self) -> tuple:
        return tuple(self._SOURCES)

    def _packed_shape(self, name: str) -> tuple:
        """The logical shape of prepared buffer `name`."""
        raise NotImplementedError

    def _init_prepared(self) -> None:
        for name in self._PREPARED:
            self.register_buffer(name, PackedWeightsTensor.empty(self._packed_shape(name)))
        self._prepared_from = {}
        self._ready = False
        self._register_prepared_hooks()

    def _register_prepared_hooks(self) -> None:
        self.register_load_state_dict_pre_hook(_wrap_plain_blobs)
        self.register_load_state_dict_post_hook(_prepared_keys_optional)

    def _source_versions(self, name: str) -> Any:
        """(data_ptr, version) of each plain weight of prepared buffer `name`, or _UNTRACKED
        when one has no version counter (an inference tensor: its in-place changes cannot be
        seen)."""
        out = []
        for src in self._SOURCES[name]:
            t = getattr(self, src, None)
            if t is None:
                continue
            try:
                out.append((t.data_ptr(), int(t._version)))
            except RuntimeError:
                return _UNTRACKED
        return tuple(out)

    def _packed(self, name: str) -> PackedWeightsTensor:
        """Prepared buffer (or parameter, after vLLM's replace_parameter) `name`, a
        PackedWeightsTensor (a plain uint8 blob set by hand is wrapped, checked)."""
        t = getattr(self, name, None)
        if not isinstance(t, PackedWeightsTensor):
            shape = self._packed_shape(name)
            t = (PackedWeightsTensor(t, name=name, _shape=shape) if isinstance(t, Tensor) and t.numel()
                 else PackedWeightsTensor.empty(shape))
            self._put(name, t)
        return t

    def _put(self, name: str, t: PackedWeightsTensor) -> None:
        if name in self._parameters:
            self._parameters[name] = nn.Parameter(t, requires_grad=False)
        else:
            self._buffers[name] = t
        self._note_ready()

    def _note_ready(self) -> None:
        """``_ready``: whether every prepared buffer holds weights (a plain attribute, which
        torch.compile reads as a constant and guards on)."""
        self._ready = all(isinstance(getattr(self, n, None), PackedWeightsTensor)
                          and not getattr(self, n).is_empty for n in self._PREPARED)

    def _set_prepared(self, name: str, t: PackedWeightsTensor) -> None:
        """Puts `t` in place as prepared buffer `name`, current with the plain weights now."""
        self._put(name, t)
        versions = self._source_versions(name)
        if versions is _UNTRACKED:
            _warn_untracked()
        self._prepared_from[name] = (self._packed(name)._token, versions)

    def _refresh(self, prepare: bool, new_only: bool = False) -> bool:
        """Checks every prepared buffer against its record: a new blob is adopted (checked, or
        prepared again for this CPU), a stale or empty one prepared again from the plain
        weights when `prepare` (new_only: only where a new blob cannot be adopted). Returns
        whether all are current now."""
        current = True
        for name in self._PREPARED:
            t = self._packed(name)
            seen = self._prepared_from.get(name)
            if t.is_empty:
                fresh = new_only
            elif seen is None or seen[0] is not t._token:
                fresh = self._adopt(name, t)
            elif new_only:
                continue
            elif self.plain_weights_dropped:
                fresh = True  # nothing they could be stale against
            elif seen[1] is _UNTRACKED:
                fresh = False
            else:
                fresh = self._source_versions(name) == seen[1]
            if not fresh:
                if not prepare:
                    current = False
                    continue
                self._need_plain("forward")
                with torch.no_grad():
                    self._set_prepared(name, self._prepare_one(name))
        return current

    def _prepared_op(self, op: Any) -> Optional[Callable]:
        """What forward runs on the prepared buffers: in eager mode the op's implementation
        for PackedWeightsTensor (no dispatcher round trip), after bringing the buffers up to
        date; while torch.compile or torch.export trace, the op itself when the buffers hold
        weights (the graph reads them as they are), else None: the raw-weight op, which
        prepares and caches at run time (cpukern.torch._weight_cache). prepare() before
        compiling traces the prepared form."""
        if torch.compiler.is_compiling():
            return op if getattr(self, "_ready", False) else None
        self._refresh(prepare=True)
        impl = EAGER[op.default]
        if torch.autograd._profiler_enabled():  # the op's name in torch.profiler's events
            return functools.partial(_profiled, op.default.name(), impl)
        return impl

    def _adopt(self, name: str, t: PackedWeightsTensor) -> bool:
        """A blob new to this module, checked to fit it (ValueError naming `name`) and made
        usable here: kept (True), replaced by one prepared again from its own layout for this
        CPU or forced isa (True), or left for preparing from the plain weights (False)."""
        if not t.runs_here:
            return False
        usable = self._usable(name, t)
        if usable is None:
            return False
        self._set_prepared(name, usable)
        return True

    def _usable(self, name: str, t: PackedWeightsTensor) -> Optional[PackedWeightsTensor]:
        """`t` (or one prepared again from it) when it fits this layer and runs here."""
        raise NotImplementedError

    def _check_fits(self, name: str, w: Any) -> None:
        """ValueError naming `name` unless prepared object `w` fits this layer."""
        raise NotImplementedError

    def _prepare_one(self, name: str) -> PackedWeightsTensor:
        """The prepared buffer `name` made now from the plain weights."""
        raise NotImplementedError

    @property
    def plain_weights_dropped(self) -> bool:
        """Whether drop_plain_weights() freed the plain weights."""
        return bool(getattr(self, "_plain_dropped", False))

    def _need_plain(self, what: str) -> None:
        if self.plain_weights_dropped:
            raise RuntimeError(f"{type(self).__name__}.{what}: needs the plain weights, which "
                               "drop_plain_weights() freed (this module runs from its prepared "
                               "buffers only)")

    def drop_plain_weights(self):
        """Frees the plain weights the prepared buffers were made from, so memory holds one
        copy of the weights (``from_pretrained`` and ``patch`` do this unless told to keep
        them). Their buffers stay, empty: state_dict() then carries the prepared buffers,
        which a module that also dropped its plain weights loads. Forward runs from the
        prepared buffers; what needs the plain weights (prepare(), dequantized(), prepared
        buffers made for another CPU) raises RuntimeError. Returns self."""
        if not self._refresh(prepare=False):
            raise RuntimeError(f"{type(self).__name__}.drop_plain_weights: call prepare() first")
        for sources in self._SOURCES.values():
            for src in sources:
                t = self._buffers.get(src)
                if t is not None:
                    self._buffers[src] = torch.empty((0,) * t.dim(), dtype=t.dtype)
        self._plain_dropped = True
        return self

    def prepare(self):
        """Builds the kernel layouts now (load time) into the prepared buffers; forward then
        runs from them (a forward prepares what is missing or stale by itself). Returns self."""
        self._need_plain("prepare")
        with torch.no_grad():
            for name in self._PREPARED:
                self._set_prepared(name, self._prepare_one(name))
        return self

    @property
    def is_prepared(self) -> bool:
        """Whether the prepared buffers hold weights current with the plain weights (a new
        blob is checked here, as at a forward)."""
        return self._refresh(prepare=False)


class TernaryLinear(_PreparedBuffer, _LinearLike):
    """A BitNet b1.58 ternary nn.Linear running cpukern's multiplication-free GEMV.

    Weights: ``packed`` int32 (out, ceil(in/16)) (cpukern.ternary's packed format, viewed as
    int32 so that every torch tool handles it), ``scale`` float32 (out,) (or, with
    ``group_size=G``, (out, ceil(in/G)): one per row and group of G inputs, as GGUF TQ1_0/TQ2_0
    store them), optional ``bias``. ``from_checkpoint`` builds one from a cpukern file
    (``ternary.load``, e.g. written by ``cpukern.convert``).
    Input: float32 (..., in) (other dtypes are converted, which copies); output float32
    (..., out).

    Bounds (tested):
      * against ``dequantized()`` (an nn.Linear with weight = scale[:, None] * unpack(packed)),
        the module it stands for: act="fp32": |y - y_ref| <= 1e-5 * (|x| @ |W_q|.T) + 1e-6;
        act="int8": additionally + |scale| * max|x| / 254 * sum_k |w_k| per output.
      * against the float module it was made from (``from_linear``): absmean quantisation
        error, data dependent; for Gaussian weights and inputs the outputs have cosine
        similarity >= 0.8 with the float outputs (measured 0.88 at 128 x 256).
    """

    _SOURCES = {"prepared": ("packed", "scale")}

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 act: str = "fp32", isa: str = "", group_size: int = 0) -> None:
        in_features = int_arg(in_features, "in_features", 1)
        out_features = int_arg(out_features, "out_features", 1)
        act = act_arg(act, _ternary.ACTS)
        isa = _isa_arg(isa)
        group_size = int_arg(group_size, "group_size", 0)
        if group_size % 16:
            raise ValueError(f"group_size: expected 0 (one scale per row) or a multiple of 16, got "
                             f"{group_size}")
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.act, self.isa, self.group_size = act, isa, group_size
        words = (self.in_features + 15) // 16
        self.register_buffer("packed", torch.zeros(self.out_features, words, dtype=torch.int32))
        scale_shape = ((self.out_features, -(-self.in_features // self.group_size)) if self.group_size
                       else (self.out_features,))
        self.register_buffer("scale", torch.ones(scale_shape, dtype=torch.float32))
        self.register_buffer("bias", torch.zeros(self.out_features) if bias else None)
        self._init_prepared()

    @classmethod
    def from_checkpoint(cls, ckpt, name: str, *, bias: Optional[str] = None, act: str = "fp32",
                        isa: str = "") -> "TernaryLinear":
        """The layer stored as packed rows ``name`` (K and any group size in the header) with
        its scale under ``cpukern.convert.scale_name(name)`` (``<p>.weight`` -> ``<p>.scale``)
        and an optional bias tensor, from ``ternary.load`` (the arrays are copied into the
        module's buffers)."""
        from cpukern.convert import scale_name

        packed, k = ckpt[name], ckpt.k(name)
        for key in (scale_name(name), bias):  # float tensors: never integers taken by value
            if key is not None and ckpt[key].dtype.kind in "biuc":
                raise TypeError(f"ckpt[{key!r}]: expected a floating-point tensor, got "
                                f"{ckpt[key].dtype} tensor of shape {tuple(ckpt[key].shape)}")
        g = ckpt.group_size(name) or 0
        mod = cls(k, packed.shape[0], bias is not None, act=act, isa=isa, group_size=g)
        with torch.no_grad():
            mod.packed.copy_(torch.from_numpy(packed.view("int32").copy()))
            mod.scale.copy_(torch.from_numpy(ckpt[scale_name(name)].astype("float32")).reshape(mod.scale.shape))
            if bias is not None:
                mod.bias.copy_(torch.from_numpy(ckpt[bias].astype("float32")))
        return mod

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, granularity: str = "row", act: str = "fp32",
                    isa: str = "") -> "TernaryLinear":
        """Quantises ``linear.weight`` with BitNet absmean (per row or per tensor)."""
        w = _float_weight(linear.weight, "linear.weight").detach().to(torch.float32).contiguous()
        if linear.bias is not None:
            _float_weight(linear.bias, "linear.bias")
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, act=act, isa=isa)
        packed, scale = _ternary.quantize(w, granularity)
        mod.packed.copy_(packed.view(torch.int32))
        mod.scale.copy_(scale)
        if linear.bias is not None:
            mod.bias.copy_(linear.bias.detach().to(torch.float32))
        return mod

    def dequantized(self) -> nn.Linear:
        """The float nn.Linear this layer computes (scale * ternary weights)."""
        self._need_plain("dequantized")
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        w = _ternary.unpack(self.packed.view(torch.uint32), self.in_features).to(torch.float32)
        s = (self.scale.repeat_interleave(self.group_size, dim=1)[:, :self.in_features] if self.group_size
             else self.scale[:, None])
        with torch.no_grad():
            lin.weight.copy_(w * s)
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    def _kernel(self, x2: Tensor) -> Tensor:
        run = self._prepared_op(torch.ops.cpukern.ternary_gemv_prepared)
        if run is not None:
            return run(self.prepared, x2, self.out_features, self.act)
        return torch.ops.cpukern.ternary_gemv(self.packed, x2, self.scale, self.act, self.isa,
                                              self.group_size)

    def _packed_shape(self, name: str) -> tuple:
        return (self.out_features, self.in_features)

    def _prepare_one(self, name: str) -> PackedWeightsTensor:
        """The ``prepared`` buffer (with act="int8" the int8 layout too)."""
        return PackedWeightsTensor(_ops.prepare_ternary_tensor(
            self.packed, self.in_features, self.scale, self.isa, self.group_size,
            int8=self.act != "fp32"), name=name, verify=False)

    def _check_fits(self, name: str, w: Any) -> None:
        if (getattr(w, "op", None) != "ternary" or w.group_size != self.group_size
                or tuple(w.shape) != (self.out_features, self.in_features)):
            raise ValueError(f"{name}: prepared weights of shape {tuple(w.shape)} (group_size "
                             f"{getattr(w, 'group_size', None)}) do not fit this layer "
                             f"({self.out_features}, {self.in_features}) (group_size "
                             f"{self.group_size})")

    def _usable(self, name: str, t: PackedWeightsTensor) -> Optional[PackedWeightsTensor]:
        self._check_fits(name, t.weights)
        return _ternary_layout_for(t, self.isa, "ternary_gemv", int8=self.act != "fp32")

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, act={self.act!r}"
                + (f", group_size={self.group_size}" if self.group_size else ""))


class WidelyLinear(_PreparedBuffer, _LinearLike):
    """A Fairy2i widely-linear ternary layer standing in for an nn.Linear with even in/out
    features: the real weight is read as a complex (n, m) matrix, quantised to {+-1, +-i}
    in ``stages`` residual stages (cpukern.widely_linear.quantize) and run by the fused kernel.

    Buffers: ``planes`` int32 (stages, 4, n, ceil(m/16)), ``scales`` float32 (stages, 4),
    optional ``bias``. Input float32 (..., 2m); output float32 (..., 2n).

    Bounds (tested):
      * against ``dequantized()`` (nn.Linear with weight = widely_linear.dense(planes, scales)):
        |y - y_ref| <= 1e-4 * (|x| @ |A_q|.T) + 1e-5.
      * against the float module it was made from: quantisation error, data dependent; for
        Gaussian weights the relative Frobenius error of the outputs is <= 0.7 with 1 stage and
        <= 0.45 with 2 stages (measured 0.59-0.64 and 0.35-0.37 at 128 x 256).
    """

    _SOURCES = {"prepared": ("planes", "scales")}

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, stages: int = 2,
                 isa: str = "") -> None:
        in_features = int_arg(in_features, "in_features", 1)
        out_features = int_arg(out_features, "out_features", 1)
        stages = int_arg(stages, "stages", 1)
        isa = _isa_arg(isa)
        super().__init__()
        if in_features % 2 or out_features % 2 or in_features < 2 or out_features < 2:
            raise ValueError(f"in_features, out_features: expected even sizes >= 2, got "
                             f"{in_features}, {out_features}")
        self.in_features, self.out_features, self.stages = in_features, out_features, stages
        self.isa = isa
        n, m = self.out_features // 2, self.in_features // 2
        self.register_buffer("planes", torch.zeros(self.stages, 4, n, (m + 15) // 16, dtype=torch.int32))
        self.register_buffer("scales", torch.zeros(self.stages, 4, dtype=torch.float32))
        self.register_buffer("bias", torch.zeros(self.out_features) if bias else None)
        self._init_prepared()

    @classmethod
    def from_linear(cls, linear: nn.Linear, stages: int = 2, *, isa: str = "") -> "WidelyLinear":
        a = _float_weight(linear.weight, "linear.weight").detach().to(torch.float32).contiguous()
        if linear.bias is not None:
            _float_weight(linear.bias, "linear.bias")
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, stages=stages, isa=isa)
        planes, scales = _widely_linear.quantize(a, stages=stages)
        mod.planes.copy_(planes.view(torch.int32))
        mod.scales.copy_(scales)
        if linear.bias is not None:
            mod.bias.copy_(linear.bias.detach().to(torch.float32))
        return mod

    def dequantized(self) -> nn.Linear:
        self._need_plain("dequantized")
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        dense = _widely_linear.dense(self.planes.view(torch.uint32), self.scales,
                                     self.in_features // 2)
        with torch.no_grad():
            lin.weight.copy_(dense)
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    def _kernel(self, x2: Tensor) -> Tensor:
        run = self._prepared_op(torch.ops.cpukern.widely_linear_prepared)
        if run is not None:
            return run(self.prepared, x2, self.out_features)
        return torch.ops.cpukern.widely_linear(self.planes, self.scales, x2, self.isa)

    def _packed_shape(self, name: str) -> tuple:
        return (self.out_features, self.in_features)

    def _prepare_one(self, name: str) -> PackedWeightsTensor:
        return PackedWeightsTensor(_ops.prepare_widely_linear_tensor(
            self.planes, self.scales, self.in_features // 2, self.isa), name=name, verify=False)

    def _check_fits(self, name: str, layer: Any) -> None:
        if (getattr(layer, "op", None) != "widely_linear" or layer.stages != self.stages
                or tuple(layer.shape) != (self.out_features, self.in_features)):
            raise ValueError(f"{name}: a prepared layer of shape {tuple(layer.shape)} with "
                             f"{getattr(layer, 'stages', None)} stages does not fit this layer "
                             f"({self.out_features}, {self.in_features}) with {self.stages} stages")

    def _usable(self, name: str, t: PackedWeightsTensor) -> Optional[PackedWeightsTensor]:
        self._check_fits(name, t.weights)
        return _ternary_layout_for(t, self.isa, "widely_linear")

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"stages={self.stages}, bias={self.bias is not None}")


def _ternary_layout_for(t: PackedWeightsTensor, isa: str, op: str,
                        int8: bool = False) -> Optional[PackedWeightsTensor]:
    """`t` when its variant is the forced `isa` (or any, when none is forced), else the layout
    unpacked and prepared again for `isa` (None where it cannot be unpacked: widely-linear
    layouts other than the public one)."""
    forced = _ops._isa(isa, op)
    if forced is None or t.weights.isa == forced:
        return t
    try:
        return PackedWeightsTensor.from_weights(_ternary.from_buffer(t.blob, isa=forced), int8=int8)
    except _ext.LayoutNotRunnableError:
        return None


def _moe_layout_for(t: PackedWeightsTensor, isa: str) -> Optional[PackedWeights]:
    """The packed experts of `t`, or None when it was packed for another forced isa: MoE
    packings cannot be unpacked, so the caller packs again from its plain weights."""
    forced = _ops._isa(isa, "fused_moe")
    p = t.weights
    return p if forced is None or p.isa == forced else None


class FusedMoE(_PreparedBuffer, _WeightFormatsKept):
    """A Mixture-of-Experts block (vLLM cpu_fused_moe semantics) on cpukern's kernel.

    Buffers: ``w13`` bf16 (E, 2I, H) (rows [gate; up], or interleaved for "swigluoai"), ``w2``
    bf16 (E, H, I), optional ``w13_bias`` (E, 2I) / ``w2_bias`` (E, H) bf16. Quantized experts
    (``from_mxfp4``, ``from_int8``) keep their own format with ``w13_scales`` / ``w2_scales``.
    ``act``: "fp32" (exact) or, for MXFP4 experts only, "int8": W4A8 (int8 activations per
    token, cpukern.moe.prepare's act; its bound is in cpukern.moe's docstring).
    ``forward(x, router_logits)`` routes with softmax + top-k in torch (renormalised if
    ``renormalize``) and runs ``torch.ops.cpukern.fused_moe``; ``experts(x, topk_weights,
    topk_ids)`` takes the routing from the caller. x: bf16 (..., H) (float32 and float16 are
    accepted too: rounded to bf16 for the kernel, the result converted back to x's dtype);
    returns x's dtype (..., H).

    Bound (tested): against a float32 torch oracle of ``experts(x, topk_weights, topk_ids)``
    (tests/python/moe_oracle.py: the activation output rounded to bf16 as the kernel does,
    the rest float32),
    |y - y_ref| <= 2e-3 + 2e-2 * |y_ref| (bf16 output rounding plus fp32 summation order).
    """

    def __init__(self, num_experts: int, hidden: int, intermediate: int, *, topk: int = 2,
                 activation: str = "silu", bias: bool = False, renormalize: bool = True,
                 isa: str = "") -> None:
        num_experts, topk, activation, renormalize, isa = _moe_args(num_experts, topk, activation,
                                                                    renormalize, isa)
        hidden = int_arg(hidden, "hidden", 1)
        intermediate = int_arg(intermediate, "intermediate", 1)
        super().__init__()
        self.num_experts, self.hidden, self.intermediate = num_experts, hidden, intermediate
        self.topk, self.activation, self.renormalize, self.isa = topk, activation, renormalize, isa
        self.act = "fp32"
        e, h, i = self.num_experts, self.hidden, self.intermediate
        bf = torch.bfloat16
        self.register_buffer("w13", torch.zeros(e, 2 * i, h, dtype=bf))
        self.register_buffer("w2", torch.zeros(e, h, i, dtype=bf))
        self.register_buffer("w13_bias", torch.zeros(e, 2 * i, dtype=bf) if bias else None)
        self.register_buffer("w2_bias", torch.zeros(e, h, dtype=bf) if bias else None)
        self._init_prepared()

    @classmethod
    def from_experts(cls, w13: Tensor, w2: Tensor, w13_bias: Optional[Tensor] = None,
                     w2_bias: Optional[Tensor] = None, *, topk: int = 2, activation: str = "silu",
                     renormalize: bool = True, isa: str = "") -> "FusedMoE":
        """w13 (E, 2I, H) and w2 (E, H, I) in nn.Linear [out, in] order (any float dtype,
        stored as bf16)."""
        for name, t in (("w13", w13), ("w2", w2), ("w13_bias", w13_bias), ("w2_bias", w2_bias)):
            if t is not None or name in ("w13", "w2"):
                _float_weight(t, name)
        if w13.dim() != 3 or w2.dim() != 3:
            raise ValueError(f"w13, w2: expected 3 dimensions, got {tuple(w13.shape)}, {tuple(w2.shape)}")
        e, i2, h = (int(s) for s in w13.shape)
        if i2 % 2 or tuple(w2.shape) != (e, h, i2 // 2):
            raise ValueError(f"w2: expected shape {(e, h, i2 // 2)} to match w13 {tuple(w13.shape)}, "
                             f"got {tuple(w2.shape)}")
        mod = cls(e, h, i2 // 2, topk=topk, activation=activation, bias=w13_bias is not None,
                  renormalize=renormalize, isa=isa)
        if (w13_bias is None) != (w2_bias is None):
            raise ValueError("w13_bias, w2_bias: give both or neither")
        with torch.no_grad():
            mod.w13.copy_(w13)
            mod.w2.copy_(w2)
            if w13_bias is not None:
                mod.w13_bias.copy_(w13_bias)
                mod.w2_bias.copy_(w2_bias)
        return mod

    @classmethod
    def from_mxfp4(cls, w13_blocks: Tensor, w13_scales: Tensor, w2_blocks: Tensor,
                   w2_scales: Tensor, w13_bias: Optional[Tensor] = None,
                   w2_bias: Optional[Tensor] = None, *, topk: int = 4,
                   activation: str = "swigluoai", renormalize: bool = True,
                   isa: str = "", act: str = "fp32") -> "FusedMoE":
        """MXFP4 experts as gpt-oss stores them: blocks uint8 (E, O, I/32, 16), scales uint8
        (E, O, I/32) for w13 (O = 2I) and w2 (O = H). Kept as MXFP4 (buffers w13 / w2 hold the
        blocks, w13_scales / w2_scales the scales); never expanded to bf16. act="int8": W4A8."""
        act = act_arg(act, _moe.ACTS)
        mod = cls._from_quantized(torch.uint8, w13_blocks, w13_scales, w2_blocks, w2_scales,
                                  w13_bias, w2_bias, topk, activation, renormalize, isa)
        mod.act = act
        return mod

    @classmethod
    def from_int8(cls, w13: Tensor, w13_scales: Tensor, w2: Tensor, w2_scales: Tensor,
                  w13_bias: Optional[Tensor] = None, w2_bias: Optional[Tensor] = None, *,
                  topk: int = 2, activation: str = "silu", renormalize: bool = True,
                  isa: str = "") -> "FusedMoE":
        """int8 W8A8 experts: w13 int8 (E, 2I, H), w2 int8 (E, H, I) with float32 per-channel
        scales (E, 2I) / (E, H) (cpukern.moe.quantize(w, format="int8") makes both);
        activations are quantised per token at run time. Kept as int8 (buffers w13 / w2,
        w13_scales / w2_scales)."""
        return cls._from_quantized(torch.int8, w13, w13_scales, w2, w2_scales, w13_bias,
                                   w2_bias, topk, activation, renormalize, isa)

    @classmethod
    def _from_quantized(cls, dtype: torch.dtype, w13: Tensor, w13_scales: Tensor, w2: Tensor,
                        w2_scales: Tensor, w13_bias: Optional[Tensor], w2_bias: Optional[Tensor],
                        topk: int, activation: str, renormalize: bool, isa: str) -> "FusedMoE":
        if (w13_bias is None) != (w2_bias is None):
            raise ValueError("w13_bias, w2_bias: give both or neither")
        dims = 4 if dtype == torch.uint8 else 3
        for name, t in (("w13", w13), ("w2", w2)):
            if not isinstance(t, Tensor) or t.dtype != dtype or t.dim() != dims:
                got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
                raise TypeError(f"{name}: expected a {dims}-D {dtype} tensor, got {got}")
        e, i2 = int(w13.shape[0]), int(w13.shape[1])
        hidden = int(w13.shape[2]) * (32 if dtype == torch.uint8 else 1)
        if min(e, i2, hidden) < 1:
            raise ValueError(f"w13: expected E, 2I and H >= 1, got shape {tuple(w13.shape)}")
        e, topk, activation, renormalize, isa = _moe_args(e, topk, activation, renormalize, isa)
        mod = cls.__new__(cls)  # no bf16 buffers are allocated
        nn.Module.__init__(mod)
        mod.num_experts, mod.hidden, mod.intermediate = e, hidden, i2 // 2
        mod.topk, mod.activation, mod.renormalize, mod.isa = topk, activation, renormalize, isa
        mod.act = "fp32"
        for name, t in (("w13", w13), ("w2", w2), ("w13_scales", w13_scales),
                        ("w2_scales", w2_scales), ("w13_bias", w13_bias), ("w2_bias", w2_bias)):
            if t is not None and name.endswith("bias"):
                t = _float_weight(t, name).to(torch.bfloat16)
            mod.register_buffer(name, None if t is None else t.contiguous())
        mod._init_prepared()
        return mod

    def route(self, router_logits: Tensor) -> tuple[Tensor, Tensor]:
        """(topk_weights float32 (T, k), topk_ids int32 (T, k)) from float logits (T, E)."""
        p = torch.softmax(router_logits.to(torch.float32), dim=-1)
        w, ids = torch.topk(p, self.topk, dim=-1)
        if self.renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        return w.contiguous(), ids.to(torch.int32)

    _act_dtype = torch.bfloat16

    _SOURCES = {"w13_prepared": ("w13", "w13_scales"), "w2_prepared": ("w2", "w2_scales")}

    def _packed_shape(self, name: str) -> tuple:
        e, h, i = self.num_experts, self.hidden, self.intermediate
        return (e, 2 * i, h) if name.startswith("w13") else (e, h, i)

    def _prepare_one(self, name: str) -> PackedWeightsTensor:
        """``w13_prepared`` / ``w2_prepared``: the experts packed for this CPU."""
        w = name[:-len("_prepared")]
        return PackedWeightsTensor(_ops.prepare_experts_tensor(
            getattr(self, w), w, self.isa, getattr(self, w + "_scales", None), self._act()),
            name=name, verify=False)

    def _act(self) -> str:
        # (modules pickled before W4A8 have none)
        return act_arg(getattr(self, "act", "fp32"), _moe.ACTS)

    def _check_fits(self, name: str, p: Any) -> None:
        want = self._packed_shape(name.rpartition(".")[2])
        if getattr(p, "op", None) != "moe" or tuple(p.shape) != want:
            raise ValueError(f"{name}: packed experts of shape {tuple(p.shape)} do not fit this "
                             f"layer {want}")

    def _usable(self, name: str, t: PackedWeightsTensor) -> Optional[PackedWeightsTensor]:
        """MoE packings cannot be unpacked: one made for another CPU (or another forced isa,
        or the other act) is packed again from the plain experts (None)."""
        self._check_fits(name, t.weights)
        p = _moe_layout_for(t, self.isa)
        if p is None or (p.format == "mxfp4_a8") != (self._act() == "int8"):
            return None
        return t

    def process_weights_after_loading(self, layer: Optional[nn.Module] = None) -> "FusedMoE":
        """vLLM's name for prepare()."""
        return self.prepare()

    def experts(self, x: Tensor, topk_weights: Tensor, topk_ids: Tensor) -> Tensor:
        _check_float(x, "x")
        x2, lead = _flatten(x, self.hidden, "x")
        xb = x2.to(torch.bfloat16).contiguous()
        tw = topk_weights.reshape(-1, self.topk).to(torch.float32).contiguous()
        ids = topk_ids.reshape(-1, self.topk).contiguous()
        run = self._prepared_op(torch.ops.cpukern.fused_moe_prepared)
        if run is not None:
            y = run(xb, self.w13_prepared, self.w2_prepared, tw, ids, self.activation,
                    self.w13_bias, self.w2_bias, False)
        else:
            y = torch.ops.cpukern.fused_moe(xb, self.w13, self.w2, tw, ids, self.activation,
                                            self.w13_bias, self.w2_bias, False, self.isa,
                                            getattr(self, "w13_scales", None),
                                            getattr(self, "w2_scales", None), self._act())
        return y.reshape(lead + (self.hidden,)).to(x.dtype)

    def forward(self, x: Tensor, router_logits: Tensor) -> Tensor:
        tw, ids = self.route(router_logits.reshape(-1, self.num_experts))
        return self.experts(x, tw, ids)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden={self.hidden}, intermediate="
                f"{self.intermediate}, topk={self.topk}, activation={self.activation!r}"
                + (f", act={self._act()!r}" if self._act() != "fp32" else ""))


class Linear(_PreparedBuffer, _WeightFormatsKept):
    """A dense nn.Linear on cpukern's fused-MoE GEMM micro-kernels (the op "linear",
    cpukern.linear: one expert, no routing): bf16 activations in, fp32 accumulation, bf16 out, the arithmetic of
    torch's bf16 nn.Linear up to the summation order. For the bf16 layers of a model that
    are not ternary or experts: attention projections, the LM head.

    Buffers: ``weight`` bf16 (out, in) and optional ``bias`` bf16 (out,); ``format="int8"``
    (from_linear) stores ``weight`` int8 with ``weight_scales`` float32 (out,) instead: W8A8,
    activations quantised per token at run time (cpukern.moe's int8 rule; faster, not exact).
    x: any float dtype (..., in), rounded to bf16 for the kernel; returns x's dtype.

    Bound (tested on K in-features, bf16 weights): against the exact x @ W.T + bias of the bf16
    values, |y - y_ref| <= 2**-8 * |y_ref| + (K + 1) * 2**-23 * (sum_k |x_k w_k| + |bias|)
    + 2**-126 * (2K + 2 + sum_k (|x_k| + |w_k|)) (the bf16 rounding of the output, the fp32
    sums, and underflow: cpukern.linear's bound).
    """

    _act_dtype = torch.bfloat16
    _SOURCES = {"prepared": ("weight", "weight_scales")}

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 isa: str = "") -> None:
        in_features = int_arg(in_features, "in_features", 1)
        out_features = int_arg(out_features, "out_features", 1)
        bias = bool_arg(bias, "bias")
        super().__init__()
        bf = torch.bfloat16
        self._set_weights(torch.zeros(out_features, in_features, dtype=bf), None,
                          torch.zeros(out_features, dtype=bf) if bias else None, isa, "bf16")

    def _set_weights(self, weight: Tensor, scales: Optional[Tensor], bias: Optional[Tensor],
                     isa: str, format: str) -> None:
        self.out_features, self.in_features = (int(d) for d in weight.shape)
        self.isa, self.format = _isa_arg(isa), format
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scales", scales)
        self.register_buffer("bias", bias)
        self._init_prepared()

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, format: str = "bf16", isa: str = "") -> "Linear":
        """The layer of an nn.Linear's weights: a bf16 weight is shared (no copy; in-place
        changes through torch are seen, as for any plain weight), others are rounded to bf16.
        format="bf16" (default) or "int8" (W8A8: per-channel int8 weights, cpukern.moe.quantize)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear: expected an nn.Linear, got {type(linear).__name__}")
        format = str_arg(format, "format", ("bf16", "int8"))
        _float_weight(linear.weight, "linear.weight")
        if linear.bias is not None:
            _float_weight(linear.bias, "linear.bias")
        with torch.no_grad():
            w = linear.weight.detach().to(torch.bfloat16).contiguous()  # shares a bf16 weight
            scales = None
            if format == "int8":
                q, scales = _moe.quantize(w.unsqueeze(0), format="int8")
                w, scales = q[0].contiguous(), scales[0].contiguous()
            bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16).clone()
        mod = cls.__new__(cls)  # no zero weights allocated: a 1 GB LM head is held once, not twice
        nn.Module.__init__(mod)
        mod._set_weights(w, scales, bias, isa, format)
        return mod

    def _packed_shape(self, name: str) -> tuple:
        return (1, self.out_features, self.in_features)

    def _prepare_one(self, name: str) -> PackedWeightsTensor:
        """``prepared``: the weight packed for this CPU (one expert)."""
        sc = self.weight_scales
        return PackedWeightsTensor(_ops.prepare_experts_tensor(
            self.weight.unsqueeze(0), "weight", _ops.linear_isa(self.isa),
            None if sc is None else sc.unsqueeze(0)),
            name=name, verify=False)

    def _check_fits(self, name: str, p: Any) -> None:
        if getattr(p, "op", None) != "moe" or tuple(p.shape) != (1, self.out_features, self.in_features):
            raise ValueError(f"{name}: packed weight of shape {tuple(p.shape)} does not fit this "
                             f"layer (1, {self.out_features}, {self.in_features})")
        if p.format != self.format:
            raise ValueError(f"{name}: packed as {p.format}, this layer is {self.format}")

    def _usable(self, name: str, t: PackedWeightsTensor) -> Optional[PackedWeightsTensor]:
        """Packings cannot be unpacked: one made for another CPU (or another forced isa) is
        packed again from the plain weight (None)."""
        self._check_fits(name, t.weights)
        return t if _moe_layout_for(t, self.isa) is not None else None

    def process_weights_after_loading(self, layer: Optional[nn.Module] = None) -> "Linear":
        """vLLM's name for prepare()."""
        return self.prepare()

    def forward(self, x: Tensor) -> Tensor:
        _check_float(x, "x")
        x2, lead = _flatten(x, self.in_features, "x")
        xb = x2.to(torch.bfloat16).contiguous()
        run = self._prepared_op(torch.ops.cpukern.linear_prepared)
        if run is not None:
            y = run(xb, self.prepared, self.out_features, self.bias)
        else:
            y = torch.ops.cpukern.linear(xb, self.weight, self.bias, self.isa, self.weight_scales)
        return y.reshape(lead + (self.out_features,)).to(x.dtype)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, format={self.format!r}")
