"""Pattern matching and rule application over graphs.

:func:`matches` finds every location where a rule's source pattern fits a
graph (all roots, all constraints); :func:`apply` builds the rewritten graph
for one location; :func:`candidates` lists every (rule, location, new graph)
of a graph, which is the action space of every search in this package.
"""
from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from typing import Any

from tempo.superopt.graph import OPS, Graph, Node, ShapeError, node
from tempo.superopt.rules import PVar, Pattern, Rule, Template, evaluate_expr

Env = dict[str, Any]


@dataclass(frozen=True, eq=False)
class Match:
    """One location of a rule in a graph: the matched roots and every bound name."""

    rule: Rule
    roots: tuple[Node, ...]
    env: Env


@dataclass(frozen=True, eq=False)
class Candidate:
    """A rewrite the optimiser may take: where it applies and the graph it gives."""

    rule: Rule
    match: Match
    graph: Graph


# ---------------------------------------------------------------- structural matching
def _match(p: Pattern, n: Node, env: Env, deferred: list) -> Env | None:
    if isinstance(p, PVar):
        bound = env.get(p.name)
        if bound is None:
            return {**env, p.name: n}
        return env if bound is n else None
    if n.op != p.op or len(n.src) != len(p.args):
        return None
    given = dict(p.attrs)
    for key, default in OPS[p.op].defaults.items():
        value = n.attr(key)
        expr = given.get(key)
        if expr is None:
            if value != default:
                return None
        elif isinstance(expr, ast.Constant):
            if value != expr.value:
                return None
        elif isinstance(expr, ast.Name) and expr.id not in env:
            env = {**env, expr.id: value}
        else:
            deferred.append((expr, value))
    for sub, child in zip(p.args, n.src):
        env = _match(sub, child, env, deferred)
        if env is None:
            return None
    return env


def _fit(template: Template, shape: tuple[int, ...], env: Env) -> Env | None:
    fixed = len(template.dims)
    if len(shape) < fixed or (template.prefix is None and len(shape) != fixed):
        return None
    env = dict(env)
    if template.prefix is not None:
        prefix = shape[:len(shape) - fixed]
        if env.setdefault(template.prefix, prefix) != prefix:
            return None
    for dim, size in zip(template.dims, shape[len(shape) - fixed:]):
        if isinstance(dim, int):
            if dim != size:
                return None
        elif env.setdefault(dim, size) != size:
            return None
    return env


def _constraints(rule: Rule, env: Env, deferred: list, const: set[int]) -> Env | None:
    for var, template in rule.shapes.items():
        env = _fit(template, env[var].shape, env)
        if env is None:
            return None
    if any(id(env[v]) not in const for v in rule.const):
        return None
    try:
        if any(evaluate_expr(e, env) != v for e, v in deferred):
            return None
        if not all(evaluate_expr(c, env) for c in rule.checks):
            return None
    except (KeyError, TypeError, IndexError):
        return None
    return env


def _ancestors(nodes: list[Node]) -> set[int]:
    seen, stack = set(), list(nodes)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.src)
    return seen


def matches(rule: Rule, graph: Graph, const: set[int] | None = None) -> list[Match]:
    """Every location of ``rule`` in ``graph`` whose roots are not all weight-only."""
    const = graph.constant_ids() if const is None else const
    per_root = []
    for p in rule.source:
        found = []
        for n in graph.topo() if isinstance(p, PVar) else graph.nodes_of(p.op):
            deferred: list = []
            env = _match(p, n, {}, deferred)
            if env is not None:
                found.append((n, env, deferred))
        per_root.append(found)
    out, seen = [], set()
    for combo in itertools.product(*per_root):
        roots = tuple(n for n, _, _ in combo)
        if len({id(r) for r in roots}) < len(roots) or all(id(r) in const for r in roots):
            continue
        env, deferred = _merge(combo)
        if env is None:
            continue
        env = _constraints(rule, env, deferred, const)
        if env is None:
            continue
        key = frozenset(id(r) for r in roots)
        if len(roots) > 1 and (key in seen or _creates_cycle(rule, roots, env)):
            continue
        seen.add(key)
        out.append(Match(rule, roots, env))
    return out


def _merge(combo) -> tuple[Env | None, list]:
    env: Env = {}
    deferred: list = []
    for _, sub, d in combo:
        for k, v in sub.items():
            if k in env and (env[k] is not v if isinstance(v, Node) else env[k] != v):
                return None, []
            env[k] = v
        deferred.extend(d)
    return env, deferred


def _creates_cycle(rule: Rule, roots: tuple[Node, ...], env: Env) -> bool:
    """True when a bound variable depends on a root (the merged node would read itself)."""
    leaves = [env[v] for v in rule.variables()]
    above = _ancestors(leaves)
    return any(id(r) in above for r in roots)


# ---------------------------------------------------------------- application
def instantiate(p: Pattern, env: Env) -> Node:
    """Build the target pattern ``p`` with the bound names of ``env``."""
    if isinstance(p, PVar):
        return env[p.name]
    attrs = {k: evaluate_expr(e, env) for k, e in p.attrs}
    return node(p.op, *(instantiate(a, env) for a in p.args), **attrs)


def apply(match: Match, graph: Graph) -> Graph | None:
    """The graph with ``match``'s roots replaced by the rule's targets (None if ill-shaped)."""
    try:
        targets = [instantiate(t, match.env) for t in match.rule.target]
    except ShapeError:
        return None
    if any(t.shape != r.shape for t, r in zip(targets, match.roots)):
        return None
    new = graph.replace({id(r): t for r, t in zip(match.roots, targets)})
    return None if new.key() == graph.key() else new


def candidates(graph: Graph, rules: list[Rule]) -> list[Candidate]:
    """Every distinct graph one rule application away from ``graph``, in rule order."""
    const = graph.constant_ids()
    out, seen = [], {graph.key()}
    for rule in rules:
        for m in matches(rule, graph, const):
            new = apply(m, graph)
            if new is not None and new.key() not in seen:
                seen.add(new.key())
                out.append(Candidate(rule, m, new))
    return out
