"""Prepared weights in modules and ops: the *_prepared ops (eager on PackedWeightsTensor and
on plain uint8 blobs, opcheck, torch.compile, torch.export), the modules' ``prepared``
PackedWeightsTensor buffers through state_dict, torch.save / torch.load and pickle
(bitwise-equal outputs, nothing prepared again), loading plain state_dicts and plain blobs,
corrupted blobs, layouts of another variant, and the vLLM flow (process_weights_after_loading
+ replace_parameter: the first forward prepares nothing)."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")

import cpukern  # noqa: E402
import cpukern.torch as ct  # noqa: E402
from cpukern import _ext, moe, ternary  # noqa: E402
from cpukern.torch import FusedMoE, Linear, TernaryLinear, WidelyLinear  # noqa: E402
from cpukern.torch import ops as ct_ops  # noqa: E402
from cpukern.torch.packed import PackedWeightsTensor  # noqa: E402

TERNARY_ISAS = [v["name"] for v in cpukern.kernels("ternary_gemv") if v["supported"]]
WIDELY_ISAS = [v["name"] for v in cpukern.kernels("widely_linear") if v["supported"]]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    ct.clear_cache()


class PrepareCounter:
    """Counts the extension's prepare calls (ternary and widely-linear) while active."""

    def __init__(self, monkeypatch):
        self.calls = 0
        for name in ("ternary_prepare", "widely_linear_prepare", "packed_from_buffer",
                     "moe_prepare"):
            orig = getattr(_ext, name)

            def counted(*a, _orig=orig, _name=name, **k):
                result = _orig(*a, **k)
                # from_buffer counts only when it prepared again (not a view)
                w = result[0] if isinstance(result, tuple) else result
                if "prepa" in _name or not w.is_view:
                    self.calls += 1
                return result
            monkeypatch.setattr(_ext, name, counted)


def _modules():
    lin = torch.nn.Linear(70, 40)
    yield "ternary", TernaryLinear.from_linear(lin), torch.randn(3, 70)
    yield "ternary_int8", TernaryLinear.from_linear(lin, act="int8"), torch.randn(3, 70)
    grouped = TernaryLinear(96, 24, group_size=32)
    with torch.no_grad():
        grouped.packed.copy_(ternary.pack(torch.randint(-1, 2, (24, 96), dtype=torch.int8)).view(torch.int32))
        grouped.scale.copy_(torch.rand(24, 3))
    yield "ternary_grouped", grouped, torch.randn(2, 96)
    yield "widely", WidelyLinear.from_linear(torch.nn.Linear(64, 40)), torch.randn(3, 64)
    yield "dense", Linear.from_linear(torch.nn.Linear(70, 40)), torch.randn(3, 70)


@pytest.mark.parametrize("kind", ["ternary", "ternary_int8", "ternary_grouped", "widely", "dense"])
def test_prepared_buffer_survives_state_dict_save_load_and_pickle(kind, monkeypatch):
    mod, x = next((m, x) for k, m, x in _modules() if k == kind)
    want = _raw(mod, x)  # the raw-weight op (through its cache)
    ct.clear_cache()
    mod.prepare()
    assert mod.is_prepared and isinstance(mod.prepared, PackedWeightsTensor)
    assert mod.prepared.dtype == torch.uint8
    assert mod.prepared.shape[-2:] == (mod.out_features, mod.in_features)
    assert torch.equal(mod(x), want)  # the prepared op computes what the raw-weight op did
    sd = mod.state_dict()
    assert isinstance(sd["prepared"], PackedWeightsTensor)
    assert sd["prepared"].blob.data_ptr() == mod.prepared.blob.data_ptr()  # no copy
    buf = io.BytesIO()
    torch.save(sd, buf)
    counter = PrepareCounter(monkeypatch)
    buf.seek(0)
    loaded = torch.load(buf)
    fresh = type(mod)(mod.in_features, mod.out_features, **_ctor_kwargs(mod))
    fresh.load_state_dict(loaded)
    assert fresh.is_prepared
    assert torch.equal(fresh(x), want)
    buf2 = io.BytesIO()
    torch.save(mod, buf2)
    buf2.seek(0)
    whole = torch.load(buf2, weights_only=False)
    assert torch.equal(whole(x), want)
    assert torch.equal(pickle.loads(pickle.dumps(mod))(x), want)
    assert counter.calls == 0, "loading a prepared state prepared again"
    assert ct.cache_info()["misses"] == 0  # and the raw-weight cache was never used


