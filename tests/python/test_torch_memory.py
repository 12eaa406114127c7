"""Packed weights over torch memory (issue 47, items 1 and 2): whatever torch does to the tensor
a packed view was made from (resize_ of it or of its storage, set_, share_memory_, deleting it),
the weights keep computing what they computed, or torch refuses the change (or, for a module's
blob that torch shrank to nothing, the module says it holds no weights); module.share_memory()
works and torch.multiprocessing hands a packed module to a worker that computes the same result.
Through the public API only (from_buffer, the modules, torch.save / torch.load)."""

from __future__ import annotations

import gc
import io

import numpy as np
import pytest

import cpukern
from contract import needs_subprocess, needs_torch, torch
from cpukern import moe, ternary

pytestmark = needs_torch

# What torch can do to a tensor's memory under a view of it.
MUTATIONS = ["resize_larger", "resize_zero", "storage_resize_zero", "set_", "share_memory_",
             "delete"]


def _mutate(blob, what: str) -> None:
    """One mutation; torch refusing it (RuntimeError: a storage that is not resizable) is fine."""
    try:
        if what == "resize_larger":
            blob.resize_(blob.numel() * 4 + 4096)
            blob.fill_(0xA5)
        elif what == "resize_zero":
            blob.resize_(0)
        elif what == "storage_resize_zero":
            blob.untyped_storage().resize_(0)
        elif what == "set_":
            blob.set_(torch.full((8,), 0xA5, dtype=torch.uint8))
        elif what == "share_memory_":
            blob.share_memory_()
            blob.fill_(0xA5)  # the shared copy is the tensor's now; the weights must not see it
    except RuntimeError as e:
        assert "not resizable" in str(e), e


def _scribble() -> None:
    """Reuses freed memory, so that a view of it would compute garbage."""
    gc.collect()
    junk = [np.full(1 << 16, 0xFF, np.uint8) for _ in range(64)]
    junk.append(torch.full((1 << 20,), 0xFF, dtype=torch.uint8))
    del junk


def _ternary_case():
    rng = np.random.default_rng(3)
    w = ternary.prepare(ternary.pack(rng.integers(-1, 2, size=(48, 200)).astype(np.int8)), 200)
    x = rng.standard_normal((2, 200)).astype(np.float32)
    return w, lambda v: ternary.gemv(v, x)


def _moe_case():
    import ml_dtypes

    rng = np.random.default_rng(4)
    e, h, i, t = 3, 32, 16, 4
    bf = lambda *s: rng.standard_normal(s).astype(ml_dtypes.bfloat16)  # noqa: E731
    w13, w2 = moe.prepare(bf(e, 2 * i, h)), moe.prepare(bf(e, h, i))
    x = bf(t, h)
    tw, ti = moe.route(rng.standard_normal((t, e)).astype(np.float32), 2)
    # w2 views a buffer; w13 stays as prepared
    return w2, lambda v: moe.fused_moe(x, w13, v, tw, ti)


CASES = {"ternary": _ternary_case, "moe": _moe_case}

# Torch memory a buffer can arrive in.
SOURCES = {
    "torch_empty": lambda b: torch.empty(b.size, dtype=torch.uint8).copy_(torch.from_numpy(b)),
    "torch_load": lambda b: _torch_roundtrip(torch.from_numpy(b.copy())),
    "from_numpy": lambda b: torch.from_numpy(_aligned_copy(b)),
    "shared": lambda b: torch.empty(b.size, dtype=torch.uint8).copy_(torch.from_numpy(b)).share_memory_(),
}


def _aligned_copy(b):
    out = ternary.aligned_empty(b.size)
    out[...] = b
    return out


def _torch_roundtrip(obj):
    f = io.BytesIO()
    torch.save(obj, f)
    f.seek(0)
    return torch.load(f, weights_only=True)


# torch 2.13 itself crashes (SIGSEGV) resizing a storage in shared memory, with no view of
# cpukern's in sight: those pairs are left out.
_TORCH_CRASHES = {("shared", w) for w in ("resize_larger", "resize_zero", "storage_resize_zero")}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("source,what", [(s, w) for s in sorted(SOURCES) for w in MUTATIONS
                                         if (s, w) not in _TORCH_CRASHES])
def test_from_buffer_over_torch_memory_survives_what_torch_does_to_it(case, source, what):
    weights, run = CASES[case]()
    want = run(weights)
    blob = SOURCES[source](np.asarray(cpukern.PackedWeights.to_bytes(weights)))
    view = cpukern.PackedWeights.from_buffer(blob)
    np.testing.assert_array_equal(np.asarray(run(view)), np.asarray(want))
    if what == "delete":
        del blob
    else:
        _mutate(blob, what)
    _scribble()
    np.testing.assert_array_equal(np.asarray(run(view)), np.asarray(want))


def test_from_buffer_over_a_numpy_view_of_a_torch_tensor_survives_a_resize():
    weights, run = _ternary_case()
    want = run(weights)
    blob = torch.empty(ternary.serialized_size(weights), dtype=torch.uint8)
    ternary.to_bytes(weights, out=blob)
    view = ternary.from_buffer(blob.numpy())  # numpy marks the storage non-resizable ...
    blob.set_(torch.empty(0, dtype=torch.uint8))  # ... but set_ still drops the memory
    _scribble()
    np.testing.assert_array_equal(run(view), want)


