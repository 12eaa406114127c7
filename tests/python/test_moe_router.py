"""The MoE router in one call: cpukern.moe.route's two rules against a float64 model, and
cpukern.torch.MoERouter (logits GEMV + rule, cpukern::moe_router_prepared) against
transformers' own Qwen3-MoE and gpt-oss routers, eager and compiled, on every linear variant."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import cpukern.torch as ct
from cpukern import moe
from variants import variant_params

LINEAR = variant_params("linear")
BF16_ULP = 2.0 ** -8  # bf16's relative rounding step


def route_scores(logits, rule):
    """What each rule ranks the experts by, in float64: softmax_topk the probabilities,
    topk_softmax the logits."""
    l = np.asarray(logits, np.float64)
    if rule == "softmax_topk":
        score = np.exp(l - l.max(-1, keepdims=True))
        score /= score.sum(-1, keepdims=True)
    else:
        score = l
    return score


def check_routing(logits, weights, ids, topk, rule, renormalize, tol):
    """ids: k distinct experts of the largest scores, largest first (ties within tol may swap);
    weights: the rule's weights of those experts within tol (relative)."""
    score = route_scores(logits, rule)
    t, e = score.shape
    ids = np.asarray(ids, np.int64)
    assert ids.shape == (t, topk)
    for r in range(t):
        chosen = score[r, ids[r]]
        assert len(set(ids[r].tolist())) == topk and ids[r].min() >= 0 and ids[r].max() < e
        rest = np.delete(score[r], ids[r])
        slack = tol * max(1.0, np.abs(score[r]).max())
        assert chosen.min() >= (rest.max() if rest.size else -np.inf) - slack, r
        assert np.all(np.diff(chosen) <= slack), r  # largest first
        if rule == "softmax_topk":
            want = chosen / chosen.sum() if renormalize else chosen
        else:
            want = np.exp(chosen - chosen.max())
            want /= want.sum()
        np.testing.assert_allclose(np.asarray(weights[r], np.float64), want, rtol=tol, atol=1e-7)


@pytest.mark.parametrize("rule,renormalize", [("softmax_topk", True), ("softmax_topk", False),
                                              ("topk_softmax", False)])
@pytest.mark.parametrize("t,e,topk", [(0, 4, 2), (1, 1, 1), (5, 8, 8), (33, 128, 8), (7, 32, 4)])
def test_route_rules_match_the_float64_model(rule, renormalize, t, e, topk):
    rng = np.random.default_rng(t * 131 + e)
    logits = (rng.standard_normal((t, e)) * 2).astype(np.float32)
    w, ids = moe.route(logits, topk, renormalize=renormalize, rule=rule)
    assert w.dtype == np.float32 and ids.dtype == np.int32 and w.shape == (t, topk)
    check_routing(logits, w, ids, topk, rule, renormalize, 1e-5)


def test_route_ties_go_to_the_lower_id_under_both_rules():
    logits = np.array([[0.0, 2.0, 2.0, 1.0, 2.0]], np.float32)
    for rule in moe.ROUTE_RULES:
        w, ids = moe.route(logits, 2, rule=rule)
        assert ids.tolist() == [[1, 2]], rule
        np.testing.assert_allclose(w, [[0.5, 0.5]])  # renormalised / softmax of equal logits


def test_route_defaults_and_refusals():
    logits = np.zeros((2, 4), np.float32)
    w, _ = moe.route(logits, 2)  # softmax_topk renormalises by default
    np.testing.assert_allclose(w, 0.5)
    w, _ = moe.route(logits, 2, renormalize=False)
    np.testing.assert_allclose(w, 0.25)
    with pytest.raises(ValueError, match="renormalize"):
        moe.route(logits, 2, rule="topk_softmax", renormalize=True)
    with pytest.raises(ValueError, match="rule"):
        moe.route(logits, 2, rule="sigmoid")


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
