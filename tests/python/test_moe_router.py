"""cpukern.torch.MoERouter (the logits GEMV and the routing rule in one call,
cpukern::moe_router_prepared) against transformers' own Qwen3-MoE and gpt-oss routers, eager
and compiled, on every linear variant."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")
pytest.importorskip("transformers", reason="transformers is not installed here: its routers are "
                    "the reference")

import cpukern.torch as ct  # noqa: E402
from test_moe_route import check_routing  # noqa: E402
from variants import variant_params  # noqa: E402

LINEAR = variant_params("linear")
BF16_ULP = 2.0 ** -8  # bf16's relative rounding step


def qwen3_router(e, h, topk, norm, seed):
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter
    cfg = SimpleNamespace(num_experts_per_tok=topk, num_experts=e, norm_topk_prob=norm,
                          hidden_size=h)
    torch.manual_seed(seed)
    r = Qwen3MoeTopKRouter(cfg).to(torch.bfloat16)
    torch.nn.init.normal_(r.weight, std=0.1)
    return r, ct.MoERouter.from_weight(r.weight, topk, renormalize=norm)


def gpt_oss_router(e, h, topk, seed, variant=""):
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter
    cfg = SimpleNamespace(num_experts_per_tok=topk, num_local_experts=e, hidden_size=h)
    torch.manual_seed(seed)
    r = GptOssTopKRouter(cfg).to(torch.bfloat16)
    torch.nn.init.normal_(r.weight, std=0.1)
    torch.nn.init.normal_(r.bias, std=0.5)
    return r, ct.MoERouter.from_weight(r.weight, topk, bias=r.bias, rule="topk_softmax",
                                       variant=variant)


def check_against_stock(stock, ours, x, rule, renormalize):
    """The logits against the stock bf16 F.linear (fp32 summation order: one bf16 rounding
    step apart at most), then ids and weights against the rule applied to our own logits."""
    with torch.no_grad():
        want = stock(x)
        got = ours(x)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
    lg, lw = got[0].float(), want[0].float()
    assert torch.all((lg - lw).abs() <= BF16_ULP * lw.abs() + 1e-6), (lg - lw).abs().max()
    check_routing(lg.numpy(), got[1].float().numpy(), got[2].numpy(), ours.topk, rule,
                  renormalize, BF16_ULP)
    # where the logits agree bitwise, the stock router chose the same experts (ties aside)
    same = torch.equal(got[0], want[0])
    if same:
        torch.testing.assert_close(got[1].float().sort(-1).values,
                                   want[1].float().sort(-1).values, rtol=BF16_ULP, atol=0)
    return same


@pytest.mark.parametrize("variant", LINEAR)
@pytest.mark.parametrize("t", [0, 1, 3, 64])
def test_qwen3_router_matches_transformers(variant, t):
    for norm in (True, False):
        stock, ours = qwen3_router(64, 96, 8, norm, seed=t)
        if variant:
            ours = ct.MoERouter.from_weight(stock.weight, 8, renormalize=norm, variant=variant)
        x = torch.randn(t, 96, dtype=torch.bfloat16)
        check_against_stock(stock, ours, x, "softmax_topk", norm)


@pytest.mark.parametrize("variant", LINEAR)
@pytest.mark.parametrize("t", [0, 1, 5, 64])
def test_gpt_oss_router_matches_transformers(variant, t):
    stock, ours = gpt_oss_router(32, 72, 4, seed=t, variant=variant)
    x = torch.randn(t, 72, dtype=torch.bfloat16)
    check_against_stock(stock, ours, x, "topk_softmax", False)


def test_router_takes_any_float_input_and_every_leading_shape():
    stock, ours = gpt_oss_router(8, 40, 2, seed=1)
    x = torch.randn(2, 3, 40)
    logits, weights, ids = ours(x)
    assert logits.dtype == weights.dtype == torch.float32 and ids.dtype == torch.int64
    assert logits.shape == (6, 8) and weights.shape == ids.shape == (6, 2)
    ref = ours(x.reshape(6, 40).to(torch.bfloat16))
    assert torch.equal(ids, ref[2]) and torch.equal(weights, ref[1].float())


def test_compiled_router_equals_eager():
    _, ours = qwen3_router(16, 64, 4, True, seed=3)
    compiled = torch.compile(ours, fullgraph=True, dynamic=False)
    for t in (1, 5):
        x = torch.randn(t, 64, dtype=torch.bfloat16)
        for a, b in zip(compiled(x), ours(x)):
            assert torch.equal(a, b)


def test_router_state_dict_round_trip():
    _, ours = gpt_oss_router(8, 40, 2, seed=2)
    empty = ct.MoERouter(40, 8, 2, rule="topk_softmax", bias=True)
    with pytest.raises(ValueError, match="weight"):
        empty(torch.randn(1, 40))
    empty.load_state_dict(ours.state_dict())
    x = torch.randn(3, 40, dtype=torch.bfloat16)
    for a, b in zip(empty(x), ours(x)):
        assert torch.equal(a, b)
    other = ct.MoERouter(40, 9, 2, rule="topk_softmax", bias=True)
    with pytest.raises(ValueError, match="weight"):
        other.load_state_dict(ours.state_dict())


def test_router_refuses_bad_arguments_by_name():
    _, ours = qwen3_router(8, 32, 2, True, seed=4)
    with pytest.raises(ValueError, match="hidden_states"):
        ours(torch.randn(1, 31))
    with pytest.raises(TypeError, match="hidden_states"):
        ours(torch.ones(1, 32, dtype=torch.int32))
    with pytest.raises(ValueError, match="topk"):
        ct.MoERouter(32, 8, 9)
    with pytest.raises(ValueError, match="topk"):
        ct.MoERouter(32, 8, 0)
    with pytest.raises(ValueError, match="rule"):
        ct.MoERouter(32, 8, 2, rule="softmax")
    with pytest.raises(ValueError, match="renormalize"):
        ct.MoERouter(32, 8, 2, rule="topk_softmax", renormalize=True)
    with pytest.raises(ValueError, match="bias"):
        ct.MoERouter.from_weight(torch.randn(8, 32), 2, bias=torch.randn(7))
    with pytest.raises(ValueError, match="weight"):
        ct.MoERouter.from_weight(torch.randn(8), 2)
    with pytest.raises(TypeError, match="weight"):
        ct.MoERouter.from_weight(torch.ones(8, 32, dtype=torch.int8), 2)
    op = torch.ops.cpukern.moe_router_prepared
    x = torch.randn(2, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="topk"):
        op(x, ours.weight, 8, None, 9, "softmax_topk", True)
    with pytest.raises(ValueError, match="num_experts"):
        op(x, ours.weight, 7, None, 2, "softmax_topk", True)
    with pytest.raises(ValueError, match="rule"):
        op(x, ours.weight, 8, None, 2, "top1", True)
    with pytest.raises(ValueError, match="renormalize"):
        op(x, ours.weight, 8, None, 2, "topk_softmax", True)
    with pytest.raises(ValueError, match="bias"):
        op(x, ours.weight, 8, torch.zeros(7, dtype=torch.bfloat16), 2, "softmax_topk", True)
    with pytest.raises(ValueError, match="x"):
        op(torch.randn(2, 31, dtype=torch.bfloat16), ours.weight, 8, None, 2, "softmax_topk", True)
