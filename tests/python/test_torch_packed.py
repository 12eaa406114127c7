"""PackedWeightsTensor, the weights of every cpukern module: what a module holds (packed weights
only), construction checks, the torch protocols it supports (detach, clone, copy_, to,
deepcopy, pickle, torch.save with weights_only) and what it refuses (other dtypes and devices,
in-place aten ops), the kernel it carries (F.linear, so an nn.Linear whose weight is one runs
cpukern, eagerly and under torch.compile), torch.compile / torch.export of the modules, empty
modules, and that a forward reuses the cached packed object."""

from __future__ import annotations

import copy
import io
import pickle

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")

import torch.nn.functional as F  # noqa: E402

import cpukern.torch as ct  # noqa: E402
from cpukern import _ext, moe, ternary  # noqa: E402
from cpukern.torch import FusedMoE, Linear, PackedWeightsTensor, TernaryLinear, WidelyLinear  # noqa: E402
from packed_helpers import PackCounter, packed_buffers, random_linear  # noqa: E402
from variants import variant_params  # noqa: E402

# Every kind of module holding PackedWeightsTensor, and the op whose variants pack it.
KIND_OP = {"ternary": "ternary_gemv", "ternary_int8": "ternary_gemv",
           "ternary_grouped": "ternary_gemv", "widely": "widely_linear", "dense": "linear",
           "dense_int8": "linear", "moe_bf16": "fused_moe", "moe_mxfp4": "fused_moe",
           "moe_w4a8": "fused_moe", "moe_int8": "fused_moe"}
KINDS = list(KIND_OP)
LINEAR_KINDS = [k for k in KINDS if not k.startswith("moe")]
# The op each kind's forward runs (what torch.export and torch.profiler see).
OP_NAME = {"ternary": "ternary_gemv_prepared", "widely": "widely_linear_prepared",
           "dense": "linear_prepared", "moe": "fused_moe_prepared"}


def _op_name(kind):
    return OP_NAME[kind.split("_")[0]]


def kind_variant_params(kinds):
    """(kind, variant) for every kind and every variant of its op (skipped where this CPU cannot
    run it)."""
    out = []
    for kind in kinds:
        for p in variant_params(KIND_OP[kind]):
            out.append(pytest.param(kind, p.values[0], id=f"{kind}-{p.id}", marks=p.marks))
    return out


