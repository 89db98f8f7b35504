"""Equality saturation with egglog: the third baseline.

The graph is encoded as egglog terms (:mod:`tempo.superopt.egglog_rules`),
every translatable rule is run until the e-graph saturates, the budget runs
out or it holds ``node_limit`` e-nodes, and the cheapest graph it represents
is extracted under the same :class:`~tempo.superopt.costmodel.CostModel` the
greedy search uses. Extraction is bottom-up to a fixed point over the
serialized e-graph: each e-class keeps the real (hash-consed) node whose
subgraph costs least, so shapes come from the IR's own inference and shared
subgraphs are counted once. Because that per-class choice is a heuristic for
the whole graph, the input is returned when the extracted graph costs more.

Saturation runs at most ``iterations`` rounds, 2 by default: with egglog
13.2.0 the full rule set panics inside egglog's join (``Option::unwrap()`` on
``None`` in ``core-relations/src/free_join``) in the third round on the conv
workloads. Two rounds already fuse, fold batch norms, enlarge and merge
convolutions. Where egglog panics anyway, or extraction is still running at
the deadline, the search returns its input.
"""
from __future__ import annotations

import json
import time

from tempo.superopt.costmodel import CostModel
from tempo.superopt.egglog_rules import (
    ENCODED_OPS, arities, attr_keys, const_rules, ctor, declarations, literal, shape_rules,
    translate_all,
)
from tempo.superopt.graph import Graph, Node, ShapeError, node
from tempo.superopt.rules import Rule
from tempo.superopt.search import SearchResult

CTORS = {ctor(op, n): op for op in ENCODED_OPS for n in arities(op)}


class _Encoder:
    """Graph nodes as egglog ``let`` bindings, with their shapes and constness."""

    def __init__(self, graph: Graph):
        self.leaves: list[Node] = []
        self.names: dict[int, str] = {}
        self.lines: list[str] = []
        const = graph.constant_ids()
        for n in graph.topo():
            name = f"$n{len(self.names)}"
            self.lines.append(f"(let {name} {self._term(n)})")
            self.lines.append(f"(set (shp {name}) {literal(n.shape)})")
            if id(n) in const:
                self.lines.append(f"(cst {name})")
            self.names[id(n)] = name

    def _term(self, n: Node) -> str:
        if n.op in CTORS.values() and len(n.src) in arities(n.op):
            attrs = [literal(n.attr(k)) for k in attr_keys(n.op)]
            return f"({ctor(n.op, len(n.src))} {' '.join([self.names[id(s)] for s in n.src] + attrs)})"
        self.leaves.append(n)
        return f"(Leaf {len(self.leaves) - 1})"


def _value(enode: dict, nodes: dict) -> object:
    """The Python value of a primitive e-node (i64, f64, String or an i64 vector)."""
    op = enode["op"]
    if op == "vec-of":
        return tuple(int(nodes[c]["op"]) for c in enode["children"])
    if op == "vec-empty":
        return ()
    return json.loads(op) if op.startswith('"') else (float(op) if "." in op or "e" in op or "inf" in op
                                                      else int(op))


def _extract(serialized: dict, leaves: list[Node], model: CostModel, deadline: float
             ) -> dict[str, Node] | None:
    """The cheapest node of every e-class of terms, by fixed-point iteration (None when the
    ``deadline`` comes first)."""
    nodes = serialized["nodes"]
    terms = [(k, v) for k, v in nodes.items() if v["op"] == "Leaf" or v["op"] in CTORS]
    best: dict[str, tuple[float, Node]] = {}
    changed = True
    while changed:
        changed = False
        for _, e in terms:
            if time.perf_counter() > deadline:
                return None
            made = _build(e, nodes, best, leaves)
            if made is None:
                continue
            cost = _subgraph_cost(made, model)
            cls = e["eclass"]
            if cls not in best or cost < best[cls][0] - 1e-12:
                best[cls] = (cost, made)
                changed = True
    return {cls: n for cls, (_, n) in best.items()}