def test_from_buffer_leaves_the_callers_tensor_resizable():
    weights, _ = _ternary_case()
    blob = torch.from_numpy(np.asarray(ternary.to_bytes(weights))).clone()
    ternary.from_buffer(blob)
    assert blob.untyped_storage().resizable()
    blob.resize_(blob.numel() + 64)  # no error: the weights took a copy


def _linear():
    from cpukern.torch import TernaryLinear

    torch.manual_seed(0)
    return TernaryLinear.from_linear(torch.nn.Linear(64, 24)), torch.randn(3, 64)


def _module(kind):
    """A packed module of `kind`: (module, call, an empty module of its sizes)."""
    from cpukern.torch import FusedMoE, Linear, TernaryLinear, WidelyLinear

    torch.manual_seed(1)
    dense = torch.nn.Linear(64, 32)
    x = torch.randn(3, 64)
    if kind == "FusedMoE":
        mod = FusedMoE.from_experts(torch.randn(4, 32, 64), torch.randn(4, 64, 16), topk=2)
        logits = torch.randn(3, 4)
        return mod, lambda m: m(x.to(torch.bfloat16), logits), lambda: FusedMoE(4, 64, 16, topk=2)
    cls = {"TernaryLinear": TernaryLinear, "WidelyLinear": WidelyLinear, "Linear": Linear}[kind]
    return cls.from_linear(dense), lambda m: m(x), lambda: cls(64, 32)


KINDS = ["TernaryLinear", "WidelyLinear", "Linear", "FusedMoE"]


def _blobs(module):
    return [t.blob for t in module.buffers() if hasattr(t, "is_empty") and not t.is_empty]


def _same_or_emptied(call, module, want, what):
    """The result the module computed; or, where the mutation left the blob empty (resize_(0):
    torch shrinks the tensor, not the storage), a clean error saying there are no weights."""
    try:
        got = call(module)
    except ValueError as e:
        assert what == "resize_zero" and "holds no packed weights yet" in str(e), (what, e)
        return
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("what", MUTATIONS[:-1])
@pytest.mark.parametrize("kind", KINDS)
def test_module_packed_weights_survive_what_torch_does_to_their_blobs(kind, what):
    module, call, _ = _module(kind)
    want = call(module).clone()
    for blob in _blobs(module):
        _mutate(blob, what)
    _scribble()
    _same_or_emptied(call, module, want, what)


@pytest.mark.parametrize("what", MUTATIONS[:-1])
@pytest.mark.parametrize("kind", ["TernaryLinear", "FusedMoE"])  # the two blob formats
def test_loaded_module_survives_what_torch_does_to_its_blobs(kind, what):
    module, call, empty = _module(kind)
    want = call(module).clone()
    other = empty()
    other.load_state_dict(_torch_roundtrip(module.state_dict()))
    torch.testing.assert_close(call(other), want, rtol=0, atol=0)
    for blob in _blobs(other):
        _mutate(blob, what)
    _scribble()
    _same_or_emptied(call, other, want, what)


@pytest.mark.parametrize("kind", KINDS)
def test_module_share_memory_moves_the_packed_weights_and_keeps_the_result(kind):
    module, call, _ = _module(kind)
    want = call(module).clone()
    assert module.share_memory() is module
    packed = [t for t in module.buffers() if hasattr(t, "is_empty") and not t.is_empty]
    assert packed and all(t.is_shared() for t in packed)
    _scribble()
    torch.testing.assert_close(call(module), want, rtol=0, atol=0)
    module.share_memory()  # twice: nothing more to move
    torch.testing.assert_close(call(module), want, rtol=0, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_share_memory_of_a_module_not_loaded_yet(kind):
    """An empty module has nothing to share; the weights a later load brings are shared by a
    later share_memory()."""
    module, call, empty = _module(kind)
    want = call(module).clone()
    target = empty()
    assert target.share_memory() is target
    assert all(t.is_empty and not t.is_shared() for t in target.buffers() if hasattr(t, "is_empty"))
    target.load_state_dict(module.state_dict())
    torch.testing.assert_close(call(target), want, rtol=0, atol=0)
    target.share_memory()
    assert _blobs(target) and all(b.is_shared() for b in _blobs(target))
    torch.testing.assert_close(call(target), want, rtol=0, atol=0)


def _worker(queue, module, x):
    # as numpy: a tensor would travel as a shared-memory handle that dies with this process
    queue.put(module(x).numpy())


@needs_subprocess
def test_torch_multiprocessing_hands_a_packed_module_to_a_worker():
    import torch.multiprocessing as mp

    lin, x = _linear()
    want = lin(x).clone()
    lin.share_memory()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(queue, lin, x))
    proc.start()
    try:
        got = queue.get(timeout=240)
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == 0
    np.testing.assert_array_equal(got, want.numpy())