@pytest.fixture
def dynamo():
    """A fresh torch.compile cache: the modules share forward code objects, whose recompile
    limit the whole suite would otherwise reach."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _build(kind, variant="", seed=0):
    """(module packed for `variant` from weights drawn with `seed`, its inputs: the same for
    every seed)."""
    g = torch.Generator().manual_seed(seed)
    gx = torch.Generator().manual_seed(99)
    if kind in ("ternary", "ternary_int8"):
        act = "int8" if kind == "ternary_int8" else "fp32"
        return (TernaryLinear.from_linear(random_linear(70, 40, g), act=act, variant=variant),
                (torch.randn(3, 70, generator=gx),))
    if kind == "ternary_grouped":
        codes = torch.randint(-1, 2, (24, 96), dtype=torch.int8, generator=g)
        mod = TernaryLinear.from_packed(ternary.pack(codes).view(torch.int32), 96,
                                        torch.rand(24, 3, generator=g) + 0.5,
                                        torch.randn(24, generator=g), group_size=32, variant=variant)
        return mod, (torch.randn(2, 96, generator=gx),)
    if kind == "widely":
        return (WidelyLinear.from_linear(random_linear(64, 40, g), variant=variant),
                (torch.randn(3, 64, generator=gx),))
    if kind in ("dense", "dense_int8"):
        fmt = "int8" if kind == "dense_int8" else "bf16"
        return (Linear.from_linear(random_linear(64, 40, g), format=fmt, variant=variant),
                (torch.randn(3, 64, generator=gx),))
    w13 = (torch.randn(4, 64, 64, generator=g) / 8).to(torch.bfloat16)
    w2 = (torch.randn(4, 64, 32, generator=g) / 8).to(torch.bfloat16)
    args = (torch.randn(5, 64, generator=gx).to(torch.bfloat16), torch.randn(5, 4, generator=gx))
    if kind == "moe_bf16":
        b13, b2 = torch.randn(4, 64, generator=g) / 10, torch.randn(4, 64, generator=g) / 10
        return FusedMoE.from_experts(w13, w2, b13, b2, activation="swigluoai", variant=variant), args
    if kind in ("moe_mxfp4", "moe_w4a8"):
        b13, s13 = moe.quantize(w13)
        b2, s2 = moe.quantize(w2)
        act = "int8" if kind == "moe_w4a8" else "fp32"
        return FusedMoE.from_mxfp4(b13, s13, b2, s2, topk=2, variant=variant, act=act), args
    q13, t13 = moe.quantize(w13, format="int8")
    q2, t2 = moe.quantize(w2, format="int8")
    return FusedMoE.from_int8(q13, t13, q2, t2, topk=2, variant=variant), args


def _empty_like(mod):
    """A module of the same sizes and settings holding no weights yet."""
    has_bias = mod.bias is not None if hasattr(mod, "bias") else mod.w13_bias is not None
    if isinstance(mod, TernaryLinear):
        return TernaryLinear(mod.in_features, mod.out_features, has_bias, act=mod.act,
                             group_size=mod.group_size)
    if isinstance(mod, WidelyLinear):
        return WidelyLinear(mod.in_features, mod.out_features, has_bias, stages=mod.stages)
    if isinstance(mod, Linear):
        return Linear(mod.in_features, mod.out_features, has_bias, format=mod.format)
    return FusedMoE(mod.num_experts, mod.hidden, mod.intermediate, topk=mod.topk,
                    activation=mod.activation, bias=has_bias, renormalize=mod.renormalize,
                    act=mod.act)


# --- what a module holds ---------------------------------------------------------------------

LOGICAL_KIND = {"ternary": "ternary", "widely": "widely_linear", "dense": "linear", "moe": "moe"}


@pytest.mark.parametrize("kind", KINDS)
def test_module_holds_only_packed_weights(kind):
    mod, _ = _build(kind)
    packed = packed_buffers(mod)
    for name, t in packed.items():
        assert type(t) is PackedWeightsTensor and t.dtype == torch.uint8 and not t.requires_grad
        assert not t.is_empty and t.kind == LOGICAL_KIND[kind.split("_")[0]]
        assert any(b is t for b in mod.buffers())
        assert t.act == (mod.act if isinstance(mod, TernaryLinear) else None)
        if t.kind == "linear":  # one expert of the MoE packer, seen as (out, in)
            assert tuple(t.weights.shape) == (1,) + tuple(t.shape)
        else:
            assert tuple(t.shape) == tuple(int(d) for d in t.weights.shape)
    if isinstance(mod, FusedMoE):
        e, h, i = mod.num_experts, mod.hidden, mod.intermediate
        assert tuple(mod.w13.shape) == (e, 2 * i, h) and tuple(mod.w2.shape) == (e, h, i)
    else:
        assert tuple(mod.weight.shape) == (mod.out_features, mod.in_features)
    # No plain copy anywhere: no parameters, and every other buffer is a bias.
    assert list(mod.parameters()) == []
    others = set(mod.state_dict()) - set(packed)
    assert others <= {"bias", "w13_bias", "w2_bias"}, others


# --- round trips -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind,variant", kind_variant_params(KINDS))
def test_state_dict_deepcopy_pickle_and_torch_save_are_bitwise(kind, variant, monkeypatch):
    mod, args = _build(kind, variant)
    want = mod(*args)
    assert all(t.weights.variant == variant for t in packed_buffers(mod).values())
    other, _ = _build(kind, variant, seed=1)  # other weights, replaced by a load below
    counter = PackCounter(monkeypatch)
    sd = mod.state_dict()
    assert all(sd[n].blob.data_ptr() == t.blob.data_ptr() for n, t in packed_buffers(mod).items())
    fresh = _empty_like(mod)
    fresh.load_state_dict(sd)
    assert torch.equal(fresh(*args), want)
    for name, t in packed_buffers(fresh).items():  # this CPU runs variant: kept, viewed, not packed again
        assert t.weights.variant == variant and t.weights.is_view, name
    assert not torch.equal(other(*args), want)
    other.load_state_dict(sd)
    assert torch.equal(other(*args), want)
    clone = copy.deepcopy(mod)
    assert torch.equal(clone(*args), want)
    for a, b in zip(packed_buffers(mod).values(), packed_buffers(clone).values()):  # deepcopy copies the blob
        assert torch.equal(a, b) and a.blob.data_ptr() != b.blob.data_ptr()
    assert torch.equal(pickle.loads(pickle.dumps(mod))(*args), want)
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    again = _empty_like(mod)
    again.load_state_dict(torch.load(buf, weights_only=True))  # a registered safe global
    assert torch.equal(again(*args), want)
    buf = io.BytesIO()
    torch.save(mod, buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf, weights_only=False)(*args), want)
    assert counter.calls == [], "a round trip packed the weights again"


@pytest.mark.parametrize("kind", ["ternary", "widely", "dense", "moe_bf16"])
def test_torch_save_of_a_state_dict_holds_the_blob_once_and_loads_weights_only(kind):
    mod, args = _build(kind)
    sd = mod.state_dict()
    buf = io.BytesIO()
    torch.save(sd, buf)
    blob_bytes = sum(t.blob.numel() for t in packed_buffers(mod).values())  # the bytes once, no more
    assert len(buf.getvalue()) < 1.3 * blob_bytes + 8192, (len(buf.getvalue()), blob_bytes)
    buf.seek(0)
    again = _empty_like(mod)
    again.load_state_dict(torch.load(buf, weights_only=True))  # a registered safe global
    assert torch.equal(again(*args), mod(*args))


# --- tensor protocols ------------------------------------------------------------------------

def test_detach_shares_clone_copies_copy_replaces():
    mod, (x,) = _build("ternary")
    t = mod.weight
    d = t.detach()
    assert type(d) is PackedWeightsTensor and d.blob is t.blob and d.weights is t.weights
    assert d.kind == t.kind and d.act == t.act
    c = t.clone()
    assert c.blob.data_ptr() != t.blob.data_ptr() and torch.equal(c.blob, t.blob)
    assert torch.equal(c, t) and c.kind == "ternary"
    other, _ = _build("ternary", seed=1)
    assert not torch.equal(other.weight, t)
    before = mod(x)
    with torch.no_grad():
        mod.weight.copy_(other.weight)  # what load_state_dict does
    assert mod.weight.blob is other.weight.blob
    got = torch.ops.cpukern.ternary_gemv_prepared(mod.weight, x, 40)
    assert torch.equal(got, torch.ops.cpukern.ternary_gemv_prepared(other.weight, x, 40))
    assert torch.equal(mod(x), got + mod.bias)
    assert not torch.equal(mod(x), before)
    with pytest.raises(TypeError, match="^src: expected a PackedWeightsTensor"):
        t.copy_(torch.zeros(40, 70, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"^src: packed ternary weights of shape \(20, 70\)"):
        t.copy_(TernaryLinear.from_linear(torch.nn.Linear(70, 20)).weight)
    dense, _ = _build("dense")
    with pytest.raises(ValueError, match=r"^src: packed linear weights .* do not fit ternary"):
        TernaryLinear(64, 40).weight.copy_(dense.weight)


def test_to_keeps_the_format_and_refuses_other_dtypes_and_devices():
    mod, (x,) = _build("ternary")
    t = mod.weight
    assert t.to(torch.uint8) is t and t.to("cpu") is t and t.cpu() is t  # nothing to convert
    copied = t.to("cpu", copy=True)
    assert type(copied) is PackedWeightsTensor and torch.equal(copied, t)
    assert copied.blob.data_ptr() != t.blob.data_ptr()
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
        with pytest.raises(TypeError, match="keep their own format"):
            t.to(dtype)
    with pytest.raises(ValueError, match="run on the CPU only, got device meta"):
        t.to("meta")
    want = mod(x)
    assert mod.half() is mod and mod.weight is t and mod.dtype == torch.float16
    assert torch.equal(mod.float()(x), want)


IN_PLACE = {
    "mul_": lambda t: t.mul_(2),
    "add_": lambda t: t.add_(1),
    "zero_": lambda t: t.zero_(),
    "fill_": lambda t: t.fill_(7),
    "index_fill_": lambda t: t.index_fill_(0, torch.tensor([0]), 1),
    "resize_": lambda t: t.resize_(8),
    "set_": lambda t: t.set_(torch.zeros(8, dtype=torch.uint8)),
    "data.mul_": lambda t: t.data.mul_(2),
    "init.zeros_": lambda t: torch.nn.init.zeros_(t),
}


@pytest.mark.parametrize("op", list(IN_PLACE))
@pytest.mark.parametrize("kind", ["ternary", "widely", "dense", "moe_bf16"])
def test_in_place_aten_ops_are_refused_and_change_nothing(kind, op):
    """The packed weights cannot be edited in place (they are not the values an in-place op
    would act on): NotImplementedError, weights and results untouched."""
    mod, args = _build(kind)
    want = mod(*args)
    t = next(iter(packed_buffers(mod).values()))
    blob, saved = t.blob, t.blob.clone()
    with torch.no_grad(), pytest.raises(NotImplementedError, match="is not supported"):
        IN_PLACE[op](t)
    assert t.blob is blob and torch.equal(t.blob, saved)
    assert torch.equal(mod(*args), want)


def test_out_of_place_aten_ops_are_refused():
    t = _build("ternary")[0].weight
    for fn in (lambda: t + t, lambda: t[0], lambda: t.view(-1), lambda: t.sum(), lambda: t.t()):
        with pytest.raises(NotImplementedError, match="is not supported"):
            fn()
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad_()


# --- construction ----------------------------------------------------------------------------

def test_bad_blob_is_refused_naming_the_argument():
    mod, _ = _build("ternary")
    blob = mod.weight.blob
    with pytest.raises(TypeError, match=r"^blob: expected a 1-D uint8 tensor"):
        PackedWeightsTensor(blob.view(torch.int8))
    with pytest.raises(TypeError, match=r"^blob: expected a 1-D uint8 tensor"):
        PackedWeightsTensor(blob.numpy())
    with pytest.raises(ValueError, match=r"^blob: expected a prepared-weight buffer"):
        PackedWeightsTensor(torch.zeros(16, dtype=torch.uint8))
    bad = blob.clone()
    bad[-1] ^= 1
    with pytest.raises(ValueError, match=r"^weights: checksum mismatch"):
        PackedWeightsTensor(bad, name="weights")
    assert not PackedWeightsTensor(bad, verify=False).is_empty  # the header alone is fine
    with pytest.raises(ValueError, match=r"^blob: header says"):
        PackedWeightsTensor(blob[:-64].clone())
    unaligned = torch.empty(blob.numel() + 1, dtype=torch.uint8)[1:]
    unaligned.copy_(blob)
    assert torch.equal(PackedWeightsTensor(unaligned), mod.weight)  # copied once, aligned
    with pytest.raises(ValueError, match=r"^kind: expected None or one of"):
        PackedWeightsTensor(blob, kind="dense")
    with pytest.raises(ValueError, match=r"^blob: holds packed weights of op 'ternary'"):
        PackedWeightsTensor(blob, kind="moe")
    with pytest.raises(ValueError, match=r"^act: expected one of"):
        PackedWeightsTensor(blob, act="int4")
    experts = _build("moe_bf16")[0].w13
    with pytest.raises(ValueError, match=r"^act: only ternary weights take an activation rule"):
        PackedWeightsTensor(experts.blob, act="int8")
    with pytest.raises(ValueError, match=r"^w13: holds packed weights of op 'moe' \(shape \(4, "):
        PackedWeightsTensor(experts.blob, name="w13", kind="linear")  # 4 experts, not 1
    empty = PackedWeightsTensor.empty((40, 70), "ternary")
    assert empty.is_empty and tuple(empty.shape) == (40, 70) and empty.act == "fp32"
    with pytest.raises(RuntimeError, match="holds no packed weights yet"):
        empty.weights
    with pytest.raises(ValueError, match=r"^weight: holds no packed weights yet"):
        F.linear(torch.randn(70), empty)
    with pytest.raises(ValueError, match=r"^prepared: expected a prepared-weight buffer"):
        torch.ops.cpukern.ternary_gemv_prepared(empty, torch.randn(70), 40)  # the empty blob
    with pytest.raises(ValueError, match=r"logical shape and kind are needed"):
        PackedWeightsTensor(torch.empty(0, dtype=torch.uint8))


def test_from_weights_and_the_packed_object_views_the_blob():
    packed = ternary.pack(torch.randint(-1, 2, (24, 48), dtype=torch.int8))
    w = ternary.prepare(packed, 48, torch.rand(24))
    t = PackedWeightsTensor.from_weights(w)
    assert tuple(t.shape) == (24, 48) and t.weights.is_view and t.kind == "ternary"
    x = torch.randn(48)
    assert torch.equal(torch.ops.cpukern.ternary_gemv_prepared(t, x, 24), ternary.gemv(w, x))
    assert torch.equal(F.linear(x, t), ternary.gemv(w, x))
    dense = PackedWeightsTensor.from_weights(moe.prepare(torch.randn(1, 24, 48).to(torch.bfloat16)),
                                             kind="linear")
    assert tuple(dense.shape) == (24, 48) and dense.kind == "linear"


# --- the kernel the tensor carries -----------------------------------------------------------

def _nn_linear(mod):
    """An nn.Linear whose weight is `mod`'s packed weight, its own float32 bias Parameter
    holding `mod`'s bias."""
    lin = torch.nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None)
    lin.weight = torch.nn.Parameter(mod.weight, requires_grad=False)
    if mod.bias is not None:
        with torch.no_grad():
            lin.bias.copy_(mod.bias)
    return lin