def _build(e: dict, nodes: dict, best: dict, leaves: list[Node]) -> Node | None:
    if e["op"] == "Leaf":
        return leaves[int(nodes[e["children"][0]]["op"])]
    op = CTORS[e["op"]]
    keys = attr_keys(op)
    kids = e["children"]
    srcs = kids[:len(kids) - len(keys)]
    if any(nodes[c]["eclass"] not in best for c in srcs):
        return None
    attrs = {k: _value(nodes[c], nodes) for k, c in zip(keys, kids[len(srcs):])}
    try:
        return node(op, *(best[nodes[c]["eclass"]][1] for c in srcs), **attrs)
    except ShapeError:
        return None


def _subgraph_cost(n: Node, model: CostModel) -> float:
    return model.cost(Graph((), (n,)))


# A fresh e-graph holding the declarations and one rule set's rules, per rule set (keyed by
# the rules' egglog text), made ahead by prepare(): reading the rules takes seconds, more than
# a small budget. Each search takes one and leaves it behind (an e-graph reused through egglog's
# push/pop panicked after some hundred searches).
_PREPARED: dict[tuple[str, ...], object] = {}


def _rules_text(rules: list[Rule]) -> tuple[str, ...]:
    return tuple(translate_all(rules)[0])


def _read_rules(texts: tuple[str, ...]):
    from egglog import bindings

    eg = bindings.EGraph()
    eg.run_program(*eg.parse_program("\n".join([declarations(), shape_rules(), const_rules(), *texts])))
    return eg


def prepare(rules: list[Rule]) -> None:
    """Read ``rules`` into a fresh e-graph now, for the next :func:`eqsat` search to use."""
    texts = _rules_text(rules)
    if texts not in _PREPARED:
        _PREPARED[texts] = _read_rules(texts)


def eqsat(graph: Graph, rules: list[Rule], budget_s: float, model: CostModel | None = None,
          node_limit: int = 20000, iterations: int = 2) -> SearchResult:
    """Saturate ``graph`` under the egglog-expressible ``rules`` and extract the cheapest graph."""
    model = model or CostModel()
    deadline = time.perf_counter() + budget_s
    start_cost = model.cost(graph)
    enc = _Encoder(graph)
    texts = _rules_text(rules)
    eg = _PREPARED.pop(texts, None) or _read_rules(texts)
    eg.run_program(*eg.parse_program("\n".join(enc.lines)))
    try:
        fired, serialized = _saturate(eg, deadline, node_limit, iterations)
    except BaseException as exc:    # egglog's Rust panics derive from BaseException
        if type(exc).__name__ != "PanicException":
            raise
        return SearchResult(graph, [], start_cost, trace=[start_cost])
    chosen = _extract(serialized, enc.leaves, model, deadline)
    if chosen is None:
        return SearchResult(graph, [], start_cost, explored=len(serialized["nodes"]),
                            trace=[start_cost])
    classes = {n["eclass"] for k, n in serialized["nodes"].items()
               if k.startswith("function-") and n["op"] in ("Leaf", *CTORS)}
    outputs = []
    for o in graph.outputs:
        cls = _class_of(serialized, enc.names[id(o)])
        outputs.append(chosen.get(cls, o) if cls in classes else o)
    result = graph.with_outputs(outputs)
    cost = model.cost(result)
    trace = [start_cost]
    if cost >= start_cost:
        result, cost = graph, start_cost
    else:
        trace.append(cost)
    applied = sorted(fired) if result is not graph else []
    return SearchResult(result, applied, cost, explored=len(serialized["nodes"]), trace=trace)


def _saturate(eg, deadline: float, node_limit: int, iterations: int) -> tuple[dict[str, int], dict]:
    """Run the rules for up to ``iterations`` rounds; the rules that fired and the e-graph."""
    fired: dict[str, int] = {}
    serialized = json.loads(eg.serialize([]).to_json())
    for _ in range(iterations):
        if time.perf_counter() >= deadline or len(serialized["nodes"]) >= node_limit:
            break
        report = eg.run_program(*eg.parse_program("(run 1)"))[-1].report
        for name, count in report.num_matches_per_rule.items():
            if count and not name.startswith("("):
                fired[name] = fired.get(name, 0) + count
        serialized = json.loads(eg.serialize([]).to_json())
        if not report.updated:
            break
    return fired, serialized


def _class_of(serialized: dict, let_name: str) -> str | None:
    for cls, data in serialized["class_data"].items():
        if data.get("let") == let_name:
            return cls
    return None