def _raw(mod, x):
    """What the module computes, by its raw-weight op (prepared and cached inside the op)."""
    if isinstance(mod, Linear):
        return torch.ops.cpukern.linear(x.to(torch.bfloat16), mod.weight, mod.bias).to(x.dtype)
    if isinstance(mod, TernaryLinear):
        y = torch.ops.cpukern.ternary_gemv(mod.packed, x, mod.scale, mod.act, "", mod.group_size)
    else:
        y = torch.ops.cpukern.widely_linear(mod.planes, mod.scales, x)
    return y + mod.bias


def _ctor_kwargs(mod):
    if isinstance(mod, Linear):
        return {"bias": mod.bias is not None}
    if isinstance(mod, TernaryLinear):
        return {"act": mod.act, "group_size": mod.group_size, "bias": mod.bias is not None}
    return {"stages": mod.stages, "bias": mod.bias is not None}


@pytest.mark.parametrize("kind", ["ternary", "widely"])
def test_plain_state_dict_still_loads_and_clears_a_stale_prepared(kind):
    mod, x = next((m, x) for k, m, x in _modules() if k == kind)
    other, _ = next((m, x) for k, m, x in _modules() if k == kind and m is not mod), None
    plain = {k: v for k, v in mod.state_dict().items() if k != "prepared"}
    target = type(mod)(mod.in_features, mod.out_features, **_ctor_kwargs(mod))
    target.prepare()  # prepared from its zero weights
    target.load_state_dict(plain)  # strict: the missing "prepared" key is fine
    assert not target.is_prepared
    assert torch.equal(target(x), mod(x))


@pytest.mark.parametrize("kind", ["ternary", "widely"])
def test_in_place_update_after_prepare_is_seen(kind, monkeypatch):
    mod, x = next((m, x) for k, m, x in _modules() if k == kind)
    mod.prepare()
    before = mod(x)
    old = mod.prepared
    with torch.no_grad():
        (mod.scale if kind == "ternary" else mod.scales).mul_(2)
    counter = PrepareCounter(monkeypatch)
    bias = mod.bias if mod.bias is not None else 0
    torch.testing.assert_close(mod(x), 2 * (before - bias) + bias)
    assert counter.calls == 1 and mod.is_prepared and mod.prepared is not old  # made again, once
    mod(x)
    assert counter.calls == 1


def test_corrupted_prepared_in_a_state_dict_names_the_key():
    mod, _ = next((m, x) for k, m, x in _modules() if k == "ternary")
    mod.prepare()
    sd = mod.state_dict()
    bad = sd["prepared"].blob.clone()  # a plain blob, as safetensors and older state_dicts hold
    bad[1000] ^= 4
    sd["prepared"] = bad
    with pytest.raises(ValueError, match=r"^prepared: checksum mismatch"):
        TernaryLinear(70, 40).load_state_dict(sd)
    sd["prepared"] = bad[:-64]
    with pytest.raises(ValueError, match=r"^prepared: header says"):
        TernaryLinear(70, 40).load_state_dict(sd)
    small = TernaryLinear(70, 20)
    small.prepare()
    sd["prepared"] = small.prepared.blob
    with pytest.raises(ValueError, match=r"^prepared: prepared weights of shape \(20, 70\)"):
        TernaryLinear(70, 40).load_state_dict(sd)
    sd["prepared"] = small.prepared  # a PackedWeightsTensor: checked the same way
    with pytest.raises(ValueError, match=r"^prepared: prepared weights of shape \(20, 70\)"):
        TernaryLinear(70, 40).load_state_dict(sd)
    grouped = TernaryLinear(70, 40, group_size=32)
    grouped.prepare()
    sd["prepared"] = grouped.prepared  # the same shape, but not this layer's scales
    with pytest.raises(ValueError, match=r"^prepared: prepared weights of shape \(40, 70\) "
                                         r"\(group_size 32\) do not fit"):
        TernaryLinear(70, 40).load_state_dict(sd)
    target = TernaryLinear(70, 40)  # set by hand: checked at the next forward
    target.prepared = grouped.prepared
    with pytest.raises(ValueError, match=r"^prepared: prepared weights of shape \(40, 70\) "
                                         r"\(group_size 32\) do not fit"):
        target(torch.randn(70))