@pytest.mark.parametrize("kind,variant", kind_variant_params(LINEAR_KINDS))
def test_nn_linear_with_a_packed_weight_computes_the_cpukern_layer(kind, variant):
    mod, (x,) = _build(kind, variant)
    lin = _nn_linear(mod)
    assert isinstance(lin.weight, PackedWeightsTensor) and isinstance(lin.weight, torch.nn.Parameter)
    assert torch.equal(lin(x), mod(x))
    x3 = x.reshape(1, *x.shape)  # leading dimensions, as nn.Linear takes them
    assert torch.equal(lin(x3), mod(x).reshape(1, *x.shape[:-1], -1))
    xh = x.half()
    assert lin(xh).dtype == torch.float16 and torch.equal(lin(xh), mod(xh))


@pytest.mark.parametrize("kind", LINEAR_KINDS)
def test_nn_linear_with_a_packed_weight_compiles_fullgraph(kind, dynamo):
    mod, (x,) = _build(kind)
    lin = _nn_linear(mod)
    compiled = torch.compile(lin, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), mod(x))
    seq = torch.nn.Sequential(lin, torch.nn.ReLU())
    assert torch.equal(torch.compile(seq, fullgraph=True, backend="aot_eager")(x), torch.relu(mod(x)))


DENSE_FORMATS = [pytest.param(fmt, p.values[0], id=f"{fmt}-{p.values[0]}", marks=p.marks)
                 for fmt in ("bf16", "int8") for p in variant_params("linear")]


