"""The equality-saturation baseline: rule translation to egglog, saturation and extraction."""
from __future__ import annotations

import numpy as np
import pytest
from egglog import bindings

from tempo.superopt.costmodel import CostModel
from tempo.superopt.egglog_rules import declarations, translate_all
from tempo.superopt.eqsat import eqsat
from tempo.superopt.models import build
from tempo.superopt.reference import evaluate, random_feeds
from tempo.superopt.rules import load_rules, parse_rules

RULES = load_rules()


def test_most_rules_translate_and_the_program_parses():
    texts, left_out = translate_all(RULES)
    assert len(texts) + len(left_out) == len(RULES) and len(texts) >= 0.9 * len(RULES)
    assert all(reason for reason in left_out.values())
    eg = bindings.EGraph()
    eg.run_program(*eg.parse_program("\n".join([declarations(), *texts])))


def test_a_rule_with_a_python_function_is_left_out_with_the_reason():
    rule = parse_rules("rule tt (layout)\n  from transpose(transpose(x, perm=p), perm=q)\n"
                       "  to transpose(x, perm=compose(p, q))\n  shapes x[a, b, c]\n")
    texts, left_out = translate_all(rule)
    assert not texts and "compose" in left_out["tt"]


@pytest.mark.parametrize("name", ["resnext", "inception"])
def test_extracted_graph_is_equivalent_and_never_costlier(name):
    g = build(name, scale="small")
    model = CostModel(repeats=3)
    res = eqsat(g, RULES, budget_s=20, model=model)
    assert res.cost <= model.cost(g)
    assert res.cost == pytest.approx(model.cost(res.graph))
    assert res.applied and res.graph.key() != g.key()         # conv graphs do get rewritten
    feeds = random_feeds(g)
    for want, got in zip(evaluate(g, feeds), evaluate(res.graph, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_eqsat_keeps_the_input_when_nothing_applies():
    g = build("bert", scale="small")
    res = eqsat(g, [], budget_s=5, model=CostModel(repeats=1))
    assert res.graph is g and res.applied == []