@pytest.mark.parametrize("src", TERNARY_ISAS)
def test_prepared_for_another_variant_is_prepared_again_on_load(src):
    """A buffer whose variant is not this module's (isa forced; the stand-in for another CPU's
    layout) is unpacked and prepared for it when loaded."""
    lin = torch.nn.Linear(70, 40)
    a = TernaryLinear.from_linear(lin, isa=src).prepare()
    for dst in TERNARY_ISAS:
        b = TernaryLinear.from_linear(lin, isa=dst)
        want = b(torch.ones(70))
        b.load_state_dict(a.state_dict())
        assert b.is_prepared
        assert b.prepared.weights.isa == dst
        assert torch.equal(b(torch.ones(70)), want)


@pytest.mark.parametrize("src", WIDELY_ISAS)
def test_widely_linear_layout_that_cannot_be_unpacked_is_prepared_from_planes(src):
    lin = torch.nn.Linear(64, 40)
    a = WidelyLinear.from_linear(lin, isa=src).prepare()
    for dst in WIDELY_ISAS:
        b = WidelyLinear.from_linear(lin, isa=dst)
        x = torch.randn(2, 64)
        want = b(x)
        b.load_state_dict(a.state_dict())  # unpacked, or prepared again from the planes
        assert b.is_prepared and b.prepared.weights.isa == dst
        assert torch.equal(b(x), want)


def test_vllm_flow_first_forward_after_replace_parameter_prepares_nothing(monkeypatch):
    """vLLM: load weights, process_weights_after_loading, then replace_parameter (a new
    Parameter object over the data): the first forward runs from the prepared tensor."""
    for kind, mod, x in _modules():
        mod.process_weights_after_loading(mod)
        want = mod(x)
        for name in ("prepared",) + mod._SOURCES["prepared"]:  # vLLM's replace_parameter on each
            old = getattr(mod, name)
            if old is None:
                continue
            delattr(mod, name)
            mod.register_parameter(name, torch.nn.Parameter(old.detach(), requires_grad=False))
        ct.clear_cache()
        counter = PrepareCounter(monkeypatch)
        assert torch.equal(mod(x), want), kind
        assert counter.calls == 0 and ct.cache_info() == {"entries": 0, "hits": 0, "misses": 0}, kind
        monkeypatch.undo()