@pytest.mark.parametrize("fmt,variant", DENSE_FORMATS)
def test_pack_linear_packs_in_place_and_keeps_the_class(fmt, variant):
    """pack_linear_: the nn.Linear keeps its class, bias and forward; its weight is a packed
    Parameter that computes what Linear.from_linear computes, bit for bit; its state_dict
    (the packed tensor or the plain blob, as safetensors stores it) loads into another packed
    nn.Linear; deepcopy and torch.save carry it."""
    g = torch.Generator().manual_seed(3)
    lin = random_linear(64, 40, g).to(torch.bfloat16)
    ref = Linear.from_linear(lin, format=fmt, variant=variant)
    x = torch.randn(5, 64, generator=g)
    assert ct.pack_linear_(lin, format=fmt, variant=variant) is lin
    assert type(lin) is torch.nn.Linear and type(lin.bias) is torch.nn.Parameter
    assert isinstance(lin.weight, PackedWeightsTensor) and isinstance(lin.weight, torch.nn.Parameter)
    assert lin.weight.kind == "linear" and lin.weight.weights.format == fmt
    assert not lin.weight.requires_grad and torch.equal(lin(x), ref(x))
    for state in (lin.state_dict(), {k: getattr(v, "blob", v) for k, v in lin.state_dict().items()}):
        other = ct.pack_linear_(random_linear(64, 40, g).to(torch.bfloat16), format=fmt)
        other.load_state_dict(state)
        assert torch.equal(other(x), ref(x))
    buf = io.BytesIO()
    torch.save(lin, buf)
    buf.seek(0)
    for again in (copy.deepcopy(lin), torch.load(buf, weights_only=False)):
        assert type(again) is torch.nn.Linear and torch.equal(again(x), ref(x))


