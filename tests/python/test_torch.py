"""PyTorch: zero-copy tensors through every op, the cpukern:: custom ops (eager, opcheck,
torch.compile, torch.export), the modules against their float counterparts (and dequantized()
against the packed weights), empty modules, vLLM-order ops."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")

import cpukern.torch as ct  # noqa: E402
from cpukern import moe, ternary, widely_linear  # noqa: E402
from moe_oracle import fused_moe_reference  # noqa: E402
from variants import variant_params  # noqa: E402

BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def ternary_weights(m=40, k=70):
    w = torch.randint(-1, 2, (m, k), dtype=torch.int8)
    return w, ternary.pack(w)


# --- zero copies, torch in -> torch out ------------------------------------------------------

def test_ternary_functions_return_torch_for_torch_input():
    w, packed = ternary_weights()
    assert isinstance(packed, torch.Tensor) and packed.dtype == torch.uint32
    assert torch.equal(ternary.unpack(packed, 70), w)
    p, s = ternary.quantize(torch.randn(8, 33))
    assert isinstance(p, torch.Tensor) and isinstance(s, torch.Tensor) and s.dtype == torch.float32
    planes, scales = widely_linear.quantize(torch.randn(8, 36), stages=2)
    assert isinstance(planes, torch.Tensor) and planes.shape == (2, 4, 4, 2)
    dense = widely_linear.dense(planes, scales, 18)
    assert isinstance(dense, torch.Tensor) and dense.shape == (8, 36)
    tw, ids = moe.route(torch.randn(3, 5), 2)
    assert isinstance(tw, torch.Tensor) and ids.dtype == torch.int32


def test_gemv_out_is_written_in_place():
    w, packed = ternary_weights()
    prepared = ternary.prepare(packed, 70)
    x = torch.randn(3, 70)
    y = torch.full((3, 40), float("nan"))
    ptr = y.data_ptr()
    got = ternary.gemv(prepared, x, out=y)
    assert got is y and y.data_ptr() == ptr
    torch.testing.assert_close(y, x @ w.float().T, rtol=1e-5, atol=1e-4)
    fresh = ternary.gemv(prepared, x)
    assert isinstance(fresh, torch.Tensor) and torch.equal(fresh, y)


def test_widely_linear_out_is_written_in_place():
    a = torch.randn(16, 40)
    planes, scales = widely_linear.quantize(a, stages=2)
    layer = widely_linear.prepare(planes, scales, 20)
    x = torch.randn(2, 40)
    y = torch.empty(2, 16)
    ptr = y.data_ptr()
    assert widely_linear.apply(layer, x, out=y) is y and y.data_ptr() == ptr
    dense = widely_linear.dense(planes, scales, 20)
    torch.testing.assert_close(y, x @ dense.T, rtol=1e-4, atol=1e-4)


def test_fused_moe_bf16_tensors_in_and_out_in_place():
    e, h, i, t = 4, 32, 24, 3
    w13, w2 = (torch.randn(e, 2 * i, h) / 6).to(BF16), (torch.randn(e, h, i) / 5).to(BF16)
    x = torch.randn(t, h).to(BF16)
    tw, ids = moe.route(torch.randn(t, e), 2)
    p13, p2 = moe.prepare(w13), moe.prepare(w2)
    out = torch.empty(t, h, dtype=BF16)
    ptr = out.data_ptr()
    assert moe.fused_moe(x, p13, p2, tw, ids, out=out) is out and out.data_ptr() == ptr
    fresh = moe.fused_moe(x, p13, p2, tw, ids)
    assert fresh.dtype == BF16 and torch.equal(fresh, out)


def test_non_contiguous_tensors_are_refused_not_copied():
    _, packed = ternary_weights()
    prepared = ternary.prepare(packed, 70)
    with pytest.raises(TypeError, match="non-contiguous"):
        ternary.gemv(prepared, torch.randn(70, 3).T)
    with pytest.raises(TypeError, match="bfloat16"):
        moe.prepare(torch.randn(2, 4, 4))


# --- custom ops ----------------------------------------------------------------------------

def test_ternary_gemv_op_int32_and_uint32_packed():
    w, packed = ternary_weights()
    scale = torch.rand(40) + 0.5
    x = torch.randn(5, 70)
    want = x @ (w.float() * scale[:, None]).T
    for p in (packed, packed.view(torch.int32)):
        got = torch.ops.cpukern.ternary_gemv(p, x, scale)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    got1 = torch.ops.cpukern.ternary_gemv(packed, x[0], scale)
    assert got1.shape == (40,)
    int8 = torch.ops.cpukern.ternary_gemv(packed, x, scale, "int8")
    bound = scale * x.abs().max(dim=1, keepdim=True).values / 254 * w.abs().sum(1) + 1e-4
    assert torch.all((int8 - want).abs() <= bound)


def test_pool_polls_only_while_torch_runs_on_one_thread():
    """torch's OpenMP threads poll too: the ops turn cpukern's polling off while torch has more
    than one thread, and back on at one; the results do not change."""
    from cpukern import _ext
    from cpukern.torch import ops
    w, packed = ternary_weights()
    x = torch.randn(3, 70)
    old = torch.get_num_threads()
    try:
        got = {}
        for n in (2, 1, 2):
            torch.set_num_threads(n)
            got[n] = torch.ops.cpukern.ternary_gemv(packed, x)
            assert _ext.set_polling(n == 1) is (n == 1), n  # what the op left in force
        torch.testing.assert_close(got[1], got[2], rtol=0, atol=0)
    finally:
        torch.set_num_threads(old)
        _ext.set_polling(True)
        ops._polling_set_for = None  # set again by the next op


def test_op_cache_reuses_and_invalidates_on_version_bump():
    w, packed = ternary_weights()
    packed = packed.view(torch.int32).clone()
    x = torch.randn(70)
    ct.clear_cache()
    y0 = torch.ops.cpukern.ternary_gemv(packed, x)
    torch.ops.cpukern.ternary_gemv(packed, x)
    info = ct.cache_info()
    assert info["hits"] == 1 and info["misses"] == 1
    one = torch.tensor([2.0])
    torch.ops.cpukern.ternary_gemv(packed, x, one)
    torch.ops.cpukern.ternary_gemv(packed, x, one)  # a (1,) scale is broadcast once, cached
    assert ct.cache_info()["misses"] == 2
    packed.copy_(ternary.pack(-w).view(torch.int32))  # in place: version bump
    y1 = torch.ops.cpukern.ternary_gemv(packed, x)
    torch.testing.assert_close(y1, -y0)
    assert ct.cache_info()["misses"] == 3


def test_opcheck_ternary_and_widely_linear():
    _, packed = ternary_weights(16, 40)
    torch.library.opcheck(torch.ops.cpukern.ternary_gemv.default,
                          (packed.view(torch.int32), torch.randn(3, 40), torch.rand(16)))
    planes, scales = widely_linear.quantize(torch.randn(8, 40), stages=1)
    torch.library.opcheck(torch.ops.cpukern.widely_linear.default,
                          (planes.view(torch.int32), scales, torch.randn(2, 40)))


def moe_layer(e=4, h=32, i=24, bias=False, act="silu", topk=2):
    """(the FusedMoE module, its bf16 weights and settings as the oracle reads them)."""
    w13 = (torch.randn(e, 2 * i, h) / h ** 0.5).to(BF16)
    w2 = (torch.randn(e, h, i) / i ** 0.5).to(BF16)
    b13 = (torch.randn(e, 2 * i) * 0.1).to(BF16) if bias else None
    b2 = (torch.randn(e, h) * 0.1).to(BF16) if bias else None
    m = ct.FusedMoE.from_experts(w13, w2, b13, b2, topk=topk, activation=act)
    raw = SimpleNamespace(w13=w13, w2=w2, w13_bias=b13, w2_bias=b2, hidden=h, intermediate=i,
                          topk=topk, activation=act)
    return m, raw


def test_opcheck_fused_moe():
    m, raw = moe_layer()
    x = torch.randn(3, 32).to(BF16)
    tw, ids = m.route(torch.randn(3, 4))
    torch.library.opcheck(torch.ops.cpukern.fused_moe.default, (x, raw.w13, raw.w2, tw, ids))


def test_vllm_order_ops_match_fused_moe():
    m, raw = moe_layer(bias=True, act="swigluoai")
    x = torch.randn(5, 32).to(BF16)
    tw, ids = m.route(torch.randn(5, 4))
    want = m.experts(x, tw, ids)
    p13, p2 = torch.empty_like(raw.w13), torch.empty_like(raw.w2)
    torch.ops.cpukern.prepack_moe_weight(raw.w13, p13, "vec")
    torch.ops.cpukern.prepack_moe_weight(raw.w2, p2, "vec")
    out = torch.empty_like(x)
    torch.ops.cpukern.cpu_fused_moe(out, x, p13, p2, m.w13_bias, m.w2_bias, tw, ids, False,
                                    "swigluoai", "vec")
    assert torch.equal(out, want)
    # topk == 1 with skip_weighted: weight 1.0
    tw1, ids1 = tw[:, :1].contiguous(), ids[:, :1].contiguous()
    torch.ops.cpukern.cpu_fused_moe(out, x, p13, p2, None, None, tw1, ids1, True, "swigluoai", "")
    ones = torch.ops.cpukern.fused_moe(x, raw.w13, raw.w2, torch.ones_like(tw1), ids1, "swigluoai")
    assert torch.equal(out, ones)
    with pytest.raises(ValueError, match="packed_weight"):
        torch.ops.cpukern.prepack_moe_weight(raw.w13, torch.empty(1, 2, 3, dtype=BF16), "vec")


# --- modules against their float counterparts ----------------------------------------------

def gaussian_linear(i=256, o=128, bias=False):
    lin = torch.nn.Linear(i, o, bias=bias)
    with torch.no_grad():
        lin.weight.normal_()
        if bias:
            lin.bias.normal_()
    return lin


@pytest.mark.parametrize("act", ["fp32", "int8"])
def test_ternary_linear_bounds(act):
    lin = gaussian_linear(bias=True)
    mod = ct.TernaryLinear.from_linear(lin, act=act)
    x = torch.randn(2, 3, 256)
    with torch.no_grad():
        y = mod(x)
        ref_mod = mod.dequantized()
        ref = ref_mod(x)
        wq = ref_mod.weight.abs()
        bound = 1e-5 * (x.abs() @ wq.T) + 1e-6
        if act == "int8":
            bound = bound + x.abs().amax(-1, keepdim=True) / 254 * wq.sum(1)
        assert y.shape == (2, 3, 128)
        assert torch.all((y - ref).abs() <= bound)
        yf = lin(x) - lin.bias
        cos = torch.nn.functional.cosine_similarity((y - mod.bias).flatten(), yf.flatten(), 0)
        assert cos >= 0.8


@pytest.mark.parametrize("stages,bound", [(1, 0.7), (2, 0.45)])
def test_widely_linear_bounds(stages, bound):
    lin = gaussian_linear()
    mod = ct.WidelyLinear.from_linear(lin, stages=stages)
    x = torch.randn(4, 256)
    with torch.no_grad():
        y = mod(x)
        ref_mod = mod.dequantized()
        err = (y - ref_mod(x)).abs()
        assert torch.all(err <= 1e-4 * (x.abs() @ ref_mod.weight.abs().T) + 1e-5)
        yf = lin(x)
        assert (y - yf).norm() / yf.norm() <= bound


@pytest.mark.parametrize("act,bias", [("silu", False), ("gelu_tanh", True), ("swigluoai", True)])
def test_fused_moe_module_bound(act, bias):
    m, raw = moe_layer(bias=bias, act=act)
    x = torch.randn(2, 3, 32).to(BF16)
    logits = torch.randn(2, 3, 4)
    y = m(x, logits)
    assert y.shape == (2, 3, 32) and y.dtype == BF16
    tw, ids = m.route(logits.reshape(-1, 4))
    ref = fused_moe_reference(raw, x, tw, ids)
    assert torch.all((y.float() - ref).abs() <= 2e-3 + 2e-2 * ref.abs())


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
@pytest.mark.parametrize("group_size", [0, 32])
@pytest.mark.parametrize("act", ["fp32", "int8"])
def test_ternary_dequantized_is_scale_times_codes_exactly(variant, group_size, act):
    """dequantized() reads the packed weights back through the kernel: exactly scale * codes
    (per row, or per row and group), and the bias, whatever the variant and the act."""
    m, k = 24, 80  # k: not a multiple of 16 nor of the group
    codes = torch.randint(-1, 2, (m, k), dtype=torch.int8)
    groups = -(-k // group_size) if group_size else 1
    scale = torch.rand(m, groups) + 0.25
    bias = torch.randn(m)
    mod = ct.TernaryLinear.from_packed(ternary.pack(codes), k,
                                       scale if group_size else scale[:, 0], bias, act=act,
                                       variant=variant, group_size=group_size)
    assert mod.weight.weights.variant == variant
    lin = mod.dequantized()
    assert isinstance(lin, torch.nn.Linear) and lin.weight.shape == (m, k)
    cols = torch.arange(k) // group_size if group_size else torch.zeros(k, dtype=torch.long)
    want = scale[:, cols] * codes.float()
    assert torch.equal(lin.weight.detach(), want)
    assert torch.equal(lin.bias.detach(), bias)


@pytest.mark.parametrize("kind", ["ternary", "widely", "dense", "moe"])
def test_empty_module_names_the_missing_weights_until_a_state_dict_fills_it(kind):
    if kind == "moe":
        full, _ = moe_layer()
        empty = ct.FusedMoE(4, 32, 24)
        args = (torch.randn(3, 32).to(BF16), torch.randn(3, 4))
    else:
        cls = {"ternary": ct.TernaryLinear, "widely": ct.WidelyLinear, "dense": ct.Linear}[kind]
        full = cls.from_linear(gaussian_linear(64, 32, bias=True))
        empty = cls(64, 32)
        args = (torch.randn(3, 64),)
    name = "w13" if kind == "moe" else "weight"
    with pytest.raises(ValueError, match=rf"^{name}\w*: holds no packed weights yet \(load a "
                                         r"state_dict or pack the layer"):
        empty(*args)
    empty.load_state_dict(full.state_dict())
    assert torch.equal(empty(*args), full(*args))


# --- graph capture ---------------------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.t = ct.TernaryLinear.from_linear(gaussian_linear(64, 32, bias=True))
        self.w = ct.WidelyLinear.from_linear(gaussian_linear(32, 32), stages=2)

    def forward(self, x):
        return self.w(torch.relu(self.t(x)))


def test_torch_compile_fullgraph():
    torch._dynamo.reset()  # the modules share forward code objects: keep clear of the recompile limit
    # aot_eager traces through the fake implementations exactly like inductor does, without
    # the C++ compile (minutes on a small machine).
    block = Block()
    x = torch.randn(3, 64)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), block(x), rtol=0, atol=0)
    m, _ = moe_layer()
    xm, logits = torch.randn(3, 32).to(BF16), torch.randn(3, 4)
    cm = torch.compile(m, fullgraph=True, backend="aot_eager")
    assert torch.equal(cm(xm, logits), m(xm, logits))


def test_torch_export():
    block = Block()
    x = torch.randn(3, 64)
    ep = torch.export.export(block, (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"cpukern.ternary_gemv_prepared.default",
            "cpukern.widely_linear_prepared.default"} <= targets, targets
    torch.testing.assert_close(ep.module()(x), block(x), rtol=0, atol=0)
    m, _ = moe_layer()
    xm, logits = torch.randn(3, 32).to(BF16), torch.randn(3, 4)
    epm = torch.export.export(m, (xm, logits))
    assert any(str(n.target) == "cpukern.fused_moe_prepared.default" for n in epm.graph.nodes)
    assert torch.equal(epm.module()(xm, logits), m(xm, logits))


def test_import_cpukern_does_not_import_torch_module():
    import subprocess
    import sys

    code = "import sys, cpukern; assert 'cpukern.torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
