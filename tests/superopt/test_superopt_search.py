"""Cost model and the TASO-style searches."""
from __future__ import annotations

from tempo.superopt.costmodel import CostModel
from tempo.superopt.graph import GraphBuilder, node
from tempo.superopt.models import build
from tempo.superopt.optimize import optimize, same_outputs
from tempo.superopt.rules import load_rules
from tempo.superopt.search import backtrack, greedy

RULES = load_rules()


def test_cost_model_caches_and_skips_weight_only_ops():
    b = GraphBuilder()
    x = b.input("x", (64, 64))
    w = node("concat", b.weight((64, 32)), b.weight((64, 32)), axis=1)
    g = b.build([node("matmul", x, w)])
    model = CostModel(repeats=3)
    cost = model.cost(g)
    assert cost > 0 and len(model.cache) == 1        # only the matmul is timed
    assert model.cost(g) == cost


def test_greedy_lowers_the_cost_and_keeps_outputs():
    g = build("inception", small=True)
    model = CostModel(repeats=3)
    res = greedy(g, RULES, budget_s=20, model=model)
    assert res.applied and res.cost < model.cost(g)
    assert res.trace == sorted(res.trace, reverse=True)
    assert same_outputs(g, res.graph)


def test_backtracking_is_at_least_as_good_as_its_start():
    g = build("resnext", small=True)
    model = CostModel(repeats=3)
    res = backtrack(g, RULES, budget_s=5, model=model)
    assert res.explored > 0 and res.cost <= model.cost(g)
    assert same_outputs(g, res.graph)


def test_optimize_never_returns_a_slower_graph():
    g = build("bert", small=True)
    out = optimize(g, "greedy", budget_s=10, rules=RULES)
    assert out.after_ms <= out.before_ms
    assert same_outputs(g, out.graph)
    assert out.kept_input == (out.graph is g)