def test_pack_linear_bad_input_names_the_argument():
    lin = torch.nn.Linear(64, 40).to(torch.bfloat16)
    with pytest.raises(TypeError, match=r"^linear: expected an nn.Linear"):
        ct.pack_linear_(torch.nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match=r"^format: "):
        ct.pack_linear_(lin, format="fp8")
    with pytest.raises(ValueError, match=r"^variant: "):
        ct.pack_linear_(lin, variant="avx1024")
    int_lin = torch.nn.Linear(64, 40)
    int_lin.weight = torch.nn.Parameter(torch.ones(40, 64, dtype=torch.int32), requires_grad=False)
    with pytest.raises(TypeError, match=r"^linear.weight: expected a floating-point tensor"):
        ct.pack_linear_(int_lin)
    assert type(lin.weight) is torch.nn.Parameter  # nothing was changed by the refusals
    ct.pack_linear_(lin)
    state = lin.state_dict()
    small = ct.pack_linear_(torch.nn.Linear(32, 40).to(torch.bfloat16))
    with pytest.raises(ValueError, match=r"^weight: packed weight of shape \(1, 40, 64\) does "
                                         r"not fit this layer \(1, 40, 32\)"):
        small.load_state_dict(state)
    with pytest.raises(TypeError, match=r"^weight: expected a 1-D uint8 tensor of packed weights"):
        lin.load_state_dict({"weight": torch.randn(40, 64), "bias": state["bias"]})
    with pytest.raises(ValueError, match=r"^weight: "):
        lin.load_state_dict({"weight": torch.zeros(8, dtype=torch.uint8), "bias": state["bias"]})
    ternary_state = {"weight": TernaryLinear.from_linear(torch.nn.Linear(64, 40)).weight.blob,
                     "bias": state["bias"]}
    with pytest.raises(ValueError, match=r"^weight: holds packed weights of op 'ternary'"):
        lin.load_state_dict(ternary_state)


