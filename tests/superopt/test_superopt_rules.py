"""Rewrite rules: the shipped rule file, each rule verified on random shapes and inputs."""
from __future__ import annotations

import numpy as np
import pytest

from tempo.superopt.graph import GraphBuilder, node
from tempo.superopt.rewrite import candidates, matches
from tempo.superopt.rules import RuleError, load_rules, parse_rules
from tempo.superopt.verify import check_rule

RULES = load_rules()


def test_the_rule_file_covers_tasos_families():
    assert len(RULES) >= 60
    assert len({r.name for r in RULES}) == len(RULES)
    families = {r.family for r in RULES}
    assert {"fusion", "batchnorm", "merge", "concat", "elementwise", "layout"} <= families


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_rule_preserves_outputs_on_random_shapes(rule):
    rng = np.random.default_rng(abs(hash(rule.name)) % (1 << 32))
    for _ in range(3):
        assert check_rule(rule, rng) < 1e-9


def test_a_wrong_rule_is_caught():
    wrong = parse_rules("""
rule relu_of_sum (wrong)
  from   relu(add(x, y))
  to     add(relu(x), relu(y))
  shapes x[*z]  y[*z]
""")[0]
    rng = np.random.default_rng(0)
    assert max(check_rule(wrong, rng) for _ in range(5)) > 1e-3


def test_matching_finds_every_location_and_respects_constraints():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    q, k, v = (node("matmul", x, b.weight((8, 8))) for _ in range(3))
    g = b.build([q, k, v, node("matmul", node("relu", q), b.weight((8, 3)))])
    merge = next(r for r in RULES if r.name == "merge_matmul")
    assert len(matches(merge, g)) == 3          # unordered pairs among q, k, v
    relu = next(r for r in RULES if r.name == "matmul_relu")
    assert len(matches(relu, g)) == 1


def test_merging_never_creates_a_cycle():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    first = node("matmul", x, b.weight((8, 8)))
    second = node("matmul", x, node("reshape", first, shape=(8, 4)))   # its weight reads first
    g = b.build([second])
    merge = next(r for r in RULES if r.name == "merge_matmul")
    assert matches(merge, g) == []


def test_candidates_are_distinct_graphs():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    y = node("relu", node("conv2d", x, b.weight((4, 4, 3, 3)), pad=1))
    g = b.build([node("add", y, y)])
    cands = candidates(g, RULES)
    names = {c.rule.name for c in cands}
    assert "conv_relu" in names and "enlarge_3x3" in names
    assert len({c.graph.key() for c in cands}) == len(cands)


@pytest.mark.parametrize("text, words", [
    ("rule r\n  from relu(x)\n", "needs both"),
    ("rule r\n  from frob(x)\n  to x\n", "unknown op 'frob'"),
    ("rule r\n  from relu(x, alpha=1)\n  to x\n", "no attribute alpha"),
    ("rule r\n  from (relu(x), relu(y))\n  to x\n", "2 source roots but 1 target"),
    ("  from relu(x)\n", "before the first rule"),
])
def test_bad_rule_text_is_reported(text, words):
    with pytest.raises(RuleError, match=words):
        parse_rules(text)


def test_a_squeezenet_fire_module_merges_in_one_rewrite_once_its_relus_are_fused():
    from tempo.superopt.models import build
    from tempo.superopt.optimize import same_outputs

    g = build("squeezenet", scale="small")
    fused = g
    while fusion := next((c for c in candidates(fused, RULES) if c.rule.name == "convb_relu"), None):
        fused = fusion.graph
    merges = [c for c in candidates(fused, RULES) if c.rule.name == "merge_concat_1x1_3x3"]
    assert len(merges) == 8                              # one per fire module
    merged = merges[0].graph
    convs = [sum(n.op == "conv2d" for n in h.topo()) for h in (fused, merged)]
    assert convs[1] == convs[0] - 1 and same_outputs(g, merged)