def test_ops_opcheck_compile_and_export():
    lin = torch.nn.Linear(70, 40)
    t = TernaryLinear.from_linear(lin).prepare()
    w = WidelyLinear.from_linear(torch.nn.Linear(64, 40)).prepare()
    torch.library.opcheck(torch.ops.cpukern.ternary_gemv_prepared.default,
                          (t.prepared.blob, torch.randn(3, 70), 40, "fp32"))
    torch.library.opcheck(torch.ops.cpukern.widely_linear_prepared.default,
                          (w.prepared.blob, torch.randn(2, 64), 40))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.t, self.w = t, w

        def forward(self, x):
            return self.t(self.w(x)[..., :40].repeat(1, 2)[..., :70])

    block = Block()
    x = torch.randn(3, 64)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), block(x))
    ep = torch.export.export(block, (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"cpukern.ternary_gemv_prepared.default", "cpukern.widely_linear_prepared.default"} <= targets
    assert torch.equal(ep.module()(x), block(x))


@pytest.mark.parametrize("form", ["PackedWeightsTensor", "blob"])
def test_prepared_op_bad_input_names_the_argument(form):
    t = TernaryLinear.from_linear(torch.nn.Linear(70, 40)).prepare()
    x = torch.randn(2, 70)
    prepared = t.prepared if form == "PackedWeightsTensor" else t.prepared.blob
    with pytest.raises(ValueError, match=r"^prepared: holds 40 output rows, the op was given 41"):
        torch.ops.cpukern.ternary_gemv_prepared(prepared, x, 41)
    with pytest.raises(ValueError, match=r"^x: expected K = 70"):
        torch.ops.cpukern.ternary_gemv_prepared(prepared, torch.randn(2, 71), 40)
    if form == "PackedWeightsTensor":
        assert torch.equal(torch.ops.cpukern.ternary_gemv_prepared(prepared, x, 40),
                           torch.ops.cpukern.ternary_gemv_prepared(prepared.blob, x, 40))
        return
    # Where the selected variant's int8 kernel reads the fp32 layout itself (avx512_vnni), the
    # buffer always carries it; otherwise the int8 layout must have been exported.
    wobj = ternary.from_buffer(prepared.numpy())
    if wobj.int8_ready:
        y = torch.ops.cpukern.ternary_gemv_prepared(prepared, x, 40, "int8")
        assert np.array_equal(y.numpy(), ternary.gemv(wobj, x.numpy(), act="int8"))
    else:
        with pytest.raises(ValueError, match=r"^prepared: has no int8 layout"):
            torch.ops.cpukern.ternary_gemv_prepared(prepared, x, 40, "int8")
    with pytest.raises(TypeError, match=r"^prepared: "):
        torch.ops.cpukern.ternary_gemv_prepared(prepared.view(torch.int8), x, 40)
    with pytest.raises(ValueError, match=r"^prepared: expected prepared weights of ternary"):
        w = WidelyLinear.from_linear(torch.nn.Linear(70, 40)).prepare()
        torch.ops.cpukern.ternary_gemv_prepared(w.prepared.blob, x, 40)
    foreign = prepared.clone()  # a header naming a variant this build does not run
    foreign[32:64] = 0
    foreign[32:39] = torch.tensor(list(b"avx1024"), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^prepared: was prepared for variant 'avx1024' .* which "
                                         r"this CPU cannot run; import it once"):
        torch.ops.cpukern.ternary_gemv_prepared(foreign, x, 40)
    other = ct_ops.prepare_ternary_tensor(t.packed, 70, t.scale, isa="reference")
    assert torch.equal(torch.ops.cpukern.ternary_gemv_prepared(other, x, 40),
                       ternary.gemv(ternary.prepare(t.packed.view(torch.uint32), 70, t.scale,
                                                    isa="reference"), x))


# --- FusedMoE: w13_prepared / w2_prepared --------------------------------------------------

def _moe_modules():
    e, h, i = 4, 64, 32
    w13 = (torch.randn(e, 2 * i, h) / 8).to(torch.bfloat16)
    w2 = (torch.randn(e, h, i) / 6).to(torch.bfloat16)
    yield "bf16", FusedMoE.from_experts(w13, w2, (torch.randn(e, 2 * i) / 10), torch.randn(e, h) / 10,
                                        activation="swigluoai")
    b13, s13 = moe.quantize(w13)
    b2, s2 = moe.quantize(w2)
    yield "mxfp4", FusedMoE.from_mxfp4(b13, s13, b2, s2, topk=2)
    q13, t13 = moe.quantize(w13, format="int8")
    q2, t2 = moe.quantize(w2, format="int8")
    yield "int8", FusedMoE.from_int8(q13, t13, q2, t2, topk=2)


def _moe_inputs(m):
    return torch.randn(5, m.hidden).to(torch.bfloat16), torch.randn(5, m.num_experts)


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4", "int8"])
def test_fused_moe_prepared_survives_state_dict_save_load_and_pickle(fmt, monkeypatch):
    mod = dict(_moe_modules())[fmt]
    args = _moe_inputs(mod)
    want = mod(*args)
    ct.clear_cache()
    mod.prepare()
    assert mod.is_prepared and mod.w13_prepared.dtype == torch.uint8
    assert torch.equal(mod(*args), want)
    sd = mod.state_dict()
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    counter = PrepareCounter(monkeypatch)
    fresh = dict(_moe_modules())[fmt]  # other weights, overwritten by the load
    fresh.load_state_dict(torch.load(buf))
    assert fresh.is_prepared and torch.equal(fresh(*args), want)
    assert torch.equal(pickle.loads(pickle.dumps(mod))(*args), want)
    assert counter.calls == 0 and ct.cache_info()["misses"] == 0
    monkeypatch.undo()
    plain = {k: v for k, v in sd.items() if not k.endswith("_prepared")}
    again = dict(_moe_modules())[fmt].prepare()
    again.load_state_dict(plain)
    assert not again.is_prepared and torch.equal(again(*args), want)


def test_fused_moe_prepared_for_another_variant_is_packed_again_from_the_experts():
    names = [v["name"] for v in cpukern.kernels("fused_moe") if v["supported"]]
    for src in names:
        a = dict(_moe_modules())["bf16"]
        a.isa = src
        a.prepare()
        for dst in names:
            b = dict(_moe_modules())["bf16"]
            b.isa = dst
            b.load_state_dict(a.state_dict())
            assert b.is_prepared and b.w13_prepared.weights.isa == dst  # packed again


def test_fused_moe_vllm_flow_and_compile(monkeypatch):
    mod = dict(_moe_modules())["bf16"]
    args = _moe_inputs(mod)
    mod.process_weights_after_loading(mod)
    want = mod(*args)
    for name in tuple(FusedMoE._SOURCES) + ("w13", "w2"):
        old = getattr(mod, name)
        delattr(mod, name)
        mod.register_parameter(name, torch.nn.Parameter(old.detach(), requires_grad=False))
    ct.clear_cache()
    counter = PrepareCounter(monkeypatch)
    assert torch.equal(mod(*args), want)
    assert counter.calls == 0 and ct.cache_info()["misses"] == 0
    monkeypatch.undo()
    cm = torch.compile(mod, fullgraph=True, backend="aot_eager")
    assert torch.equal(cm(*args), want)
    ep = torch.export.export(mod, args)
    assert any(str(n.target) == "cpukern.fused_moe_prepared.default" for n in ep.graph.nodes)
    assert torch.equal(ep.module()(*args), want)
    tw, ids = mod.route(args[1])
    torch.library.opcheck(torch.ops.cpukern.fused_moe_prepared.default,
                          (args[0], mod.w13_prepared.blob, mod.w2_prepared.blob, tw, ids, "swigluoai",
                           mod.w13_bias, mod.w2_bias))


def test_fused_moe_corrupted_prepared_names_the_key():
    mod = dict(_moe_modules())["bf16"].prepare()
    sd = mod.state_dict()
    bad = sd["w2_prepared"].blob.clone()
    bad[2000] ^= 1
    sd["w2_prepared"] = bad
    with pytest.raises(ValueError, match=r"^w2_prepared: checksum mismatch"):
        dict(_moe_modules())["bf16"].load_state_dict(sd)
    sd["w2_prepared"] = mod.w13_prepared
    with pytest.raises(ValueError, match=r"^w2_prepared: packed experts of shape \(4, 64, 64\)"):
        dict(_moe_modules())["bf16"].load_state_dict(sd)


def test_packed_experts_buffer_fuzz_raises_or_returns():
    """Flipped header / payload bytes and one-byte-value payloads (MXFP4 nibbles and scale
    bytes 255 included): import and fused_moe raise ValueError or return."""
    rng = torch.Generator().manual_seed(3)
    for fmt, mod in _moe_modules():
        mod.prepare()
        x, logits = _moe_inputs(mod)
        tw, ids = mod.route(logits)
        outcomes = set()
        for trial in range(40):
            w13 = mod.w13_prepared.blob.clone()
            if trial < 4:
                w13[448:] = (0xFF, 0x00, 0x7F, 0x88)[trial]
            else:
                n = int(torch.randint(1, 5, (1,), generator=rng))
                hi = 448 if trial % 2 else w13.numel()
                at = torch.randint(0, hi, (n,), generator=rng)
                w13[at] ^= (1 << torch.randint(0, 8, (n,), generator=rng)).to(torch.uint8)
            try:
                p13 = moe.from_buffer(w13)
                p2 = moe.from_buffer(mod.w2_prepared.blob)
                if p13.shape[1] != 2 * mod.intermediate or p13.shape[2] != mod.hidden:
                    raise ValueError("shape")
                moe.fused_moe(x, p13, p2, tw, ids, activation=mod.activation)
                outcomes.add("ran")
            except ValueError:
                outcomes.add("raised")
        assert outcomes == {"ran", "raised"}, (fmt, outcomes)


def test_vllm_order_prepared_moe_op_matches_the_module(monkeypatch):
    from cpukern.torch import vllm
    mod = dict(_moe_modules())["bf16"]
    x, logits = _moe_inputs(mod)
    tw, ids = mod.route(logits)
    want = mod.experts(x, tw, ids)
    w13, w2 = vllm.prepack_moe_tensor(mod.w13), vllm.prepack_moe_tensor(mod.w2)
    ct.clear_cache()
    counter = PrepareCounter(monkeypatch)
    out = torch.empty_like(x)
    torch.ops.cpukern.cpu_fused_moe_prepared(out, x, w13, w2, mod.w13_bias, mod.w2_bias, tw, ids,
                                             False, "swigluoai")
    assert torch.equal(out, want) and counter.calls == 0


# --- drop_plain_weights: one copy of the weights in memory ------------------------------

def _all_modules():
    for kind, mod, x in _modules():
        yield kind, mod, (x,)
    for fmt, mod in _moe_modules():
        yield "moe_" + fmt, mod, _moe_inputs(mod)


@pytest.mark.parametrize("kind", ["ternary", "ternary_grouped", "widely", "dense", "moe_bf16",
                                  "moe_mxfp4", "moe_int8"])
def test_drop_plain_weights_keeps_the_result_and_frees_the_plain_copy(kind, monkeypatch):
    mod, args = next((m, a) for k, m, a in _all_modules() if k == kind)
    twin = pickle.loads(pickle.dumps(mod))  # the same weights, for a state_dict target
    with pytest.raises(RuntimeError, match="prepare"):
        mod.drop_plain_weights()  # nothing prepared yet: it would leave no weights at all
    want = mod.prepare()(*args)
    plain = [s for srcs in mod._SOURCES.values() for s in srcs if getattr(mod, s, None) is not None]
    assert mod.drop_plain_weights() is mod and mod.plain_weights_dropped
    assert all(getattr(mod, s).numel() == 0 for s in plain), plain
    counter = PrepareCounter(monkeypatch)
    assert torch.equal(mod(*args), want)
    assert counter.calls == 0
    # What needs the plain weights again says so instead of preparing from empty tensors.
    with pytest.raises(RuntimeError, match="drop_plain_weights"):
        mod.prepare()
    if hasattr(mod, "dequantized"):
        with pytest.raises(RuntimeError, match="drop_plain_weights"):
            mod.dequantized()
    # state_dict carries the prepared buffers; a module that dropped too loads them.
    twin.prepare().drop_plain_weights()
    twin.load_state_dict(mod.state_dict())
    assert torch.equal(twin(*args), want)
    assert torch.equal(pickle.loads(pickle.dumps(mod))(*args), want)
    # A state_dict without the prepared buffers replaces nothing the module runs from.
    empty = {k: v for k, v in mod.state_dict().items() if not k.endswith("prepared")}
    twin.load_state_dict(empty)
    assert torch.equal(twin(*args), want)
    # Prepared weights made for another CPU need the plain weights: an error, not zeros.
    for name in twin._PREPARED:
        foreign = getattr(twin, name).clone()
        foreign._runs_here, foreign._weights = False, None
        getattr(twin, name).copy_(foreign)
    with pytest.raises(RuntimeError, match="drop_plain_weights"):
        twin(*args)