def test_f_linear_on_experts_is_a_type_error_naming_weight():
    mod, _ = _build("moe_bf16")
    x = torch.randn(2, 64)
    for t in (mod.w13, mod.w2):
        with pytest.raises(TypeError, match=r"^weight: expected packed weights of a linear layer, "
                                            r"got moe"):
            F.linear(x, t)
    lin = torch.nn.Linear(64, 64, bias=False)
    lin.weight = torch.nn.Parameter(mod.w2, requires_grad=False)
    with pytest.raises(TypeError, match=r"^weight: "):
        lin(x)


@pytest.mark.parametrize("kind", LINEAR_KINDS)
def test_f_linear_bad_input_names_x(kind):
    mod, (x,) = _build(kind)
    with pytest.raises(ValueError, match=rf"^x: expected {mod.in_features} input features"):
        F.linear(torch.randn(2, mod.in_features + 2), mod.weight)
    with pytest.raises(TypeError, match=r"^x: expected a float32, float16, bfloat16 or float64"):
        F.linear(x.to(torch.int32), mod.weight)


# --- empty modules ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ternary", "ternary_grouped", "widely", "dense", "moe_bf16",
                                  "moe_w4a8"])
def test_empty_module_names_the_missing_weights_until_loaded(kind):
    packed, args = _build(kind)
    mod = _empty_like(packed)
    assert all(t.is_empty and tuple(t.shape) == tuple(getattr(packed, n).shape)
               for n, t in packed_buffers(mod).items())
    name = "w13" if isinstance(mod, FusedMoE) else "weight"
    with pytest.raises(ValueError, match=rf"^{name}\w*: holds no packed weights yet"):
        mod(*args)
    mod.load_state_dict(packed.state_dict())
    assert torch.equal(mod(*args), packed(*args))
    # An empty module's state_dict holds empty blobs: loading it empties the target again.
    packed.load_state_dict(_empty_like(packed).state_dict())
    assert all(t.is_empty for t in packed_buffers(packed).values())
    with pytest.raises(ValueError, match="holds no packed weights yet"):
        packed(*args)


