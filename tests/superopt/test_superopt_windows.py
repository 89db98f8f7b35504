"""Windows of a graph (the RL agent's curriculum) are well-formed subgraphs."""
from __future__ import annotations

import numpy as np

from superopt_graphs import every_op_graph
from tempo.superopt.models import build
from tempo.superopt.reference import evaluate, random_feeds
from tempo.superopt.windows import window, windows


def _ops(graph):
    const = graph.constant_ids()
    return [n for n in graph.topo() if n.src and id(n) not in const]


def test_a_window_of_every_operator_computes_the_graph():
    g = every_op_graph()
    whole = window(g, _ops(g))
    assert len(whole.inputs) == len(g.inputs) and len(whole.outputs) == len(g.outputs)
    feeds = random_feeds(g, seed=3)
    renamed = {w.attr("name"): feeds[x.attr("name")] for w, x in zip(whole.inputs, g.inputs)}
    for a, b in zip(evaluate(g, feeds), evaluate(whole, renamed)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_windows_cover_every_operator_and_cut_at_the_right_values():
    g = build("squeezenet", scale="small")
    ops = _ops(g)
    parts = windows(g, 16)
    assert len(parts) == len(range(0, len(ops) - 16 + 8, 8))
    covered = set()
    for w in parts:
        inner = _ops(w)
        assert len(inner) <= 16
        covered |= {(n.op, n.shape) for n in inner}
        assert all(n.op == "input" for n in w.inputs) and w.outputs
        assert not set(w.weights) - set(g.weights)          # weights are the graph's own
        evaluate(w, random_feeds(w))                         # runs: every value it reads is defined
    assert covered == {(n.op, n.shape) for n in ops}
    assert windows(g, len(ops)) == []                        # no window smaller than the graph
