"""Cost model and the TASO-style searches."""
from __future__ import annotations

from tempo.superopt.costmodel import CostModel
from tempo.superopt.graph import GraphBuilder, node
from tempo.superopt.models import build
from tempo.superopt import optimize as optimize_module
from tempo.superopt.optimize import optimize, same_outputs
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import load_rules
from tempo.superopt.search import SearchResult, backtrack, greedy, taso

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


def test_tasos_sum_charges_the_weight_only_ops_too():
    b = GraphBuilder()
    x = b.input("x", (64, 64))
    w = node("concat", b.weight((64, 32)), b.weight((64, 32)), axis=1)
    g = b.build([node("matmul", x, w)])
    folding, summing = CostModel(repeats=3), CostModel(repeats=3, fold_weights=False)
    assert folding.cost(g) > 0 and len(folding.cache) == 1
    total = summing.cost(g)
    assert len(summing.cache) == 2                    # the concat of the weights is timed too
    parts = [summing.op_cost(n) for n in g.topo() if n.src]
    assert len(parts) == 2 and min(parts) > 0 and total == sum(parts)


def test_a_graphs_cost_is_the_sum_over_the_operators_that_read_an_input(monkeypatch):
    """The per-node memo gives every candidate of a search the cost the definition gives it."""
    monkeypatch.setattr(CostModel, "op_cost", lambda self, n: float(len(n.op) + sum(n.shape)))
    g = build("resnext", scale="small")
    graphs = [g, *(c.graph for c in candidates(g, RULES))]
    for fold in (True, False):
        model = CostModel(fold_weights=fold)
        for h in graphs:
            const = h.constant_ids() if fold else set()
            want = sum(model.op_cost(n) for n in h.topo()
                       if n.src and id(n) not in const and n.op != "opaque")
            assert model.cost(h) == want


def test_tasos_search_leaves_a_batch_norm_that_folding_would_remove(monkeypatch):
    """With every operator priced alike, folding a batch norm into its convolution is one
    operator fewer to the folding model, three more (weight-only) to TASO's sum."""
    monkeypatch.setattr(CostModel, "op_cost", lambda self, n: 1.0)
    g = build("resnext", scale="small")
    bn = [r for r in RULES if r.name == "bn_conv"]
    assert "bn_conv" in backtrack(g, bn, budget_s=5).applied
    assert taso(g, bn, budget_s=5).applied == []
    assert optimize_module.agent_function("taso") is taso


def test_an_operator_costs_the_reference_kernels_latency_times_its_ratio(monkeypatch):
    from tempo.superopt import execute
    from tempo.superopt.latency import Latency

    timed = []

    def beside_the_reference(calls, rounds, repeats):
        timed.append((sorted(calls), rounds, repeats))   # fastest: 1 over 2
        return {"op": Latency((1.0, 4.0, 1.0)), "ref": Latency((6.0, 2.0, 6.0))}

    model = CostModel(repeats=3)
    reference, reference_ms = model.reference()
    assert reference_ms > 0 and model.reference()[0] is reference     # made once
    monkeypatch.setattr(execute, "time_calls", beside_the_reference)
    b = GraphBuilder()
    g = b.build([node("relu", b.input("x", (8, 8)))])
    assert model.cost(g) == reference_ms / 2
    assert timed == [(["op", "ref"], 1, 3)]


def test_the_cost_model_ranks_a_big_matmul_above_a_small_one():
    """32768 times the multiply-adds: 27-54 times the cost by the fastest runs, measured over
    fresh models."""
    b = GraphBuilder()
    small = b.build([node("matmul", b.input("x", (16, 16)), b.weight((16, 16)))])
    big = b.build([node("matmul", b.input("x", (512, 512)), b.weight((512, 512)))])
    model = CostModel()
    assert model.cost(big) > 5 * model.cost(small)


def test_greedy_lowers_the_cost_and_keeps_outputs():
    g = build("inception", scale="small")
    model = CostModel(repeats=3)
    res = greedy(g, RULES, budget_s=20, model=model)
    assert res.applied and res.cost < model.cost(g)
    assert res.trace == sorted(res.trace, reverse=True)
    assert same_outputs(g, res.graph)


def test_backtracking_is_at_least_as_good_as_its_start():
    g = build("resnext", scale="small")
    model = CostModel(repeats=3)
    res = backtrack(g, RULES, budget_s=5, model=model)
    assert res.explored > 0 and res.cost <= model.cost(g)
    assert same_outputs(g, res.graph)


def test_optimize_never_returns_a_slower_graph():
    g = build("bert", scale="small")
    out = optimize(g, "greedy", budget_s=10, rules=RULES)
    assert out.after_ms <= out.before_ms
    assert same_outputs(g, out.graph)
    assert out.kept_input == (out.graph is g)


def test_optimize_keeps_the_input_and_names_what_it_refused(monkeypatch):
    g = build("resnext", scale="small")
    slower = g
    for _ in range(4):                       # every 1x1 convolution enlarged to 3x3: 9x the flops
        found = [c for c in candidates(slower, RULES) if c.rule.name.startswith("enlarge_1x1")]
        if not found:
            break
        slower = found[0].graph
    assert slower.key() != g.key()
    refused = SearchResult(slower, ["enlarge_1x1b"] * 4, 0.0, origin="test")
    monkeypatch.setattr(optimize_module, "agent_function", lambda name: lambda *a, **k: refused)
    out = optimize(g, "slower", budget_s=1, rules=RULES)
    assert out.kept_input and out.graph is g and out.applied == []
    assert out.rejected == refused.applied and out.origin == "test"
    assert out.reason.startswith("not faster when measured (")
    assert out.refused is slower                     # the refused graph, for the benchmark to time


def test_the_never_slower_check_times_check_rounds_rounds_of_decision_compiles(monkeypatch):
    g = build("resnext", scale="small")
    faster = next(c.graph for c in candidates(g, RULES) if c.rule.name == "bn_conv")
    monkeypatch.setattr(optimize_module, "agent_function",
                        lambda name: lambda *a, **k: SearchResult(faster, ["bn_conv"], 0.0))
    timed = []
    real = optimize_module.time_interleaved

    def recording(graphs, rounds=5, repeats=10, compiles=1, deadline=None):
        timed.append((rounds, compiles))
        return real(graphs, rounds, repeats, compiles=compiles, deadline=deadline)

    monkeypatch.setattr(optimize_module, "time_interleaved", recording)
    optimize(g, "faster", budget_s=30, rules=RULES)
    assert (optimize_module.CHECK_ROUNDS, optimize_module.DECISION_COMPILES) == (40, 8)
    assert timed == [(40, 8)]


def test_a_graph_no_rule_matches_is_returned_unsearched_unless_an_agent_is_to_be_saved(tmp_path):
    b = GraphBuilder()
    g = b.build([node("relu", b.input("x", (8, 8)))])
    out = optimize(g, "rl", 600.0, [])
    assert out.kept_input and out.reason == "no rule matches"
    assert out.optimise_s == 0.0 and out.episodes == 0 and out.graph is g
    saved = tmp_path / "agent.pt"
    trained = optimize(g, "rl", 1.0, [], save=str(saved))
    assert trained.reason == "no rewrite found" and saved.exists()