def test_constructors_wrap_given_packed_weights_and_check_them():
    mod, (x,) = _build("ternary")
    same = TernaryLinear(70, 40, weight=mod.weight, bias=mod.bias)
    assert same.weight is mod.weight and torch.equal(same(x), mod(x))
    with pytest.raises(ValueError, match=r"^weight: expected packed ternary weights \(act 'int8'\)"):
        TernaryLinear(70, 40, act="int8", weight=mod.weight)
    with pytest.raises(ValueError, match=r"^weight: packed weights of shape \(40, 70\) .* do not fit"):
        TernaryLinear(70, 41, weight=mod.weight)
    experts, args = _build("moe_bf16")
    again = FusedMoE(4, 64, 32, activation="swigluoai", bias=True, packed=packed_buffers(experts))
    again.w13_bias, again.w2_bias = experts.w13_bias, experts.w2_bias
    assert torch.equal(again(*args), experts(*args))
    with pytest.raises(ValueError, match=r"^w13: packed experts of shape \(4, 64, 64\) do not fit"):
        FusedMoE(4, 64, 16, packed=packed_buffers(experts))


# --- graph capture, caching, profiling -------------------------------------------------------

@pytest.mark.parametrize("kind", ["ternary", "ternary_grouped", "widely", "dense", "moe_bf16",
                                  "moe_mxfp4"])
