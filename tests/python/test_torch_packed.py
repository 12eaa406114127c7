"""PackedWeightsTensor, the one torch holder of prepared weights: construction checks, the
torch protocols it supports (detach, clone, copy_, to, deepcopy, pickle, torch.save with
weights_only), what it refuses, torch.compile through it, and that a forward reuses its cached
prepared object."""

from __future__ import annotations

import copy
import io
import pickle

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")

import cpukern.torch as ct  # noqa: E402
from cpukern import _ext, moe, ternary  # noqa: E402
from cpukern.torch import FusedMoE, Linear, PackedWeightsTensor, TernaryLinear, WidelyLinear  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _modules():
    """(name, prepared module, inputs) for every module that holds PackedWeightsTensor."""
    yield "ternary", TernaryLinear.from_linear(torch.nn.Linear(70, 40)).prepare(), (torch.randn(3, 70),)
    yield ("ternary_int8", TernaryLinear.from_linear(torch.nn.Linear(70, 40), act="int8").prepare(),
           (torch.randn(3, 70),))
    yield "widely", WidelyLinear.from_linear(torch.nn.Linear(64, 40)).prepare(), (torch.randn(3, 64),)
    yield "dense", Linear.from_linear(torch.nn.Linear(70, 40)).prepare(), (torch.randn(3, 70),)
    yield ("dense_int8", Linear.from_linear(torch.nn.Linear(64, 40), format="int8").prepare(),
           (torch.randn(3, 64),))
    w13 = (torch.randn(4, 64, 64) / 8).to(torch.bfloat16)
    w2 = (torch.randn(4, 64, 32) / 8).to(torch.bfloat16)
    yield ("moe_bf16", FusedMoE.from_experts(w13, w2).prepare(),
           (torch.randn(5, 64).to(torch.bfloat16), torch.randn(5, 4)))
    b13, s13 = moe.quantize(w13)
    b2, s2 = moe.quantize(w2)
    yield ("moe_mxfp4", FusedMoE.from_mxfp4(b13, s13, b2, s2, topk=2).prepare(),
           (torch.randn(5, 64).to(torch.bfloat16), torch.randn(5, 4)))


KINDS = [k for k, _, _ in _modules()]


def _module(kind):
    return next((m, a) for k, m, a in _modules() if k == kind)


def _packed(mod):
    return [getattr(mod, n) for n in mod._PREPARED]


@pytest.mark.parametrize("kind", KINDS)
def test_module_holds_it_as_an_ordinary_buffer(kind):
    mod, args = _module(kind)
    for t in _packed(mod):
        assert type(t) is PackedWeightsTensor and t.dtype == torch.uint8 and not t.requires_grad
        assert not t.is_empty and t.runs_here and tuple(t.shape) == tuple(t.weights.shape)
        assert any(b is t for b in mod.buffers())
    assert set(mod._PREPARED) <= set(mod.state_dict())


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip_deepcopy_pickle_and_torch_save(kind):
    mod, args = _module(kind)
    want = mod(*args)
    fresh, _ = _module(kind)  # other random weights, overwritten below
    fresh.load_state_dict(mod.state_dict())
    assert torch.equal(fresh(*args), want)
    assert torch.equal(copy.deepcopy(mod)(*args), want)
    assert torch.equal(pickle.loads(pickle.dumps(mod))(*args), want)
    buf = io.BytesIO()
    torch.save(mod.state_dict(), buf)
    buf.seek(0)
    again, _ = _module(kind)
    again.load_state_dict(torch.load(buf, weights_only=True))  # a registered safe global
    assert torch.equal(again(*args), want)
    for a, b in zip(_packed(mod), _packed(copy.deepcopy(mod))):  # deepcopy copies the blob
        assert torch.equal(a, b) and a.blob.data_ptr() != b.blob.data_ptr()


