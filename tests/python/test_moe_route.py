"""cpukern.moe.route's two rules (softmax_topk: Qwen3-MoE, Mixtral, vLLM; topk_softmax:
gpt-oss) against a float64 model, ties and refusals. The routers built on them (MoERouter)
are tested in test_moe_router.py."""

import numpy as np
import pytest

from cpukern import moe

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