def test_torch_compile_fullgraph_and_export_run_the_packed_op_on_the_blob(kind, dynamo):
    mod, args = _build(kind)
    want = mod(*args)
    compiled = torch.compile(mod, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(*args), want)
    ep = torch.export.export(mod, args)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert f"cpukern.{_op_name(kind)}.default" in targets, targets
    assert torch.equal(ep.module()(*args), want)


@pytest.mark.parametrize("kind", KINDS)
def test_forward_reuses_the_cached_packed_object(kind, monkeypatch):
    """No forward makes the packed object again (from_buffer or a prepare)."""
    mod, args = _build(kind)
    mod(*args)
    calls = []
    for name in ("packed_from_buffer", "ternary_prepare", "widely_linear_prepare", "moe_prepare"):
        orig = getattr(_ext, name)
        monkeypatch.setattr(_ext, name, lambda *a, _o=orig, _n=name, **k: calls.append(_n) or _o(*a, **k))
    for _ in range(3):
        mod(*args)
    assert calls == []


@pytest.mark.parametrize("kind", ["ternary", "widely", "dense"])
def test_a_plain_blob_runs_in_the_op_like_the_module(kind):
    """The blob alone (a safetensors file's tensor) is the packed weights: the op on it
    computes what the module computes."""
    mod, (x,) = _build(kind)
    blob = mod.weight.blob.clone()
    bias = mod.bias
    if kind == "dense":
        y = torch.ops.cpukern.linear_prepared(x.to(torch.bfloat16), blob, mod.out_features, bias)
        assert torch.equal(y.to(x.dtype), mod(x))
        return
    op = (torch.ops.cpukern.ternary_gemv_prepared if kind == "ternary"
          else torch.ops.cpukern.widely_linear_prepared)
    assert torch.equal(op(blob, x, mod.out_features) + bias, mod(x))


@pytest.mark.parametrize("kind", KINDS)
def test_eager_forward_is_named_in_torch_profiler(kind):
    """The eager forward skips the dispatcher (where the profiler records an op): under a
    profiler it records the op's name itself, so per-op profiles still attribute the time."""
    from torch.profiler import ProfilerActivity, profile

    mod, args = _build(kind)
    with torch.no_grad():
        mod(*args)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            mod(*args)
    names = {e.key for e in prof.key_averages()}
    assert f"cpukern::{_op_name(kind)}" in names, sorted(names)


def test_blob_index_forgets_a_blob_with_it_and_never_answers_for_another():
    """The op's blob -> packed-object lookup (what a compiled graph's call finds its weights
    by): held weakly, by identity; an entry goes with its blob, and a new tensor that happens
    to get the dead one's id is not taken for it."""
    import gc

    from cpukern.torch.packed import _BlobIndex

    index, marker = _BlobIndex(), object()
    blob = torch.zeros(64, dtype=torch.uint8)
    index[blob] = marker
    assert index.get(blob) is marker and index.get(torch.zeros(64, dtype=torch.uint8)) is None
    dead_id = id(blob)
    del blob
    gc.collect()
    assert dead_id not in index._entries
    index[torch.zeros(1, dtype=torch.uint8)] = marker  # dies at once: its entry goes too
    gc.collect()
    assert not index._entries
    keep = torch.zeros(8, dtype=torch.uint8)
    index[keep] = marker
    assert index.pop(torch.zeros(8, dtype=torch.uint8)) is None and index.get(keep) is marker
    assert index.pop(keep) is marker and index.get(keep) is None


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_packed_nn_linear_with_a_trainable_bias_compiles(backend, dynamo):
    """pack_linear_ keeps the layer's own bias Parameter, frozen as the packed weight is (a
    compiled graph hands it to the op as it is, and the ops refuse tensors that require
    grad): an unfrozen model's layer compiles."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 16).to(torch.bfloat16)
    assert lin.bias.requires_grad
    ct.pack_linear_(lin)
    assert not lin.bias.requires_grad
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        want = lin(x)
        assert torch.equal(torch.compile(lin, fullgraph=True, backend=backend)(x), want)