def test_detach_shares_clone_copies_copy_replaces():
    mod, (x,) = _module("ternary")
    t = mod.prepared
    d = t.detach()
    assert type(d) is PackedWeightsTensor and d.blob is t.blob and d.weights is t.weights
    c = t.clone()
    assert c.blob.data_ptr() != t.blob.data_ptr() and torch.equal(c.blob, t.blob)
    assert torch.equal(c, t)
    other = TernaryLinear.from_linear(torch.nn.Linear(70, 40)).prepare()
    assert not torch.equal(other.prepared, t)
    before = mod(x)
    with torch.no_grad():
        mod.prepared.copy_(other.prepared)  # what load_state_dict does
    assert mod.prepared.blob is other.prepared.blob
    got = torch.ops.cpukern.ternary_gemv_prepared(mod.prepared, x, 40)
    assert torch.equal(got, torch.ops.cpukern.ternary_gemv_prepared(other.prepared, x, 40))
    assert torch.equal(mod(x), got + mod.bias)
    assert not torch.equal(mod(x), before)
    with pytest.raises(TypeError, match="^src: expected a PackedWeightsTensor"):
        t.copy_(torch.zeros(40, 70, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"^src: packed weights of shape \(20, 70\)"):
        t.copy_(TernaryLinear(70, 20).prepare().prepared)


def test_to_keeps_the_format_and_refuses_other_dtypes_and_devices():
    mod, (x,) = _module("ternary")
    t = mod.prepared
    assert t.to(torch.uint8) is t and t.to("cpu") is t and t.cpu() is t  # nothing to convert
    copied = t.to("cpu", copy=True)
    assert type(copied) is PackedWeightsTensor and torch.equal(copied, t)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
        with pytest.raises(TypeError, match="keep their own format"):
            t.to(dtype)
    with pytest.raises(ValueError, match="run on the CPU only, got device meta"):
        t.to("meta")
    want = mod(x)
    assert mod.half() is mod and mod.prepared is t and mod.dtype == torch.float16
    assert torch.equal(mod.float()(x), want)
    with pytest.raises(NotImplementedError, match="aten.add.Tensor is not supported"):
        t + t


def test_bad_blob_is_refused_naming_the_argument():
    mod, _ = _module("ternary")
    blob = mod.prepared.blob
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
    assert PackedWeightsTensor(bad, verify=False).runs_here  # the header alone is fine
    with pytest.raises(ValueError, match=r"^blob: header says"):
        PackedWeightsTensor(blob[:-64].clone())
    unaligned = torch.empty(blob.numel() + 1, dtype=torch.uint8)[1:]
    unaligned.copy_(blob)
    assert torch.equal(PackedWeightsTensor(unaligned), mod.prepared)  # copied once, aligned
    empty = PackedWeightsTensor.empty((40, 70))
    assert empty.is_empty and not empty.runs_here and tuple(empty.shape) == (40, 70)
    with pytest.raises(RuntimeError, match="no prepared weights yet"):
        empty.weights
    with pytest.raises(ValueError, match=r"^prepared: holds no prepared weights this CPU runs"):
        torch.ops.cpukern.ternary_gemv_prepared(empty, torch.randn(70), 40)


def test_from_weights_and_the_prepared_object_views_the_blob():
    packed = ternary.pack(torch.randint(-1, 2, (24, 48), dtype=torch.int8))
    w = ternary.prepare(packed, 48, torch.rand(24))
    t = PackedWeightsTensor.from_weights(w)
    assert tuple(t.shape) == (24, 48) and t.weights.is_view
    x = torch.randn(48)
    assert torch.equal(torch.ops.cpukern.ternary_gemv_prepared(t, x, 24), ternary.gemv(w, x))


@pytest.mark.parametrize("kind", ["ternary", "widely", "dense", "moe_bf16"])
def test_torch_compile_fullgraph_runs_the_prepared_op_on_the_blob(kind):
    mod, args = _module(kind)
    want = mod(*args)
    compiled = torch.compile(mod, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(*args), want)
    ep = torch.export.export(mod, args)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert any(t.startswith("cpukern.") and t.endswith("_prepared.default") for t in targets), targets
    assert torch.equal(ep.module()(*args), want)


@pytest.mark.parametrize("kind", KINDS)
def test_forward_reuses_the_cached_prepared_object(kind, monkeypatch):
    """No forward makes the prepared object again (from_buffer or a prepare)."""
    mod, args = _module(kind)
    mod(*args)
    calls = []
    for name in ("packed_from_buffer", "ternary_prepare", "widely_linear_prepare", "moe_prepare"):
        orig = getattr(_ext, name)
        monkeypatch.setattr(_ext, name, lambda *a, _o=orig, _n=name, **k: calls.append(_n) or _o(*a, **k))
    for _ in range(3):
        mod(*args)
    assert calls == []


def test_old_names_still_work():
    assert ct.packed.PackedWeightsTensor is PackedWeightsTensor
    assert callable(ct.clear_cache) and set(ct.cache_info()) == {"entries", "hits", "misses"}
    mod, (x,) = _module("ternary")
    blob = ct.ops.prepare_ternary_tensor(mod.packed, 70, mod.scale)  # a plain blob, as before
    assert torch.equal(torch.ops.cpukern.ternary_gemv_prepared(blob, x, 40) + mod.bias, mod(x))


@pytest.mark.parametrize("kind", KINDS)
def test_eager_forward_is_named_in_torch_profiler(kind):
    """The eager forward skips the dispatcher (where the profiler records an op): under a
    profiler it records the op's name itself, so per-op profiles still attribute the time."""
    from torch.profiler import ProfilerActivity, profile

    mod, args = _module(kind)
    with torch.no_grad():
        mod(*args)  # prepared outside the profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            mod(*args)
    names = {e.key for e in prof.key_averages()}
    assert any(n.startswith("cpukern::") and n.endswith("_prepared") for n in names), sorted(names)
